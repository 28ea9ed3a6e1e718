package agent

import (
	"cmp"
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"
	"time"

	"github.com/tetherhq/tether/agent/journal"
	"github.com/tetherhq/tether/bus"
	"github.com/tetherhq/tether/model"
)

// handle processes one command from the inbox, in order. A command's
// effect and its id are journaled in one transaction before it is
// acknowledged: a redelivery finds the id and changes nothing. Deploys are
// queued for the worker, so the inbox keeps flowing (dependency.status must
// reach a deploy that waits for it).
func (a *Agent) handle(ctx context.Context, d bus.Delivery) error {
	e := d.Envelope
	if e.Env != a.cfg.Env || e.Agent != a.cfg.Name {
		// The server sends a command to its agent's inbox only: one
		// addressed to another is a replay by someone who can write
		// into this inbox.
		err := fmt.Errorf("%w: %s is addressed to %s/%s", errReplay, e, e.Env, e.Agent)
		a.refuse(ctx, e, err)
		return fmt.Errorf("%w: %w", bus.ErrReject, err)
	}
	if e.Kind == bus.KindRejected {
		return a.onRejected(e)
	}
	byNext, err := a.verify(e)
	switch {
	case errors.Is(err, errLeftBehind):
		a.log.Info().Str("message", e.String()).
			Msg("dropping a message signed by the server key this agent left for the next one: the server's answer to a hello sent before the switch reached this agent")
		return nil
	case err != nil:
		a.refuse(ctx, e, err)
		return fmt.Errorf("%w: %w", bus.ErrReject, err)
	case byNext:
		// Only the server, once it switched, signs with its next key.
		if err := a.switchServerKey(ctx); err != nil {
			return err
		}
	}
	if a.journal.Seen(e.ID) {
		return nil
	}
	answer := a.answersHello(e)
	if err := a.fresh(e); err != nil && !answer {
		// Old news: a command queued while the agent was away long, or a
		// replay. The server's answer to the next hello brings whatever
		// it still means.
		a.log.Info().Err(err).Str("message", e.String()).Msg("dropping a stale command")
		return a.journal.Begin().Seen(e.ID).Commit()
	}
	err = a.command(ctx, e, answer)
	if errors.Is(err, bus.ErrReject) {
		// Final: remember it so a redelivery is not looked at again.
		if jerr := a.journal.Begin().Seen(e.ID).Commit(); jerr != nil {
			return jerr
		}
	}
	return err
}

// onRejected slows the hello loop down. The message cannot be verified (no
// server key is trusted yet, or it is not signed with it), so it is not
// trusted for anything else.
func (a *Agent) onRejected(e *bus.Envelope) error {
	var body bus.Rejected
	_ = e.DecodeBody(&body)
	if a.isEnrolled() {
		if err := bus.Verify(e, a.journal.ServerKey()); err != nil && (a.journal.NextServerKey() == nil || bus.Verify(e, a.journal.NextServerKey()) != nil) {
			return fmt.Errorf("%w: %w", bus.ErrReject, err)
		}
	}
	if body.Protocol != "" {
		a.log.Error().Str("reason", body.Reason).Str("agent_protocol", bus.Protocol).Str("server_protocol", body.Protocol).
			Str("agent_version", a.version()).Dur("next_hello_in", a.cfg.HelloRetryMax).
			Msgf("the server does not take this agent's protocol version (%s; the server speaks %s): install an agent the server supports "+
				"(see the compatibility policy in docs/operations.md); saying hello again later", bus.Protocol, body.Protocol)
		a.poke(a.rejected)
		a.poke(a.answered)
		return nil
	}
	a.log.Error().Str("reason", body.Reason).Dur("next_hello_in", a.cfg.HelloRetryMax).
		Msgf("the server does not enroll this agent: %s; ask an operator to accept it (tether agent accept %s --env %s), or start it with a valid --token",
			cmp.Or(body.Reason, "no reason given"), a.cfg.Name, a.cfg.Env)
	a.poke(a.rejected)
	a.poke(a.answered)
	return nil
}

