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
	"github.com/tetherhq/tether/server/record"
)

// A rollover of the server's signing key (docs/security.md, "The server's
// signing key"), in three steps an operator takes:
//
//  1. NewKey makes the next key, keeps it sealed in the store next to the
//     current one, and announces it to every accepted agent:
//     server.rollover, signed by the current key, carries the next key and
//     the next key's proof made for that agent of that environment. Agents
//     acknowledge (server.rollover.ack); an agent that was away gets it in
//     the answer to its next hello. The current key signs everything.
//  2. Switch records when every server signs with the next key: Refresh ×
//     2 from now, so that every replica, reading the keys from the store
//     every Refresh, switches at that same instant, not one before
//     another. Then every agent is sent a first command signed by the next
//     key (the rollover first, signed by the old key, to those that had
//     not taken it), which makes the next key the only one it takes. The
//     old key is kept: an agent that pinned it and missed the rollover is
//     sent the rollover, signed by it, before anything else.
//  3. Retire forgets the old key: the next one is the current key from
//     then on.

// RolloverExpiry bounds how long the messages of a rollover step wait in
// the inbox of an agent that is not connected: it gets what it lacks in
// the answer to its next hello.
const RolloverExpiry = time.Hour

// errNoKeyFile: the server keeps its signing key nowhere it could roll it
// over from (the embedded mode).
var errNoKeyFile = &record.SigningKeyStepError{Message: "this server has no key file (the embedded mode): its signing key is made anew on every start, there is nothing to roll over"}

// stepError refuses a rollover step.
func stepError(format string, args ...any) error {
	return &record.SigningKeyStepError{Message: fmt.Sprintf(format, args...)}
}

// notReady refuses a rollover step agents are not ready for.
func notReady(format string, args ...any) error {
	return &record.SigningKeyStepError{Message: fmt.Sprintf(format, args...), NotReady: true}
}

// Status says where a rollover of the signing key stands, and
// which accepted agents are not ready for its next step.
func (k *Keys) Status(ctx context.Context) (record.SigningKeyStatus, error) {
	if err := k.Load(ctx); err != nil {
		return record.SigningKeyStatus{}, err
	}
	return k.status(ctx)
}

// status is Status of the keys as last read.
func (k *Keys) status(ctx context.Context) (record.SigningKeyStatus, error) {
	signing, previous, announced, ks := k.keySetNow()
	st := record.SigningKeyStatus{Phase: record.SigningKeySteady, Signing: keyView(signing)}
	want := signing
	switch {
	case previous != nil:
		st.Phase, st.Previous = record.SigningKeySwitched, new(keyView(previous))
	case announced != nil && ks.switchAt != nil:
		st.Phase, st.Next, want = record.SigningKeySwitching, new(keyView(announced)), announced
	case announced != nil:
		st.Phase, st.Next, want = record.SigningKeyAnnounced, new(keyView(announced)), announced
	}
	if ks.next != nil {
		st.MadeAt, st.SwitchAt = new(ks.madeAt), ks.switchAt
	}
	fp := model.Fingerprint(pubOf(want))
	err := k.eachAccepted(ctx, func(a record.Agent) error {
		st.Agents++
		if slices.Contains(a.ServerKeys, fp) {
			st.Ready++
			return nil
		}
		st.WaitingCount++
		if len(st.Waiting) < record.MaxListedWaiting {
			st.Waiting = append(st.Waiting, record.WaitingAgent{Env: a.Env, Agent: a.Name, Connected: a.Connected, ServerKeys: a.ServerKeys})
		}
		return nil
	})
	return st, err
}

func keyView(k ed25519.PrivateKey) record.SigningKeyView {
	return record.SigningKeyView{Fingerprint: model.Fingerprint(pubOf(k)), PublicKey: pubOf(k)}
}

// eachAccepted calls fn with every accepted agent of every environment.
func (k *Keys) eachAccepted(ctx context.Context, fn func(record.Agent) error) error {
	envs, err := k.store.ListEnvs(ctx)
	if err != nil {
		return err
	}
	for _, env := range envs {
		agents, err := k.store.ListAgents(ctx, env.Name)
		if err != nil {
			return err
		}
		for _, a := range agents {
			if a.State != record.AgentAccepted {
				continue
			}
			if err := fn(a); err != nil {
				return err
			}
		}
	}
	return nil
}

// waitingNames names the first few waiting agents.
func waitingNames(st record.SigningKeyStatus) string {
	var names []string
	for _, w := range st.Waiting[:min(len(st.Waiting), 5)] {
		names = append(names, w.Env+"/"+w.Agent)
	}
	if st.WaitingCount > len(names) {
		names = append(names, fmt.Sprintf("and %d more", st.WaitingCount-len(names)))
	}
	return strings.Join(names, ", ")
}

