package server

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/tetherhq/tether/model"
	"github.com/tetherhq/tether/server/record"
	"github.com/tetherhq/tether/server/source"
	"github.com/tetherhq/tether/server/store"
	"github.com/tetherhq/tether/server/webhook"
)

// The sources operators set through the API: a git repository or an
// uploaded archive per environment, kept in the store with their
// credentials (write-only: no answer and no log carries them).

// SourceOptions bound the sources StoredSources fetches.
type SourceOptions struct {
	// Limits bound a checkout (zero: source.DefaultLimits).
	Limits source.Limits
	// AllowFile allows file:// repositories: they read the server's own
	// disk, so they are refused unless the server's operator allows them
	// (tests, a repository mirrored onto the server).
	AllowFile bool
	// CacheDir is where the sources are kept between compiles
	// (source.Cache): a clone of each git repository, fetched
	// incrementally, and the work tree of the revision compiled last.
	// Each replica has its own; it is a cache, rebuilt when removed or
	// damaged. Empty: none, every compile fetches its source afresh into
	// a temporary directory.
	CacheDir string
}

// StoredSources is Sources over the sources kept in st.
func StoredSources(st store.Store, opts SourceOptions) Sources {
	if opts.Limits == (source.Limits{}) {
		opts.Limits = source.DefaultLimits()
	}
	ss := &storedSources{st: st, limits: opts.Limits, allowFile: opts.AllowFile}
	if opts.CacheDir != "" {
		ss.cache = source.NewCache(opts.CacheDir)
	}
	return ss
}

type storedSources struct {
	st        store.Store
	limits    source.Limits
	allowFile bool
	cache     *source.Cache // nil: none
}

func (ss *storedSources) allowsLocal() bool { return ss.allowFile }

// checker is a Sources that refuses some sources before they are stored.
type checker interface {
	check(spec source.Spec) error
}

func (ss *storedSources) check(spec source.Spec) error {
	if spec.Git != nil && !ss.allowFile && strings.HasPrefix(strings.ToLower(spec.Git.URL), "file:") {
		return fmt.Errorf("%w: a file:// repository reads the server's own disk: this server allows none (tether server --allow-file-sources)", record.ErrInvalidSource)
	}
	return nil
}

func (ss *storedSources) Has(ctx context.Context, env string) (bool, error) {
	_, err := ss.st.GetSource(ctx, env, false)
	if errors.Is(err, model.ErrNotFound) {
		return false, nil
	}
	return err == nil, err
}

func (ss *storedSources) Checkout(ctx context.Context, env string) (Checkout, error) {
	rec, err := ss.st.GetSource(ctx, env, true)
	if err != nil {
		return Checkout{}, err
	}
	spec, err := source.Decode(rec.Kind, rec.Spec, rec.Archive)
	if err != nil {
		return Checkout{}, err
	}
	if err := ss.check(spec); err != nil {
		return Checkout{}, err
	}
	co := Checkout{Source: sourceInputs(spec, ss.limits)}
	if ss.cache != nil {
		t, err := ss.cache.Checkout(ctx, env, spec, ss.limits)
		if err == nil {
			co.Dir, co.Revision, co.Release = t.Dir, string(t.Revision), t.Release
			return co, nil
		}
		if !errors.Is(err, source.ErrCache) {
			return Checkout{}, err
		}
		// The cache is a shortcut: without it the source is fetched
		// as it would be without one, and the report says why.
		co.Warnings = append(co.Warnings, fmt.Sprintf("the source cache in %s cannot be used (%v): the source was fetched afresh; "+
			"check the server's --state-dir", ss.cache.Dir(), err))
	}
	dir, err := os.MkdirTemp("", "tether-compile-*")
	if err != nil {
		return Checkout{}, fmt.Errorf("make a directory for the source: %w", err)
	}
	rev, err := source.Fetch(ctx, spec, dir, ss.limits)
	if err != nil {
		os.RemoveAll(dir)
		return Checkout{}, err
	}
	co.Dir, co.Revision, co.Release = dir, string(rev), func() { os.RemoveAll(dir) }
	return co, nil
}

// sourceInputs is what, besides its revision, decides the files a source
// gives: where it is and which part, within which limits. Never its
// credentials.
func sourceInputs(spec source.Spec, limits source.Limits) string {
	if g := spec.Git; g != nil {
		return fmt.Sprintf("git %s ref=%q subdir=%q limits=%d/%d", g.URL, g.Ref, g.Subdir, limits.MaxBytes, limits.MaxFiles)
	}
	return fmt.Sprintf("archive subdir=%q limits=%d/%d", spec.Archive.Subdir, limits.MaxBytes, limits.MaxFiles)
}

