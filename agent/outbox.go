package agent

import (
	"context"
	"crypto/ed25519"
	"time"

	"github.com/tetherhq/tether/agent/journal"
	"github.com/tetherhq/tether/bus"
)

// emit seals an event and puts it in the outbox in the same transaction as
// tx's other changes; the publisher sends it. An event is thus never lost
// between being produced and being confirmed by the broker, and the state
// it reports (results, a state request) is journaled with it.
func (a *Agent) emit(tx *journal.Tx, kind bus.Kind, body any) error {
	e, err := a.signer.Seal(kind, a.cfg.Env, a.cfg.Name, body)
	if err != nil {
		return err
	}
	data, err := bus.Encode(e)
	if err != nil {
		return err
	}
	if err := tx.Out(e.Seq, data).Commit(); err != nil {
		return err
	}
	a.poke(a.flush)
	return nil
}

// Outbox publishing pauses after a failure, doubling up to the cap.
const (
	outboxRetry    = 200 * time.Millisecond
	outboxRetryMax = 30 * time.Second
)

// publishOutbox sends the outbox's events in order, each removed once the
// broker confirmed it, until ctx ends. While the broker is away it retries
// with back-off; events wait in the journal meanwhile, across restarts.
func (a *Agent) publishOutbox(ctx context.Context) {
	pause := outboxRetry
	failing := false
	for {
		err := a.sendOutbox(ctx)
		switch {
		case err == nil:
			if failing {
				a.log.Info().Msg("outbox delivered again")
			}
			failing, pause = false, outboxRetry
			select {
			case <-a.flush:
				continue
			case <-ctx.Done():
				return
			}
		case ctx.Err() != nil:
			return
		default:
			if !failing {
				a.log.Warn().Err(err).Int("waiting", a.journal.OutboxLen()).Msg("cannot deliver events; they wait in the journal")
			}
			failing = true
			if !sleep(ctx, jitter(pause)) {
				return
			}
			pause = min(2*pause, outboxRetryMax)
		}
	}
}

// sendOutbox publishes every event in the outbox, oldest first.
func (a *Agent) sendOutbox(ctx context.Context) error {
	for {
		out := a.journal.Outbox()
		if len(out) == 0 {
			return nil
		}
		for _, o := range out {
			e, err := bus.Decode(o.Data)
			if err != nil {
				// Written by this agent: it cannot happen short of a bug;
				// drop it rather than block every later event.
				a.log.Error().Err(err).Uint64("seq", o.Seq).Msg("dropping an undecodable event from the outbox")
			} else {
				resign(e, a.signer.Key())
				if err := a.bus.Publish(ctx, e); err != nil {
					return err
				}
				a.toldNow()
			}
			if err := a.journal.Sent(o.Seq); err != nil {
				return err
			}
		}
	}
}

// resign signs an event of the outbox with key when an earlier key of the
// agent's signed it (the key rolled over since it was journaled): it then
// holds however long it waits for the broker. Nothing else of it changes.
func resign(e *bus.Envelope, key ed25519.PrivateKey) {
	if bus.Verify(e, key.Public().(ed25519.PublicKey)) != nil {
		bus.Sign(e, key)
	}
}
