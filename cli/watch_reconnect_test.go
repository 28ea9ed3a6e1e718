package cli

import (
	"context"
	"encoding/json"
	"net"
	"net/http"
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

// apiOn serves srv's API on addr until the returned stop is called; stop
// cuts the streams open, as a server that goes away does.
func apiOn(t *testing.T, addr string, srv *server.Server) (stop func()) {
	t.Helper()
	return apiOnWith(t, addr, srv, nil)
}

// apiOnWith is apiOn with the API's handler wrapped by wrap (nil: not).
func apiOnWith(t *testing.T, addr string, srv *server.Server, wrap func(http.Handler) http.Handler) (stop func()) {
	t.Helper()
	var ln net.Listener
	var err error
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if ln, err = net.Listen("tcp", addr); err == nil || time.Now().After(deadline) {
			break
		}
	}
	if err != nil {
		t.Fatal(err)
	}
	a := api.New(api.Config{}, server.APIServices(srv, nil), zerolog.Nop())
	h := a.Handler()
	if wrap != nil {
		h = wrap(h)
	}
	hs := &http.Server{Handler: h}
	done := make(chan struct{})
	go func() { defer close(done); _ = hs.Serve(ln) }()
	var stopped bool
	stop = func() {
		if stopped {
			return
		}
		stopped = true
		hs.Close() // closes the open streams too
		a.EndStreams()
		<-done
	}
	t.Cleanup(stop)
	return stop
}

// TestWatchReconnects: `tether watch` follows events across a restart of
// the server's API, says it reconnects, and shows what was published
// while it was away once, in order (Last-Event-ID). Across a restart of
// the server process it resumes from the stored event log: the events
// published while it was away come, none twice, none said missed.
func TestWatchReconnects(t *testing.T) {
	was, wasMax := watchRetry, watchRetryMax
	watchRetry, watchRetryMax = 20*time.Millisecond, 100*time.Millisecond
	t.Cleanup(func() { watchRetry, watchRetryMax = was, wasMax })

	ctx := context.Background()
	st, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "t.db"), sqlite.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	b := bus.NewLocal(zerolog.Nop())
	t.Cleanup(b.Close)
	// newServer runs a server until stopServer (its events appended to
	// the log as it stops).
	var stopServer func()
	newServer := func() *server.Server {
		srv, err := server.New(server.Config{}, st, b, zerolog.Nop())
		if err != nil {
			t.Fatal(err)
		}
		rctx, cancel := context.WithCancel(ctx)
		done := make(chan struct{})
		go func() { defer close(done); _ = srv.Run(rctx) }()
		stopServer = func() { cancel(); <-done }
		t.Cleanup(stopServer)
		return srv
	}
	srv := newServer()
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
	for _, n := range []string{"a1", "a2", "a3", "a4"} {
		if err := st.UpsertAgent(ctx, record.Agent{Env: "prod", Name: n, State: record.AgentAccepted, PublicKey: make([]byte, 32)}); err != nil {
			t.Fatal(err)
		}
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	stop := apiOn(t, addr, srv)

	wctx, cancel := context.WithCancel(ctx)
	var out, errb syncBuffer
	done := make(chan int, 1)
	go func() {
		done <- run(wctx, []string{"tether", "watch", "-o", "json", "--server", "http://" + addr, "--token", secret, "--env", "prod"}, strings.NewReader(""), &out, &errb)
	}()
	exited := false
	t.Cleanup(func() {
		if !exited {
			cancel()
			<-done
		}
	})
	dump := func() string { return "stdout:\n" + out.String() + "stderr:\n" + errb.String() }
	// poke publishes an event about agent name (a pause, each time).
	poke := func(srv *server.Server, name string) {
		t.Helper()
		if _, err := srv.AgentAction(ctx, "prod", name, record.AgentPause); err != nil {
			t.Fatal(err)
		}
	}
	shown := func(name string) int {
		n := 0
		for _, e := range streamEvents(out.String()) {
			if e.Kind == server.EventAgentChanged && e.Agent == name {
				n++
			}
		}
		return n
	}
	// The stream is open once an event published now is shown.
	waitFor(t, "the first event", 20*time.Second, func() bool {
		poke(srv, "a1")
		return shown("a1") > 0
	}, dump)

	stop()
	poke(srv, "a2") // published while watch is away
	stop = apiOn(t, addr, srv)
	waitFor(t, "the event published while away", 20*time.Second, func() bool { return shown("a2") == 1 }, dump)
	if !strings.Contains(errb.String(), "lost the event stream") || !strings.Contains(errb.String(), "reconnecting in") ||
		!strings.Contains(errb.String(), "reconnected; resuming after event") {
		t.Fatalf("watch did not say it reconnects:\n%s", dump())
	}
	ids := map[string]bool{}
	for _, e := range streamEvents(out.String()) {
		if e.Kind == api.EventsMissed {
			continue // a notice, not an event of the server's
		}
		if e.ID == "" || ids[e.ID] {
			t.Fatalf("event %q shown without an ID or twice\n%s", e.ID, dump())
		}
		ids[e.ID] = true
	}
	if strings.Contains(errb.String(), "may have been missed") {
		t.Fatalf("a resume within the kept events says events were missed\n%s", dump())
	}

	// Another server process over the same store: watch resumes from
	// the stored log, and the event published while it was away comes.
	stop()
	poke(srv, "a3")
	stopServer()
	srv2 := newServer()
	stop = apiOn(t, addr, srv2)
	waitFor(t, "the event published before the restart", 20*time.Second, func() bool { return shown("a3") == 1 }, dump)
	waitFor(t, "an event of the new server", 20*time.Second, func() bool {
		poke(srv2, "a4")
		return shown("a4") > 0
	}, dump)
	ids = map[string]bool{}
	for _, e := range streamEvents(out.String()) {
		if e.ID == "" || ids[e.ID] {
			t.Fatalf("event %q shown without an ID or twice across the restart\n%s", e.ID, dump())
		}
		ids[e.ID] = true
	}
	if strings.Contains(errb.String(), "may have been missed") {
		t.Fatalf("a resume across a restart says events were missed\n%s", dump())
	}
	stop()
	cancel()
	exited = true
	if code := <-done; code != 0 {
		t.Fatalf("watch exited %d after Ctrl-C, want 0\n%s", code, dump())
	}
}

// streamEvents parses the lines of `tether watch -o json`.
func streamEvents(s string) []server.Event {
	var events []server.Event
	for _, line := range strings.Split(s, "\n") {
		var e server.Event
		if json.Unmarshal([]byte(line), &e) == nil {
			events = append(events, e)
		}
	}
	return events
}