// forget drops what the cache keeps of env's source; a compile using it
// keeps it (the next source set for env replaces it).
func (ss *storedSources) forget(ctx context.Context, env string) {
	if ss.cache != nil {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
		defer cancel()
		_ = ss.cache.Forget(ctx, env)
	}
}

// poller is a Sources whose sources are polled for their revision
// (Resolve) every poll interval.
type poller interface {
	// pollInterval is how often env's source is polled; 0: never.
	pollInterval(ctx context.Context, env string) (time.Duration, error)
}

func (ss *storedSources) pollInterval(ctx context.Context, env string) (time.Duration, error) {
	rec, err := ss.st.GetSource(ctx, env, false)
	if errors.Is(err, model.ErrNotFound) {
		return 0, nil
	}
	return rec.PollInterval, err
}

func (ss *storedSources) Resolve(ctx context.Context, env string) (Resolved, error) {
	rec, err := ss.st.GetSource(ctx, env, false)
	if err != nil {
		return Resolved{}, err
	}
	spec, err := source.Decode(rec.Kind, rec.Spec, nil)
	if err != nil {
		return Resolved{}, err
	}
	if rec.Kind == record.SourceArchive {
		return Resolved{Revision: rec.ArchiveSHA256, Source: sourceInputs(spec, ss.limits)}, nil
	}
	if err := ss.check(spec); err != nil {
		return Resolved{}, err
	}
	rev, err := source.Resolve(ctx, spec)
	return Resolved{Revision: string(rev), Source: sourceInputs(spec, ss.limits)}, err
}

// pollTimeout bounds one poll of a repository.
const pollTimeout = time.Minute

// poll asks env's source which revision it is at, and for a compile when
// that is not the revision the newest compile read. It reports whether
// the poll failed, so that a failing repository is logged once, not at
// every poll.
func (s *Server) poll(ctx context.Context, env string, failing bool) bool {
	pctx, cancel := context.WithTimeout(ctx, pollTimeout)
	defer cancel()
	res, err := s.cfg.Sources.Resolve(pctx, env)
	rev := res.Revision
	if err != nil {
		if !failing && ctx.Err() == nil {
			s.log.Warn().Err(err).Str("env", env).Msg("cannot poll the source; trying again at the next interval")
		}
		return true
	}
	if failing {
		s.log.Info().Str("env", env).Msg("the source answers polls again")
	}
	last, err := s.store.ListCompiles(ctx, env, 1)
	if err != nil {
		s.log.Warn().Err(err).Str("env", env).Msg("cannot read the newest compile to compare with the polled revision")
		return false
	}
	if len(last) > 0 && last[0].Revision == rev {
		return false
	}
	s.log.Info().Str("env", env).Str("revision", rev).Msg("poll: the source has a new revision")
	s.triggerCompile(ctx, env, record.Trigger{Kind: record.TriggerPoll, By: shortCommit(rev)})
	return false
}

// WebhookPath is where the push webhook of env is received.
func WebhookPath(env string) string { return "/api/v1/envs/" + env + "/compile/hook" }

// SetSource makes a git repository env's source (see
// record.SourceRequest), and asks for a compile of it on behalf of by.
// The answer shows the webhook secret when this call made it.
func (s *Server) SetSource(ctx context.Context, env string, req record.SourceRequest, by string) (record.SourceView, error) {
	if _, err := s.store.GetEnv(ctx, env); err != nil {
		return record.SourceView{}, err
	}
	poll, err := parsePoll(req.PollInterval)
	if err != nil {
		return record.SourceView{}, err
	}
	old, err := s.store.GetSource(ctx, env, false)
	if err != nil && !errors.Is(err, model.ErrNotFound) {
		return record.SourceView{}, err
	}
	g := &source.GitSpec{URL: req.URL, Ref: req.Ref, Subdir: req.Subdir, Username: req.Username, Token: source.NewSecret(req.Token),
		SSHKey: source.NewSecret(req.SSHKey), KnownHosts: req.KnownHosts, CABundle: req.CABundle}
	if old.Kind == record.SourceGit && !req.NoCredentials {
		if prev, err := source.Decode(old.Kind, old.Spec, nil); err == nil && prev.Git.URL == g.URL {
			keepCredentials(g, prev.Git)
		}
	}
	if req.NoCredentials && (req.Token != "" || req.SSHKey != "") {
		return record.SourceView{}, fmt.Errorf("%w: no_credentials with a token or an SSH key: drop the one or the other", record.ErrInvalidSource)
	}
	spec := source.Spec{Git: g}
	kind, desc, _, err := spec.Encode()
	if err != nil {
		return record.SourceView{}, sourceError(err)
	}
	if c, ok := s.cfg.Sources.(checker); ok {
		if err := c.check(spec); err != nil {
			return record.SourceView{}, err
		}
	}
	secret, shown := old.WebhookSecret, ""
	switch {
	case req.WebhookSecret != "":
		if len(req.WebhookSecret) < 16 || len(req.WebhookSecret) > 256 {
			return record.SourceView{}, fmt.Errorf("%w: a webhook secret has 16 to 256 characters; leave it out and the server makes one", record.ErrInvalidSource)
		}
		secret = req.WebhookSecret
	case secret == "" || req.RotateWebhookSecret:
		if secret, err = webhook.NewSecret(); err != nil {
			return record.SourceView{}, err
		}
		shown = secret
	}
	rec, err := s.store.PutSource(ctx, record.Source{Env: env, Kind: kind, Spec: desc, WebhookSecret: secret, PollInterval: poll, UpdatedBy: by})
	if err != nil {
		return record.SourceView{}, err
	}
	s.log.Info().Str("env", env).Str("by", by).Str("url", g.URL).Str("ref", g.Ref).Msg("source set")
	s.triggerCompile(ctx, env, record.Trigger{Kind: record.TriggerOperator, By: by})
	v := sourceView(rec)
	v.WebhookSecret = shown
	return v, nil
}

