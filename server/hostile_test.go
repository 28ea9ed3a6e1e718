package server_test

import (
	"crypto/ed25519"
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/tetherhq/tether/agent"
	"github.com/tetherhq/tether/bus"
	"github.com/tetherhq/tether/model"
	"github.com/tetherhq/tether/server"
	"github.com/tetherhq/tether/server/record"
	"github.com/tetherhq/tether/server/scheduler"
)

// What a compromised host can send with its own agent's key, and what the
// server makes of it.

// forge publishes an event of kind signed with key, numbered seq.
func (r *rig) forge(key ed25519.PrivateKey, seq uint64, kind bus.Kind, agent string, body any) {
	r.t.Helper()
	b, err := json.Marshal(body)
	if err != nil {
		r.t.Fatal(err)
	}
	e := &bus.Envelope{V: bus.ProtocolVersion, ID: uuid.NewString(), Kind: kind, Env: "test", Agent: agent, Seq: seq, TS: time.Now().UTC(), Body: b}
	bus.Sign(e, key)
	if err := r.bus.Publish(r.ctx, e); err != nil {
		r.t.Fatal(err)
	}
}

// security returns the message of the next security alert.
func (r *rig) security() string {
	r.t.Helper()
	e := r.next(server.EventSecurity)
	return e.Alert.Message
}

func (r *rig) status(id model.ID) record.ResourceStatus {
	r.t.Helper()
	sts, err := r.store.Statuses(r.ctx, "test", record.StatusFilter{})
	if err != nil {
		r.t.Fatal(err)
	}
	for _, st := range sts {
		if st.ID == id {
			return st
		}
	}
	r.t.Fatalf("no status of %s", id)
	return record.ResourceStatus{}
}

func (r *rig) lastSeq(name string) int64 {
	r.t.Helper()
	return r.agentRecord(name).LastSeq
}

// agentRecord is the store's record of agent name of environment test.
func (r *rig) agentRecord(name string) record.Agent {
	r.t.Helper()
	a, err := r.store.GetAgent(r.ctx, "test", name)
	if err != nil {
		r.t.Fatal(err)
	}
	return a
}

// sayHello publishes a hello of agent name signed by sg, waits until the
// server handled an event more, and returns the hello's sequence number.
func (r *rig) sayHello(sg *bus.Signer, name string, h bus.Hello) uint64 {
	r.t.Helper()
	e, err := sg.Seal(bus.KindHello, "test", name, h)
	if err != nil {
		r.t.Fatal(err)
	}
	before := r.srv.IngestStats().Events
	if err := r.bus.Publish(r.ctx, e); err != nil {
		r.t.Fatal(err)
	}
	waitFor(r.t, "the hello handled", func() bool { return r.srv.IngestStats().Events > before })
	return e.Seq
}

// A report numbered past the protocol's limit, or jumping further than any
// honest agent's numbers can, is refused with a security alert and changes
// nothing; the agent's own later reports still count.
func TestStatusPoisoningIsRefused(t *testing.T) {
	r := newRig(t, record.EnrollOpen)
	f := file("web", "/f", "1")
	v1 := r.release(f)
	a, _ := r.startAgentWith(agent.Config{Env: "test", Name: "web", ServerKey: r.srv.PublicKey()})
	r.waitOnline("web")
	r.deploy(scheduler.DeployRequest{})
	failed := bus.ResourceStatus{DeployID: "forged", Generation: v1.Number, Done: true,
		Results: []model.Result{{ID: f.ID, State: model.StateFailed, Message: "forged"}}}
	last := uint64(r.lastSeq("web"))
	for _, c := range []struct {
		seq  uint64
		want string
	}{
		{9e18, "past the protocol's limit"},
		{last + bus.MaxSeqJump + 1000, "jumps"},
	} {
		r.forge(a.Journal().Key(), c.seq, bus.KindResourceStatus, "web", failed)
		if msg := r.security(); !strings.Contains(msg, c.want) {
			t.Fatalf("seq %d: security alert %q, want it to say %q", c.seq, msg, c.want)
		}
	}
	if st := r.status(f.ID); st.State != model.StateDeployed {
		t.Fatalf("after the forgeries %s is %s, want deployed", f.ID, st.State)
	}
	f2 := file("web", "/f", "2")
	v2 := r.release(f2)
	r.deploy(scheduler.DeployRequest{})
	if st := r.status(f2.ID); st.State != model.StateDeployed || st.Version != v2.Number {
		t.Fatalf("a later deploy left %s %s at version %d, want deployed at %d", f2.ID, st.State, st.Version, v2.Number)
	}
}