// command carries out one verified command; answer says it is an
// `enrolled` answering this process's own hello (fresh by construction).
func (a *Agent) command(ctx context.Context, e *bus.Envelope, answer bool) error {
	tx := a.journal.Begin().Seen(e.ID)
	switch e.Kind {
	case bus.KindEnrolled:
		var body bus.Enrolled
		if err := e.DecodeBody(&body); err != nil {
			return fmt.Errorf("%w: %w", bus.ErrReject, err)
		}
		// verify checked an enrollment before the first against the key
		// expected; one after it must name the key pinned.
		switch held := a.journal.ServerKey(); {
		case held != nil && !held.Equal(ed25519.PublicKey(body.ServerKey)):
			err := fmt.Errorf("%w: enrollment offers server key %s, but this agent trusts %s", errForged, bus.Fingerprint(body.ServerKey), bus.Fingerprint(held))
			a.refuse(ctx, e, err)
			return fmt.Errorf("%w: %w", bus.ErrReject, err)
		case held == nil:
			if err := a.journal.Enroll(ed25519.PublicKey(body.ServerKey), e.TS); err != nil {
				return err
			}
			// At the default level (warn): an operator compares the
			// fingerprint with `tether server key`, once per agent.
			a.log.Warn().Str("server_key", bus.Fingerprint(body.ServerKey)).Msg("enrolled; server key pinned")
		}
		if a.signer.Advance(body.LastSeq) && answer {
			// The server held later numbers than this agent's hello
			// (its journal restored from an older copy): it took the
			// hello's labels and facts for older news. They are
			// reported again, numbered past, once the answer is in.
			a.poke(a.factsAgain)
		}
		a.eventsAlive.Store(body.EventsAlive)
		if err := a.followEnvironment(body, answer); err != nil {
			return err
		}
		policy := a.journal.DriftPolicy()
		paused := func() {}
		if body.Paused != nil {
			paused = a.pauseOp(tx, *body.Paused, e.TS, false)
		}
		tx.SetDriftPolicy(body.DriftPolicy, e.TS)
		if err := tx.Commit(); err != nil {
			return err
		}
		paused()
		if a.journal.DriftPolicy() != policy {
			a.reverify()
		}
		a.markEnrolled()
		a.poke(a.answered)
		a.reportRefusals(ctx) // those refused before the server knew this agent
		return nil
	case bus.KindDesiredFull:
		var body bus.DesiredFull
		if err := e.DecodeBody(&body); err != nil {
			return fmt.Errorf("%w: %w", bus.ErrReject, err)
		}
		started := a.carryDeploy(tx, e, body.Deploy)
		if err := a.applyFull(ctx, tx, e, body); err != nil {
			return a.keepCarried(e, body.Deploy, err)
		}
		started()
	case bus.KindDesiredDiff:
		var body bus.DesiredDiff
		if err := e.DecodeBody(&body); err != nil {
			return fmt.Errorf("%w: %w", bus.ErrReject, err)
		}
		started := a.carryDeploy(tx, e, body.Deploy)
		if err := a.applyDiff(ctx, tx, e, body); err != nil {
			return a.keepCarried(e, body.Deploy, err)
		}
		started()
	case bus.KindDeploy, bus.KindRepair:
		var body bus.Deploy
		if err := e.DecodeBody(&body); err != nil {
			return fmt.Errorf("%w: %w", bus.ErrReject, err)
		}
		started := a.carryDeploy(tx, e, &body)
		if err := tx.Commit(); err != nil {
			return err
		}
		started()
	case bus.KindDryRun:
		var body bus.DryRun
		if err := e.DecodeBody(&body); err != nil {
			return fmt.Errorf("%w: %w", bus.ErrReject, err)
		}
		if body.Plan != nil {
			return a.startPlan(ctx, tx, body.DeployID, *body.Plan)
		}
		if err := tx.AddJob(journal.Job{ID: body.DeployID, Kind: string(bus.KindDryRun), Full: true, Generation: body.Generation, IssuedAt: e.TS}).Commit(); err != nil {
			return err
		}
		a.poke(a.wake)
	case bus.KindDependencyStatus:
		var body bus.DependencyStatus
		if err := e.DecodeBody(&body); err != nil {
			return fmt.Errorf("%w: %w", bus.ErrReject, err)
		}
		if err := tx.Commit(); err != nil {
			return err
		}
		a.deps.set(body.ID, body.State, e.TS)
	case bus.KindPause, bus.KindResume:
		if _, at := a.journal.Paused(); e.TS.Before(at) {
			// A pause or resume issued before the one in force: old news.
			a.log.Info().Str("message", e.String()).Msg("ignoring a pause or resume older than the one in force")
			return tx.Commit()
		}
		after := a.pauseOp(tx, e.Kind == bus.KindPause, e.TS, true)
		if err := tx.Commit(); err != nil {
			return err
		}
		after()
	case bus.KindSettings:
		var body bus.Settings
		if err := e.DecodeBody(&body); err != nil {
			return fmt.Errorf("%w: %w", bus.ErrReject, err)
		}
		if err := tx.SetDriftPolicy(body.DriftPolicy, e.TS).Commit(); err != nil {
			return err
		}
		a.log.Info().Str("drift_policy", string(a.journal.DriftPolicy())).Msg("the server changed this agent's settings")
		// Drift seen under alert is healed now, if the policy says heal.
		a.reverify()
	case bus.KindRotateKey:
		if err := tx.Commit(); err != nil {
			return err
		}
		return a.rotateKey(ctx)
	case bus.KindKeyAccepted:
		var body bus.KeyAccepted
		if err := e.DecodeBody(&body); err != nil {
			return fmt.Errorf("%w: %w", bus.ErrReject, err)
		}
		if err := a.switchKey(body); err != nil {
			return err
		}
		return tx.Commit()
	case bus.KindServerRollover:
		var body bus.ServerRollover
		if err := e.DecodeBody(&body); err != nil {
			return fmt.Errorf("%w: %w", bus.ErrReject, err)
		}
		return a.takeServerRollover(ctx, tx, e, body)
	case bus.KindFactsRefresh:
		if err := tx.Commit(); err != nil {
			return err
		}
		return a.reportFacts(ctx, true)
	case bus.KindMachine:
		var body bus.Machine
		if err := e.DecodeBody(&body); err != nil {
			return fmt.Errorf("%w: %w", bus.ErrReject, err)
		}
		if err := tx.Commit(); err != nil {
			return err
		}
		a.machineCommand(ctx, body)
	default:
		a.log.Info().Str("kind", string(e.Kind)).Msg("command not handled by this agent version; ignored")
		return tx.Commit()
	}
	return nil
}