// keepCredentials fills what g leaves empty from prev, the same URL's
// source before.
func keepCredentials(g, prev *source.GitSpec) {
	if !g.Token.IsSet() && !g.SSHKey.IsSet() {
		g.Token, g.SSHKey = prev.Token, prev.SSHKey
		if g.Username == "" {
			g.Username = prev.Username
		}
	}
	if g.KnownHosts == "" {
		g.KnownHosts = prev.KnownHosts
	}
	if g.CABundle == "" {
		g.CABundle = prev.CABundle
	}
}

// UploadSource makes an uploaded archive (tar, or tar.gz) env's source,
// its model in subdir, and asks for a compile of it on behalf of by. The
// archive is unpacked once on the way in: one that holds what the server
// would refuse to write (links out, devices, names leading out, more than
// the limits) is refused now, not at the next compile.
func (s *Server) UploadSource(ctx context.Context, env string, archive []byte, subdir, by string) (record.SourceView, error) {
	if _, err := s.store.GetEnv(ctx, env); err != nil {
		return record.SourceView{}, err
	}
	spec := source.Spec{Archive: &source.ArchiveSpec{Data: archive, Subdir: subdir}}
	kind, desc, data, err := spec.Encode()
	if err != nil {
		return record.SourceView{}, sourceError(err)
	}
	tmp, err := os.MkdirTemp("", "tether-upload-*")
	if err != nil {
		return record.SourceView{}, err
	}
	defer os.RemoveAll(tmp)
	rev, err := source.Fetch(ctx, spec, tmp, source.DefaultLimits())
	if err != nil {
		return record.SourceView{}, sourceError(err)
	}
	rec, err := s.store.PutSource(ctx, record.Source{Env: env, Kind: kind, Spec: desc, Archive: data, ArchiveSHA256: string(rev), UpdatedBy: by})
	if err != nil {
		return record.SourceView{}, err
	}
	s.log.Info().Str("env", env).Str("by", by).Int("bytes", len(archive)).Str("sha256", string(rev)).Msg("source archive uploaded")
	s.triggerCompile(ctx, env, record.Trigger{Kind: record.TriggerOperator, By: by})
	return sourceView(rec), nil
}

// GetSource shows env's source; ErrNotFound when it has none.
func (s *Server) GetSource(ctx context.Context, env string) (record.SourceView, error) {
	if _, err := s.store.GetEnv(ctx, env); err != nil {
		return record.SourceView{}, err
	}
	rec, err := s.store.GetSource(ctx, env, false)
	if err != nil {
		return record.SourceView{}, err
	}
	return sourceView(rec), nil
}

// DeleteSource removes env's source: the server compiles it no more, and
// what it released stays released.
func (s *Server) DeleteSource(ctx context.Context, env string) error {
	if _, err := s.store.GetEnv(ctx, env); err != nil {
		return err
	}
	if err := s.store.DeleteSource(ctx, env); err != nil {
		return err
	}
	s.forgetSource(ctx, env)
	return nil
}

// forgetSource drops what this server keeps of env's source on its disk
// (other replicas drop theirs when they next fetch another source for it).
func (s *Server) forgetSource(ctx context.Context, env string) {
	if f, ok := s.cfg.Sources.(interface {
		forget(ctx context.Context, env string)
	}); ok {
		f.forget(ctx, env)
	}
}

