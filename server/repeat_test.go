package server_test

import (
	"context"
	"crypto/ed25519"
	"sync"
	"testing"

	"github.com/tetherhq/tether/bus"
	"github.com/tetherhq/tether/server"
	"github.com/tetherhq/tether/server/record"
)

// A hello an agent says again while the answer to its first waits in its
// inbox is not handled again: the server only marks the agent as heard.
// Once the inbox no longer holds the answer (the agent read it, or the
// inbox was emptied), or when the hello tells something new, a repeat is
// handled in full, answered again.
func TestRepeatedHelloAnsweredOnce(t *testing.T) {
	settings := quietSettings()
	settings.Enrollment = record.EnrollOpen
	r := startRig(t, server.Config{}, map[string]record.EnvSettings{"test": settings})
	_, key, _ := bus.GenerateKey()
	sg := bus.NewSigner(key, 0)
	hello := bus.Hello{PublicKey: key.Public().(ed25519.PublicKey), Labels: map[string]string{"role": "web"}}
	say := func(h bus.Hello) uint64 { return r.sayHello(sg, "fresh", h) }
	repeated := func() float64 {
		return metricWith(t, r.srv, "tether_ingest_events_total", `{kind="hello",outcome="repeated"}`)
	}
	// read takes what waits in the inbox and returns how many.
	read := func() int {
		t.Helper()
		var mu sync.Mutex
		n := 0
		ctx, cancel := context.WithCancel(r.ctx)
		done := make(chan struct{})
		go func() {
			defer close(done)
			_ = r.bus.ConsumeInbox(ctx, "test", "fresh", func(context.Context, bus.Delivery) error {
				mu.Lock()
				n++
				mu.Unlock()
				return nil
			})
		}()
		waitFor(t, "the inbox read", func() bool {
			waiting, err := r.bus.AnswerWaiting(r.ctx, "test", "fresh")
			return err == nil && !waiting
		})
		cancel()
		<-done
		mu.Lock()
		defer mu.Unlock()
		return n
	}

	first := say(hello)
	if a := r.waitRecord("fresh", "its enrollment", func(a record.Agent) bool { return a.State == record.AgentAccepted }); a.LastSeq != int64(first) {
		t.Fatalf("last sequence %d, want %d", a.LastSeq, first)
	}
	repeat := hello
	repeat.Repeats = first
	second := say(repeat)
	if got := repeated(); got != 1 {
		t.Fatalf("%g hellos counted as repeated, want 1", got)
	}
	r.waitRecord("fresh", "the repeat marked as heard", func(a record.Agent) bool { return a.LastSeq == int64(second) })
	if n := read(); n != 1 {
		t.Fatalf("the inbox held %d messages, want the one answer", n)
	}

	// The answer was read: a repeat said before it was is answered again.
	say(repeat)
	if got := repeated(); got != 1 {
		t.Fatalf("%g hellos counted as repeated, want still 1", got)
	}
	waitFor(t, "a second answer", func() bool {
		waiting, err := r.bus.AnswerWaiting(r.ctx, "test", "fresh")
		return err == nil && waiting
	})

	// A repeat that tells something new is handled, answer waiting or not.
	changed := repeat
	changed.Labels = map[string]string{"role": "db"}
	say(changed)
	if got := repeated(); got != 1 {
		t.Fatalf("%g hellos counted as repeated, want still 1", got)
	}
	r.waitRecord("fresh", "its new label", func(a record.Agent) bool { return a.Labels["role"] == "db" })
	if n := read(); n != 2 {
		t.Fatalf("the inbox held %d messages, want the two answers", n)
	}
}

// A restarted agent starts a new series: its first hello is handled in
// full though an answer waits in its inbox. A repeat signed by another
// key than the one it presents (someone without the agent's key) is
// refused, neither skipped nor answered.
func TestRepeatedHelloAfterRestartAndForged(t *testing.T) {
	settings := quietSettings()
	settings.Enrollment = record.EnrollOpen
	r := startRig(t, server.Config{}, map[string]record.EnvSettings{"test": settings})
	_, key, _ := bus.GenerateKey()
	pub := key.Public().(ed25519.PublicKey)
	sg := bus.NewSigner(key, 0)
	say := func(sg *bus.Signer, h bus.Hello) { r.sayHello(sg, "web", h) }
	count := func(outcome string) float64 {
		return metricWith(t, r.srv, "tether_ingest_events_total", `{kind="hello",outcome="`+outcome+`"}`)
	}
	say(sg, bus.Hello{PublicKey: pub})
	r.waitRecord("web", "its enrollment", func(a record.Agent) bool { return a.State == record.AgentAccepted })
	a := r.agentRecord("web")

	// Restarted: a first hello again (no series), an answer waiting.
	ok := count("ok")
	say(sg, bus.Hello{PublicKey: pub})
	if got := count("repeated"); got != 0 {
		t.Fatalf("a restarted agent's first hello counted as repeated (%g)", got)
	}
	if got := count("ok"); got != ok+1 {
		t.Fatalf("hellos handled: %g, want %g", got, ok+1)
	}

	// Forged: the agent's key presented, another key's signature.
	_, other, _ := bus.GenerateKey()
	forger := bus.NewSigner(other, uint64(a.LastSeq)+10)
	rejected := count("rejected")
	say(forger, bus.Hello{PublicKey: pub, Repeats: uint64(a.LastSeq)})
	if got := count("repeated"); got != 0 {
		t.Fatalf("a forged repeat was skipped as repeated (%g)", got)
	}
	if got := count("rejected"); got != rejected+1 {
		t.Fatalf("rejected hellos: %g, want %g", got, rejected+1)
	}
}