// A forged report within the bound, numbered far ahead of the agent's own,
// freezes nothing: the agent's next report of the resource counts. A new
// key (the host provisioned again) starts the sequence over.
func TestForgedReportFreezesNothing(t *testing.T) {
	r := newRig(t, record.EnrollOpen)
	f := file("web", "/f", "1")
	v1 := r.release(f)
	a, stop := r.startAgentWith(agent.Config{Env: "test", Name: "web", ServerKey: r.srv.PublicKey()})
	r.waitOnline("web")
	r.deploy(scheduler.DeployRequest{})
	ahead := uint64(r.lastSeq("web")) + bus.MaxSeqJump - 1
	r.forge(a.Journal().Key(), ahead, bus.KindResourceStatus, "web", bus.ResourceStatus{DeployID: "forged", Generation: v1.Number,
		Done: true, Results: []model.Result{{ID: f.ID, State: model.StateFailed, Message: "forged"}}})
	waitFor(t, "the forged failure recorded", func() bool { return r.status(f.ID).State == model.StateFailed })
	r.deploy(scheduler.DeployRequest{Full: true})
	if st := r.status(f.ID); st.State != model.StateDeployed {
		t.Fatalf("after the agent's next report %s is %s, want deployed: one message froze it", f.ID, st.State)
	}
	stop()
	// Provisioned again: a new key, an empty journal.
	r.startAgentWith(agent.Config{Env: "test", Name: "web", ServerKey: r.srv.PublicKey()})
	r.waitOnline("web")
	if got := r.lastSeq("web"); uint64(got) >= ahead {
		t.Fatalf("after a new key the last sequence number is %d, want it started over", got)
	}
	r.deploy(scheduler.DeployRequest{Full: true})
	if st := r.status(f.ID); st.State != model.StateDeployed {
		t.Fatalf("after a new key %s is %s, want deployed", f.ID, st.State)
	}
}

// An agent that reports a generation older than it did before (not an
// empty journal) raises a security alert; commands an agent refused do too.
func TestAgentStepsBackAndRefusalsAreAlerted(t *testing.T) {
	r := newRig(t, record.EnrollOpen)
	r.release(file("web", "/f", "1"))
	a, _ := r.startAgentWith(agent.Config{Env: "test", Name: "web", ServerKey: r.srv.PublicKey()})
	r.waitOnline("web")
	r.deploy(scheduler.DeployRequest{})
	v2 := r.release(file("web", "/f", "2"))
	r.deploy(scheduler.DeployRequest{})
	key := a.Journal().Key()
	r.forge(key, uint64(r.lastSeq("web"))+1, bus.KindHello, "web", bus.Hello{PublicKey: key.Public().(ed25519.PublicKey), Generation: v2.Number - 1})
	if msg := r.security(); !strings.Contains(msg, "behind the 2 it reported before") {
		t.Fatalf("security alert %q, want the step back named", msg)
	}

	_, stranger, _ := bus.GenerateKey()
	e, err := bus.NewSigner(stranger, 0).Seal(bus.KindPause, "test", "web", bus.Empty{})
	if err != nil {
		t.Fatal(err)
	}
	if err := r.bus.Send(r.ctx, e, bus.SendOptions{}); err != nil {
		t.Fatal(err)
	}
	if msg := r.security(); !strings.Contains(msg, "agent web refused 1 command") || !strings.Contains(msg, "pause") {
		t.Fatalf("security alert %q, want the agent's refusal of the forged pause", msg)
	}
}

