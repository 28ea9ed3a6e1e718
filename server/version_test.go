package server_test

import (
	"crypto/ed25519"
	"strings"
	"testing"

	"github.com/tetherhq/tether/agent"
	"github.com/tetherhq/tether/bus"
	"github.com/tetherhq/tether/model"
	"github.com/tetherhq/tether/server"
	"github.com/tetherhq/tether/server/record"
)

// An agent's version and protocol are recorded from its hello; an agent
// older than versions (it says neither) is taken; one of another major
// protocol is recorded with why, told so, and not enrolled, its token
// left unused; a protocol that is not major.minor is refused outright.
func TestAgentVersionsAndProtocolPolicy(t *testing.T) {
	r := newRig(t, record.EnrollToken)
	r.startAgentWith(agent.Config{Env: "test", Name: "web", Version: "v9.8.7", ServerKey: r.srv.PublicKey()})
	if e := r.next(server.EventAgentDiscovered); e.Agent != "web" {
		t.Fatalf("got %+v, want web discovered", e)
	}
	if _, err := r.srv.AgentAction(r.ctx, "test", "web", record.AgentAccept); err != nil {
		t.Fatal(err)
	}
	r.waitOnline("web")
	web := r.waitRecord("web", "its version", func(a record.Agent) bool { return a.AgentVersion != "" })
	if web.AgentVersion != "v9.8.7" || web.Protocol != bus.Protocol {
		t.Fatalf("web: version %q, protocol %q; want v9.8.7, %s", web.AgentVersion, web.Protocol, bus.Protocol)
	}

	secret, err := model.NewEnrollmentToken(r.srv.PublicKey())
	if err != nil {
		t.Fatal(err)
	}
	if err := r.store.CreateEnrollToken(r.ctx, record.EnrollmentToken{ID: "t1", Env: "test", Name: "t", Hash: record.HashSecret(secret), MaxUses: 1, CreatedBy: "test"}); err != nil {
		t.Fatal(err)
	}
	// An older agent: no version, no protocol (1.0), with a token.
	old := r.inboxAgent("old", false)
	r.forge(old.key, 1, bus.KindHello, "old", bus.Hello{PublicKey: old.key.Public().(ed25519.PublicKey), Token: secret})
	r.waitOnline("old")
	if a, _ := r.store.GetAgent(r.ctx, "test", "old"); a.State != record.AgentAccepted || a.AgentVersion != "" || a.Protocol != "" {
		t.Fatalf("old agent: state %s, version %q, protocol %q; want accepted with neither", a.State, a.AgentVersion, a.Protocol)
	}
	if err := r.store.CreateEnrollToken(r.ctx, record.EnrollmentToken{ID: "t2", Env: "test", Name: "t2", Hash: record.HashSecret(secret + "2"), MaxUses: 1, CreatedBy: "test"}); err != nil {
		t.Fatal(err)
	}

	// A newer major: recorded, refused, told why and which protocol the
	// server speaks.
	next := r.inboxAgent("next", false)
	r.forge(next.key, 1, bus.KindHello, "next", bus.Hello{PublicKey: next.key.Public().(ed25519.PublicKey), Token: secret + "2", Version: "v20.0.0", Protocol: "2.0"})
	e := r.next(server.EventAgentDiscovered)
	if e.Agent != "next" || !strings.Contains(e.Error, "protocol 2.0") {
		t.Fatalf("got %+v, want next discovered with its protocol named", e)
	}
	a, err := r.store.GetAgent(r.ctx, "test", "next")
	if err != nil || a.State == record.AgentAccepted || a.AgentVersion != "v20.0.0" || a.Protocol != "2.0" || !strings.Contains(a.Note, "protocol not supported") {
		t.Fatalf("next: %+v (%v); want it recorded, not accepted, with version, protocol and why", a, err)
	}
	waitFor(t, "the refusal sent to next", func() bool {
		next.mu.Lock()
		defer next.mu.Unlock()
		for _, m := range next.got {
			var body bus.Rejected
			if m.Kind == bus.KindRejected && m.DecodeBody(&body) == nil && body.Protocol == bus.Protocol && strings.Contains(body.Reason, "2.0") {
				return true
			}
		}
		return false
	})
	toks, err := r.store.ListEnrollTokens(r.ctx, "test")
	if err != nil {
		t.Fatal(err)
	}
	for _, tok := range toks {
		if tok.ID == "t2" && tok.Uses != 0 {
			t.Fatalf("token t2 used %d times by an agent refused for its protocol, want 0", tok.Uses)
		}
	}

	// A protocol that is no version at all: dead-lettered, not recorded.
	bad := r.inboxAgent("bad", false)
	r.forge(bad.key, 1, bus.KindHello, "bad", bus.Hello{PublicKey: bad.key.Public().(ed25519.PublicKey), Protocol: "two"})
	waitFor(t, "the hello dead-lettered", func() bool { return len(r.bus.DeadLetters()) > 0 })
	if _, err := r.store.GetAgent(r.ctx, "test", "bad"); err == nil {
		t.Fatal("an agent with a malformed protocol version was recorded")
	}
}
