package server_test

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tetherhq/tether/bus"
	"github.com/tetherhq/tether/model"
	"github.com/tetherhq/tether/server"
	"github.com/tetherhq/tether/server/record"
	"github.com/tetherhq/tether/server/scheduler"
	"github.com/tetherhq/tether/server/store"
)

// fakeBroker stands in for the broker's management API: it records what
// the server asked to close.
type fakeBroker struct {
	mu     sync.Mutex
	closes []closeCall
}

type closeCall struct {
	env, name string
	key       ed25519.PublicKey // nil: any key of the agent
}

func (f *fakeBroker) CloseAgentConnections(_ context.Context, env, name string, key ed25519.PublicKey) (int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.closes = append(f.closes, closeCall{env: env, name: name, key: key})
	return 1, nil
}

// Connections lists none: these tests are about closing by agent.
func (f *fakeBroker) Connections(context.Context) ([]bus.BrokerConnection, error) { return nil, nil }

func (f *fakeBroker) CloseConnection(context.Context, string, string) error { return nil }

func (f *fakeBroker) calls() []closeCall {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]closeCall(nil), f.closes...)
}

// waitClose waits until the server asked to close the connections of
// name's key, and returns every call so far.
func (f *fakeBroker) waitClose(t *testing.T, name string, key ed25519.PublicKey) []closeCall {
	t.Helper()
	var calls []closeCall
	waitFor(t, "the connections of "+name+"'s key "+model.Fingerprint(key)+" closed", func() bool {
		calls = f.calls()
		for _, c := range calls {
			if c.name == name && bytes.Equal(c.key, key) {
				return true
			}
		}
		return false
	})
	return calls
}

// brokerRig runs a server whose broker management API is fb, with one
// environment of the given enrollment.
func brokerRig(t *testing.T, fb *fakeBroker, enrollment record.Enrollment) *rig {
	t.Helper()
	settings := record.DefaultEnvSettings()
	settings.AutoDeploy = false
	settings.Enrollment = enrollment
	return startRigWith(t, func(c *server.Config, _ store.Store) { c.Broker = fb }, map[string]record.EnvSettings{"test": settings})
}

// A squatter says hello first under a pending name with a key of its own
// (and a token that does not hold: it is told so, and gets no inbox: a
// pending agent has none, so nothing can be queued for the squatter's
// key); then the host the name is for says hello with a valid enrollment
// token and another key, which takes the name. The squatter's key is cut
// off the broker, and the inbox the host gets holds its enrollment first.
func TestRekeyOfAPendingNameCutsTheOldKeyOff(t *testing.T) {
	fb := &fakeBroker{}
	r := brokerRig(t, fb, record.EnrollToken)
	_, squatter, _ := bus.GenerateKey()
	r.forge(squatter, 1, bus.KindHello, "new", bus.Hello{PublicKey: pub(squatter), Token: "not-a-token"})
	if e := r.next(server.EventAgentDiscovered); e.Agent != "new" || !strings.Contains(e.Error, "token") {
		t.Fatalf("discovery %+v: want new refused for its token", e)
	}
	// Nothing can be queued for the squatter's key: no inbox.
	leftover, err := bus.NewSigner(squatter, 0).Seal(bus.KindPause, "test", "new", bus.Empty{})
	if err != nil {
		t.Fatal(err)
	}
	if err := r.bus.Send(r.ctx, leftover, bus.SendOptions{}); !errors.Is(err, bus.ErrNoInbox) {
		t.Fatalf("send to the pending agent: %v, want %v (a pending agent has no inbox)", err, bus.ErrNoInbox)
	}

	secret, err := model.NewEnrollmentToken(r.srv.PublicKey())
	if err != nil {
		t.Fatal(err)
	}
	if err := r.store.CreateEnrollToken(r.ctx, record.EnrollmentToken{ID: "t1", Env: "test", Name: "t", Hash: record.HashSecret(secret), MaxUses: 5, CreatedBy: "test"}); err != nil {
		t.Fatal(err)
	}
	_, host, _ := bus.GenerateKey()
	r.forge(host, 1, bus.KindHello, "new", bus.Hello{PublicKey: pub(host), Token: secret})
	r.waitOnline("new")

	calls := fb.waitClose(t, "new", pub(squatter))
	for _, c := range calls {
		if c.key == nil || bytes.Equal(c.key, pub(host)) {
			t.Fatalf("closed the connections of %s key %s: want only the squatter's key's", c.name, model.Fingerprint(c.key))
		}
	}
	first := make(chan *bus.Envelope, 1)
	ctx, cancel := context.WithCancel(r.ctx)
	defer cancel()
	go func() {
		_ = r.bus.ConsumeInbox(ctx, "test", "new", func(_ context.Context, d bus.Delivery) error {
			select {
			case first <- d.Envelope:
			default:
			}
			return nil
		})
	}()
	select {
	case e := <-first:
		if e.Kind != bus.KindEnrolled {
			t.Fatalf("first command in the inbox after the new key took the name: %s, want the enrollment (what was queued before is gone)", e)
		}
	case <-time.After(patience):
		t.Fatal("nothing in the inbox after the new key took the name: want its enrollment")
	}
}

