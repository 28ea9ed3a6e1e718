package cli

import (
	"context"
	"encoding/json"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/tetherhq/tether/bus"
	"github.com/tetherhq/tether/server"
	"github.com/tetherhq/tether/server/api"
	"github.com/tetherhq/tether/server/record"
	"github.com/tetherhq/tether/server/store/sqlite"
)

// `tether agent facts-refresh NAME` and `tether agent rotate-key NAME`
// against a real API (SQLite, the in-process bus): the agent's inbox gets
// the command; errors and -o json are those of the other agent commands.
func TestAgentFactsRefresh(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	st, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "t.db"), sqlite.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	b := bus.NewLocal(zerolog.Nop())
	t.Cleanup(b.Close)
	srv, err := server.New(server.Config{}, st, b, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(api.New(api.Config{}, server.APIServices(srv, nil), zerolog.Nop()).Handler())
	t.Cleanup(ts.Close)
	tok, secret, err := api.IssueToken("ops", record.RoleOperator, "", "test", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if err := st.CreateToken(ctx, tok); err != nil {
		t.Fatal(err)
	}
	if _, err := srv.EnsureEnv(ctx, "prod", record.DefaultEnvSettings()); err != nil {
		t.Fatal(err)
	}
	if err := st.UpsertAgent(ctx, record.Agent{Env: "prod", Name: "web-1", PublicKey: make([]byte, 32), LastSeen: time.Now()}); err != nil {
		t.Fatal(err)
	}
	t.Setenv("TETHER_SERVER", ts.URL)
	t.Setenv("TETHER_TOKEN", secret)
	t.Setenv("TETHER_ENV", "prod")

	if code, _, stderr := invoke(t, "agent", "facts-refresh", "web-1"); code != 1 || !strings.Contains(stderr, "accept it first") {
		t.Fatalf("refresh of a pending agent: exit %d, %q; want 1 and a hint to accept it", code, stderr)
	}
	if code, _, stderr := invoke(t, "agent", "rotate-key", "web-1"); code != 1 || !strings.Contains(stderr, "accept it first") {
		t.Fatalf("rotate-key of a pending agent: exit %d, %q; want 1 and a hint to accept it", code, stderr)
	}
	if code, _, stderr := invoke(t, "agent", "facts-refresh"); code != exitUsage {
		t.Fatalf("no agent name: exit %d, want %d: %q", code, exitUsage, stderr)
	}
	if _, err := srv.AgentAction(ctx, "prod", "web-1", record.AgentAccept); err != nil {
		t.Fatal(err)
	}
	if err := b.DeclareInbox(ctx, "prod", "web-1"); err != nil {
		t.Fatal(err)
	}
	if code, stdout, stderr := invoke(t, "agent", "facts-refresh", "web-1"); code != 0 || !strings.Contains(stdout, "agent web-1: asked to report its facts again") {
		t.Fatalf("facts-refresh: exit %d, %q / %q", code, stdout, stderr)
	}
	code, stdout, stderr := invoke(t, "agent", "facts-refresh", "web-1", "-o", "json")
	var view api.AgentView
	if code != 0 || json.Unmarshal([]byte(stdout), &view) != nil || view.Name != "web-1" || view.State != record.AgentAccepted {
		t.Fatalf("facts-refresh -o json: exit %d, %q / %q; want the agent as JSON", code, stdout, stderr)
	}

	if code, stdout, stderr := invoke(t, "agent", "rotate-key", "web-1"); code != 0 || !strings.Contains(stdout, "agent web-1: asked to replace its key") {
		t.Fatalf("rotate-key: exit %d, %q / %q", code, stdout, stderr)
	}

	refreshes, rotations := make(chan struct{}, 2), make(chan struct{}, 1)
	consumed := make(chan struct{})
	go func() {
		defer close(consumed)
		_ = b.ConsumeInbox(ctx, "prod", "web-1", func(_ context.Context, d bus.Delivery) error {
			switch d.Envelope.Kind {
			case bus.KindFactsRefresh:
				select {
				case refreshes <- struct{}{}:
				default: // more than asked for: the count below fails
				}
			case bus.KindRotateKey:
				rotations <- struct{}{}
			}
			return nil
		})
	}()
	for i := range 2 {
		select {
		case <-refreshes:
		case <-ctx.Done():
			t.Fatalf("%d facts.refresh in the agent's inbox, want 2", i)
		}
	}
	select {
	case <-rotations:
	case <-ctx.Done():
		t.Fatal("no key.rotate in the agent's inbox")
	}
	cancel()
	<-consumed
}