// Labels and facts an agent could not honestly have are refused with its
// hello: nothing of it is stored.
func TestHelloWithBadLabelsOrFactsIsRefused(t *testing.T) {
	r := newRig(t, record.EnrollOpen)
	_, key, _ := bus.GenerateKey()
	pub := key.Public().(ed25519.PublicKey)
	huge := map[string]any{"blob": strings.Repeat("x", model.MaxFactsSize)}
	for _, h := range []bus.Hello{
		{PublicKey: pub, Labels: map[string]string{"role\nx": "web"}},
		{PublicKey: pub, Labels: map[string]string{"role": strings.Repeat("w", model.MaxLabelValueLen+1)}},
		{PublicKey: pub, Facts: huge},
	} {
		r.forge(key, 1, bus.KindHello, "bad", h)
	}
	waitFor(t, "three hellos dead-lettered", func() bool { return len(r.bus.DeadLetters()) == 3 })
	if _, err := r.store.GetAgent(r.ctx, "test", "bad"); err == nil {
		t.Fatal("an agent with bad labels or facts was recorded")
	}
}

// Another key on a name the server already knows: on a pending name only a
// valid enrollment token puts it there; on a rejected or accepted name,
// nothing does. Each refusal is a security alert naming both keys, and the
// record keeps the key it had.
func TestKeySwapRefused(t *testing.T) {
	r := newRig(t, record.EnrollToken)
	pubOf := func(k ed25519.PrivateKey) ed25519.PublicKey { return k.Public().(ed25519.PublicKey) }
	_, owner, _ := bus.GenerateKey()
	_, thief, _ := bus.GenerateKey()
	r.forge(owner, 1, bus.KindHello, "new", bus.Hello{PublicKey: pubOf(owner)})
	if e := r.next(server.EventAgentDiscovered); e.Agent != "new" {
		t.Fatalf("got %+v, want new discovered", e)
	}
	keyOf := func(name string) ed25519.PublicKey {
		t.Helper()
		a, err := r.store.GetAgent(r.ctx, "test", name)
		if err != nil {
			t.Fatal(err)
		}
		return a.PublicKey
	}
	r.forge(thief, 1, bus.KindHello, "new", bus.Hello{PublicKey: pubOf(thief)})
	if msg := r.security(); !strings.Contains(msg, "pending agent new's name with another key ("+bus.Fingerprint(pubOf(thief))) {
		t.Fatalf("security alert %q, want the key swap of a pending agent named", msg)
	}
	r.forge(thief, 2, bus.KindHello, "new", bus.Hello{PublicKey: pubOf(thief), Token: "not-a-token"})
	if msg := r.security(); !strings.Contains(msg, "enrollment token that does not hold") {
		t.Fatalf("security alert %q, want the bad token named", msg)
	}
	if !keyOf("new").Equal(pubOf(owner)) {
		t.Fatal("the pending agent's key was swapped")
	}

	// A valid token may put its key on a pending name (a reinstalled host).
	secret, err := model.NewEnrollmentToken(r.srv.PublicKey())
	if err != nil {
		t.Fatal(err)
	}
	if err := r.store.CreateEnrollToken(r.ctx, record.EnrollmentToken{ID: "t1", Env: "test", Name: "t", Hash: record.HashSecret(secret), MaxUses: 5, CreatedBy: "test"}); err != nil {
		t.Fatal(err)
	}
	_, reinstalled, _ := bus.GenerateKey()
	r.forge(reinstalled, 1, bus.KindHello, "new", bus.Hello{PublicKey: pubOf(reinstalled), Token: secret})
	r.waitOnline("new")
	if !keyOf("new").Equal(pubOf(reinstalled)) {
		t.Fatal("a valid token did not put its key on the pending name")
	}

	// A rejected name takes no other key, token or not.
	r.forge(owner, 2, bus.KindHello, "gone", bus.Hello{PublicKey: pubOf(owner)})
	r.next(server.EventAgentDiscovered)
	if _, err := r.srv.AgentAction(r.ctx, "test", "gone", record.AgentReject); err != nil {
		t.Fatal(err)
	}
	r.forge(thief, 3, bus.KindHello, "gone", bus.Hello{PublicKey: pubOf(thief), Token: secret})
	if msg := r.security(); !strings.Contains(msg, "rejected agent gone's name with another key") {
		t.Fatalf("security alert %q, want the key swap of a rejected agent named", msg)
	}
	if !keyOf("gone").Equal(pubOf(owner)) {
		t.Fatal("the rejected agent's key was swapped")
	}
}

