package server_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tetherhq/tether/agent"
	"github.com/tetherhq/tether/server"
	"github.com/tetherhq/tether/server/record"
	"github.com/tetherhq/tether/server/scheduler"
	"github.com/tetherhq/tether/server/store"
)

// countingStore counts the writes of agents' records.
type countingStore struct {
	store.Store
	upserts, marks, marked atomic.Int64
}

func (c *countingStore) UpsertAgent(ctx context.Context, a record.Agent) error {
	c.upserts.Add(1)
	return c.Store.UpsertAgent(ctx, a)
}

func (c *countingStore) MarkAgentsSeen(ctx context.Context, seen []store.AgentSeen) error {
	c.marks.Add(1)
	c.marked.Add(int64(len(seen)))
	return c.Store.MarkAgentsSeen(ctx, seen)
}

// Heartbeats that say nothing new are written in groups, every second,
// with no read and write of the agent's record each; its last-seen time
// and sequence move, and a goodbye still takes it offline.
func TestHeartbeatsWrittenInGroups(t *testing.T) {
	var cs *countingStore
	settings := record.DefaultEnvSettings()
	settings.Enrollment = record.EnrollOpen
	settings.AutoDeploy = false
	r := startRigOver(t, func(st store.Store) store.Store { cs = &countingStore{Store: st}; return cs },
		func(*server.Config, store.Store) {}, map[string]record.EnvSettings{"test": settings})
	names := []string{"web-1", "web-2", "web-3"}
	stops := map[string]func(){}
	for _, n := range names {
		_, stops[n] = r.startAgentWith(agent.Config{Env: "test", Name: n, StateDir: t.TempDir(), ServerKey: r.srv.PublicKey(),
			Heartbeat: 5 * time.Millisecond, NoWatch: true})
	}
	r.waitOnline(names...)
	get := r.agentRecord
	first := map[string]record.Agent{}
	for _, n := range names {
		first[n] = get(n)
	}
	upserts := cs.upserts.Load()
	// Wait (a guard, not a timing) until each agent's stored sequence
	// moved by 40 heartbeats' worth and its last-seen time by more than
	// a flush.
	deadline := time.Now().Add(patience)
	for _, n := range names {
		for a := get(n); a.LastSeq < first[n].LastSeq+40 || !a.LastSeen.After(first[n].LastSeen); a = get(n) {
			if time.Now().After(deadline) {
				t.Fatalf("%s: sequence %d, last seen %v; want past %d and %v", n, a.LastSeq, a.LastSeen, first[n].LastSeq+40, first[n].LastSeen)
			}
			time.Sleep(10 * time.Millisecond)
		}
		if a := get(n); !a.Connected {
			t.Fatalf("%s offline while it beats", n)
		}
	}
	if n := cs.upserts.Load() - upserts; n != 0 {
		t.Fatalf("%d writes of agents' whole records for heartbeats that said nothing new, want 0", n)
	}
	if marks, marked := cs.marks.Load(), cs.marked.Load(); marks == 0 || marked < marks {
		t.Fatalf("%d grouped writes of %d agents' heartbeats", marks, marked)
	}

	// A goodbye is recorded at once, and heartbeats written after it,
	// heard before it, do not bring the agent back online.
	stops["web-2"]()
	deadline = time.Now().Add(patience)
	for get("web-2").Connected {
		if time.Now().After(deadline) {
			t.Fatal("web-2 still online after its goodbye")
		}
		time.Sleep(10 * time.Millisecond)
	}
	marks := cs.marks.Load()
	for cs.marks.Load() < marks+2 {
		if time.Now().After(deadline) {
			t.Fatal("no more heartbeats written")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if get("web-2").Connected {
		t.Fatal("web-2 online again after its goodbye, without a heartbeat since")
	}
}

// An agent that reports skips its heartbeats: the server takes every
// event of an accepted agent as a sign of life, moves its last-seen time
// and sequence, and says so in its answer to the hello. Once the agent
// has nothing else to say, it beats again.
func TestReportsStandForHeartbeats(t *testing.T) {
	settings := record.DefaultEnvSettings()
	settings.Enrollment = record.EnrollOpen
	settings.AutoDeploy = false
	r := startRigWith(t, func(*server.Config, store.Store) {}, map[string]record.EnvSettings{"test": settings})
	var changing atomic.Bool
	var n atomic.Int64
	changing.Store(true)
	facts := func(context.Context) map[string]any {
		if changing.Load() {
			return map[string]any{"n": n.Add(1)}
		}
		return map[string]any{"n": n.Load()}
	}
	r.startAgentWith(agent.Config{Env: "test", Name: "web-1", StateDir: t.TempDir(), ServerKey: r.srv.PublicKey(),
		Heartbeat: 200 * time.Millisecond, Facts: facts, FactsInterval: 50 * time.Millisecond, NoWatch: true})
	r.waitOnline("web-1")
	beats := func() float64 {
		return metricWith(t, r.srv, "tether_ingest_events_total", `{kind="heartbeat",outcome="ok"}`)
	}
	reports := func() float64 {
		return metricWith(t, r.srv, "tether_ingest_events_total", `{kind="facts",outcome="ok"}`)
	}
	get := func() record.Agent { return r.agentRecord("web-1") }

	// Reporting facts every 50 ms (a load a server under the race
	// detector keeps up with), for as long as 10 heartbeats: the agent
	// skips them all but a few (a report late on a busy machine).
	before := get()
	deadline := time.Now().Add(patience)
	for reports() < 20 || get().LastSeq < before.LastSeq+20 {
		if time.Now().After(deadline) {
			t.Fatalf("%g facts reported, sequence %d; want 20 reports and the sequence past %d", reports(), get().LastSeq, before.LastSeq+20)
		}
		time.Sleep(5 * time.Millisecond)
	}
	beatsBefore := beats()
	time.Sleep(2 * time.Second) // 10 heartbeats' time, reporting all along
	if got := beats() - beatsBefore; got > 2 {
		t.Fatalf("%g heartbeats while the agent reported all along, want at most 2 of 10", got)
	}
	if n := metricWith(t, r.srv, "tether_ingest_events_total", `{kind="facts",outcome="over_rate"}`); n != 0 {
		t.Fatalf("%g facts over the agent's rate: the test reports too fast", n)
	}
	if a := get(); !a.Connected || !a.LastSeen.After(before.LastSeen) {
		t.Fatalf("connected %v, last seen %v (was %v): its reports did not keep it seen", a.Connected, a.LastSeen, before.LastSeen)
	}

	// Quiet: it beats again.
	changing.Store(false)
	beatsBefore = beats()
	deadline = time.Now().Add(patience)
	for beats() < beatsBefore+3 {
		if time.Now().After(deadline) {
			t.Fatalf("%g heartbeats once the agent fell quiet, want 3", beats()-beatsBefore)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// Results are signs of life: an agent that only reports (its heartbeat an
// hour away) has its last-seen time moved by each report, also of a
// version it held already, so that the offline window does not trip over
// an agent busy deploying.
func TestResultsMoveLastSeen(t *testing.T) {
	r := newRig(t, record.EnrollOpen)
	r.startAgentWith(agent.Config{Env: "test", Name: "web-1", StateDir: t.TempDir(), ServerKey: r.srv.PublicKey(),
		Heartbeat: time.Hour, NoWatch: true})
	r.waitOnline("web-1")
	r.release(file("web-1", "/a", "a"), file("web-1", "/b", "b"))
	get := func() record.Agent { return r.agentRecord("web-1") }
	for range 2 {
		before := get()
		if res := r.deploy(scheduler.DeployRequest{Full: true}); len(res) != 2 {
			t.Fatalf("%d results, want 2", len(res))
		}
		deadline := time.Now().Add(patience)
		for a := get(); a.LastSeq <= before.LastSeq || !a.LastSeen.After(before.LastSeen); a = get() {
			if time.Now().After(deadline) {
				t.Fatalf("after its results: sequence %d, last seen %v; want past %d and %v", a.LastSeq, a.LastSeen, before.LastSeq, before.LastSeen)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
}
