package agent

import (
	"context"
	"crypto/ed25519"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tetherhq/tether/bus"
	"github.com/tetherhq/tether/model"
)

// serverRollover is the server.rollover from the server's key current to
// next for agent of env.
func serverRollover(current ed25519.PublicKey, next ed25519.PrivateKey, env, agent string) bus.ServerRollover {
	return bus.ServerRollover{Key: current, NextKey: next.Public().(ed25519.PublicKey), Proof: bus.ProveServerKey(next, env, agent, current)}
}

// helloKeys returns the server keys the agent's next hello names.
func helloKeys(t *testing.T, s *fakeServer, from *int, agent string) []string {
	t.Helper()
	var h bus.Hello
	if err := s.next(from, agent, bus.KindHello).DecodeBody(&h); err != nil {
		t.Fatal(err)
	}
	return h.ServerKeys
}

// The server announces its next key, switches to it, and the agent
// follows: it takes both keys once it acknowledged the next one (across a
// restart), the next alone from the first command signed by it (across a
// restart too, with its configuration still naming the old key), and
// deploys throughout.
func TestServerKeyRollover(t *testing.T) {
	s := newFakeServer(t)
	dir, root := t.TempDir(), t.TempDir()
	current := s.signer.PublicKey()
	pinOld := func(c *Config) { c.ServerKey = current }
	var seen int
	r := start(t, s, "web", dir, root, nil)
	if got, want := helloKeys(t, s, &seen, "web"), []string{model.Fingerprint(current)}; !slices.Equal(got, want) {
		t.Fatalf("hello before enrollment names server keys %v, want the one expected %v", got, want)
	}
	s.enroll("web")
	s.deploy(&seen, "web", 1, "d1", "", file("web", "/a", "1"))

	_, next, _ := bus.GenerateKey()
	nextPub := next.Public().(ed25519.PublicKey)
	both := []string{model.Fingerprint(current), model.Fingerprint(nextPub)}
	s.send("web", bus.KindServerRollover, serverRollover(current, next, "test", "web"))
	var ack bus.ServerRolloverAck
	if err := s.next(&seen, "web", bus.KindServerRolloverAck).DecodeBody(&ack); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(ack.ServerKeys, both) || ack.Rollover == "" {
		t.Fatalf("acknowledgement %+v, want server keys %v and the rollover's id", ack, both)
	}
	if k := r.a.Journal().NextServerKey(); !k.Equal(nextPub) {
		t.Fatalf("next server key in the journal: %v, want %s", k, model.Fingerprint(nextPub))
	}

	// Restarted between the acknowledgement and the switch: it takes
	// both keys, and says so.
	r.stop()
	r = start(t, s, "web", dir, root, nil, pinOld)
	if got := helloKeys(t, s, &seen, "web"); !slices.Equal(got, both) {
		t.Fatalf("hello after a restart names server keys %v, want %v", got, both)
	}
	s.enroll("web")
	s.deploy(&seen, "web", 2, "d2", "", file("web", "/a", "2"))

	// The server switches: the first command signed by the next key makes
	// it the only one.
	s.signer.SetKey(next)
	s.deploy(&seen, "web", 3, "d3", "", file("web", "/a", "3"))
	j := r.a.Journal()
	if !j.ServerKey().Equal(nextPub) || j.NextServerKey() != nil || !j.PreviousServerKey().Equal(current) {
		t.Fatalf("after the switch: pinned %v, next %v, previous %v; want the next key alone, the old one previous", j.ServerKey(), j.NextServerKey(), j.PreviousServerKey())
	}
	// The old key signs nothing it takes.
	s.put(sealWith(t, s.key, bus.KindPause, "web", bus.Empty{}, time.Now()))
	if rep := s.security(&seen, "web"); !strings.Contains(strings.Join(rep.Refused, "\n"), "pause") {
		t.Fatalf("security report %+v, want the pause signed by the old key refused", rep)
	}
	if paused, _ := j.Paused(); paused {
		t.Fatal("a pause signed by the old key was taken")
	}

	// Restarted after the switch, with the configuration still naming the
	// old key (an enrollment token made before the rollover): it starts,
	// and takes the new key alone.
	r.stop()
	start(t, s, "web", dir, root, nil, pinOld)
	if got, want := helloKeys(t, s, &seen, "web"), []string{model.Fingerprint(nextPub)}; !slices.Equal(got, want) {
		t.Fatalf("hello after the switch and a restart names server keys %v, want %v", got, want)
	}
	s.enroll("web")
	s.deploy(&seen, "web", 4, "d4", "", file("web", "/a", "4"))
}

// enrolledAgent starts an agent named web on a fake server and waits
// until it is enrolled.
func enrolledAgent(t *testing.T) (*fakeServer, *running, *int) {
	t.Helper()
	s := newFakeServer(t)
	seen := new(int)
	r := start(t, s, "web", t.TempDir(), t.TempDir(), nil)
	s.next(seen, "web", bus.KindHello)
	s.enroll("web")
	s.next(seen, "web", bus.KindHeartbeat)
	return s, r, seen
}