// A flood of forged events, and one of an accepted agent's own events,
// cost a bounded amount: a few alerts are stored and the rest summed up in
// one, a bounded number of refused events are dead-lettered and the rest
// dropped, an agent's events beyond its rate are dropped; and another
// agent's events still count.
func TestFloodsAreBounded(t *testing.T) {
	settings := record.DefaultEnvSettings()
	settings.AutoDeploy = false
	settings.Enrollment = record.EnrollOpen
	r := startRig(t, server.Config{FloodWindow: 2 * time.Second, AgentEventRate: 5}, map[string]record.EnvSettings{"test": settings})
	_, ghost, _ := bus.GenerateKey()
	const forged = 400
	for i := range forged {
		r.forge(ghost, uint64(i+1), bus.KindHeartbeat, "ghost", bus.Heartbeat{})
	}
	waitFor(t, "every forged event handled", func() bool { return r.srv.IngestStats().Events >= forged })
	alerts := func(agent string) []record.Alert {
		t.Helper()
		as, err := r.store.Alerts(r.ctx, record.AlertFilter{Env: "test", Agent: agent, Kind: record.AlertSecurity, Limit: 1000})
		if err != nil {
			t.Fatal(err)
		}
		return as
	}
	// No key the server knows signed them: they are an unknown signer's.
	if n := len(alerts("(unknown signer)")); n > 5 {
		t.Fatalf("%d forged events: %d alerts stored, want at most 5", forged, n)
	}
	if n, _ := r.bus.DeadLetterCount(r.ctx); n > 100 || n == 0 {
		t.Fatalf("%d forged events: %d dead-lettered, want some, at most 100", forged, n)
	}
	waitFor(t, "the held-back alerts summed up", func() bool {
		for _, a := range alerts("(unknown signer)") {
			if strings.Contains(a.Message, fmt.Sprintf("%d more security alerts about events no key the server knows signed", forged-5)) {
				return true
			}
		}
		return false
	})

	// An accepted agent over its rate (5 a second, bursts of 50).
	_, key, _ := bus.GenerateKey()
	pub := key.Public().(ed25519.PublicKey)
	r.forge(key, 1, bus.KindHello, "noisy", bus.Hello{PublicKey: pub})
	r.waitOnline("noisy")
	_, quietKey, _ := bus.GenerateKey()
	r.forge(quietKey, 1, bus.KindHello, "quiet", bus.Hello{PublicKey: quietKey.Public().(ed25519.PublicKey)})
	r.waitOnline("quiet")
	before := r.srv.IngestStats().Events
	for i := range 300 {
		r.forge(key, uint64(i+2), bus.KindHeartbeat, "noisy", bus.Heartbeat{})
	}
	r.forge(quietKey, 2, bus.KindFacts, "quiet", bus.Facts{Facts: map[string]any{"os": "after the flood"}})
	waitFor(t, "the flood and the quiet agent's facts handled", func() bool { return r.srv.IngestStats().Events >= before+301 })
	waitFor(t, "the rate alert", func() bool {
		for _, a := range alerts("noisy") {
			if strings.Contains(a.Message, "sends more than 5 events a second") {
				return true
			}
		}
		return false
	})
	a, err := r.store.GetAgent(r.ctx, "test", "quiet")
	if err != nil || a.Facts["os"] != "after the flood" {
		t.Fatalf("the quiet agent's facts: %v, %v; want them recorded", a.Facts, err)
	}
	if got := int(r.lastSeq("noisy")); got >= 300 {
		t.Fatalf("noisy agent: last sequence number recorded %d: want the events beyond its rate dropped", got)
	}
}