// NewKey makes the server's next signing key, keeps it sealed in the
// store, and announces it to every accepted agent.
func (k *Keys) NewKey(ctx context.Context) (record.SigningKeyStatus, error) {
	ring := k.cfg.Keyring
	if ring == nil {
		return record.SigningKeyStatus{}, errNoKeyFile
	}
	pub, key, err := bus.GenerateKey()
	if err != nil {
		return record.SigningKeyStatus{}, err
	}
	sealed, err := ring.Seal(key, rolloverAAD(pub))
	if err != nil {
		return record.SigningKeyStatus{}, err
	}
	signing := k.signer.PublicKey()
	if _, err := k.store.UpdateSigningKeys(ctx, func(ks *record.SigningKeys) error {
		if r := ks.Rollover; r != nil {
			what := "announced"
			if r.SwitchAt != nil {
				what = "switched to"
			}
			return stepError("a rollover of the signing key is under way: next key %s, %s: finish it first (tether server signing-key status)",
				model.Fingerprint(r.PublicKey), what)
		}
		if cur, err := k.storedKey(ks.Current); err != nil {
			return err
		} else if !bytes.Equal(pubOf(cur), signing) {
			return stepError("this server signs with %s, the database holds %s: restart it", model.Fingerprint(signing), model.Fingerprint(pubOf(cur)))
		}
		ks.Rollover = &record.SigningKeyRollover{PublicKey: pub, PrivateKey: sealed, MadeAt: time.Now().UTC()}
		return nil
	}); err != nil {
		return record.SigningKeyStatus{}, err
	}
	if err := k.Load(ctx); err != nil {
		return record.SigningKeyStatus{}, err
	}
	k.log.Info().Str("next_key", model.Fingerprint(pub)).Str("key", model.Fingerprint(signing)).Msg("next signing key made; announcing it to every accepted agent")
	// The announcement goes on if the client that asked leaves: the key
	// is made either way.
	sent, err := k.sendEach(context.WithoutCancel(ctx), func(a record.Agent) ([]*bus.Envelope, error) {
		r, err := k.serverRollover(a, k.signer.Key(), key)
		return []*bus.Envelope{r}, err
	})
	st, serr := k.status(ctx)
	st.Sent = sent
	st.Note = "agents take the next key as the announcement reaches them (those away, at their next hello); once `tether server signing-key status` shows them all ready, run `tether server signing-key switch`"
	if err != nil {
		st.Note = fmt.Sprintf("the next key is made, but not every agent was sent it (%v): each gets it at its next hello; %s", err, st.Note)
	}
	return st, serr
}

// sendEach sends every accepted agent the messages msgs makes for it
// (expiring after RolloverExpiry), and counts the agents reached; an agent
// whose inbox does not exist is not, and gets what it lacks at its next
// hello.
func (k *Keys) sendEach(ctx context.Context, msgs func(record.Agent) ([]*bus.Envelope, error)) (int, error) {
	sent := 0
	var failed error
	err := k.eachAccepted(ctx, func(a record.Agent) error {
		es, err := msgs(a)
		if err != nil {
			return err
		}
		for _, e := range es {
			if err := k.bus.Send(ctx, e, bus.SendOptions{Expiration: RolloverExpiry}); errors.Is(err, bus.ErrNoInbox) {
				return nil
			} else if err != nil {
				failed = err
				k.log.Info().Err(err).Str("env", a.Env).Str("agent", a.Name).Msg("signing-key rollover not sent to the agent now; it is at its next hello")
				return nil
			}
		}
		if len(es) > 0 {
			sent++
		}
		return nil
	})
	return sent, cmpErr(err, failed)
}

