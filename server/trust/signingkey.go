package trust

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/tetherhq/tether/bus"
	"github.com/tetherhq/tether/model"
	"github.com/tetherhq/tether/server/event"
	"github.com/tetherhq/tether/server/record"
)

// keySet is the server's signing keys as this replica last read them.
type keySet struct {
	// current is the key in the secrets table; next the rollover's key,
	// nil when none is under way.
	current, next ed25519.PrivateKey
	madeAt        time.Time
	switchAt      *time.Time
	// sealed are the stored forms they were opened from: a read that
	// finds them unchanged opens nothing.
	sealedCurrent, sealedNext []byte
}

// signingAt is the key every server signs with at now.
func (ks *keySet) signingAt(now time.Time) ed25519.PrivateKey {
	if ks.next != nil && ks.switchAt != nil && !now.Before(*ks.switchAt) {
		return ks.next
	}
	return ks.current
}

// rolloverAAD binds a rollover's sealed private key to its public key: a
// sealed key put in the row with another public key does not open.
func rolloverAAD(pub []byte) []byte {
	return []byte("tether/signing-key-rollover/" + model.Fingerprint(pub))
}

// Load reads the signing keys from the store and signs with the one in
// force. Watch does it every Refresh; a server with no key file (Keyring
// nil) keeps its configured key and reads none.
func (k *Keys) Load(ctx context.Context) error {
	if k.cfg.Keyring == nil {
		return nil
	}
	stored, err := k.store.SigningKeys(ctx)
	if errors.Is(err, model.ErrNotFound) {
		return nil // nothing stored: the key configured signs
	}
	if err != nil {
		return fmt.Errorf("read the signing keys: %w", err)
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	next := k.set
	if !bytes.Equal(stored.Current, next.sealedCurrent) {
		key := ed25519.PrivateKey(stored.Current)
		if !inClear(signingKeySecret, stored.Current) {
			if key, err = openKey(k.cfg.Keyring, stored.Current, secretAAD(signingKeySecret)); err != nil {
				return fmt.Errorf("server signing key in the database: %w", err)
			}
		}
		next.current, next.sealedCurrent = key, stored.Current
	}
	next.next, next.sealedNext, next.madeAt, next.switchAt = nil, nil, time.Time{}, nil
	if r := stored.Rollover; r != nil {
		key := k.set.next
		if !bytes.Equal(r.PrivateKey, k.set.sealedNext) {
			if key, err = openKey(k.cfg.Keyring, r.PrivateKey, rolloverAAD(r.PublicKey)); err != nil {
				return fmt.Errorf("next signing key in the database: %w", err)
			}
			if !bytes.Equal(key.Public().(ed25519.PublicKey), r.PublicKey) {
				return fmt.Errorf("next signing key in the database: its private key is not the one of public key %s: restore the table signing_key_rollover from a backup", model.Fingerprint(r.PublicKey))
			}
		}
		next.next, next.sealedNext, next.madeAt, next.switchAt = key, r.PrivateKey, r.MadeAt, r.SwitchAt
	}
	k.set = next
	k.signWith(next.signingAt(time.Now()))
	return nil
}

// openKey opens a sealed ed25519 private key.
func openKey(ring Sealer, sealed, aad []byte) (ed25519.PrivateKey, error) {
	key, err := ring.Open(sealed, aad)
	if err != nil {
		return nil, err
	}
	if len(key) != ed25519.PrivateKeySize {
		return nil, fmt.Errorf("%d bytes once opened: want an ed25519 private key (%d)", len(key), ed25519.PrivateKeySize)
	}
	return ed25519.PrivateKey(key), nil
}

// signWith makes the server sign with key from now on (the scheduler
// shares its signer). Called with k.mu held.
func (k *Keys) signWith(key ed25519.PrivateKey) {
	if key == nil || key.Equal(k.signer.Key()) {
		return
	}
	was := k.signer.PublicKey()
	k.signer.SetKey(key)
	k.log.Info().Str("key", bus.Fingerprint(k.signer.PublicKey())).Str("previous_key", bus.Fingerprint(was)).
		Msg("this server signs with the next signing key from now on")
}

// keySetNow returns the signing keys as this replica knows them, with the
// key it signs with: the next key (switched), the previous one (kept for
// agents that missed the rollover), or the next one announced.
func (k *Keys) keySetNow() (signing, previous, announced ed25519.PrivateKey, ks keySet) {
	k.mu.Lock()
	defer k.mu.Unlock()
	ks = k.set
	signing = k.signer.Key()
	switch {
	case ks.next == nil:
	case ks.next.Equal(signing):
		previous = ks.current
	case ks.current.Equal(signing):
		announced = ks.next
	}
	return signing, previous, announced, ks
}

// Watch reads the signing keys every Refresh, and switches at the instant
// a switch names, until ctx ends.
func (k *Keys) Watch(ctx context.Context) {
	failing := false
	t := time.NewTimer(k.cfg.Refresh)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		err := k.Load(ctx)
		switch {
		case err != nil && ctx.Err() == nil && !failing:
			failing = true
			k.log.Warn().Err(err).Msg("cannot read the signing keys; this server signs with the key it has until it can")
		case err == nil && failing:
			failing = false
			k.log.Info().Msg("signing keys read again")
		}
		wait := k.cfg.Refresh
		k.mu.Lock()
		if at := k.set.switchAt; at != nil && k.set.next != nil {
			if d := time.Until(*at); d > 0 && d < wait {
				wait = d
			}
		}
		k.mu.Unlock()
		t.Reset(wait)
	}
}

