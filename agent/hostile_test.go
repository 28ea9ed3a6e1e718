package agent

import (
	"context"
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/rs/zerolog"

	"github.com/tetherhq/tether/agent/handler"
	"github.com/tetherhq/tether/agent/handler/builtin"
	"github.com/tetherhq/tether/agent/journal"
	"github.com/tetherhq/tether/bus"
	"github.com/tetherhq/tether/model"
)

// What a host's neighbours on the broker, or anyone who captured its
// traffic, can try on an agent, and what each meets.

// sealAt seals a command of the fake server stamped at ts.
func (s *fakeServer) sealAt(kind bus.Kind, agent string, body any, ts time.Time) *bus.Envelope {
	s.t.Helper()
	return sealWith(s.t, s.key, kind, agent, body, ts)
}

func sealWith(t testing.TB, key ed25519.PrivateKey, kind bus.Kind, agent string, body any, ts time.Time) *bus.Envelope {
	t.Helper()
	b, err := json.Marshal(body)
	if err != nil {
		t.Fatal(err)
	}
	e := &bus.Envelope{V: bus.ProtocolVersion, ID: uuid.NewString(), Kind: kind, Env: "test", Agent: agent, Seq: 1, TS: ts.UTC(), Body: b}
	bus.Sign(e, key)
	return e
}

func (s *fakeServer) put(e *bus.Envelope) {
	s.t.Helper()
	if err := s.bus.Send(context.Background(), e, bus.SendOptions{}); err != nil {
		s.t.Fatal(err)
	}
}

// fullAt is the desired.full of rs at gen, stamped now.
func (s *fakeServer) fullEnvelope(key ed25519.PrivateKey, agent string, gen int64, rs ...model.Resource) *bus.Envelope {
	s.t.Helper()
	sl := model.SliceOf(agent, gen, rs)
	h, err := sl.Hash()
	if err != nil {
		s.t.Fatal(err)
	}
	return sealWith(s.t, key, bus.KindDesiredFull, agent, bus.DesiredFull{Generation: gen, Resources: sl.Resources, SliceHash: h}, time.Now())
}

// security returns the next security report of agent.
func (s *fakeServer) security(from *int, agent string) bus.Security {
	s.t.Helper()
	var body bus.Security
	if err := s.next(from, agent, bus.KindSecurity).DecodeBody(&body); err != nil {
		s.t.Fatal(err)
	}
	return body
}

// Before it ever runs, a stranger creates a new agent's inbox and queues
// an `enrolled` with its own key, then desired state with an exec and a
// deploy. The agent, told to expect the real server's key, refuses all of
// it, runs nothing, reports it, and enrolls with the real server after.
func TestHijackOfANewAgentIsRefused(t *testing.T) {
	s := newFakeServer(t)
	dir, root := t.TempDir(), t.TempDir()
	_, stranger, _ := bus.GenerateKey()
	if err := s.bus.DeclareInbox(context.Background(), "test", "web"); err != nil {
		t.Fatal(err)
	}
	pwn := model.Resource{ID: model.ID{Type: "exec", Agent: "web", Key: "name", Value: "pwn"},
		Attributes: model.Attributes{"name": "pwn", "command": "echo pwned > pwned", "cwd": "/", "creates": "/pwned"}}
	s.put(sealWith(t, stranger, bus.KindEnrolled, "web", bus.Enrolled{ServerKey: stranger.Public().(ed25519.PublicKey)}, time.Now()))
	s.put(s.fullEnvelope(stranger, "web", 1, pwn))
	s.put(sealWith(t, stranger, bus.KindDeploy, "web", bus.Deploy{DeployID: "pwn", Mode: bus.DeployFull, Generation: 1}, time.Now()))

	var seen int
	r := start(t, s, "web", dir, root, nil, func(c *Config) {
		c.ServerKey, c.ServerFingerprint = nil, model.Fingerprint(s.signer.PublicKey())
	})
	// The report and the hello race: each is looked for from the start.
	from := 0
	if rep := s.security(&from, "web"); rep.Count < 1 || !strings.Contains(strings.Join(rep.Refused, "\n"), "not "+model.Fingerprint(s.signer.PublicKey())) {
		t.Fatalf("security report %+v, want the forged enrollment named", rep)
	}
	s.next(&seen, "web", bus.KindHello)
	waitDead(t, s, 3)
	if _, err := os.Stat(filepath.Join(root, "pwned")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the stranger's exec ran: %v", err)
	}
	if k := r.a.Journal().ServerKey(); k != nil {
		t.Fatalf("the agent pinned %s", model.Fingerprint(k))
	}
	// The real server's answer is trusted, and its desired state deployed.
	s.enroll("web")
	got := s.deploy(&seen, "web", 1, "d1", "", file("web", "/a", "A"))
	if len(got) != 1 || !r.a.Journal().ServerKey().Equal(s.signer.PublicKey()) {
		t.Fatalf("after the real enrollment: %d results, pinned %v", len(got), r.a.Journal().ServerKey())
	}
}

