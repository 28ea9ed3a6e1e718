package server

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
//  1. NewSigningKey makes the next key, keeps it sealed in the store next
//     to the current one, and announces it to every accepted agent:
//     server.rollover, signed by the current key, carries the next key and
//     the next key's proof made for that agent of that environment. Agents
//     acknowledge (server.rollover.ack); an agent that was away gets it in
//     the answer to its next hello. The current key signs everything.
//  2. SwitchSigningKey records when every server signs with the next key:
//     SigningKeyRefresh × 2 from now, so that every replica, reading the
//     keys from the store every SigningKeyRefresh, switches at that same
//     instant, not one before another. Then every agent is sent a first
//     command signed by the next key (the rollover first, signed by the
//     old key, to those that had not taken it), which makes the next key
//     the only one it takes. The old key is kept: an agent that pinned it
//     and missed the rollover is sent the rollover, signed by it, before
//     anything else.
//  3. RetireSigningKey forgets the old key: the next one is the current
//     key from then on.

// ServerRolloverExpiry bounds how long the messages of a rollover step
// wait in the inbox of an agent that is not connected: it gets what it
// lacks in the answer to its next hello.
const ServerRolloverExpiry = time.Hour

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
func (k *keySet) signingAt(now time.Time) ed25519.PrivateKey {
	if k.next != nil && k.switchAt != nil && !now.Before(*k.switchAt) {
		return k.next
	}
	return k.current
}

// rolloverAAD binds a rollover's sealed private key to its public key: a
// sealed key put in the row with another public key does not open.
func rolloverAAD(pub []byte) []byte {
	return []byte("tether/signing-key-rollover/" + model.Fingerprint(pub))
}

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

// LoadSigningKeys reads the signing keys from the store and signs with the
// one in force. Run does it every SigningKeyRefresh; a server with no key
// file (Keyring nil) keeps its configured key and reads none.
func (s *Server) LoadSigningKeys(ctx context.Context) error {
	if s.cfg.Keyring == nil {
		return nil
	}
	stored, err := s.store.SigningKeys(ctx)
	if errors.Is(err, model.ErrNotFound) {
		return nil // nothing stored: the key configured signs
	}
	if err != nil {
		return fmt.Errorf("read the signing keys: %w", err)
	}
	s.keysMu.Lock()
	defer s.keysMu.Unlock()
	next := s.keys
	if !bytes.Equal(stored.Current, next.sealedCurrent) {
		key := ed25519.PrivateKey(stored.Current)
		if !inClear(signingKeySecret, stored.Current) {
			if key, err = openKey(s.cfg.Keyring, stored.Current, secretAAD(signingKeySecret)); err != nil {
				return fmt.Errorf("server signing key in the database: %w", err)
			}
		}
		next.current, next.sealedCurrent = key, stored.Current
	}
	next.next, next.sealedNext, next.madeAt, next.switchAt = nil, nil, time.Time{}, nil
	if r := stored.Rollover; r != nil {
		key := s.keys.next
		if !bytes.Equal(r.PrivateKey, s.keys.sealedNext) {
			if key, err = openKey(s.cfg.Keyring, r.PrivateKey, rolloverAAD(r.PublicKey)); err != nil {
				return fmt.Errorf("next signing key in the database: %w", err)
			}
			if !bytes.Equal(key.Public().(ed25519.PublicKey), r.PublicKey) {
				return fmt.Errorf("next signing key in the database: its private key is not the one of public key %s: restore the table signing_key_rollover from a backup", model.Fingerprint(r.PublicKey))
			}
		}
		next.next, next.sealedNext, next.madeAt, next.switchAt = key, r.PrivateKey, r.MadeAt, r.SwitchAt
	}
	s.keys = next
	s.signWith(next.signingAt(time.Now()))
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
// shares its signer). Called with keysMu held.
func (s *Server) signWith(key ed25519.PrivateKey) {
	if key == nil || key.Equal(s.signer.Key()) {
		return
	}
	was := s.signer.PublicKey()
	s.signer.SetKey(key)
	s.log.Info().Str("key", bus.Fingerprint(s.signer.PublicKey())).Str("previous_key", bus.Fingerprint(was)).
		Msg("this server signs with the next signing key from now on")
}

// keySetNow returns the signing keys as this replica knows them, with the
// key it signs with: the next key (switched), the previous one (kept for
// agents that missed the rollover), or the next one announced.
func (s *Server) keySetNow() (signing, previous, announced ed25519.PrivateKey, ks keySet) {
	s.keysMu.Lock()
	defer s.keysMu.Unlock()
	ks = s.keys
	signing = s.signer.Key()
	switch {
	case ks.next == nil:
	case ks.next.Equal(signing):
		previous = ks.current
	case ks.current.Equal(signing):
		announced = ks.next
	}
	return signing, previous, announced, ks
}

// watchSigningKeys reads the signing keys every SigningKeyRefresh, and
// switches at the instant a switch names, until ctx ends.
func (s *Server) watchSigningKeys(ctx context.Context) {
	failing := false
	t := time.NewTimer(s.cfg.SigningKeyRefresh)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		err := s.LoadSigningKeys(ctx)
		switch {
		case err != nil && ctx.Err() == nil && !failing:
			failing = true
			s.log.Warn().Err(err).Msg("cannot read the signing keys; this server signs with the key it has until it can")
		case err == nil && failing:
			failing = false
			s.log.Info().Msg("signing keys read again")
		}
		wait := s.cfg.SigningKeyRefresh
		s.keysMu.Lock()
		if at := s.keys.switchAt; at != nil && s.keys.next != nil {
			if d := time.Until(*at); d > 0 && d < wait {
				wait = d
			}
		}
		s.keysMu.Unlock()
		t.Reset(wait)
	}
}

