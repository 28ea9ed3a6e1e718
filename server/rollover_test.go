package server_test

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tetherhq/tether/agent"
	"github.com/tetherhq/tether/agent/journal"
	"github.com/tetherhq/tether/bus"
	"github.com/tetherhq/tether/model"
	"github.com/tetherhq/tether/server"
	"github.com/tetherhq/tether/server/record"
	"github.com/tetherhq/tether/server/scheduler"
	"github.com/tetherhq/tether/server/store/sqlite"
)

// rotatingAgent is the configuration of an agent with a state directory
// that heartbeats often: its first event signed with a new key comes soon.
func (r *rig) rotatingAgent(name, dir string) agent.Config {
	return agent.Config{Env: "test", Name: name, StateDir: dir, ServerKey: r.srv.PublicKey(), Heartbeat: 20 * time.Millisecond}
}

// waitRecord waits until the agent's record satisfies ok.
func (r *rig) waitRecord(name, what string, ok func(record.Agent) bool) record.Agent {
	r.t.Helper()
	deadline := time.Now().Add(patience)
	for {
		a, err := r.store.GetAgent(r.ctx, "test", name)
		if err == nil && ok(a) {
			return a
		}
		if time.Now().After(deadline) {
			r.t.Fatalf("agent %s: still waiting for %s; record %+v, %v", name, what, a, err)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// startAccepted starts an agent of a manual environment and accepts it,
// as an operator would: another key on its name is then refused, unlike in
// an open environment.
func (r *rig) startAccepted(cfg agent.Config) (a *agent.Agent, stop func()) {
	r.t.Helper()
	a, stop = r.startAgentWith(cfg)
	if got := r.waitRecord(cfg.Name, "its discovery", func(record.Agent) bool { return true }); got.State != record.AgentAccepted {
		if _, err := r.srv.AgentAction(r.ctx, "test", cfg.Name, record.AgentAccept); err != nil {
			r.t.Fatal(err)
		}
	}
	r.waitOnline(cfg.Name)
	return a, stop
}

func pub(k ed25519.PrivateKey) ed25519.PublicKey { return k.Public().(ed25519.PublicKey) }

// An operator rotates a running agent's key: the agent proposes a new key
// signed by its old one, the server makes it the agent's, the agent
// switches, and deploys go on; its old key cannot propose another, and a
// restart keeps the new key.
func TestAgentKeyRotation(t *testing.T) {
	r := newRig(t, record.EnrollManual)
	dir := t.TempDir()
	r.release(file("web", "/f", "1"))
	a, stop := r.startAccepted(r.rotatingAgent("web", dir))
	r.deploy(scheduler.DeployRequest{})
	oldKey := a.Journal().Key()

	if _, err := r.srv.RotateKey(r.ctx, "test", "web"); err != nil {
		t.Fatal(err)
	}
	rec := r.waitRecord("web", "the switch to its new key", func(a record.Agent) bool {
		return !bytes.Equal(a.PublicKey, pub(oldKey)) && a.PreviousUntil != nil
	})
	if !bytes.Equal(rec.PreviousKey, pub(oldKey)) {
		t.Fatalf("previous key %s, want the old key %s", model.Fingerprint(rec.PreviousKey), model.Fingerprint(pub(oldKey)))
	}
	if got := a.PublicKey(); !got.Equal(ed25519.PublicKey(rec.PublicKey)) {
		t.Fatalf("agent signs with %s, the server holds %s", model.Fingerprint(got), model.Fingerprint(rec.PublicKey))
	}
	audit, err := r.store.Audit(r.ctx, record.AuditFilter{Env: "test"})
	if err != nil {
		t.Fatal(err)
	}
	if len(audit) == 0 || audit[0].Action != "agent.key-rollover" || !strings.Contains(audit[0].Detail, model.Fingerprint(rec.PublicKey)) {
		t.Fatalf("audit log %+v: want the rollover to %s first", audit, model.Fingerprint(rec.PublicKey))
	}

	// Deploys go on, their results signed with the new key.
	r.release(file("web", "/f", "2"))
	if res := r.deploy(scheduler.DeployRequest{}); len(res) != 1 {
		t.Fatalf("deploy after the rotation: %d results, want 1", len(res))
	}

	// The old key, once the agent left it, cannot move the agent again.
	_, stolen, _ := bus.GenerateKey()
	r.forge(oldKey, uint64(r.lastSeq("web"))+1, bus.KindKeyRollover, "web",
		bus.KeyRollover{NewKey: pub(stolen), Proof: bus.ProveKey(stolen, "test", "web", pub(oldKey))})
	if msg := r.security(); !strings.Contains(msg, "previous key") {
		t.Fatalf("security alert %q: want the rollover by the previous key refused", msg)
	}
	if got := r.waitRecord("web", "its key", func(record.Agent) bool { return true }); !bytes.Equal(got.PublicKey, rec.PublicKey) {
		t.Fatal("a rollover signed by the old key moved the agent")
	}

	// Restarted, it says hello with the new key: no alert, it deploys.
	stop()
	r.startAccepted(r.rotatingAgent("web", dir))
	r.release(file("web", "/f", "3"))
	if res := r.deploy(scheduler.DeployRequest{}); len(res) != 1 {
		t.Fatalf("deploy after a restart: %d results, want 1", len(res))
	}
}

// A rollover that began while the agent was stopped (or whose
// acknowledgement was lost) is proposed again after the next hello, signed
// by the key the agent still holds, and completes.
func TestAgentKeyRotationResumes(t *testing.T) {
	r := newRig(t, record.EnrollManual)
	dir := t.TempDir()
	r.release(file("web", "/f", "1"))
	_, stop := r.startAccepted(r.rotatingAgent("web", dir))
	stop()

	// A crash after the next key was kept, before it was told.
	j, err := journal.Open(dir, "web", journal.Config{})
	if err != nil {
		t.Fatal(err)
	}
	oldKey := j.Key()
	next, _, err := j.BeginRollover()
	if err != nil {
		t.Fatal(err)
	}
	j.Close()

	// The server accepted it, and the acknowledgement was lost: the server
	// holds the new key while the agent still signs with the old one.
	// A consumer in the agent's place takes the acknowledgement.
	acked := make(chan struct{}, 1)
	cctx, cancel := context.WithCancel(r.ctx)
	consumed := make(chan error, 1)
	go func() {
		consumed <- r.bus.ConsumeInbox(cctx, "test", "web", func(_ context.Context, d bus.Delivery) error {
			if d.Envelope.Kind == bus.KindKeyAccepted {
				acked <- struct{}{}
			}
			return nil
		})
	}()
	r.forge(oldKey, uint64(r.lastSeq("web"))+1, bus.KindKeyRollover, "web",
		bus.KeyRollover{NewKey: pub(next), Proof: bus.ProveKey(next, "test", "web", pub(oldKey))})
	select {
	case <-acked:
	case <-time.After(patience):
		t.Fatal("no key.accepted sent")
	}
	cancel()
	<-consumed
	if rec := r.waitRecord("web", "its record", func(record.Agent) bool { return true }); !bytes.Equal(rec.PublicKey, pub(next)) || rec.PreviousUntil != nil {
		t.Fatalf("record after the rollover: key %s, previous until %v; want the new key, the old one holding until the switch",
			model.Fingerprint(rec.PublicKey), rec.PreviousUntil)
	}

	a, _ := r.startAccepted(r.rotatingAgent("web", dir))
	r.waitRecord("web", "the switch", func(a record.Agent) bool { return a.PreviousUntil != nil })
	if !a.PublicKey().Equal(pub(next)) {
		t.Fatalf("agent signs with %s, want the key it proposed %s", model.Fingerprint(a.PublicKey()), model.Fingerprint(pub(next)))
	}
	r.release(file("web", "/f", "2"))
	if res := r.deploy(scheduler.DeployRequest{}); len(res) != 1 {
		t.Fatalf("deploy after the rotation: %d results, want 1", len(res))
	}
}

// A rollover not signed by the agent's key, or without the new key's
// proof of possession, is refused with a security alert and changes
// nothing.
func TestForgedKeyRolloverIsRefused(t *testing.T) {
	r := newRig(t, record.EnrollManual)
	dir := t.TempDir()
	r.release(file("web", "/f", "1"))
	a, _ := r.startAccepted(r.rotatingAgent("web", dir))
	key := a.Journal().Key()
	_, mallory, _ := bus.GenerateKey()
	_, next, _ := bus.GenerateKey()

	cases := []struct {
		name   string
		signer ed25519.PrivateKey
		body   bus.KeyRollover
		want   string
		// about is whom the alert is filed under: the sender, an
		// unknown signer for what no key of web's signed.
		about string
	}{
		{"signed by another key", mallory,
			bus.KeyRollover{NewKey: pub(mallory), Proof: bus.ProveKey(mallory, "test", "web", pub(mallory))}, "another key", "(unknown signer)"},
		{"no proof", key, bus.KeyRollover{NewKey: pub(next)}, "proof", "web"},
		{"proof by another key", key,
			bus.KeyRollover{NewKey: pub(next), Proof: bus.ProveKey(mallory, "test", "web", pub(key))}, "proof", "web"},
		{"proof for another agent", key,
			bus.KeyRollover{NewKey: pub(next), Proof: bus.ProveKey(next, "test", "db", pub(key))}, "proof", "web"},
		{"no new key", key, bus.KeyRollover{}, "not an ed25519", "web"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r.forge(c.signer, uint64(r.lastSeq("web"))+1, bus.KindKeyRollover, "web", c.body)
			e := r.next(server.EventSecurity)
			if e.Agent != c.about || !strings.Contains(e.Alert.Message, c.want) {
				t.Fatalf("security alert %q about %s: want %q about %s", e.Alert.Message, e.Agent, c.want, c.about)
			}
			got, err := r.store.GetAgent(r.ctx, "test", "web")
			if err != nil || !bytes.Equal(got.PublicKey, pub(key)) || len(got.PreviousKey) != 0 {
				t.Fatalf("record after a refused rollover: key %s, previous %x, %v; want the agent's key unchanged",
					model.Fingerprint(got.PublicKey), got.PreviousKey, err)
			}
		})
	}
}

// A replica that holds the agent in its cache from before a rollover
// another replica took reads the agent again when an event signed by the
// new key does not verify with the cached key: nothing is refused.
func TestRolloverSeenByAnotherReplica(t *testing.T) {
	ctx := context.Background()
	st, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "tether.db"), sqlite.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	// Caches that never expire within the test: only the re-read can
	// show replica B the new key.
	srvA, srvB, busA, busB := twoReplicas(t, st, server.Config{AgentCacheTTL: time.Hour})
	web := newFakeAgent(t, st, "prod", "web")
	if err := busA.DeclareInbox(ctx, "prod", "web"); err != nil {
		t.Fatal(err)
	}
	runServer(t, srvA)
	runServer(t, srvB)
	record1 := func() record.Agent {
		a, err := st.GetAgent(ctx, "prod", "web")
		if err != nil {
			t.Fatal(err)
		}
		return a
	}

	publish(t, busB, []*bus.Envelope{web.seal(t, "prod", bus.KindHeartbeat, bus.Heartbeat{})})
	waitFor(t, "replica B to take the heartbeat (and cache the agent)", func() bool { return record1().LastSeq == 1 })

	old := web.signer.Key()
	_, next, _ := bus.GenerateKey()
	publish(t, busA, []*bus.Envelope{web.seal(t, "prod", bus.KindKeyRollover,
		bus.KeyRollover{NewKey: pub(next), Proof: bus.ProveKey(next, "prod", "web", pub(old))})})
	waitFor(t, "replica A to take the rollover", func() bool { return bytes.Equal(record1().PublicKey, pub(next)) })

	web.signer.SetKey(next)
	publish(t, busB, []*bus.Envelope{web.seal(t, "prod", bus.KindHeartbeat, bus.Heartbeat{})})
	waitFor(t, "replica B to take the new key's heartbeat", func() bool { return record1().PreviousUntil != nil })
	alerts, err := st.Alerts(ctx, record.AlertFilter{Env: "prod", Kind: record.AlertSecurity})
	if err != nil || len(alerts) != 0 {
		t.Fatalf("security alerts %+v, %v; want none", alerts, err)
	}
}

// A thief holding the agent's current key who proposes a key of their own
// first takes the name; the agent's own proposal, signed by the key it
// still holds, then raises the alert that shows it.
func TestRolloverRaceWithAThiefIsAlerted(t *testing.T) {
	r := newRig(t, record.EnrollManual)
	r.release(file("web", "/f", "1"))
	a, _ := r.startAccepted(r.rotatingAgent("web", t.TempDir()))
	key := a.Journal().Key()
	_, thief, _ := bus.GenerateKey()
	r.forge(key, uint64(r.lastSeq("web"))+1, bus.KindKeyRollover, "web",
		bus.KeyRollover{NewKey: pub(thief), Proof: bus.ProveKey(thief, "test", "web", pub(key))})
	r.waitRecord("web", "the thief's key", func(a record.Agent) bool { return bytes.Equal(a.PublicKey, pub(thief)) })

	if _, err := r.srv.RotateKey(r.ctx, "test", "web"); err != nil {
		t.Fatal(err)
	}
	if msg := r.security(); !strings.Contains(msg, "signed by its previous key") {
		t.Fatalf("security alert %q: want the agent's own rollover refused, signed by the key the thief moved it from", msg)
	}
}