// waitDead waits until the bus dead-lettered n messages.
func waitDead(t *testing.T, s *fakeServer, n int) {
	t.Helper()
	deadline := time.Now().Add(patience)
	for len(s.bus.DeadLetters()) < n {
		if time.Now().After(deadline) {
			t.Fatalf("%d messages dead-lettered, want %d", len(s.bus.DeadLetters()), n)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// An agent that knows no server key does not start: it would have to trust
// whoever answers first.
func TestAgentWithoutServerKeyDoesNotStart(t *testing.T) {
	_, key, _ := bus.GenerateKey()
	_, other, _ := bus.GenerateKey()
	token, err := model.NewEnrollmentToken(key.Public().(ed25519.PublicKey))
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name string
		cfg  Config
		want string
	}{
		{"nothing", Config{}, "no server key to trust"},
		{"a token of the older form", Config{Token: "tether_c2VjcmV0"}, "does not carry the server key's fingerprint"},
		{"a damaged token", Config{Token: "tether-enroll.!!.x"}, "damaged"},
		{"a token and another server's key", Config{Token: token, ServerKey: other.Public().(ed25519.PublicKey)}, "different servers"},
		{"a bad fingerprint", Config{ServerFingerprint: "SHA256:short"}, "not a key fingerprint"},
	}
	reg, err := builtin.Registry(handler.Runtime{Root: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			c.cfg.Env, c.cfg.Name, c.cfg.StateDir = "test", "web", t.TempDir()
			a, err := New(c.cfg, bus.NewLocal(zerolog.Nop()), reg, zerolog.Nop())
			if err == nil {
				a.Close()
				t.Fatalf("started; want a refusal saying %q", c.want)
			}
			if !strings.Contains(err.Error(), c.want) {
				t.Fatalf("got %v, want %q", err, c.want)
			}
		})
	}
	// A token alone is enough.
	a, err := New(Config{Env: "test", Name: "web", StateDir: t.TempDir(), Token: token}, bus.NewLocal(zerolog.Nop()), reg, zerolog.Nop())
	if err != nil {
		t.Fatalf("with a token: %v", err)
	}
	a.Close()
}

// Desired state only moves forward: a captured, genuinely signed
// desired.full and deploy of an older generation, sent again, change
// nothing on the host and are reported.
func TestReplayedDesiredStateIsRefused(t *testing.T) {
	s := newFakeServer(t)
	dir, root := t.TempDir(), t.TempDir()
	var seen int
	r := start(t, s, "web", dir, root, nil)
	s.next(&seen, "web", bus.KindHello)
	s.enroll("web")
	oldFull := s.fullEnvelope(s.key, "web", 1, file("web", "/secret", "old"))
	oldDeploy := s.sealAt(bus.KindDeploy, "web", bus.Deploy{DeployID: "d1", Mode: bus.DeployFull, Generation: 1}, time.Now())
	s.put(oldFull)
	s.put(oldDeploy)
	s.results(&seen, "web", "d1")
	s.deploy(&seen, "web", 2, "d2", "", file("web", "/secret", "new"))

	// The replay: the same envelopes, and copies with new ids.
	s.put(oldFull)
	s.put(oldDeploy)
	again := s.fullEnvelope(s.key, "web", 1, file("web", "/secret", "old"))
	s.put(again)
	s.put(s.sealAt(bus.KindDeploy, "web", bus.Deploy{DeployID: "d1-again", Mode: bus.DeployFull, Generation: 1}, time.Now()))
	if rep := s.security(&seen, "web"); !strings.Contains(strings.Join(rep.Refused, "\n"), "older than the 2 held") {
		t.Fatalf("security report %+v, want the replayed generation named", rep)
	}
	// The deploy of the replay runs against what the agent holds.
	s.results(&seen, "web", "d1-again")
	if b, _ := os.ReadFile(filepath.Join(root, "secret")); string(b) != "new" {
		t.Fatalf("after the replay /secret holds %q, want new", b)
	}
	if g := r.a.Journal().Slice().Generation; g != 2 {
		t.Fatalf("after the replay the agent holds generation %d, want 2", g)
	}
}

// A command issued longer ago than MaxCommandAge, or as far ahead, is
// dropped whatever its id; an older pause or resume than the one in force
// changes nothing.
func TestStaleCommandsAreDropped(t *testing.T) {
	s := newFakeServer(t)
	var seen int
	r := start(t, s, "web", t.TempDir(), t.TempDir(), nil, func(c *Config) { c.MaxCommandAge = 10 * time.Minute })
	s.next(&seen, "web", bus.KindHello)
	s.enroll("web")
	s.next(&seen, "web", bus.KindHeartbeat)
	paused := func() bool { p, _ := r.a.Journal().Paused(); return p }

	s.put(s.sealAt(bus.KindPause, "web", bus.Empty{}, time.Now().Add(-time.Hour)))
	s.put(s.sealAt(bus.KindPause, "web", bus.Empty{}, time.Now().Add(time.Hour)))
	resumed := time.Now()
	s.put(s.sealAt(bus.KindResume, "web", bus.Empty{}, resumed))
	s.put(s.sealAt(bus.KindPause, "web", bus.Empty{}, resumed.Add(-time.Minute)))
	// A marker: once it is handled, everything before it was.
	s.put(s.sealAt(bus.KindDeploy, "web", bus.Deploy{DeployID: "marker", Mode: bus.DeployIncremental}, time.Now()))
	s.results(&seen, "web", "marker")
	if _, at := r.a.Journal().Paused(); paused() || !at.Equal(resumed.UTC()) {
		t.Fatalf("paused %v (by the command of %v); want the resume of %v in force", paused(), at, resumed)
	}
	s.put(s.sealAt(bus.KindPause, "web", bus.Empty{}, time.Now()))
	deadline := time.Now().Add(patience)
	for !paused() {
		if time.Now().After(deadline) {
			t.Fatal("a fresh pause did not pause")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// The agent judges commands by the server's clock, measured from the
// answer to its hello: a host whose clock is hours off still works, and
// learns the last sequence number the server holds of it.
func TestServerClockAndSequenceFromTheHelloAnswer(t *testing.T) {
	s := newFakeServer(t)
	var seen int
	r := start(t, s, "web", t.TempDir(), t.TempDir(), nil, func(c *Config) { c.MaxCommandAge = 10 * time.Minute })
	hello := s.next(&seen, "web", bus.KindHello)
	ahead := 3 * time.Hour // the server's clock
	s.put(s.sealAt(bus.KindEnrolled, "web", bus.Enrolled{ServerKey: s.signer.PublicKey(), Hello: hello.ID, LastSeq: 1 << 30}, time.Now().Add(ahead)))
	if hb := s.next(&seen, "web", bus.KindHeartbeat); hb.Seq <= 1<<30 {
		t.Fatalf("heartbeat #%d after the server said it holds #%d", hb.Seq, 1<<30)
	}
	s.put(s.sealAt(bus.KindPause, "web", bus.Empty{}, time.Now().Add(ahead)))
	deadline := time.Now().Add(patience)
	for p, _ := r.a.Journal().Paused(); !p; p, _ = r.a.Journal().Paused() {
		if time.Now().After(deadline) {
			t.Fatal("a pause stamped by the server's clock, three hours ahead, was not applied")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// The newest generation held outlives a journal started over: replays of
// older desired state are refused before the server's answer comes. An
// environment deleted and created again (another incarnation, numbered
// from 1) is followed only on the server's answer to the agent's own hello.
func TestGenerationFloorOutlivesTheJournal(t *testing.T) {
	s := newFakeServer(t)
	dir, root := t.TempDir(), t.TempDir()
	var seen int
	r := start(t, s, "web", dir, root, nil)
	hello := s.next(&seen, "web", bus.KindHello)
	s.put(s.sealAt(bus.KindEnrolled, "web", bus.Enrolled{ServerKey: s.signer.PublicKey(), Hello: hello.ID, Env: "first"}, time.Now()))
	old := s.fullEnvelope(s.key, "web", 1, file("web", "/f", "old"))
	s.put(old)
	s.deploy(&seen, "web", 3, "d3", "", file("web", "/f", "new"))
	r.stop()
	if _, err := journal.Reset(dir); err != nil {
		t.Fatal(err)
	}
	r = start(t, s, "web", dir, root, nil)
	hello = s.next(&seen, "web", bus.KindHello)
	var h bus.Hello
	if err := hello.DecodeBody(&h); err != nil || h.Generation != 0 {
		t.Fatalf("after a reset the agent says it holds %d (%v), want 0", h.Generation, err)
	}
	s.put(s.fullEnvelope(s.key, "web", 1, file("web", "/f", "old")))
	if rep := s.security(&seen, "web"); !strings.Contains(strings.Join(rep.Refused, "\n"), "older than the 3 held") {
		t.Fatalf("security report %+v, want the old generation refused", rep)
	}
	// Another incarnation's word, not answering this hello: not followed.
	s.put(s.sealAt(bus.KindEnrolled, "web", bus.Enrolled{ServerKey: s.signer.PublicKey(), Env: "second", Generation: 1}, time.Now()))
	// The answer to the hello: the environment was created again.
	s.put(s.sealAt(bus.KindEnrolled, "web", bus.Enrolled{ServerKey: s.signer.PublicKey(), Hello: hello.ID, Env: "second", Generation: 1}, time.Now()))
	got := s.deploy(&seen, "web", 1, "again", "", file("web", "/f", "recreated"))
	if len(got) != 1 {
		t.Fatalf("the new environment's version 1: %d results", len(got))
	}
	if env, gen := r.a.Journal().Generation(); env != "second" || gen != 1 {
		t.Fatalf("following %q at %d, want second at 1", env, gen)
	}
	if b, _ := os.ReadFile(filepath.Join(root, "f")); string(b) != "recreated" {
		t.Fatalf("/f holds %q", b)
	}
}
