package ingest

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"
	"time"

	"github.com/tetherhq/tether/bus"
	"github.com/tetherhq/tether/model"
	"github.com/tetherhq/tether/server/event"
	"github.com/tetherhq/tether/server/record"
)

// An agent replaces its key by a signed rollover (docs/security.md, "Key
// rotation"): key.rollover, signed by its current key, carries the next key
// and that key's proof of possession; the server makes the next key the
// agent's, keeps the current one as its previous key, and answers
// key.accepted. The agent signs with its old key until that answer arrives,
// so its previous key holds until the agent is first heard from with the
// new one, and PreviousKeyGrace after that: events it signed before the
// switch are still on their way through the broker. Sequence numbers go on
// across a rollover (the agent's signer keeps counting), so deduplication
// of what either key signed still holds.

// PreviousKeyGrace is how long an agent's previous key still holds after
// the agent was first heard from with its new one.
const PreviousKeyGrace = time.Hour

// RotateKeyExpiry bounds how long a key.rotate waits in an offline
// agent's inbox: an agent away longer is asked again by its operator.
const RotateKeyExpiry = time.Hour

// verifyAgent checks an event's signature against the agent's key, or its
// previous key while that holds, and reports which. The first event signed
// with the new key starts the previous key's grace. A copy of the agent
// from the cache (cached) that verifies neither is read again from the
// store: the key may have rolled over through another replica.
func (in *Ingester) verifyAgent(ctx context.Context, a *record.Agent, cached bool, e *bus.Envelope) (byPrevious bool, err error) {
	now := time.Now()
	for fresh := !cached; ; fresh = true {
		if err := bus.Verify(e, a.PublicKey); err == nil {
			if !a.Switched() {
				return false, in.markSwitched(ctx, a, now)
			}
			return false, nil
		}
		if a.PreviousHolds(a.PreviousKey, now) && bus.Verify(e, a.PreviousKey) == nil {
			return true, nil
		}
		if fresh {
			return false, bus.Verify(e, a.PublicKey)
		}
		since := in.agents.since(a.Env, a.Name)
		got, err := in.store.GetAgent(ctx, a.Env, a.Name)
		if err != nil {
			return false, err
		}
		in.agents.putRead(got, since)
		*a = got
	}
}

// markSwitched records that the agent signs with its new key: its previous
// key holds for PreviousKeyGrace more for the events it signed, and no
// more on the broker: the connections still logged in with it are closed
// (the agent logs in anew as it switches; whoever else holds the old key
// is cut off). Its inbox stays.
func (in *Ingester) markSwitched(ctx context.Context, a *record.Agent, now time.Time) error {
	next := *a
	next.PreviousUntil = new(now.Add(PreviousKeyGrace).UTC())
	ok, err := in.store.SetAgentKey(ctx, next, a.PublicKey)
	if err != nil || !ok {
		// Not ok: the key changed again meanwhile (another rollover, taken
		// by another replica); that one's switch is its own.
		return err
	}
	*a = next
	// next is the copy the event came with, which may be older than the
	// record: read again at the next event.
	in.agents.forget(a.Env, a.Name)
	in.log.Info().Str("env", a.Env).Str("agent", a.Name).Str("key", bus.Fingerprint(a.PublicKey)).
		Dur("previous_key_holds", PreviousKeyGrace).Msg("agent switched to its new key")
	if len(next.PreviousKey) > 0 {
		in.cutOff(ctx, revocation{env: a.Env, name: a.Name, key: next.PreviousKey, why: "the agent switched to its new key"})
	}
	return nil
}