// verify checks a command's signature against the server key, or the
// server's next key once a server.rollover announced it: byNext says the
// command is signed by the next key, which the server signs with only
// once it switched. Before enrollment only `enrolled` is accepted, and
// only when it carries the key the agent was told to expect (its token's
// fingerprint, or the operator's --server-key) and is signed by it:
// whoever writes into a new agent's inbox first cannot make it trust
// another key.
func (a *Agent) verify(e *bus.Envelope) (byNext bool, err error) {
	if key := a.journal.ServerKey(); key != nil {
		if err := bus.Verify(e, key); err == nil {
			return false, nil
		}
		if next := a.journal.NextServerKey(); next != nil && bus.Verify(e, next) == nil {
			return true, nil
		}
		if prev := a.journal.PreviousServerKey(); prev != nil && (e.Kind == bus.KindEnrolled || e.Kind == bus.KindServerRollover) && bus.Verify(e, prev) == nil {
			return false, errLeftBehind
		}
		return false, fmt.Errorf("%w: %w", errForged, bus.Verify(e, key))
	}
	if e.Kind != bus.KindEnrolled {
		return false, fmt.Errorf("%w: %s arrived before enrollment: no server key to verify it with", errForged, e.Kind)
	}
	var body bus.Enrolled
	if err := e.DecodeBody(&body); err != nil {
		return false, err
	}
	if fp := bus.Fingerprint(body.ServerKey); fp != a.pin {
		return false, fmt.Errorf("%w: enrollment offers server key %s, not %s, the one this agent was told to expect", errForged, fp, a.pin)
	}
	if err := bus.Verify(e, body.ServerKey); err != nil {
		return false, fmt.Errorf("%w: %w", errForged, err)
	}
	return false, nil
}

