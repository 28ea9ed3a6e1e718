package cli

import (
	"context"
	"errors"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/tetherhq/tether/bus"
	"github.com/tetherhq/tether/bus/amqp/amqptest"
	"github.com/tetherhq/tether/model"
	"github.com/tetherhq/tether/server"
	"github.com/tetherhq/tether/server/api"
	"github.com/tetherhq/tether/server/record"
	"github.com/tetherhq/tether/server/store/postgres"
	"github.com/tetherhq/tether/server/store/postgres/pgtest"
)

// streamOpened wraps an API handler: opened is closed once an event
// stream wrote its first line (where in the log it starts).
func streamOpened(opened chan struct{}) func(http.Handler) http.Handler {
	var once sync.Once
	return func(h http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == "/api/v1/events" {
				w = &firstWrite{ResponseWriter: w, wrote: func() { once.Do(func() { close(opened) }) }}
			}
			h.ServeHTTP(w, r)
		})
	}
}

// firstWrite calls wrote once the stream's first bytes were flushed to
// the client (a write alone sits in the server's buffer: a server stopped
// then would leave the client with no answer at all).
type firstWrite struct {
	http.ResponseWriter
	wrote   func()
	written bool
}

func (w *firstWrite) Write(b []byte) (int, error) {
	n, err := w.ResponseWriter.Write(b)
	w.written = w.written || n > 0
	return n, err
}

func (w *firstWrite) FlushError() error {
	err := http.NewResponseController(w.ResponseWriter).Flush()
	if err == nil && w.written {
		w.wrote()
	}
	return err
}

func (w *firstWrite) Flush() { _ = w.FlushError() }

