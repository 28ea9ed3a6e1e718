package server_test

import (
	"context"
	"encoding/json"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/tetherhq/tether/bus"
	"github.com/tetherhq/tether/server"
	"github.com/tetherhq/tether/server/record"
	"github.com/tetherhq/tether/server/store/sqlite"
)

// TestDecisionEventsLoggedWithThem: the event of an operator's decision
// about an agent (accept, pause, delete) is in the event log when the
// decision returns, appended by the transaction that records it: a server
// that appends nothing in the background (here it is not run: as one that
// crashed right after) loses none. The server's own subscribers get it
// too, once.
func TestDecisionEventsLoggedWithThem(t *testing.T) {
	ctx := context.Background()
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
	if _, err := srv.EnsureEnv(ctx, "prod", quietSettings()); err != nil {
		t.Fatal(err)
	}
	if err := st.UpsertAgent(ctx, record.Agent{Env: "prod", Name: "web", State: record.AgentPending, PublicKey: make([]byte, 32),
		FirstSeen: time.Now(), LastSeen: time.Now()}); err != nil {
		t.Fatal(err)
	}
	sub := srv.Subscribe()
	defer sub.Close()
	var last int64
	for _, step := range []struct {
		what string
		do   func() error
	}{
		{"accept", func() error { _, err := srv.AgentAction(ctx, "prod", "web", record.AgentAccept); return err }},
		{"pause", func() error { _, err := srv.AgentAction(ctx, "prod", "web", record.AgentPause); return err }},
		{"deleted", func() error { _, err := srv.DeleteAgent(ctx, "prod", "web"); return err }},
	} {
		if err := step.do(); err != nil {
			t.Fatalf("%s: %v", step.what, err)
		}
		logged, err := st.EventsAfter(ctx, last, "prod", 0)
		if err != nil {
			t.Fatal(err)
		}
		var e server.Event
		if len(logged) != 1 || json.Unmarshal(logged[0].Data, &e) != nil || e.Kind != server.EventAgentChanged || e.Agent != "web" || e.Error != step.what {
			t.Fatalf("%s: the event log holds %+v after it returned, want its agent.changed event", step.what, logged)
		}
		last = logged[0].ID
		wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		got, err := sub.Next(wctx)
		cancel()
		if err != nil || got.Kind != server.EventAgentChanged || got.Error != step.what || !got.At.Equal(e.At) {
			t.Fatalf("%s: the subscriber got %+v (%v), want the logged event %+v", step.what, got, err, e)
		}
	}
}

// TestHaltLoggedWithIt: halting and resuming an environment puts env.halted
// in the event log by the transaction that changes its settings, with
// the server not run (as if it crashed right after); a change that
// halts nothing logs nothing.
func TestHaltLoggedWithIt(t *testing.T) {
	ctx := context.Background()
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
	if _, err := srv.EnsureEnv(ctx, "prod", quietSettings()); err != nil {
		t.Fatal(err)
	}
	var last int64
	for _, step := range []struct {
		what   string
		change func(*record.EnvSettings)
		want   string // the event's text; "": none
	}{
		{"halt", func(s *record.EnvSettings) { s.Halted = true }, "halted=true"},
		{"keep", func(s *record.EnvSettings) { s.VersionsToKeep = 3 }, ""},
		{"resume", func(s *record.EnvSettings) { s.Halted = false }, "halted=false"},
	} {
		if _, err := srv.UpdateEnvSettings(ctx, "prod", func(s *record.EnvSettings) error { step.change(s); return nil }); err != nil {
			t.Fatalf("%s: %v", step.what, err)
		}
		logged, err := st.EventsAfter(ctx, last, "prod", 0)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, le := range logged {
			var e server.Event
			if err := json.Unmarshal(le.Data, &e); err != nil {
				t.Fatal(err)
			}
			got = append(got, string(e.Kind)+" "+e.Error)
			last = le.ID
		}
		want := []string{}
		if step.want != "" {
			want = append(want, string(server.EventEnvHalted)+" "+step.want)
		}
		if !slices.Equal(got, want) && len(got)+len(want) > 0 {
			t.Fatalf("%s: the event log got %q after it returned, want %q", step.what, got, want)
		}
	}
}
