package server_test

import (
	"context"
	"errors"
	"fmt"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/tetherhq/tether/bus"
	"github.com/tetherhq/tether/bus/amqp/amqptest"
	"github.com/tetherhq/tether/model"
	"github.com/tetherhq/tether/server"
	"github.com/tetherhq/tether/server/record"
	"github.com/tetherhq/tether/server/store"
	"github.com/tetherhq/tether/server/store/postgres"
	"github.com/tetherhq/tether/server/store/postgres/pgtest"
)

// fakeAgent is an accepted agent known to the store, signing with its own
// key, without an engine: tests publish its events by hand.
type fakeAgent struct {
	name   string
	signer *bus.Signer
}

func newFakeAgent(t *testing.T, st store.Store, env, name string) *fakeAgent {
	t.Helper()
	pub, key, err := bus.GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	a := record.Agent{Env: env, Name: name, State: record.AgentAccepted, PublicKey: pub, FirstSeen: time.Now(), LastSeen: time.Now()}
	if err := st.UpsertAgent(context.Background(), a); err != nil {
		t.Fatal(err)
	}
	return &fakeAgent{name: name, signer: bus.NewSigner(key, 0)}
}

func (f *fakeAgent) seal(t *testing.T, env string, kind bus.Kind, body any) *bus.Envelope {
	t.Helper()
	e, err := f.signer.Seal(kind, env, f.name, body)
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// runServer runs srv until the test ends or stop is called; stop returns
// once it stopped.
func runServer(t *testing.T, srv *server.Server) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Run(ctx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
				t.Errorf("server: %v", err)
			}
		})
	}
	t.Cleanup(stop)
	return stop
}

func quietSettings() record.EnvSettings {
	s := record.DefaultEnvSettings()
	s.AutoDeploy, s.DeployInterval, s.RepairInterval = false, 0, 0
	return s
}