// Why a command is refused.
var (
	// errForged: not signed by the server this agent trusts.
	errForged = errors.New("forged command")
	// errReplay: signed by the server, but taking the agent back.
	errReplay = errors.New("replayed command")
	// errLeftBehind: an `enrolled` or `server.rollover` signed by the
	// server key the agent left for the next one. The server sends these
	// to an agent whose hello said it held only the old key; one that
	// switched meanwhile (by commands queued before the answer) drops
	// them, taking nothing from them and reporting nothing: they could
	// only give it back what it holds.
	errLeftBehind = errors.New("signed by the server key this agent left")
)

// answersHello reports whether e is an `enrolled` answering a hello of
// this process: fresh by construction, it sets the clock.
func (a *Agent) answersHello(e *bus.Envelope) bool {
	if e.Kind != bus.KindEnrolled {
		return false
	}
	var body bus.Enrolled
	return e.DecodeBody(&body) == nil && body.Hello != "" && a.clock.answered(body.Hello, e.TS, a.log)
}

// followEnvironment keeps the newest generation held up to date with the
// server's word: raised to the released version; and, when the answer to
// this process's own hello names another incarnation of the environment
// (deleted and created again, its versions numbered from 1 again), started
// over from its released version. Nothing else ever lowers it.
func (a *Agent) followEnvironment(body bus.Enrolled, answer bool) error {
	env, held := a.journal.Generation()
	switch {
	case body.Env == "" || body.Env == env:
		return a.journal.HoldGeneration(body.Generation)
	case env == "":
		return a.journal.SetGeneration(body.Env, max(held, body.Generation))
	case answer:
		a.log.Warn().Int64("held", held).Int64("released", body.Generation).
			Msg("the environment was deleted and created again: this agent follows the new one from its released version")
		return a.journal.SetGeneration(body.Env, body.Generation)
	default:
		a.log.Info().Msg("an enrollment of another incarnation of the environment that does not answer this agent's hello: its generation is not followed")
		return nil
	}
}

// fresh refuses a command issued longer ago than MaxCommandAge by the
// server's clock (as the agent measured it), or as far in the future: a
// captured command replayed later is refused whatever its id.
func (a *Agent) fresh(e *bus.Envelope) error {
	age := a.clock.now().Sub(e.TS)
	if age > a.cfg.MaxCommandAge || -age > a.cfg.MaxCommandAge {
		return fmt.Errorf("%s was issued %s ago by the server's clock, outside the %s a command is valid", e.Kind, age.Round(time.Second), a.cfg.MaxCommandAge)
	}
	return nil
}

// floor is the oldest generation of desired state the agent takes: the
// newest it held (kept in its identity, through a journal started over).
func (a *Agent) floor() int64 {
	_, gen := a.journal.Generation()
	return gen
}

// checkSlice verifies a slice holds only this agent's resources and
// matches the hash the server computed.
func (a *Agent) checkSlice(s model.Slice, want model.Hash) error {
	for i := range s.Resources {
		if s.Resources[i].ID.Agent != a.cfg.Name {
			return fmt.Errorf("desired state holds %s of another agent", s.Resources[i].ID)
		}
	}
	got, err := s.Hash()
	if err != nil {
		return err
	}
	if got != want {
		return fmt.Errorf("desired state of generation %d does not match its hash", s.Generation)
	}
	return nil
}

