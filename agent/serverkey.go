package agent

import (
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"

	"github.com/tetherhq/tether/agent/journal"
	"github.com/tetherhq/tether/bus"
)

// A rollover of the server's signing key (docs/security.md, "The server's
// signing key"): the server announces its next key in server.rollover,
// signed by the key the agent pinned, with the next key's proof made for
// this agent of this environment. The agent keeps the next key in its
// identity (journal.AnnounceServerKey), acknowledges it with
// server.rollover.ack through its outbox, and takes commands signed by
// either key; the first command signed by the next key (the server
// switched) makes it the only one (journal.SwitchServerKey).

// takeServerRollover records the server's next key announced by a
// server.rollover, and acknowledges it in tx.
func (a *Agent) takeServerRollover(ctx context.Context, tx *journal.Tx, e *bus.Envelope, body bus.ServerRollover) error {
	pinned := a.journal.ServerKey()
	if err := bus.CheckServerKeyProof(a.cfg.Env, a.cfg.Name, pinned, body); err != nil {
		err = fmt.Errorf("%w: %w", errForged, err)
		a.refuse(ctx, e, err)
		return fmt.Errorf("%w: %w", bus.ErrReject, err)
	}
	next, was := ed25519.PublicKey(body.NextKey), a.journal.NextServerKey()
	if err := a.journal.AnnounceServerKey(next); err != nil {
		return err
	}
	switch {
	case was == nil:
		a.log.Info().Str("server_key", bus.Fingerprint(pinned)).Str("next_server_key", bus.Fingerprint(next)).
			Msg("the server announced its next signing key: commands signed by either are taken until the first signed by the next")
	case !was.Equal(next):
		a.log.Info().Str("server_key", bus.Fingerprint(pinned)).Str("next_server_key", bus.Fingerprint(next)).Str("replaced", bus.Fingerprint(was)).
			Msg("the server announced another next signing key, in place of the one it announced before")
	}
	return a.emit(tx, bus.KindServerRolloverAck, bus.ServerRolloverAck{ServerKeys: a.serverKeys(), Rollover: e.ID})
}

// switchServerKey pins the server's next key alone: a command signed by it
// arrived, so the server switched. The server is told (its next hello
// tells it anyway).
func (a *Agent) switchServerKey(ctx context.Context) error {
	old, next := a.journal.ServerKey(), a.journal.NextServerKey()
	err := a.journal.SwitchServerKey()
	switch {
	case errors.Is(err, journal.ErrNoServerRollover):
		return nil // another delivery switched it
	case err != nil:
		return fmt.Errorf("server key rollover: %w", err)
	}
	a.log.Info().Str("server_key", bus.Fingerprint(next)).Str("previous_server_key", bus.Fingerprint(old)).
		Msg("the server signs with its next key: it is the only server key this agent takes from now on")
	if err := a.publishNow(ctx, bus.KindServerRolloverAck, bus.ServerRolloverAck{ServerKeys: a.serverKeys()}); err != nil {
		a.log.Info().Err(err).Msg("the server is not told this agent takes its new key alone; its next hello tells it")
	}
	return nil
}

// serverKeys are the fingerprints of the server keys the agent takes
// commands signed by (the pinned one, then the next); before enrollment,
// the one it expects.
func (a *Agent) serverKeys() []string {
	pinned := a.journal.ServerKey()
	if pinned == nil {
		if a.pin == "" {
			return nil
		}
		return []string{a.pin}
	}
	keys := []string{bus.Fingerprint(pinned)}
	if next := a.journal.NextServerKey(); next != nil {
		keys = append(keys, bus.Fingerprint(next))
	}
	return keys
}