// TestIngestOnPostgresAndRabbitMQ publishes a burst of status and
// compliance events, with redeliveries, through the broker to a server on
// PostgreSQL: every result and drift report is recorded once, in fewer
// transactions than events (group commit), and every delivery is acked.
func TestIngestOnPostgresAndRabbitMQ(t *testing.T) {
	ctx := context.Background()
	st := pgtest.Open(t)
	cfg := amqptest.Config(t)
	b := amqptest.Open(t, cfg)
	srv, err := server.New(server.Config{Consumers: 8}, st, b, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := srv.EnsureEnv(ctx, "prod", quietSettings()); err != nil {
		t.Fatal(err)
	}
	const n = 300
	v, rs := releaseFiles(t, srv, n)
	web := newFakeAgent(t, st, "prod", "web")

	// Everything is on the queue before the server starts: it finds a
	// backlog, as after a restart.
	var events []*bus.Envelope
	for i, r := range rs {
		state := model.StateDeployed
		if i%10 == 0 {
			state = model.StateFailed
		}
		events = append(events, web.seal(t, "prod", bus.KindResourceStatus, bus.ResourceStatus{
			DeployID: "d1", Generation: v.Number, Results: []model.Result{{ID: r.ID, State: state, Message: "run 1"}}}))
	}
	drifted := rs[1].ID
	events = append(events, web.seal(t, "prod", bus.KindCompliance, bus.Compliance{Generation: v.Number,
		Reports: []bus.DriftReport{{ID: drifted, Compliance: model.NonCompliant, Changes: model.Changes{"content": {Current: "hacked", Desired: "x"}}}}}))
	// Redeliveries: the same envelopes again (the agent's outbox after a
	// lost confirm).
	events = append(events, events[:50]...)
	publish(t, b, events)

	sub := srv.Subscribe()
	defer sub.Close()
	stop := runServer(t, srv)
	waitFor(t, "all statuses recorded", func() bool {
		sts, err := st.Statuses(ctx, "prod", record.StatusFilter{})
		if err != nil {
			return false
		}
		for _, s := range sts {
			if s.State == model.StateAvailable {
				return false
			}
		}
		return len(sts) == n
	})
	failed, err := st.Statuses(ctx, "prod", record.StatusFilter{State: model.StateFailed})
	if err != nil || len(failed) != n/10 {
		t.Fatalf("%d failed statuses (%v), want %d", len(failed), err, n/10)
	}
	acts, err := st.DeployActions(ctx, "prod", "d1", 0)
	if err != nil || len(acts) != n/10 {
		t.Fatalf("action log of d1: %d entries (%v), want %d: one per failed result, none for redeliveries", len(acts), err, n/10)
	}
	waitFor(t, "the drift alert", func() bool {
		alerts, err := st.Alerts(ctx, record.AlertFilter{Env: "prod", Kind: record.AlertDrift})
		return err == nil && len(alerts) == 1 && alerts[0].ID != nil && *alerts[0].ID == drifted
	})
	sts, _ := st.Statuses(ctx, "prod", record.StatusFilter{Compliance: model.NonCompliant})
	var nonCompliant []string
	for _, s := range sts {
		if s.State == model.StateDeployed {
			nonCompliant = append(nonCompliant, s.ID.Value)
		}
	}
	if fmt.Sprint(nonCompliant) != "[/f001]" {
		t.Fatalf("deployed but non-compliant: %v, want [/f001] (the drift report)", nonCompliant)
	}
	if e := next(t, sub, server.EventDrift); e.Alert == nil || *e.Alert.ID != drifted || e.Alert.Changes["content"].Current != "hacked" {
		t.Fatalf("drift event %+v", e)
	}
	// Group commit: fewer ingest transactions than events. Redeliveries
	// handled at the same time as their first copy reach the store, which
	// drops them on (agent, seq); later ones are dropped in memory.
	commits, written := ingestTransactions(t, srv)
	if written < n+1 || written > n+1+50 || commits >= written {
		t.Fatalf("%v events written in %v transactions: want %d to %d events in fewer transactions", written, commits, n+1, n+51)
	}
	t.Logf("%v events in %v transactions", written, commits)
	// Stopped, the server's unacknowledged deliveries would go back to
	// the queue: none may.
	stop()
	for _, q := range []bus.Queue{bus.QueueEvents, bus.QueueCompliance} {
		if left, err := b.Backlog(ctx, q); err != nil || left != 0 {
			t.Fatalf("%d messages left on %s (%v), want every delivery acknowledged", left, q, err)
		}
	}
}

// next returns the next event of kind from sub.
func next(t *testing.T, sub *server.Subscription, kind server.EventKind) server.Event {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), patience)
	defer cancel()
	for {
		e, err := sub.Next(ctx)
		if err != nil {
			t.Fatalf("waiting for %s: %v", kind, err)
		}
		if e.Kind == kind {
			return e
		}
	}
}

// releaseFiles releases a version of n files of agent web in prod.
func releaseFiles(t *testing.T, srv *server.Server, n int) (model.Version, []model.Resource) {
	t.Helper()
	ctx := context.Background()
	var rs []model.Resource
	for i := range n {
		rs = append(rs, file("web", fmt.Sprintf("/f%03d", i), "x"))
	}
	v, _, err := srv.Export(ctx, "prod", rs, model.VersionMeta{Compiler: "test"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := srv.Release(ctx, "prod", v.Number); err != nil {
		t.Fatal(err)
	}
	return v, rs
}

func publish(t *testing.T, b bus.Bus, events []*bus.Envelope) {
	t.Helper()
	var wg sync.WaitGroup
	errs := make(chan error, len(events))
	work := make(chan *bus.Envelope)
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for e := range work {
				if err := b.Publish(context.Background(), e); err != nil {
					errs <- err
				}
			}
		}()
	}
	for _, e := range events {
		work <- e
	}
	close(work)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}