// A server.rollover not made by the pinned key for this very agent is
// refused with a security report, and changes nothing: signed by another
// key, without the next key's proof or with another key's, with a proof
// made for another agent or environment, rolling over from a key the
// agent does not hold, or addressed to another agent.
func TestForgedServerRolloverIsRefused(t *testing.T) {
	_, stranger, _ := bus.GenerateKey()
	_, next, _ := bus.GenerateKey()
	_, other, _ := bus.GenerateKey()
	nextPub := next.Public().(ed25519.PublicKey)
	cases := []struct {
		name string
		// forge returns the message, put in web's inbox.
		forge func(s *fakeServer) *bus.Envelope
		want  string
	}{
		{"signed by another key", func(s *fakeServer) *bus.Envelope {
			return sealWith(t, stranger, bus.KindServerRollover, "web", serverRollover(stranger.Public().(ed25519.PublicKey), next, "test", "web"), time.Now())
		}, "forged"},
		{"without the next key's proof", func(s *fakeServer) *bus.Envelope {
			return s.sealAt(bus.KindServerRollover, "web", bus.ServerRollover{Key: s.signer.PublicKey(), NextKey: nextPub}, time.Now())
		}, "proof"},
		{"with another key's proof", func(s *fakeServer) *bus.Envelope {
			r := serverRollover(s.signer.PublicKey(), other, "test", "web")
			r.NextKey = nextPub
			return s.sealAt(bus.KindServerRollover, "web", r, time.Now())
		}, "proof"},
		{"with a proof for another agent", func(s *fakeServer) *bus.Envelope {
			return s.sealAt(bus.KindServerRollover, "web", serverRollover(s.signer.PublicKey(), next, "test", "db"), time.Now())
		}, "proof"},
		{"with a proof for another environment", func(s *fakeServer) *bus.Envelope {
			return s.sealAt(bus.KindServerRollover, "web", serverRollover(s.signer.PublicKey(), next, "prod", "web"), time.Now())
		}, "proof"},
		{"from a key the agent does not hold", func(s *fakeServer) *bus.Envelope {
			return s.sealAt(bus.KindServerRollover, "web", serverRollover(other.Public().(ed25519.PublicKey), next, "test", "web"), time.Now())
		}, "not the pinned"},
		{"addressed to another agent", func(s *fakeServer) *bus.Envelope {
			return s.sealAt(bus.KindServerRollover, "db", serverRollover(s.signer.PublicKey(), next, "test", "db"), time.Now())
		}, "addressed to test/db"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s, r, seen := enrolledAgent(t)
			data, err := bus.Encode(c.forge(s))
			if err != nil {
				t.Fatal(err)
			}
			if err := s.bus.SendRaw(context.Background(), "test", "web", data); err != nil {
				t.Fatal(err)
			}
			rep := s.security(seen, "web")
			if told := strings.Join(rep.Refused, "\n"); !strings.Contains(told, "server.rollover") || !strings.Contains(told, c.want) {
				t.Fatalf("security report %+v: want the server.rollover refused for %q", rep, c.want)
			}
			waitDead(t, s, 1)
			if k := r.a.Journal().NextServerKey(); k != nil {
				t.Fatalf("the agent took next server key %s", model.Fingerprint(k))
			}
			if n := s.count("web", bus.KindServerRolloverAck); n != 0 {
				t.Fatalf("%d acknowledgements of a forged rollover", n)
			}
		})
	}
}

// Once switched, an `enrolled` or `server.rollover` signed by the key the
// agent left — the server answering a hello sent before the switch
// reached the agent — is dropped without a report; anything else the old
// key signs is refused with one.
func TestMessagesOfTheLeftKey(t *testing.T) {
	s, r, seen := enrolledAgent(t)
	current := s.signer.PublicKey()
	_, next, _ := bus.GenerateKey()
	s.send("web", bus.KindServerRollover, serverRollover(current, next, "test", "web"))
	s.next(seen, "web", bus.KindServerRolloverAck)
	s.signer.SetKey(next)
	s.send("web", bus.KindFactsRefresh, bus.Empty{})
	s.next(seen, "web", bus.KindFacts)
	if !r.a.Journal().ServerKey().Equal(next.Public().(ed25519.PublicKey)) {
		t.Fatal("the agent did not switch to the next key")
	}

	s.put(sealWith(t, s.key, bus.KindEnrolled, "web", bus.Enrolled{ServerKey: current}, time.Now()))
	s.put(sealWith(t, s.key, bus.KindServerRollover, "web", serverRollover(current, next, "test", "web"), time.Now()))
	s.put(sealWith(t, s.key, bus.KindFactsRefresh, "web", bus.Empty{}, time.Now()))
	rep := s.security(seen, "web")
	if rep.Count != 1 || !strings.Contains(rep.Refused[0], string(bus.KindFactsRefresh)) {
		t.Fatalf("security report %+v: want only the facts.refresh signed by the old key", rep)
	}
	// The report is sent while the refused message is handled; it is
	// dead-lettered once the handler returns. The inbox is handled in
	// order: the two before it were dropped by then, or dead-lettered.
	waitDead(t, s, 1)
	if dead := s.bus.DeadLetters(); len(dead) != 1 {
		t.Fatalf("%d messages dead-lettered, want 1 (the facts.refresh)", len(dead))
	}
	if !r.a.Journal().ServerKey().Equal(next.Public().(ed25519.PublicKey)) {
		t.Fatal("a message signed by the old key moved the agent back")
	}
}