// commitSlice journals a new slice (tx holds the change) and wakes the
// worker.
func (a *Agent) commitSlice(tx *journal.Tx, s model.Slice) error {
	if err := tx.Commit(); err != nil {
		return err
	}
	if err := a.journal.HoldGeneration(s.Generation); err != nil {
		return err
	}
	if err := a.rehash(s); err != nil {
		return err
	}
	if n, err := a.journal.Forget(); err != nil {
		return err
	} else if n > 0 {
		a.log.Debug().Int("resources", n).Msg("forgot the results of resources that left the slice")
	}
	a.log.Debug().Int64("generation", s.Generation).Int("resources", len(s.Resources)).Msg("desired state updated")
	a.poke(a.wake)
	return nil
}

func (a *Agent) rehash(s model.Slice) error {
	hashes := make(map[model.ID]model.Hash, len(s.Resources))
	for i := range s.Resources {
		h, err := s.Resources[i].Hash()
		if err != nil {
			return fmt.Errorf("desired state: %w", err)
		}
		hashes[s.Resources[i].ID] = h
	}
	a.mu.Lock()
	a.hashes = hashes
	a.mu.Unlock()
	return nil
}

// applyFull replaces the desired slice with a full state sent.
func (a *Agent) applyFull(ctx context.Context, tx *journal.Tx, e *bus.Envelope, body bus.DesiredFull) error {
	if held := a.floor(); body.Generation < held {
		err := fmt.Errorf("%w: desired state of generation %d, older than the %d held: refused (desired state only moves forward)", errReplay, body.Generation, held)
		a.refuse(ctx, e, err)
		return fmt.Errorf("%w: %w", bus.ErrReject, err)
	}
	s := model.Slice{Agent: a.cfg.Name, Generation: body.Generation, Resources: body.Resources}
	if err := a.checkSlice(s, body.SliceHash); err != nil {
		// Refused, it still answers the request under way, if
		// any: ask again.
		a.stateAnswered()
		return a.requestState(ctx, tx, err, body.Generation)
	}
	if err := a.commitSlice(tx.SetSlice(s), s); err != nil {
		return err
	}
	if want := a.stateAnswered(); want > s.Generation {
		// A diff to a newer generation came while this answer was
		// on its way, and was dropped: ask for the state again.
		a.log.Info().Int64("held", s.Generation).Int64("seen", want).Msg("the full state sent is older than a diff dropped meanwhile; asking again")
		return a.requestState(ctx, a.journal.Begin(), nil, want)
	}
	return nil
}

// keepCarried returns err, the refusal of a desired state that carried
// dep; refused as older than the one held, its deploy is journaled all
// the same, as the deploy command that would have followed it is: it runs
// on the desired state held, and the server hears how it ended.
func (a *Agent) keepCarried(e *bus.Envelope, dep *bus.Deploy, err error) error {
	if dep == nil || !errors.Is(err, errReplay) {
		return err
	}
	tx := a.journal.Begin()
	started := a.carryDeploy(tx, e, dep)
	if cerr := tx.Commit(); cerr != nil {
		return cerr
	}
	started()
	return err
}

// carryDeploy adds to tx the deploy (or repair) dep asks for, when not
// nil: a deploy command, or the one a desired state carries. The function
// it returns, called once tx committed, starts it.
func (a *Agent) carryDeploy(tx *journal.Tx, e *bus.Envelope, dep *bus.Deploy) (started func()) {
	if dep == nil {
		return func() {}
	}
	kind := e.Kind
	if kind != bus.KindRepair {
		kind = bus.KindDeploy
	}
	job := journal.Job{ID: dep.DeployID, Kind: string(kind), Full: dep.Mode == bus.DeployFull || kind == bus.KindRepair,
		Generation: dep.Generation, DriftPolicy: dep.DriftPolicy, IssuedAt: e.TS}
	tx.AddJob(job)
	return func() {
		if kind == bus.KindDeploy {
			a.supersedeRepair(job.ID)
		}
		a.poke(a.wake)
	}
}