// rollover makes an accepted agent's proposed key its key. byPrevious says
// the proposal was signed by the agent's previous key: the agent proposing
// again the key it rolled over to, which it has not heard was accepted
// (answered again), or someone else holding that key (refused).
func (in *Ingester) rollover(ctx context.Context, a record.Agent, e *bus.Envelope, body bus.KeyRollover, byPrevious bool) error {
	signer := ed25519.PublicKey(a.PublicKey)
	if byPrevious {
		signer = ed25519.PublicKey(a.PreviousKey)
	}
	if bytes.Equal(body.NewKey, a.PublicKey) {
		if !byPrevious {
			// The agent proposed it again as it switched to it: done.
			return nil
		}
		// Told again: the agent did not get the acknowledgement.
		if err := bus.CheckKeyProof(a.Env, a.Name, signer, body); err != nil {
			in.security(ctx, e, fmt.Sprintf("key rollover of agent %s refused: %v", a.Name, err))
			return fmt.Errorf("%w: %w", bus.ErrReject, err)
		}
		return in.acceptKey(ctx, a, e)
	}
	if byPrevious {
		in.security(ctx, e, fmt.Sprintf("key rollover of agent %s to %s signed by its previous key %s, which it left for %s: refused (is the old key in other hands?)",
			a.Name, keyName(body.NewKey), bus.Fingerprint(signer), bus.Fingerprint(a.PublicKey)))
		return fmt.Errorf("%w: %s: signed by a key the agent left", bus.ErrReject, e)
	}
	if err := bus.CheckKeyProof(a.Env, a.Name, signer, body); err != nil {
		in.security(ctx, e, fmt.Sprintf("key rollover of agent %s refused: %v", a.Name, err))
		return fmt.Errorf("%w: %w", bus.ErrReject, err)
	}
	// Several replicas write agents: the key moves only from the one that
	// signed, whatever else changed meanwhile.
	next := a
	next.PreviousKey, next.PublicKey, next.PreviousUntil = a.PublicKey, body.NewKey, nil
	switch ok, err := in.store.SetAgentKey(ctx, next, a.PublicKey); {
	case err != nil:
		return err
	case !ok:
		return fmt.Errorf("key rollover of %s/%s: its key changed meanwhile; trying again", a.Env, a.Name)
	}
	since := in.agents.since(a.Env, a.Name)
	cur, err := in.store.GetAgent(ctx, a.Env, a.Name)
	if err != nil {
		return err
	}
	in.agents.putRead(cur, since)
	detail := fmt.Sprintf("key %s rolled over to %s", bus.Fingerprint(signer), bus.Fingerprint(body.NewKey))
	if err := in.store.RecordAudit(ctx, record.AuditEntry{Actor: "agent " + a.Name, Action: "agent.key-rollover", Env: a.Env,
		Target: a.Name, Detail: model.Clip(detail, model.MaxAuditLen)}); err != nil {
		in.log.Error().Err(err).Str("agent", a.Name).Msg("audit log entry of a key rollover lost")
	}
	in.log.Info().Str("env", a.Env).Str("agent", a.Name).Str("previous_key", bus.Fingerprint(signer)).
		Str("key", bus.Fingerprint(body.NewKey)).Msg("agent key rolled over")
	in.feed.Publish(event.Event{Kind: event.AgentChanged, Env: a.Env, Agent: a.Name, Error: "key rolled over"})
	return in.acceptKey(ctx, cur, e)
}

// acceptKey tells the agent its new key is the one the server verifies.
func (in *Ingester) acceptKey(ctx context.Context, a record.Agent, rollover *bus.Envelope) error {
	e, err := in.signer.Seal(bus.KindKeyAccepted, a.Env, a.Name, bus.KeyAccepted{Key: a.PublicKey, Rollover: rollover.ID})
	if err != nil {
		return err
	}
	if err := in.bus.Send(ctx, e, bus.SendOptions{}); err != nil && !errors.Is(err, bus.ErrNoInbox) {
		return err
	}
	return nil
}

// RotateKey asks an accepted agent to replace its key, and returns the
// agent as recorded now: its key changes when its rollover arrives.
func (in *Ingester) RotateKey(ctx context.Context, env, name string) (record.Agent, error) {
	a, err := in.store.GetAgent(ctx, env, name)
	if err != nil {
		return a, err
	}
	if a.State != record.AgentAccepted {
		return a, fmt.Errorf("%w: agent %s is %s: accept it first", model.ErrConflict, name, a.State)
	}
	e, err := in.signer.Seal(bus.KindRotateKey, env, name, bus.Empty{})
	if err != nil {
		return a, err
	}
	if err := in.bus.Send(ctx, e, bus.SendOptions{Expiration: RotateKeyExpiry}); err != nil {
		return a, fmt.Errorf("%w: ask agent %s to rotate its key: %w", model.ErrUnavailable, name, err)
	}
	return a, nil
}