// AnswerHello sends an accepted agent `enrolled` (body, signed with the
// key in force), preceded, when the agent said it takes only the key the
// server switched from, by `enrolled` and the rollover signed by that key;
// and followed by the rollover of a next key the agent does not take yet.
// hello is the id of the hello this answers ("" for an operator's
// acceptance).
func (k *Keys) AnswerHello(ctx context.Context, a record.Agent, body bus.Enrolled) error {
	signing, previous, announced, _ := k.keySetNow()
	takes := func(key ed25519.PrivateKey) bool { return slices.Contains(a.ServerKeys, model.Fingerprint(pubOf(key))) }
	var out []*bus.Envelope
	if previous != nil && len(a.ServerKeys) > 0 && !takes(signing) && takes(previous) {
		old := body
		old.ServerKey, old.Hello = pubOf(previous), ""
		e, err := sealWith(previous, bus.KindEnrolled, a, old)
		if err != nil {
			return err
		}
		r, err := k.serverRollover(a, previous, signing)
		if err != nil {
			return err
		}
		out = append(out, e, r)
		k.log.Info().Str("env", a.Env).Str("agent", a.Name).Str("key", bus.Fingerprint(pubOf(signing))).Str("agent_takes", strings.Join(a.ServerKeys, ",")).
			Msg("agent missed the rollover of the server's signing key: it is sent it, signed by the previous key")
	}
	body.ServerKey = k.signer.PublicKey()
	e, err := k.signer.Seal(bus.KindEnrolled, a.Env, a.Name, body)
	if err != nil {
		return err
	}
	out = append(out, e)
	if announced != nil && !takes(announced) {
		r, err := k.serverRollover(a, signing, announced)
		if err != nil {
			return err
		}
		out = append(out, r)
	}
	if len(a.ServerKeys) > 0 && !takes(signing) && (previous == nil || !takes(previous)) {
		k.log.Warn().Str("env", a.Env).Str("agent", a.Name).Str("agent_takes", strings.Join(a.ServerKeys, ",")).Str("key", bus.Fingerprint(pubOf(signing))).
			Msg("agent takes none of this server's signing keys (it missed a rollover whose old key was retired, or it expects another server): it refuses what it is sent; enroll it again")
	}
	for _, e := range out {
		if err := k.bus.Send(ctx, e, bus.SendOptions{}); err != nil {
			return err
		}
	}
	return nil
}

func pubOf(k ed25519.PrivateKey) ed25519.PublicKey { return k.Public().(ed25519.PublicKey) }

// sealWith seals a command to a with key (not the server's signer: a key
// it does not sign with any more).
func sealWith(key ed25519.PrivateKey, kind bus.Kind, a record.Agent, body any) (*bus.Envelope, error) {
	return bus.NewSigner(key, uint64(time.Now().UnixNano())).Seal(kind, a.Env, a.Name, body)
}

// serverRollover is the server.rollover from the key from to the key to,
// for agent a, signed by from.
func (k *Keys) serverRollover(a record.Agent, from, to ed25519.PrivateKey) (*bus.Envelope, error) {
	body := bus.ServerRollover{Key: pubOf(from), NextKey: pubOf(to), Proof: bus.ProveServerKey(to, a.Env, a.Name, pubOf(from))}
	if from.Equal(k.signer.Key()) {
		return k.signer.Seal(bus.KindServerRollover, a.Env, a.Name, body)
	}
	return sealWith(from, bus.KindServerRollover, a, body)
}

// RolloverAck records the server keys an agent took with a rollover.
func (k *Keys) RolloverAck(ctx context.Context, a record.Agent, e *bus.Envelope, body bus.ServerRolloverAck) error {
	if err := CheckServerKeys(body.ServerKeys); err != nil {
		return fmt.Errorf("%w: %s: %w", bus.ErrReject, e, err)
	}
	if _, err := k.touch(ctx, a.Env, a.Name, e.Seq, func(a *record.Agent) bool {
		a.ServerKeys, a.ServerKeysSeq, a.Connected = body.ServerKeys, int64(e.Seq), true
		return true
	}); err != nil {
		return err
	}
	what := "took the server's next signing key"
	if body.Rollover == "" {
		what = "takes the server's new signing key alone"
	}
	k.log.Info().Str("env", a.Env).Str("agent", a.Name).Str("server_keys", strings.Join(body.ServerKeys, ",")).Msg("agent " + what)
	k.feed.Publish(event.Event{Kind: event.AgentChanged, Env: a.Env, Agent: a.Name, Error: what})
	return nil
}

// CheckServerKeys refuses a list of server keys no agent could name.
func CheckServerKeys(keys []string) error {
	if len(keys) > bus.MaxServerKeys {
		return fmt.Errorf("%d server keys: an agent takes at most %d", len(keys), bus.MaxServerKeys)
	}
	for _, k := range keys {
		if !strings.HasPrefix(k, "SHA256:") || len(k) > 64 {
			return fmt.Errorf("server key %q: want a fingerprint (SHA256:…)", model.Clip(k, 70))
		}
	}
	return nil
}