func cmpErr(errs ...error) error {
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// storedKey opens the current key as stored.
func (k *Keys) storedKey(sealed []byte) (ed25519.PrivateKey, error) {
	if inClear(signingKeySecret, sealed) {
		return ed25519.PrivateKey(sealed), nil
	}
	key, err := openKey(k.cfg.Keyring, sealed, secretAAD(signingKeySecret))
	if err != nil {
		return nil, fmt.Errorf("server signing key in the database: %w", err)
	}
	return key, nil
}

// Switch makes every server sign with the next key, from Refresh × 2
// from now, once every accepted agent took it (or force). It answers after the switch, with every agent sent a first
// command signed by the next key.
func (k *Keys) Switch(ctx context.Context, force bool) (record.SigningKeyStatus, error) {
	if k.cfg.Keyring == nil {
		return record.SigningKeyStatus{}, errNoKeyFile
	}
	st, err := k.Status(ctx)
	if err != nil {
		return st, err
	}
	switch st.Phase {
	case record.SigningKeySteady:
		return st, stepError("no next signing key to switch to: make one first (tether server signing-key new)")
	case record.SigningKeySwitching, record.SigningKeySwitched:
		return st, stepError("the servers switched to the next key already (%s): retire the old one once every agent takes the new one (tether server signing-key retire)", st.Signing.Fingerprint)
	}
	if st.WaitingCount > 0 && !force {
		return st, notReady("%d of %d accepted agents have not taken the next key yet (%s): wait until they have (tether server signing-key status), "+
			"or switch anyway with --force: they are sent the rollover signed by the old key, which is kept until it is retired",
			st.WaitingCount, st.Agents, waitingNames(st))
	}
	next := st.Next.PublicKey
	at := time.Now().Add(2 * k.cfg.Refresh).UTC()
	if _, err := k.store.UpdateSigningKeys(ctx, func(ks *record.SigningKeys) error {
		if ks.Rollover == nil || !bytes.Equal(ks.Rollover.PublicKey, next) || ks.Rollover.SwitchAt != nil {
			return stepError("the rollover changed meanwhile (through another server?): see tether server signing-key status")
		}
		ks.Rollover.SwitchAt = &at
		return nil
	}); err != nil {
		return st, err
	}
	k.log.Info().Str("next_key", model.Fingerprint(next)).Time("switch_at", at).Bool("forced", force).Msg("every server signs with the next signing key from the time set")
	// The switch stands once recorded: it goes on if the client leaves.
	ctx = context.WithoutCancel(ctx)
	if err := k.Load(ctx); err != nil {
		return st, err
	}
	time.Sleep(time.Until(at))
	k.mu.Lock()
	k.signWith(k.set.signingAt(time.Now()))
	k.mu.Unlock()
	sent, err := k.sendEach(ctx, k.firstSigned)
	st, serr := k.status(ctx)
	st.Sent = sent
	st.Note = "every server signs with the next key; agents take it alone at the first command signed by it (sent now to those connected; those away, at their next hello). " +
		"Once `tether server signing-key status` shows every agent ready, run `tether server signing-key retire`"
	if err != nil {
		st.Note = fmt.Sprintf("switched, but not every agent was sent a first command signed by the next key (%v): each takes it at its next command or hello. %s", err, st.Note)
	}
	return st, serr
}

// firstSigned is what the switch sends an agent: `enrolled`, signed by the
// key switched to, which makes the agent take it alone; preceded by the
// rollover signed by the old key when the agent did not take it. An agent
// that never said which keys it takes (older than rollovers) is sent
// nothing: it refuses the new key whatever it is sent.
func (k *Keys) firstSigned(a record.Agent) ([]*bus.Envelope, error) {
	signing, previous, _, _ := k.keySetNow()
	if previous == nil || len(a.ServerKeys) == 0 {
		return nil, nil
	}
	var out []*bus.Envelope
	if !slices.Contains(a.ServerKeys, model.Fingerprint(pubOf(signing))) {
		r, err := k.serverRollover(a, previous, signing)
		if err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	e, err := k.signer.Seal(bus.KindEnrolled, a.Env, a.Name, bus.Enrolled{ServerKey: pubOf(signing), LastSeq: uint64(max(a.LastSeq, 0)), EventsAlive: true})
	if err != nil {
		return nil, err
	}
	return append(out, e), nil
}

// Retire forgets the key the servers signed with before the switch: the
// next key is the current one from now on. Agents that do not take it yet
// would be cut off: they must have (or force).
func (k *Keys) Retire(ctx context.Context, force bool) (record.SigningKeyStatus, error) {
	ring := k.cfg.Keyring
	if ring == nil {
		return record.SigningKeyStatus{}, errNoKeyFile
	}
	st, err := k.Status(ctx)
	if err != nil {
		return st, err
	}
	switch st.Phase {
	case record.SigningKeySteady:
		return st, stepError("no old signing key to retire: the servers hold one key (%s)", st.Signing.Fingerprint)
	case record.SigningKeyAnnounced, record.SigningKeySwitching:
		return st, stepError("the servers do not sign with the next key yet: switch first (tether server signing-key switch), then retire the old key")
	}
	if st.WaitingCount > 0 && !force {
		return st, notReady("%d of %d accepted agents do not take the new key yet (%s): once the old key is retired they refuse everything the server sends "+
			"and must be enrolled again; they catch up at their next hello, so start them first, or retire anyway with --force",
			st.WaitingCount, st.Agents, waitingNames(st))
	}
	key, _, _, _ := k.keySetNow()
	sealed, err := ring.Seal(key, secretAAD(signingKeySecret))
	if err != nil {
		return st, err
	}
	old := st.Previous.PublicKey
	if _, err := k.store.UpdateSigningKeys(ctx, func(ks *record.SigningKeys) error {
		r := ks.Rollover
		if r == nil || !bytes.Equal(r.PublicKey, pubOf(key)) || r.SwitchAt == nil {
			return stepError("the rollover changed meanwhile (through another server?): see tether server signing-key status")
		}
		ks.Current, ks.Rollover = sealed, nil
		return nil
	}); err != nil {
		return st, err
	}
	if err := k.Load(ctx); err != nil {
		return st, err
	}
	k.log.Info().Str("retired_key", model.Fingerprint(old)).Str("key", model.Fingerprint(pubOf(key))).Msg("old signing key retired")
	st, err = k.status(ctx)
	st.Note = fmt.Sprintf("key %s is retired and signs nothing. Enrollment tokens made before the switch carry its fingerprint and enroll no agent now: make new ones (tether agent token create)",
		model.Fingerprint(old))
	return st, err
}
