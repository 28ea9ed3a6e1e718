package agent

import (
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"

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
		return fmt.Errorf("%w: %s is addressed to %s/%s", bus.ErrReject, e, e.Env, e.Agent)
	}
	if e.Kind == bus.KindRejected {
		return a.onRejected(e)
	}
	if err := a.verify(e); err != nil {
		a.log.Warn().Err(err).Str("message", e.String()).Msg("dropping a command that does not verify")
		return fmt.Errorf("%w: %w", bus.ErrReject, err)
	}
	if a.journal.Seen(e.ID) {
		return nil
	}
	err := a.command(ctx, e)
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
		if err := bus.Verify(e, a.serverKey()); err != nil {
			return fmt.Errorf("%w: %w", bus.ErrReject, err)
		}
	}
	a.log.Error().Str("reason", body.Reason).Dur("next_hello_in", a.cfg.HelloRetryMax).
		Msg("the server does not enroll this agent: ask an operator to accept it (tether agent accept), or start it with a valid --token")
	a.poke(a.rejected)
	a.poke(a.answered)
	return nil
}

// command carries out one verified command.
func (a *Agent) command(ctx context.Context, e *bus.Envelope) error {
	tx := a.journal.Begin().Seen(e.ID)
	switch e.Kind {
	case bus.KindEnrolled:
		var body bus.Enrolled
		if err := e.DecodeBody(&body); err != nil {
			return fmt.Errorf("%w: %w", bus.ErrReject, err)
		}
		if a.journal.ServerKey() == nil {
			tx.Enroll(ed25519.PublicKey(body.ServerKey))
			a.log.Info().Str("server_key", bus.Fingerprint(body.ServerKey)).Msg("enrolled; server key pinned")
		}
		if err := tx.Commit(); err != nil {
			return err
		}
		a.markEnrolled()
		a.poke(a.answered)
		return nil
	case bus.KindDesiredFull:
		var body bus.DesiredFull
		if err := e.DecodeBody(&body); err != nil {
			return fmt.Errorf("%w: %w", bus.ErrReject, err)
		}
		s := model.Slice{Agent: a.cfg.Name, Generation: body.Generation, Resources: body.Resources}
		if err := a.checkSlice(s, body.SliceHash); err != nil {
			return a.requestState(ctx, tx, err)
		}
		return a.commitSlice(tx.SetSlice(s), s)
	case bus.KindDesiredDiff:
		var body bus.DesiredDiff
		if err := e.DecodeBody(&body); err != nil {
			return fmt.Errorf("%w: %w", bus.ErrReject, err)
		}
		return a.applyDiff(ctx, tx, body)
	case bus.KindDeploy, bus.KindRepair:
		var body bus.Deploy
		if err := e.DecodeBody(&body); err != nil {
			return fmt.Errorf("%w: %w", bus.ErrReject, err)
		}
		job := journal.Job{ID: body.DeployID, Kind: string(e.Kind), Full: body.Mode == bus.DeployFull || e.Kind == bus.KindRepair,
			Generation: body.Generation, DriftPolicy: body.DriftPolicy}
		if err := tx.AddJob(job).Commit(); err != nil {
			return err
		}
		if e.Kind == bus.KindDeploy {
			a.supersedeRepair(job.ID)
		}
		a.poke(a.wake)
	case bus.KindDryRun:
		var body bus.DryRun
		if err := e.DecodeBody(&body); err != nil {
			return fmt.Errorf("%w: %w", bus.ErrReject, err)
		}
		if err := tx.AddJob(journal.Job{ID: body.DeployID, Kind: string(bus.KindDryRun), Full: true, Generation: body.Generation}).Commit(); err != nil {
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
		a.deps.set(body.ID, body.State)
	case bus.KindPause, bus.KindResume:
		if err := tx.Pause(e.Kind == bus.KindPause).Commit(); err != nil {
			return err
		}
		a.log.Info().Bool("paused", e.Kind == bus.KindPause).Msg("the server paused or resumed this agent")
		a.poke(a.wake)
	case bus.KindFactsRefresh:
		if err := tx.Commit(); err != nil {
			return err
		}
		return a.reportFacts(ctx, true)
	default:
		a.log.Info().Str("kind", string(e.Kind)).Msg("command not handled by this agent version; ignored")
		return tx.Commit()
	}
	return nil
}

// verify checks a command's signature against the server key. Before
// enrollment only `enrolled` is accepted, signed by the key it carries
// (or by the configured key when one is pinned).
func (a *Agent) verify(e *bus.Envelope) error {
	key := a.serverKey()
	if key != nil {
		return bus.Verify(e, key)
	}
	if e.Kind != bus.KindEnrolled {
		return fmt.Errorf("%s arrived before enrollment: no server key to verify it with", e.Kind)
	}
	var body bus.Enrolled
	if err := e.DecodeBody(&body); err != nil {
		return err
	}
	return bus.Verify(e, body.ServerKey)
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

// applyDiff moves the slice by a diff from the generation held; any other
// diff, or one whose result does not match the server's hash, is answered
// with a request for the full state.
func (a *Agent) applyDiff(ctx context.Context, tx *journal.Tx, d bus.DesiredDiff) error {
	cur := a.journal.Slice()
	if cur.Generation == d.To && d.From != d.To {
		if h, err := cur.Hash(); err == nil && h == d.SliceHash {
			return tx.Commit() // applied already (journaled, then not acknowledged)
		}
	}
	next, err := cur.Apply(d.Diff)
	if errors.Is(err, model.ErrGenerationMismatch) {
		a.log.Info().Int64("held", cur.Generation).Int64("diff_from", d.From).Msg("diff from another generation; asking for the full state")
		return a.requestState(ctx, tx, nil)
	}
	if err != nil {
		return fmt.Errorf("%w: %w", bus.ErrReject, err)
	}
	if err := a.checkSlice(next, d.SliceHash); err != nil {
		return a.requestState(ctx, tx, err)
	}
	return a.commitSlice(tx.ApplyDiff(d.Diff), next)
}

// requestState asks the server for the full desired state, in the same
// transaction as the command that showed the gap.
func (a *Agent) requestState(ctx context.Context, tx *journal.Tx, why error) error {
	if why != nil {
		a.log.Error().Err(why).Msg("desired state refused; asking for the full state")
	}
	return a.emit(tx, bus.KindStateRequest, bus.StateRequest{Generation: a.journal.Slice().Generation})
}