// applyDiff moves the slice by a diff from the generation held; any other
// diff, or one whose result does not match the server's hash, is answered
// with a request for the full state.
func (a *Agent) applyDiff(ctx context.Context, tx *journal.Tx, e *bus.Envelope, d bus.DesiredDiff) error {
	cur := a.journal.Slice()
	if cur.Generation == d.To && d.From != d.To {
		if h, err := cur.Hash(); err == nil && h == d.SliceHash {
			return tx.Commit() // applied already (journaled, then not acknowledged)
		}
	}
	if held := a.floor(); d.To < held {
		err := fmt.Errorf("%w: a diff to generation %d, older than the %d held: refused (desired state only moves forward)", errReplay, d.To, held)
		a.refuse(ctx, e, err)
		return fmt.Errorf("%w: %w", bus.ErrReject, err)
	}
	next, err := cur.Apply(d.Diff)
	if errors.Is(err, model.ErrGenerationMismatch) {
		return a.requestState(ctx, tx, nil, d.To)
	}
	if err != nil {
		return fmt.Errorf("%w: %w", bus.ErrReject, err)
	}
	if err := a.checkSlice(next, d.SliceHash); err != nil {
		return a.requestState(ctx, tx, err, d.To)
	}
	return a.commitSlice(tx.ApplyDiff(d.Diff), next)
}

// stateAsk is a request for the full desired state under way: when it was
// made, the generation held then, and the newest generation a command
// showed since (the answer must reach it).
type stateAsk struct {
	at         time.Time
	held, want int64
}

// askAgainAfter is how long a request for the full state stays under way
// without an answer; a command that shows a gap after that asks again (the
// server may have dropped the request, or restarted before answering).
const askAgainAfter = time.Minute

// requestState asks the server for the full desired state, in the same
// transaction as the command that showed the gap (want is the generation
// that command was for). One request is under way at a time: while the
// server has not answered, a command that shows the gap again is taken
// and dropped, not asked about again. In a storm of releases a lagging
// agent would else ask once per release, and every answer is a full
// state: the requests pile up in front of the server faster than it
// answers them.
func (a *Agent) requestState(ctx context.Context, tx *journal.Tx, why error, want int64) error {
	held := a.journal.Slice().Generation
	now := time.Now()
	a.mu.Lock()
	pending := !a.asked.at.IsZero() && a.asked.held == held && now.Sub(a.asked.at) < askAgainAfter
	if pending {
		a.asked.want = max(a.asked.want, want)
	}
	a.mu.Unlock()
	if pending {
		a.log.Debug().Int64("held", held).Int64("want", want).Msg("desired state from another generation; the full state is asked for already")
		return tx.Commit()
	}
	if why != nil {
		a.log.Error().Err(why).Msg("desired state refused; asking for the full state")
	} else {
		a.log.Info().Int64("held", held).Int64("want", want).Msg("desired state from another generation; asking for the full state")
	}
	if err := a.emit(tx, bus.KindStateRequest, bus.StateRequest{Generation: held}); err != nil {
		return err
	}
	a.mu.Lock()
	a.asked = stateAsk{at: now, held: held, want: want}
	a.mu.Unlock()
	return nil
}

// stateAnswered ends the request for the full state under way, if any, and
// returns the newest generation a command showed while it was.
func (a *Agent) stateAnswered() int64 {
	a.mu.Lock()
	defer a.mu.Unlock()
	want := a.asked.want
	a.asked = stateAsk{}
	return want
}

// pauseOp adds to tx the pause (or resume) the server issued at ts, unless
// one issued later is in force, and returns what to do once tx is
// committed: a pause stops the job in progress (it runs again once
// resumed), and the monitor then reports drift but heals none; a resume
// wakes the worker and has the monitor verify everything again, so drift
// seen while paused is healed now under the heal policy. told says the
// server sent a pause or resume command, which is logged even when it
// changes nothing.
func (a *Agent) pauseOp(tx *journal.Tx, paused bool, ts time.Time, told bool) (after func()) {
	wasPaused, at := a.journal.Paused()
	if ts.Before(at) {
		return func() {}
	}
	tx.Pause(paused, ts)
	return func() {
		if told || paused != wasPaused {
			a.log.Info().Bool("paused", paused).Msg("the server paused or resumed this agent")
		}
		switch {
		case paused:
			a.stopRunning(errPaused)
		case wasPaused:
			a.reverify()
		}
		a.poke(a.wake)
	}
}