// waitFor polls cond until it holds (patience bounds it: a guard against
// hangs, not a speed assertion).
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(patience)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("gave up waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// waitProgress waits until count reaches target; it gives up when count
// stood still for patience (a stall, not a slow run).
func waitProgress(t *testing.T, what string, count func() uint64, target uint64) {
	t.Helper()
	last, since := count(), time.Now()
	for {
		n := count()
		if n >= target {
			return
		}
		if n != last {
			last, since = n, time.Now()
		}
		if time.Since(since) > patience {
			t.Fatalf("gave up waiting for %s: %d of %d, none more for %s", what, n, target, patience)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// ingestTransactions reads the ingest histogram off the server's /metrics:
// how many transactions wrote how many events.
func ingestTransactions(t *testing.T, srv *server.Server) (commits, events float64) {
	t.Helper()
	rec := httptest.NewRecorder()
	srv.Metrics().Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	found := 0
	for _, line := range strings.Split(rec.Body.String(), "\n") {
		for name, v := range map[string]*float64{"tether_ingest_batch_events_count ": &commits, "tether_ingest_batch_events_sum ": &events} {
			if rest, ok := strings.CutPrefix(line, name); ok {
				if _, err := fmt.Sscan(rest, v); err != nil {
					t.Fatalf("metric line %q: %v", line, err)
				}
				found++
			}
		}
	}
	if found != 2 {
		t.Fatalf("tether_ingest_batch_events not in /metrics:\n%s", rec.Body.String())
	}
	return commits, events
}

// TestStandbyTakesOver runs two replicas on one database and broker: one
// leads the environment's scheduler and runs its periodic verification;
// when it stops, the standby takes over; when the leader's database
// session is killed, the lead is taken again.
func TestStandbyTakesOver(t *testing.T) {
	ctx := context.Background()
	url := pgtest.Fresh(t)
	cfg := amqptest.Config(t)
	open := func() (*server.Server, store.Store) {
		st, err := postgres.Open(ctx, postgres.Config{URL: url, LeaseCheck: 100 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { st.Close() })
		srv, err := server.New(server.Config{LeadEvery: 100 * time.Millisecond, Consumers: 1}, st, amqptest.Open(t, cfg), zerolog.Nop())
		if err != nil {
			t.Fatal(err)
		}
		return srv, st
	}
	a, st := open()
	settings := quietSettings()
	settings.RepairInterval = record.Duration(time.Second)
	if _, err := a.EnsureEnv(ctx, "prod", settings); err != nil {
		t.Fatal(err)
	}
	v, _, err := a.Export(ctx, "prod", []model.Resource{file("web", "/f", "x")}, model.VersionMeta{Compiler: "test"})
	if err != nil {
		t.Fatal(err)
	}
	newFakeAgent(t, st, "prod", "web")
	// The agent's inbox exists (it connected once); nobody consumes it.
	if err := amqptest.Open(t, cfg).DeclareInbox(ctx, "prod", "web"); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Release(ctx, "prod", v.Number); err != nil {
		t.Fatal(err)
	}
	b, _ := open()
	subA, subB := a.Subscribe(), b.Subscribe()
	defer subA.Close()
	defer subB.Close()
	stopA := runServer(t, a)
	nextScheduled(t, subA) // a leads: it started first
	holder := leaseHolder(t, url)
	runServer(t, b)
	if got := leaseHolder(t, url); got != holder {
		t.Fatalf("the lease moved from session %d to %d while its holder was alive", holder, got)
	}
	stopA()
	e := nextScheduled(t, subB)
	if e.Operation != record.OpDryRun || e.Env != "prod" {
		t.Fatalf("standby scheduled %+v, want a dry run of prod (drift policy alert)", e)
	}
	// Kill the leader's database session: the lease is lost and taken
	// again, on a new session.
	holder = leaseHolder(t, url)
	if err := postgres.TerminateSession(ctx, url, holder); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "a new lease holder", func() bool {
		h, ok := tryLeaseHolder(t, url)
		return ok && h != holder
	})
	nextScheduled(t, subB)
}

func nextScheduled(t *testing.T, sub *server.Subscription) server.Event {
	t.Helper()
	return next(t, sub, server.EventScheduled)
}

// leaseHolder returns the session holding the scheduler lease of prod.
func leaseHolder(t *testing.T, url string) uint32 {
	t.Helper()
	var pid uint32
	waitFor(t, "a lease holder", func() bool {
		var ok bool
		pid, ok = tryLeaseHolder(t, url)
		return ok
	})
	return pid
}

func tryLeaseHolder(t *testing.T, url string) (uint32, bool) {
	t.Helper()
	pid, ok, err := postgres.LeaseHolder(context.Background(), url, "scheduler/prod")
	if err != nil {
		t.Fatal(err)
	}
	return pid, ok
}

// An agent rejected through one replica is refused by another that holds
// it in its cache as soon as PostgreSQL tells of the change, not when the
// copy expires (an hour here).
func TestRejectSeenByAnotherReplicaAtOnce(t *testing.T) {
	ctx := context.Background()
	st := pgtest.Open(t)
	srvA, srvB, _, busB := twoReplicas(t, st, server.Config{AgentCacheTTL: time.Hour, AgentCacheListenTTL: time.Hour})
	web := newFakeAgent(t, st, "prod", "web")
	runServer(t, srvA)
	runServer(t, srvB)
	publish(t, busB, []*bus.Envelope{web.seal(t, "prod", bus.KindHeartbeat, bus.Heartbeat{})})
	waitFor(t, "replica B to take the heartbeat (and cache the agent)", func() bool {
		a, err := st.GetAgent(ctx, "prod", "web")
		return err == nil && a.LastSeq == 1
	})
	if _, err := srvA.AgentAction(ctx, "prod", "web", record.AgentReject); err != nil {
		t.Fatal(err)
	}
	// A heartbeat or two in flight before the notice reached B may be
	// taken; then B refuses them.
	waitFor(t, "replica B to refuse the rejected agent's heartbeats", func() bool {
		publish(t, busB, []*bus.Envelope{web.seal(t, "prod", bus.KindHeartbeat, bus.Heartbeat{})})
		return eventsCounted(t, srvB, "heartbeat", "rejected", "dropped") > 0
	})
}

// twoReplicas makes two servers with cfg on one store, each with an
// in-process bus of its own (events published to one bus reach that server
// alone), and environment "prod"; the test runs them.
func twoReplicas(t *testing.T, st store.Store, cfg server.Config) (srvA, srvB *server.Server, busA, busB *bus.Local) {
	t.Helper()
	busA, busB = bus.NewLocal(zerolog.Nop()), bus.NewLocal(zerolog.Nop())
	t.Cleanup(busA.Close)
	t.Cleanup(busB.Close)
	var err error
	if srvA, err = server.New(cfg, st, busA, zerolog.Nop()); err != nil {
		t.Fatal(err)
	}
	if srvB, err = server.New(cfg, st, busB, zerolog.Nop()); err != nil {
		t.Fatal(err)
	}
	if _, err := srvA.EnsureEnv(context.Background(), "prod", quietSettings()); err != nil {
		t.Fatal(err)
	}
	return srvA, srvB, busA, busB
}

// eventsCounted reads tether_ingest_events_total off the server's /metrics:
// the events of kind handled with one of outcomes.
func eventsCounted(t *testing.T, srv *server.Server, kind string, outcomes ...string) float64 {
	t.Helper()
	rec := httptest.NewRecorder()
	srv.Metrics().Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	var n float64
	for _, line := range strings.Split(rec.Body.String(), "\n") {
		for _, o := range outcomes {
			if rest, ok := strings.CutPrefix(line, fmt.Sprintf(`tether_ingest_events_total{kind=%q,outcome=%q} `, kind, o)); ok {
				var v float64
				if _, err := fmt.Sscan(rest, &v); err != nil {
					t.Fatalf("metric line %q: %v", line, err)
				}
				n += v
			}
		}
	}
	return n
}