// Once an agent is heard from with the key it rolled over to, the
// connections still logged in with its previous key are closed (whoever
// else holds that key is cut off); its other connections and its inbox
// stay, and it deploys on.
func TestSwitchedKeyCutsThePreviousKeyOff(t *testing.T) {
	fb := &fakeBroker{}
	r := brokerRig(t, fb, record.EnrollManual)
	r.release(file("web", "/f", "1"))
	a, _ := r.startAccepted(r.rotatingAgent("web", t.TempDir()))
	oldKey := pub(a.Journal().Key())
	if calls := fb.calls(); len(calls) != 0 {
		t.Fatalf("connections closed before the rotation: %+v", calls)
	}
	if _, err := r.srv.RotateKey(r.ctx, "test", "web"); err != nil {
		t.Fatal(err)
	}
	rec := r.waitRecord("web", "the switch to its new key", func(a record.Agent) bool { return a.PreviousUntil != nil })
	for _, c := range fb.waitClose(t, "web", oldKey) {
		if !bytes.Equal(c.key, oldKey) {
			t.Fatalf("closed the connections of %s key %s: want only the previous key's (%s), not the new one's (%s) or any",
				c.name, model.Fingerprint(c.key), model.Fingerprint(oldKey), model.Fingerprint(rec.PublicKey))
		}
	}
	r.release(file("web", "/f", "2"))
	if res := r.deploy(scheduler.DeployRequest{}); len(res) != 1 {
		t.Fatalf("deploy after the rotation: %d results, want 1", len(res))
	}
}

// A rejected agent that says hello again gets no inbox: the server
// declares inboxes only for the agents it records pending or accepted.
// Accepted again, it has one at once, with its enrollment in it.
func TestRejectedAgentGetsNoInbox(t *testing.T) {
	fb := &fakeBroker{}
	r := brokerRig(t, fb, record.EnrollManual)
	_, key, _ := bus.GenerateKey()
	r.forge(key, 1, bus.KindHello, "bad", bus.Hello{PublicKey: pub(key)})
	r.next(server.EventAgentDiscovered)
	if _, err := r.srv.AgentAction(r.ctx, "test", "bad", record.AgentReject); err != nil {
		t.Fatal(err)
	}
	fb.waitClose(t, "bad", nil)
	probe, err := bus.NewSigner(key, 0).Seal(bus.KindPause, "test", "bad", bus.Empty{})
	if err != nil {
		t.Fatal(err)
	}
	if err := r.bus.Send(r.ctx, probe, bus.SendOptions{}); !errors.Is(err, bus.ErrNoInbox) {
		t.Fatalf("send to a revoked agent: got %v, want ErrNoInbox (its inbox deleted)", err)
	}
	r.forge(key, 2, bus.KindHello, "bad", bus.Hello{PublicKey: pub(key)})
	if e := r.next(server.EventAgentDiscovered); e.Agent != "bad" || !strings.Contains(e.Error, "rejected") {
		t.Fatalf("hello of a rejected agent: %+v, want it refused as rejected", e)
	}
	if err := r.bus.Send(r.ctx, probe, bus.SendOptions{}); !errors.Is(err, bus.ErrNoInbox) {
		t.Fatalf("send after a rejected agent's hello: got %v, want ErrNoInbox (no inbox declared for it)", err)
	}
	if _, err := r.srv.AgentAction(r.ctx, "test", "bad", record.AgentAccept); err != nil {
		t.Fatal(err)
	}
	if err := r.bus.Send(r.ctx, probe, bus.SendOptions{}); err != nil {
		t.Fatalf("send to an agent accepted again: got %v, want its inbox declared", err)
	}
}