// Hellos of invented names beyond the discovery rate are not recorded
// (and alerted once); an agent with a valid token still enrolls.
func TestDiscoveryFloodIsBounded(t *testing.T) {
	r := newRig(t, record.EnrollToken)
	const hellos = 1300
	start := time.Now()
	for i := range hellos {
		_, k, _ := bus.GenerateKey()
		r.forge(k, 1, bus.KindHello, fmt.Sprintf("fake-%d", i), bus.Hello{PublicKey: k.Public().(ed25519.PublicKey)})
	}
	// Under -race on a busy machine the hellos take a while: the guard
	// is against a stall, not a slow run.
	waitProgress(t, "every hello handled", func() uint64 { return r.srv.IngestStats().Events }, hellos)
	agents, err := r.store.ListAgents(r.ctx, "test")
	if err != nil {
		t.Fatal(err)
	}
	// 1,000 at once, then 2 a second while the hellos are handled.
	if n, most := len(agents), 1000+int(2*time.Since(start).Seconds())+1; n < 1000 || n > most {
		t.Fatalf("%d hellos of invented names: %d agents recorded, want the first 1,000 and at most %d", hellos, n, most)
	}
	as, err := r.store.Alerts(r.ctx, record.AlertFilter{Env: "test", Kind: record.AlertSecurity, Limit: 1000})
	if err != nil {
		t.Fatal(err)
	}
	if len(as) == 0 || len(as) > 5 || !strings.Contains(as[0].Message, "faster than 120 a minute") {
		t.Fatalf("alerts: %d, first %q; want a few naming the discovery rate", len(as), as[0].Message)
	}
	secret, err := model.NewEnrollmentToken(r.srv.PublicKey())
	if err != nil {
		t.Fatal(err)
	}
	if err := r.store.CreateEnrollToken(r.ctx, record.EnrollmentToken{ID: "t1", Env: "test", Name: "t", Hash: record.HashSecret(secret), MaxUses: 1, CreatedBy: "test"}); err != nil {
		t.Fatal(err)
	}
	_, k, _ := bus.GenerateKey()
	r.forge(k, 1, bus.KindHello, "real", bus.Hello{PublicKey: k.Public().(ed25519.PublicKey), Token: secret})
	r.waitOnline("real")
}

// Events an agent signed, captured on their way and sent again, say
// nothing of now: a host that went silent does not look alive, a replayed
// goodbye disconnects nothing, older labels do not come back. (A replica
// drops an envelope id it handled among its last 65,536; another replica,
// or the same one later, does not: such a replay is an event the server
// has not handled, numbered at or below one it has, as forged here.)
func TestReplayedEventsSayNothingOfNow(t *testing.T) {
	r := newRig(t, record.EnrollOpen)
	keys := map[string]ed25519.PrivateKey{}
	for _, name := range []string{"web", "db"} {
		pub, key, err := bus.GenerateKey()
		if err != nil {
			t.Fatal(err)
		}
		keys[name] = key
		r.sayHello(bus.NewSigner(key, 0), name, bus.Hello{PublicKey: pub, Labels: map[string]string{"role": name}, Version: "1.0", Protocol: bus.Protocol})
		r.waitRecord(name, "accepted and connected", func(a record.Agent) bool { return a.State == record.AgentAccepted && a.Connected })
	}
	// send has the server handle an event of agent name numbered seq.
	send := func(name string, seq uint64, kind bus.Kind, body any) {
		t.Helper()
		before := r.srv.IngestStats().Events
		r.forge(keys[name], seq, kind, name, body)
		waitFor(t, fmt.Sprintf("%s %d of %s handled", kind, seq, name), func() bool { return r.srv.IngestStats().Events > before })
	}
	send("web", 10, bus.KindFacts, bus.Facts{Labels: map[string]string{"role": "cache"}})
	send("web", 11, bus.KindGoodbye, bus.Empty{})
	gone := r.agentRecord("web")
	if gone.Connected || gone.Labels["role"] != "cache" || gone.LastSeq != 11 {
		t.Fatalf("after facts and a goodbye: %+v; want role cache, not connected, last number 11", gone)
	}

	// Replayed: a heartbeat, older facts, a hello, all numbered below
	// the goodbye.
	send("web", 5, bus.KindHeartbeat, bus.Heartbeat{Version: "0.9", Protocol: bus.Protocol})
	send("web", 6, bus.KindFacts, bus.Facts{Labels: map[string]string{"role": "old"}})
	pub := keys["web"].Public().(ed25519.PublicKey)
	send("web", 7, bus.KindHello, bus.Hello{PublicKey: pub, Labels: map[string]string{"role": "old"}, Version: "0.9", Protocol: bus.Protocol})
	// Heartbeats are written every second, together: one of db's,
	// written, comes after anything the replays marked.
	send("db", 2, bus.KindHeartbeat, bus.Heartbeat{Version: "1.0", Protocol: bus.Protocol})
	r.waitRecord("db", "its heartbeat written", func(a record.Agent) bool { return a.LastSeq == 2 })
	got := r.agentRecord("web")
	if got.Connected || !got.LastSeen.Equal(gone.LastSeen) || got.LastSeq != 11 || got.Labels["role"] != "cache" || got.AgentVersion != "1.0" {
		t.Fatalf("after replays: connected %v, last seen %v, last number %d, role %s, version %s; want as the goodbye left it: false, %v, 11, cache, 1.0",
			got.Connected, got.LastSeen, got.LastSeq, got.Labels["role"], got.AgentVersion, gone.LastSeen)
	}
	// A replayed goodbye while it lives disconnects nothing.
	send("web", 12, bus.KindHeartbeat, bus.Heartbeat{Version: "1.1", Protocol: bus.Protocol})
	back := r.waitRecord("web", "connected again", func(a record.Agent) bool { return a.Connected })
	if !back.LastSeen.After(gone.LastSeen) || back.AgentVersion != "1.1" {
		t.Fatalf("after a new heartbeat: last seen %v, version %s; want after %v, 1.1", back.LastSeen, back.AgentVersion, gone.LastSeen)
	}
	send("web", 11, bus.KindGoodbye, bus.Empty{})
	if got := r.agentRecord("web"); !got.Connected {
		t.Fatal("a replayed goodbye disconnected the agent")
	}
	// Nor does an older hello in a protocol this server does not speak
	// (captured before an upgrade).
	send("web", 8, bus.KindHello, bus.Hello{PublicKey: pub, Protocol: "2.0"})
	if got := r.agentRecord("web"); !got.Connected || got.Note != "" || got.State != record.AgentAccepted {
		t.Fatalf("after an older hello of another protocol: connected %v, note %q, state %s; want connected, no note, accepted", got.Connected, got.Note, got.State)
	}
}

