package cli

import (
	"context"
	"net/http/httptest"
	"net/netip"
	"path/filepath"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/tetherhq/tether/bus"
	"github.com/tetherhq/tether/server"
	"github.com/tetherhq/tether/server/api"
	"github.com/tetherhq/tether/server/notify"
	"github.com/tetherhq/tether/server/record"
	"github.com/tetherhq/tether/server/store/sqlite"
)

// testAPI is a server's REST API on SQLite and the in-process bus, with an
// environment prod, for the CLI's server commands.
type testAPI struct {
	srv *server.Server
	st  *sqlite.Store
	bus *bus.Local
}

// newTestAPI starts a testAPI and points TETHER_SERVER, TETHER_TOKEN (an
// admin's) and TETHER_ENV (prod) at it.
func newTestAPI(t *testing.T) *testAPI {
	t.Helper()
	ctx := context.Background()
	st, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "t.db"), sqlite.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	b := bus.NewLocal(zerolog.Nop())
	t.Cleanup(b.Close)
	// The webhook tests' receivers listen on 127.0.0.1, denied by default.
	srv, err := server.New(server.Config{Webhooks: notify.SenderConfig{Policy: notify.Policy{Allow: []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}}}}, st, b, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	rctx, stop := context.WithCancel(ctx)
	stopped := make(chan struct{})
	go func() { defer close(stopped); _ = srv.RunNotify(rctx) }()
	t.Cleanup(func() { stop(); <-stopped })
	ts := httptest.NewServer(api.New(api.Config{}, server.APIServices(srv, nil), zerolog.Nop()).Handler())
	t.Cleanup(ts.Close)
	tok, secret, err := api.IssueToken("admin", record.RoleAdmin, "", "test", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if err := st.CreateToken(ctx, tok); err != nil {
		t.Fatal(err)
	}
	if _, err := srv.EnsureEnv(ctx, "prod", record.DefaultEnvSettings()); err != nil {
		t.Fatal(err)
	}
	t.Setenv("TETHER_SERVER", ts.URL)
	t.Setenv("TETHER_TOKEN", secret)
	t.Setenv("TETHER_ENV", "prod")
	return &testAPI{srv: srv, st: st, bus: b}
}

// pendingAgent records a discovered agent waiting for acceptance.
func (a *testAPI) pendingAgent(t *testing.T, name string) {
	t.Helper()
	if err := a.st.UpsertAgent(context.Background(), record.Agent{Env: "prod", Name: name, PublicKey: make([]byte, 32), LastSeen: time.Now()}); err != nil {
		t.Fatal(err)
	}
}
