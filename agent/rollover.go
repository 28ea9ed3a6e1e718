package agent

import (
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"

	"github.com/tetherhq/tether/agent/journal"
	"github.com/tetherhq/tether/bus"
)

// Key rotation (docs/security.md, "Key rotation"): the agent makes its next
// key and keeps it durably (journal.BeginRollover) before it tells the
// server, in key.rollover signed by its current key, with the next key's
// proof of possession. It signs with its current key until the server
// answers key.accepted, then switches (journal.CompleteRollover): events
// still in its outbox are signed again with the new key as they leave, and
// it logs in to the broker anew. A rollover a restart interrupted is
// proposed again after the next hello, the same key each time.

// rotateKey starts a rollover (or goes on with the one under way) and
// proposes the next key to the server.
func (a *Agent) rotateKey(ctx context.Context) error {
	next, started, err := a.journal.BeginRollover()
	if err != nil {
		return err
	}
	if started {
		a.log.Info().Str("next_key", bus.Fingerprint(next.Public().(ed25519.PublicKey))).Msg("key rotation: next key made; proposing it to the server")
	}
	a.proposeKey(ctx)
	return nil
}

// proposeKey sends the rollover under way, if any. It is said again after
// every hello until the server answers, so it needs no outbox.
func (a *Agent) proposeKey(ctx context.Context) {
	next := a.journal.NextKey()
	if next == nil {
		return
	}
	body := bus.KeyRollover{NewKey: next.Public().(ed25519.PublicKey), Proof: bus.ProveKey(next, a.cfg.Env, a.cfg.Name, a.signer.PublicKey())}
	if err := a.publishNow(ctx, bus.KindKeyRollover, body); err != nil && ctx.Err() == nil {
		a.publishFailed(err, "cannot propose the next key to the server; proposing it again after the next hello")
	}
}

// switchKey makes the key the server accepted the agent's.
func (a *Agent) switchKey(body bus.KeyAccepted) error {
	key := ed25519.PublicKey(body.Key)
	err := a.journal.CompleteRollover(key)
	switch {
	case errors.Is(err, journal.ErrNoRollover) && a.signer.PublicKey().Equal(key):
		return nil // switched already: a redelivery
	case errors.Is(err, journal.ErrNoRollover):
		a.log.Warn().Str("key", bus.Fingerprint(key)).Msg("the server accepted a key this agent does not hold (a rollover it gave up when its key.next file was lost): " +
			"it keeps signing with its current key, which the server takes until it switches; to give it a new key, remove the agent on the server and enroll it again")
		return nil
	case err != nil:
		return fmt.Errorf("key rotation: %w", err)
	}
	old := a.signer.PublicKey()
	a.signer.SetKey(a.journal.Key())
	a.log.Info().Str("previous_key", bus.Fingerprint(old)).Str("key", bus.Fingerprint(key)).Msg("key rotation: the server accepted the new key; signing with it")
	if a.cfg.Relogin != nil {
		a.cfg.Relogin()
	}
	return nil
}