func (w *firstWrite) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// TestWatchAcrossRestartsAndReplicas runs servers on PostgreSQL and
// RabbitMQ, one at a time and then two on one database, and follows them
// with `tether watch`, which has shown nothing when its server stops.
// While no server runs, an agent's results wait in the broker; the server
// started again ingests them before it serves any stream. watch,
// reconnected, shows each of them once (it resumes where its first
// stream started). Then it follows another replica, while the first
// ingests: what was ingested while no stream was served, and what comes
// after, each once, none said missed.
func TestWatchAcrossRestartsAndReplicas(t *testing.T) {
	was, wasMax := watchRetry, watchRetryMax
	watchRetry, watchRetryMax = 20*time.Millisecond, 100*time.Millisecond
	t.Cleanup(func() { watchRetry, watchRetryMax = was, wasMax })

	ctx := context.Background()
	pg := pgtest.Fresh(t)
	cfg := amqptest.Config(t)
	st, err := postgres.Open(ctx, postgres.Config{URL: pg})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	// start runs a server as a process would: a store and a broker
	// connection of its own, until stop.
	type replica struct {
		srv  *server.Server
		stop func()
	}
	start := func() replica {
		t.Helper()
		st, err := postgres.Open(ctx, postgres.Config{URL: pg})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { st.Close() })
		srv, err := server.New(server.Config{}, st, amqptest.Open(t, cfg), zerolog.Nop())
		if err != nil {
			t.Fatal(err)
		}
		rctx, cancel := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- srv.Run(rctx) }()
		var once sync.Once
		stop := func() {
			once.Do(func() {
				cancel()
				if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
					t.Errorf("server: %v", err)
				}
			})
		}
		t.Cleanup(stop)
		return replica{srv, stop}
	}
	a := start()
	settings := record.DefaultEnvSettings()
	settings.AutoDeploy, settings.DeployInterval, settings.RepairInterval = false, 0, 0
	if _, err := a.srv.EnsureEnv(ctx, "prod", settings); err != nil {
		t.Fatal(err)
	}
	tok, secret, err := api.IssueToken("admin", record.RoleAdmin, "", "test", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if err := st.CreateToken(ctx, tok); err != nil {
		t.Fatal(err)
	}
	pub, key, err := bus.GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	if err := st.UpsertAgent(ctx, record.Agent{Env: "prod", Name: "web", State: record.AgentAccepted, PublicKey: pub, FirstSeen: time.Now(), LastSeen: time.Now()}); err != nil {
		t.Fatal(err)
	}
	agentBus := amqptest.Open(t, cfg)
	signer := bus.NewSigner(key, 0)
	report := func(paths ...string) {
		t.Helper()
		var rs []model.Result
		for _, p := range paths {
			rs = append(rs, model.Result{ID: model.ID{Type: "file", Agent: "web", Key: "path", Value: p}, State: model.StateDeployed})
		}
		e, err := signer.Seal(bus.KindResourceStatus, "prod", "web", bus.ResourceStatus{Generation: 1, DeployID: "d", Results: rs})
		if err != nil {
			t.Fatal(err)
		}
		if err := agentBus.Publish(ctx, e); err != nil {
			t.Fatal(err)
		}
	}
	// logged counts the results the event log holds.
	logged := func() int {
		events, err := st.EventsAfter(ctx, 0, "prod", 1000)
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, e := range events {
			if _, data, err := record.Unfold(e.Kind, e.Data); err == nil && e.Kind == record.EventResults {
				n += len(data)
			}
		}
		return n
	}

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	opened := make(chan struct{})
	stopAPI := apiOnWith(t, addr, a.srv, streamOpened(opened))
	wctx, cancel := context.WithCancel(ctx)
	var out, errb syncBuffer
	exit := make(chan int, 1)
	go func() {
		exit <- run(wctx, []string{"tether", "watch", "-o", "json", "--server", "http://" + addr, "--token", secret, "--env", "prod"}, strings.NewReader(""), &out, &errb)
	}()
	exited := false
	t.Cleanup(func() {
		if !exited {
			cancel()
			<-exit
		}
	})
	dump := func() string { return "stdout:\n" + out.String() + "stderr:\n" + errb.String() }
	select {
	case <-opened:
	case <-time.After(30 * time.Second):
		t.Fatalf("the event stream did not open\n%s", dump())
	}
	shown := func() map[string][]string { // path: the IDs it was shown with
		m := map[string][]string{}
		for _, e := range streamEvents(out.String()) {
			if e.Kind == server.EventResult && e.Result != nil {
				m[e.Result.ID.Value] = append(m[e.Result.ID.Value], e.ID)
			}
		}
		return m
	}

	// The server stops; its agent reports meanwhile; the server started
	// again ingests the reports before its API serves any stream.
	stopAPI()
	a.stop()
	report("/down1", "/down2")
	report("/down3")
	a = start()
	waitFor(t, "the reports made while no server ran to be ingested", 30*time.Second, func() bool { return logged() == 3 }, dump)
	stopAPI = apiOn(t, addr, a.srv)
	waitFor(t, "the results ingested while watch was away", 30*time.Second, func() bool { return len(shown()) == 3 }, dump)

	// Another replica on the database; watch's server switches to it
	// (a load balancer's choice) while the agent reports: the first
	// replica, or the second, ingests it while no stream is served.
	b := start()
	stopAPI()
	report("/switch")
	waitFor(t, "the report made while no stream was served to be ingested", 30*time.Second, func() bool { return logged() == 4 }, dump)
	stopAPI = apiOn(t, addr, b.srv)
	defer stopAPI()
	report("/live1")
	report("/live2")
	want := []string{"/down1", "/down2", "/down3", "/switch", "/live1", "/live2"}
	waitFor(t, "every result", 30*time.Second, func() bool { return len(shown()) == len(want) }, dump)

	got := shown()
	ids := map[string]bool{}
	for _, p := range want {
		if len(got[p]) != 1 {
			t.Fatalf("result %s shown %d times, want once\n%s", p, len(got[p]), dump())
		}
		if id := got[p][0]; id == "" || ids[id] {
			t.Fatalf("result %s shown with ID %q, empty or another's\n%s", p, id, dump())
		}
		ids[got[p][0]] = true
	}
	if strings.Contains(errb.String(), "may have been missed") {
		t.Fatalf("watch says events were missed\n%s", dump())
	}
	cancel()
	exited = true
	if code := <-exit; code != 0 {
		t.Fatalf("watch exited %d after Ctrl-C, want 0\n%s", code, dump())
	}
}
