package server

import (
	"context"
	"net/http"

	"github.com/tetherhq/tether/server/compile"
	"github.com/tetherhq/tether/server/record"
	"github.com/tetherhq/tether/server/store"
)

// Server-side compiles are package compile's: the server hands its
// compiler the store, its exports and releases, and its feed (New), runs
// its queue (Run), and answers the API's compiles and sources through it.

// The compiler's sources, named as the server's callers name them.
type (
	Sources       = compile.Sources
	Resolved      = compile.Resolved
	Checkout      = compile.Checkout
	SourceOptions = compile.SourceOptions
)

// ErrNoSource is compile.ErrNoSource.
var ErrNoSource = compile.ErrNoSource

// StoredSources is Sources over the sources kept in st.
func StoredSources(st store.Store, opts SourceOptions) Sources {
	return compile.StoredSources(st, opts)
}

// WebhookPath is where the push webhook of env is received.
func WebhookPath(env string) string { return compile.WebhookPath(env) }

var (
	_ compile.Exporter = compileServices{}
	_ compile.Releaser = compileServices{}
)

// RequestCompile asks for a compile of env on behalf of by (see
// compile.Compiler.Request).
func (s *Server) RequestCompile(ctx context.Context, env, by string) (record.CompileRequest, error) {
	return s.compiles.Request(ctx, env, by)
}

// ListCompiles returns env's newest compile reports, newest first.
func (s *Server) ListCompiles(ctx context.Context, env string, limit int) ([]record.Compile, error) {
	return s.compiles.List(ctx, env, limit)
}

// GetCompile returns one compile report of env.
func (s *Server) GetCompile(ctx context.Context, env, id string) (record.Compile, error) {
	return s.compiles.Get(ctx, env, id)
}

// SetSource makes a git repository env's source (see
// compile.Compiler.SetSource).
func (s *Server) SetSource(ctx context.Context, env string, req record.SourceRequest, by string) (record.SourceView, error) {
	return s.compiles.SetSource(ctx, env, req, by)
}

// UploadSource makes an uploaded archive env's source (see
// compile.Compiler.UploadSource).
func (s *Server) UploadSource(ctx context.Context, env string, archive []byte, subdir, by string) (record.SourceView, error) {
	return s.compiles.UploadSource(ctx, env, archive, subdir, by)
}

// GetSource shows env's source; ErrNotFound when it has none.
func (s *Server) GetSource(ctx context.Context, env string) (record.SourceView, error) {
	return s.compiles.GetSource(ctx, env)
}

// DeleteSource removes env's source: the server compiles it no more, and
// what it released stays released.
func (s *Server) DeleteSource(ctx context.Context, env string) error {
	return s.compiles.DeleteSource(ctx, env)
}

// Webhook handles a push webhook for env (see compile.Compiler.Webhook).
func (s *Server) Webhook(ctx context.Context, env string, h http.Header, body []byte) (record.WebhookResult, error) {
	return s.compiles.Webhook(ctx, env, h, body)
}