// An agent restored from an older copy of its state directory numbers its
// hello at or below what the server recorded of it: the server answers,
// and takes what the hello says for older news (a replay is no
// different). The answer tells the agent the numbers it must move past,
// and it reports its labels and facts again, numbered past them.
func TestRestoredAgentReportsItsFactsAgain(t *testing.T) {
	r := newRig(t, record.EnrollOpen)
	dir := t.TempDir()
	state, backup := filepath.Join(dir, "state"), filepath.Join(dir, "backup")
	cfg := agent.Config{Env: "test", Name: "web", StateDir: state, ServerKey: r.srv.PublicKey(),
		Labels: map[string]string{"role": "web"}, FactsInterval: 50 * time.Millisecond}
	gone := func(a record.Agent) bool { return !a.Connected }
	_, stop := r.startAgentWith(cfg)
	r.waitOnline("web")
	stop()
	r.waitRecord("web", "its goodbye", gone)
	copyState(t, state, backup)
	// Run on: its numbers move on past the copy's, and its facts are
	// reported later than its hello.
	_, stop = r.startAgentWith(cfg)
	hello := r.waitRecord("web", "its second run's hello", func(a record.Agent) bool { return a.Connected })
	if _, err := r.srv.RefreshFacts(r.ctx, "test", "web"); err != nil {
		t.Fatal(err)
	}
	r.waitRecord("web", "its facts reported again", func(a record.Agent) bool { return a.FactsSeq > hello.FactsSeq })
	stop()
	held := r.waitRecord("web", "its second goodbye", gone).LastSeq
	if err := os.RemoveAll(state); err != nil {
		t.Fatal(err)
	}
	copyState(t, backup, state)
	cfg.Labels = map[string]string{"role": "db"}
	r.startAgentWith(cfg)
	got := r.waitRecord("web", "the restored agent's labels, and it connected", func(a record.Agent) bool { return a.Labels["role"] == "db" && a.Connected })
	if got.FactsSeq <= held {
		t.Fatalf("restored agent: facts numbered %d; want past %d", got.FactsSeq, held)
	}
}

// copyState copies an agent's state directory from to to, modes kept (an
// agent refuses a key file others can read).
func copyState(t *testing.T, from, to string) {
	t.Helper()
	err := filepath.WalkDir(from, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(from, path)
		dst := filepath.Join(to, rel)
		if d.IsDir() {
			return os.MkdirAll(dst, info.Mode().Perm())
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		return os.WriteFile(dst, b, info.Mode().Perm())
	})
	if err != nil {
		t.Fatal(err)
	}
}