// Webhook handles a push webhook for env: authenticated by the source's
// webhook secret, a push of the ref the source follows asks for a compile.
// What the push says is only a hint: the compile fetches the ref itself,
// so a replayed or reordered delivery compiles what the repository holds
// now. Every refusal to authenticate is the same ErrWebhookRefused,
// whether env, its source or its secret is missing or the signature is
// wrong.
func (s *Server) Webhook(ctx context.Context, env string, h http.Header, body []byte) (record.WebhookResult, error) {
	rec, err := s.store.GetSource(ctx, env, false)
	switch {
	case errors.Is(err, model.ErrNotFound):
		return record.WebhookResult{}, fmt.Errorf("%w: environment %s has no source with a webhook", record.ErrWebhookRefused, env)
	case err != nil:
		return record.WebhookResult{}, err
	case rec.WebhookSecret == "":
		return record.WebhookResult{}, fmt.Errorf("%w: the source of %s has no webhook secret", record.ErrWebhookRefused, env)
	}
	d, err := webhook.Verify(h, body, rec.WebhookSecret, time.Now())
	switch {
	case errors.Is(err, webhook.ErrUnauthenticated):
		return record.WebhookResult{}, fmt.Errorf("%w: %w", record.ErrWebhookRefused, err)
	case err != nil:
		return record.WebhookResult{}, refusedWebhook{err}
	}
	res := record.WebhookResult{Provider: string(d.Provider), Event: d.Event, Delivery: d.ID}
	spec, err := source.Decode(rec.Kind, rec.Spec, nil)
	if err != nil {
		return res, err
	}
	if spec.Git == nil {
		res.Why = "the source is an uploaded archive: upload a new one to change it"
		return res, nil
	}
	res.Compile, res.Why = d.Matches(spec.Git.Ref)
	log := s.log.Info().Str("env", env).Str("provider", res.Provider).Str("event", res.Event).Str("delivery", res.Delivery).Str("auth", d.Auth)
	if !res.Compile {
		log.Str("why", res.Why).Msg("webhook: nothing to compile")
		return res, nil
	}
	by := d.Push.Repository
	if d.Push.After != "" {
		by = strings.TrimSpace(by + " " + shortCommit(d.Push.After))
	}
	log.Str("ref", d.Push.Ref).Str("after", d.Push.After).Msg("webhook: compile asked for")
	s.triggerCompile(ctx, env, record.Trigger{Kind: record.TriggerWebhook, By: by})
	return res, nil
}

// refusedWebhook is a malformed webhook: record.ErrInvalidWebhook, with
// the webhook package's text alone.
type refusedWebhook struct{ err error }

func (r refusedWebhook) Error() string   { return r.err.Error() }
func (r refusedWebhook) Unwrap() []error { return []error{record.ErrInvalidWebhook, r.err} }

func shortCommit(id string) string {
	if len(id) > 12 {
		return id[:12]
	}
	return id
}

// sourceView is what may be shown of rec.
func sourceView(rec record.Source) record.SourceView {
	v := record.SourceView{Env: rec.Env, Kind: rec.Kind, HasWebhook: rec.WebhookSecret != "", UpdatedAt: rec.UpdatedAt, UpdatedBy: rec.UpdatedBy}
	if spec, err := source.Decode(rec.Kind, rec.Spec, nil); err == nil {
		r := spec.Redacted()
		v.URL, v.Ref, v.Subdir, v.Username = r.URL, r.Ref, r.Subdir, r.Username
		v.HasToken, v.HasSSHKey, v.HasKnownHosts, v.HasCABundle = r.HasToken, r.HasSSHKey, r.HasKnownHosts, r.HasCABundle
	}
	if rec.Kind == record.SourceArchive {
		v.ArchiveBytes, v.ArchiveSHA256 = rec.ArchiveSize, rec.ArchiveSHA256
	}
	if v.HasWebhook {
		v.WebhookPath = WebhookPath(rec.Env)
	}
	if rec.PollInterval > 0 {
		v.PollInterval = rec.PollInterval.String()
	}
	return v
}

// parsePoll reads a poll interval: "" and "0" are never.
func parsePoll(s string) (time.Duration, error) {
	if s == "" || s == "0" {
		return 0, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil || d < record.MinPollInterval || d > record.MaxPollInterval {
		return 0, fmt.Errorf("%w: poll interval %q: want a duration between %s and %s (e.g. 5m), or 0 for never",
			record.ErrInvalidSource, model.Clip(s, 32), record.MinPollInterval, record.MaxPollInterval)
	}
	return d, nil
}

// sourceError classes what the source package refuses as the caller's
// mistake, its text for the operator.
func sourceError(err error) error {
	for _, e := range []error{source.ErrInvalid, source.ErrUnsafe, source.ErrLimit, source.ErrRefNotFound} {
		if errors.Is(err, e) {
			return refusedSource{err}
		}
	}
	return err
}

// refusedSource is a source error that is record.ErrInvalidSource too,
// with the source package's text alone.
type refusedSource struct{ err error }

func (r refusedSource) Error() string   { return r.err.Error() }
func (r refusedSource) Unwrap() []error { return []error{record.ErrInvalidSource, r.err} }