// answerHello sends an accepted agent `enrolled` (body, signed with the
// key in force), preceded, when the agent said it takes only the key the
// server switched from, by `enrolled` and the rollover signed by that key;
// and followed by the rollover of a next key the agent does not take yet.
// hello is the id of the hello this answers ("" for an operator's
// acceptance).
func (s *Server) answerHello(ctx context.Context, a record.Agent, body bus.Enrolled) error {
	signing, previous, announced, _ := s.keySetNow()
	takes := func(k ed25519.PrivateKey) bool { return slices.Contains(a.ServerKeys, model.Fingerprint(pubOf(k))) }
	var out []*bus.Envelope
	if previous != nil && len(a.ServerKeys) > 0 && !takes(signing) && takes(previous) {
		old := body
		old.ServerKey, old.Hello = pubOf(previous), ""
		e, err := sealWith(previous, bus.KindEnrolled, a, old)
		if err != nil {
			return err
		}
		r, err := s.serverRollover(a, previous, signing)
		if err != nil {
			return err
		}
		out = append(out, e, r)
		s.log.Info().Str("env", a.Env).Str("agent", a.Name).Str("key", bus.Fingerprint(pubOf(signing))).Str("agent_takes", strings.Join(a.ServerKeys, ",")).
			Msg("agent missed the rollover of the server's signing key: it is sent it, signed by the previous key")
	}
	body.ServerKey = s.signer.PublicKey()
	e, err := s.signer.Seal(bus.KindEnrolled, a.Env, a.Name, body)
	if err != nil {
		return err
	}
	out = append(out, e)
	if announced != nil && !takes(announced) {
		r, err := s.serverRollover(a, signing, announced)
		if err != nil {
			return err
		}
		out = append(out, r)
	}
	if len(a.ServerKeys) > 0 && !takes(signing) && (previous == nil || !takes(previous)) {
		s.log.Warn().Str("env", a.Env).Str("agent", a.Name).Str("agent_takes", strings.Join(a.ServerKeys, ",")).Str("key", bus.Fingerprint(pubOf(signing))).
			Msg("agent takes none of this server's signing keys (it missed a rollover whose old key was retired, or it expects another server): it refuses what it is sent; enroll it again")
	}
	for _, e := range out {
		if err := s.bus.Send(ctx, e, bus.SendOptions{}); err != nil {
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
func (s *Server) serverRollover(a record.Agent, from, to ed25519.PrivateKey) (*bus.Envelope, error) {
	body := bus.ServerRollover{Key: pubOf(from), NextKey: pubOf(to), Proof: bus.ProveServerKey(to, a.Env, a.Name, pubOf(from))}
	if from.Equal(s.signer.Key()) {
		return s.signer.Seal(bus.KindServerRollover, a.Env, a.Name, body)
	}
	return sealWith(from, bus.KindServerRollover, a, body)
}

// rolloverAck records the server keys an agent took with a rollover.
func (s *Server) rolloverAck(ctx context.Context, a record.Agent, e *bus.Envelope, body bus.ServerRolloverAck) error {
	if err := checkServerKeys(body.ServerKeys); err != nil {
		return fmt.Errorf("%w: %s: %w", bus.ErrReject, e, err)
	}
	if _, err := s.touch(ctx, a.Env, a.Name, e.Seq, func(a *record.Agent) bool {
		a.ServerKeys, a.ServerKeysSeq, a.Connected = body.ServerKeys, int64(e.Seq), true
		return true
	}); err != nil {
		return err
	}
	what := "took the server's next signing key"
	if body.Rollover == "" {
		what = "takes the server's new signing key alone"
	}
	s.log.Info().Str("env", a.Env).Str("agent", a.Name).Str("server_keys", strings.Join(body.ServerKeys, ",")).Msg("agent " + what)
	s.feed.Publish(Event{Kind: EventAgentChanged, Env: a.Env, Agent: a.Name, Error: what})
	return nil
}

// checkServerKeys refuses a list of server keys no agent could name.
func checkServerKeys(keys []string) error {
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

// SigningKeyStatus says where a rollover of the signing key stands, and
// which accepted agents are not ready for its next step.
func (s *Server) SigningKeyStatus(ctx context.Context) (record.SigningKeyStatus, error) {
	if err := s.LoadSigningKeys(ctx); err != nil {
		return record.SigningKeyStatus{}, err
	}
	return s.status(ctx)
}

// status is SigningKeyStatus of the keys as last read.
func (s *Server) status(ctx context.Context) (record.SigningKeyStatus, error) {
	signing, previous, announced, ks := s.keySetNow()
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
	err := s.eachAccepted(ctx, func(a record.Agent) error {
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
func (s *Server) eachAccepted(ctx context.Context, fn func(record.Agent) error) error {
	envs, err := s.store.ListEnvs(ctx)
	if err != nil {
		return err
	}
	for _, env := range envs {
		agents, err := s.store.ListAgents(ctx, env.Name)
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

// NewSigningKey makes the server's next signing key, keeps it sealed in
// the store, and announces it to every accepted agent.
func (s *Server) NewSigningKey(ctx context.Context) (record.SigningKeyStatus, error) {
	ring := s.cfg.Keyring
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
	signing := s.signer.PublicKey()
	if _, err := s.store.UpdateSigningKeys(ctx, func(ks *record.SigningKeys) error {
		if r := ks.Rollover; r != nil {
			what := "announced"
			if r.SwitchAt != nil {
				what = "switched to"
			}
			return stepError("a rollover of the signing key is under way: next key %s, %s: finish it first (tether server signing-key status)",
				model.Fingerprint(r.PublicKey), what)
		}
		if cur, err := s.storedKey(ks.Current); err != nil {
			return err
		} else if !bytes.Equal(pubOf(cur), signing) {
			return stepError("this server signs with %s, the database holds %s: restart it", model.Fingerprint(signing), model.Fingerprint(pubOf(cur)))
		}
		ks.Rollover = &record.SigningKeyRollover{PublicKey: pub, PrivateKey: sealed, MadeAt: time.Now().UTC()}
		return nil
	}); err != nil {
		return record.SigningKeyStatus{}, err
	}
	if err := s.LoadSigningKeys(ctx); err != nil {
		return record.SigningKeyStatus{}, err
	}
	s.log.Info().Str("next_key", model.Fingerprint(pub)).Str("key", model.Fingerprint(signing)).Msg("next signing key made; announcing it to every accepted agent")
	// The announcement goes on if the client that asked leaves: the key
	// is made either way.
	sent, err := s.sendEach(context.WithoutCancel(ctx), func(a record.Agent) ([]*bus.Envelope, error) {
		r, err := s.serverRollover(a, s.signer.Key(), key)
		return []*bus.Envelope{r}, err
	})
	st, serr := s.status(ctx)
	st.Sent = sent
	st.Note = "agents take the next key as the announcement reaches them (those away, at their next hello); once `tether server signing-key status` shows them all ready, run `tether server signing-key switch`"
	if err != nil {
		st.Note = fmt.Sprintf("the next key is made, but not every agent was sent it (%v): each gets it at its next hello; %s", err, st.Note)
	}
	return st, serr
}

// sendEach sends every accepted agent the messages msgs makes for it
// (expiring after ServerRolloverExpiry), and counts the agents reached;
// an agent whose inbox does not exist is not, and gets what it lacks at
// its next hello.
func (s *Server) sendEach(ctx context.Context, msgs func(record.Agent) ([]*bus.Envelope, error)) (int, error) {
	sent := 0
	var failed error
	err := s.eachAccepted(ctx, func(a record.Agent) error {
		es, err := msgs(a)
		if err != nil {
			return err
		}
		for _, e := range es {
			if err := s.bus.Send(ctx, e, bus.SendOptions{Expiration: ServerRolloverExpiry}); errors.Is(err, bus.ErrNoInbox) {
				return nil
			} else if err != nil {
				failed = err
				s.log.Info().Err(err).Str("env", a.Env).Str("agent", a.Name).Msg("signing-key rollover not sent to the agent now; it is at its next hello")
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
func (s *Server) storedKey(sealed []byte) (ed25519.PrivateKey, error) {
	if inClear(signingKeySecret, sealed) {
		return ed25519.PrivateKey(sealed), nil
	}
	key, err := openKey(s.cfg.Keyring, sealed, secretAAD(signingKeySecret))
	if err != nil {
		return nil, fmt.Errorf("server signing key in the database: %w", err)
	}
	return key, nil
}

// SwitchSigningKey makes every server sign with the next key, from
// SigningKeyRefresh × 2 from now, once every accepted agent took it (or
// force). It answers after the switch, with every agent sent a first
// command signed by the next key.
func (s *Server) SwitchSigningKey(ctx context.Context, force bool) (record.SigningKeyStatus, error) {
	if s.cfg.Keyring == nil {
		return record.SigningKeyStatus{}, errNoKeyFile
	}
	st, err := s.SigningKeyStatus(ctx)
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
	at := time.Now().Add(2 * s.cfg.SigningKeyRefresh).UTC()
	if _, err := s.store.UpdateSigningKeys(ctx, func(ks *record.SigningKeys) error {
		if ks.Rollover == nil || !bytes.Equal(ks.Rollover.PublicKey, next) || ks.Rollover.SwitchAt != nil {
			return stepError("the rollover changed meanwhile (through another server?): see tether server signing-key status")
		}
		ks.Rollover.SwitchAt = &at
		return nil
	}); err != nil {
		return st, err
	}
	s.log.Info().Str("next_key", model.Fingerprint(next)).Time("switch_at", at).Bool("forced", force).Msg("every server signs with the next signing key from the time set")
	// The switch stands once recorded: it goes on if the client leaves.
	ctx = context.WithoutCancel(ctx)
	if err := s.LoadSigningKeys(ctx); err != nil {
		return st, err
	}
	time.Sleep(time.Until(at))
	s.keysMu.Lock()
	s.signWith(s.keys.signingAt(time.Now()))
	s.keysMu.Unlock()
	sent, err := s.sendEach(ctx, s.firstSigned)
	st, serr := s.status(ctx)
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
func (s *Server) firstSigned(a record.Agent) ([]*bus.Envelope, error) {
	signing, previous, _, _ := s.keySetNow()
	if previous == nil || len(a.ServerKeys) == 0 {
		return nil, nil
	}
	var out []*bus.Envelope
	if !slices.Contains(a.ServerKeys, model.Fingerprint(pubOf(signing))) {
		r, err := s.serverRollover(a, previous, signing)
		if err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	e, err := s.signer.Seal(bus.KindEnrolled, a.Env, a.Name, bus.Enrolled{ServerKey: pubOf(signing), LastSeq: uint64(max(a.LastSeq, 0)), EventsAlive: true})
	if err != nil {
		return nil, err
	}
	return append(out, e), nil
}

// RetireSigningKey forgets the key the servers signed with before the
// switch: the next key is the current one from now on. Agents that do not
// take it yet would be cut off: they must have (or force).
func (s *Server) RetireSigningKey(ctx context.Context, force bool) (record.SigningKeyStatus, error) {
	ring := s.cfg.Keyring
	if ring == nil {
		return record.SigningKeyStatus{}, errNoKeyFile
	}
	st, err := s.SigningKeyStatus(ctx)
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
	key, _, _, _ := s.keySetNow()
	sealed, err := ring.Seal(key, secretAAD(signingKeySecret))
	if err != nil {
		return st, err
	}
	old := st.Previous.PublicKey
	if _, err := s.store.UpdateSigningKeys(ctx, func(ks *record.SigningKeys) error {
		r := ks.Rollover
		if r == nil || !bytes.Equal(r.PublicKey, pubOf(key)) || r.SwitchAt == nil {
			return stepError("the rollover changed meanwhile (through another server?): see tether server signing-key status")
		}
		ks.Current, ks.Rollover = sealed, nil
		return nil
	}); err != nil {
		return st, err
	}
	if err := s.LoadSigningKeys(ctx); err != nil {
		return st, err
	}
	s.log.Info().Str("retired_key", model.Fingerprint(old)).Str("key", model.Fingerprint(pubOf(key))).Msg("old signing key retired")
	st, err = s.status(ctx)
	st.Note = fmt.Sprintf("key %s is retired and signs nothing. Enrollment tokens made before the switch carry its fingerprint and enroll no agent now: make new ones (tether agent token create)",
		model.Fingerprint(old))
	return st, err
}
