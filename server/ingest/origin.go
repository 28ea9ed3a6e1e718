package ingest

import (
	"bytes"
	"context"
	"fmt"
	"time"

	"github.com/tetherhq/tether/bus"
	"github.com/tetherhq/tether/server/record"
)

// Who sent an event. An event names the agent it is from (its env and
// agent), but a name is a claim: anyone who can publish can write any.
// What the server refuses, and the security alerts it raises, are filed
// under the sender, never under the agent a forgery claims to be, and the
// sender's alert and dead-letter budgets (flood.go) pay for them: one
// sender's noise cannot hold back another agent's alerts.
//
// The sender is, from the strongest word to the weakest:
//   - the broker login the message names (user_id), which RabbitMQ
//     checks against the connection's login: an agent that logs in as
//     itself names it on every event;
//   - where agents log in as themselves (the server answers the broker's
//     authentication backend), the agent of the routing key: the broker
//     lets a login publish under its own name only;
//   - the agent whose key signed the event: the one the routing key
//     names, or the one the event claims to be (its hello's own key, for
//     a hello of a name not known yet);
//   - else an unknown signer of the environment (unknownSigner): a shared
//     login carries no name the server could trust, and a signature does
//     not say whose key made it.

// unknownSigner is the sender of what no known key signed (not an agent
// name: those start with a letter or digit).
const unknownSigner = "(unknown signer)"

// publisher is who published an event: its sender.
type publisher struct {
	env, agent string
	// by says how the server knows: "its broker login", "its key", or ""
	// for an unknown signer.
	by string
}

const (
	byLogin = "its broker login"
	byKey   = "its key"
)

// origin is the sender of one delivery, found when first needed (an
// alert, a refusal) and kept.
type origin struct {
	d bus.Delivery
	// claimed is set once the event verified under the key of the agent
	// it claims to be, forged once it did not.
	claimed, forged bool
	found           *publisher
}

type originKey struct{}

// withOrigin carries the origin of the event ctx handles.
func withOrigin(ctx context.Context, o *origin) context.Context {
	return context.WithValue(ctx, originKey{}, o)
}

func originOf(ctx context.Context) *origin {
	o, _ := ctx.Value(originKey{}).(*origin)
	return o
}

// markClaimed records that the event ctx handles is signed by the key of
// the agent it claims to be (ok), or is not (!ok).
func markClaimed(ctx context.Context, ok bool) {
	if o := originOf(ctx); o != nil {
		o.claimed, o.forged = ok, !ok
	}
}

// published is what the broker vouches for of a delivery: the login it
// names, or, where agents log in as themselves, the agent of its routing
// key; ok is false when it vouches for nothing.
func (in *Ingester) published(d bus.Delivery) (publisher, bool) {
	if l, err := bus.ParseBrokerUser(d.Login); err == nil {
		return publisher{env: l.Env, agent: l.Agent, by: byLogin}, true
	}
	if in.agentLogins.Load() {
		if env, agent, _, ok := bus.ParseEventKey(d.RoutingKey); ok {
			return publisher{env: env, agent: agent, by: byLogin}, true
		}
	}
	return publisher{}, false
}

// senderOf finds the sender of the event ctx handles (e, when ctx carries
// no origin: the in-process bus's tests).
func (in *Ingester) senderOf(ctx context.Context, e *bus.Envelope) publisher {
	o := originOf(ctx)
	if o == nil {
		return publisher{env: e.Env, agent: e.Agent, by: byKey}
	}
	if o.found == nil {
		w := in.findSender(ctx, o)
		o.found = &w
	}
	return *o.found
}

func (in *Ingester) findSender(ctx context.Context, o *origin) publisher {
	e := o.d.Envelope
	if w, ok := in.published(o.d); ok {
		return w
	}
	claimed := publisher{env: e.Env, agent: e.Agent, by: byKey}
	if o.claimed {
		return claimed
	}
	now := time.Now()
	signedBy := func(env, name string) bool {
		a, _, err := in.agents.get(ctx, env, name)
		if err != nil {
			return false
		}
		return bus.Verify(e, a.PublicKey) == nil || (a.PreviousHolds(a.PreviousKey, now) && bus.Verify(e, a.PreviousKey) == nil)
	}
	if env, agent, _, ok := bus.ParseEventKey(o.d.RoutingKey); ok && (env != e.Env || agent != e.Agent) && signedBy(env, agent) {
		return publisher{env: env, agent: agent, by: byKey}
	}
	if e.Kind == bus.KindHello {
		// Signed by the key it presents (checked before): the claimed
		// agent's if that key is its own, or the name is not known yet.
		var h bus.Hello
		if e.DecodeBody(&h) == nil && !o.forged {
			a, _, err := in.agents.get(ctx, e.Env, e.Agent)
			if err != nil || bytes.Equal(a.PublicKey, h.PublicKey) || (a.State == record.AgentAccepted && a.PreviousHolds(h.PublicKey, now)) {
				return claimed
			}
		}
		return publisher{env: e.Env, agent: unknownSigner}
	}
	if !o.forged && signedBy(e.Env, e.Agent) {
		return claimed
	}
	return publisher{env: e.Env, agent: unknownSigner}
}

// describe says who sent e, for an alert about it: nothing more when the
// sender is the agent e claims to be.
func (w publisher) describe(e *bus.Envelope) string {
	switch {
	case w.env == e.Env && w.agent == e.Agent:
		return ""
	case w.agent == unknownSigner:
		return fmt.Sprintf("; claims to be agent %s/%s, signed by none of its keys: its sender is not known (a shared broker login, or a key the server does not know)", e.Env, e.Agent)
	}
	return fmt.Sprintf("; sent by agent %s/%s (%s), claiming to be agent %s/%s", w.env, w.agent, w.by, e.Env, e.Agent)
}
