package release

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/rs/zerolog"

	"github.com/tetherhq/tether/model"
	"github.com/tetherhq/tether/server/event"
	"github.com/tetherhq/tether/server/record"
)

// Staged rollouts. An environment whose release strategy is waves
// releases a version as any other (the store says it is the released one)
// but pins every agent outside the first wave to the version it had
// (agent_pins): the scheduler gives a pinned agent that version on hello,
// state request, deploy, repair and dry run, so it heals and repairs
// against it. The rollout's driver (driveRollout, run like a fan-out under
// the release's lease) sends one wave at a time, unpinning its agents
// first, watches their resources' states, and goes on, waits for an
// operator, or halts, as the strategy says. An abort leaves the pins: the
// agents not reached keep their version until the next release.

// rolloutEvery is how often a rollout's driver reads where its wave
// stands.
var rolloutEvery = 500 * time.Millisecond

// planRollout plans a staged release of version n of env (prev released
// before it, 0 if none) and pins the agents outside the first wave to
// prev. It runs before the store releases n, so no agent outside the
// first wave is ever sent n before its wave.
func (r *Releaser) planRollout(ctx context.Context, env string, n, prev int64, st record.ReleaseStrategy) (*record.Rollout, int, error) {
	all, err := r.store.ListAgents(ctx, env)
	if err != nil {
		return nil, 0, err
	}
	var accepted []record.Agent
	for _, a := range all {
		if a.State == record.AgentAccepted {
			accepted = append(accepted, a)
		}
	}
	waits, _, err := r.store.VersionWaits(ctx, env, n)
	if err != nil {
		return nil, 0, err
	}
	requires := map[string][]string{}
	for id, waiters := range waits {
		for _, w := range waiters {
			requires[w] = append(requires[w], id.Agent)
		}
	}
	waves, moved, err := st.PlanWaves(accepted, requires)
	if err != nil {
		return nil, 0, fmt.Errorf("%w: %w: nothing released", record.ErrInvalidSetting, err)
	}
	ro := &record.Rollout{Stage: record.StageDeploying, Previous: prev, Strategy: st, Waves: waves, Moved: moved}
	var later []string
	for _, w := range waves[min(1, len(waves)):] {
		later = append(later, w.Agents...)
	}
	// An agent pinned already (left on its version by an aborted rollout)
	// keeps that version.
	if err := r.store.PinAgents(ctx, env, prev, later); err != nil {
		return nil, 0, err
	}
	return ro, len(accepted), nil
}

// startRollout records a staged release of version n of env with its
// plan and queues its driver.
func (r *Releaser) startRollout(ctx context.Context, env string, n int64, ro *record.Rollout, agents int) (record.Release, error) {
	ctx = context.WithoutCancel(ctx)
	rel, err := r.store.StartRelease(ctx, record.Release{Env: env, Version: n})
	if err != nil {
		return rel, err
	}
	rel.Agents, rel.Rollout = agents, ro
	if rel, err = r.store.UpdateRelease(ctx, rel); err != nil {
		return rel, err
	}
	r.log.Info().Str("env", env).Str("release", rel.ID).Int64("version", n).Int("waves", len(ro.Waves)).Int64("previous", ro.Previous).
		Msg("staged rollout started: agents outside the first wave keep their version until their wave")
	r.feed.Publish(event.Event{Kind: event.ReleaseStarted, Env: env, Generation: n, Release: &rel})
	r.queue.add(rel)
	return rel, nil
}

// Continue tells the staged rollout id of env to go on: to its next wave
// whatever the current one's agents reported, or past a halt (the
// failures so far are accepted; the threshold counts the next ones).
func (r *Releaser) Continue(ctx context.Context, env, id string) (record.Release, error) {
	rel, err := r.store.ContinueRelease(ctx, env, id)
	if err == nil {
		r.log.Info().Str("env", env).Str("release", id).Msg("staged rollout: an operator continues it")
	}
	return rel, err
}

// Abort ends the staged rollout id of env: no further wave is sent; the
// agents not reached keep their version until the next release.
func (r *Releaser) Abort(ctx context.Context, env, id string) (record.Release, error) {
	rel, err := r.store.AbortRelease(ctx, env, id, "aborted by an operator: the agents not reached keep the version they had until the next release")
	if err == nil {
		r.log.Info().Str("env", env).Str("release", id).Msg("staged rollout aborted")
		r.feed.Publish(event.Event{Kind: event.ReleaseDone, Env: env, Generation: rel.Version, Release: &rel})
	}
	return rel, err
}

// driveRollout runs staged release rel until it is done, aborted or
// superseded, or ctx ends (the next leader resumes it from the store).
func (r *Releaser) driveRollout(ctx context.Context, rel record.Release, log zerolog.Logger) {
	t := time.NewTicker(rolloutEvery)
	defer t.Stop()
	for {
		done, err := r.rolloutStep(ctx, rel.Env, rel.ID, log)
		if err != nil && ctx.Err() == nil {
			log.Warn().Err(err).Msg("staged rollout: cannot read or record where it stands; trying again")
		}
		if done {
			r.prune(ctx, rel.Env)
			return
		}
		select {
		case <-t.C:
		case <-ctx.Done():
			return
		}
	}
}

// rolloutStep reads where the rollout stands, acts on it (an operator's
// continue, a wave to send, a threshold passed, a wave finished) and
// records it. done says the rollout ended.
func (r *Releaser) rolloutStep(ctx context.Context, env, id string, log zerolog.Logger) (bool, error) {
	cur, err := r.store.GetRelease(ctx, env, id)
	if err != nil {
		return errors.Is(err, model.ErrNotFound), err
	}
	ro := cur.Rollout
	if cur.State != record.ReleaseRunning || ro == nil {
		return true, nil // aborted (or ended elsewhere)
	}
	before, err := json.Marshal(cur)
	if err != nil {
		return false, err
	}
	if v, err := r.store.ReleasedVersion(ctx, env); err != nil {
		return false, err
	} else if v.Number != cur.Version {
		ro.Stage, cur.State = record.StageDone, record.ReleaseDone
		cur.Note = fmt.Sprintf("superseded by version %d: the agents this rollout had not reached get that one", v.Number)
		return true, r.recordRollout(ctx, cur)
	}
	if len(ro.Waves) == 0 {
		return true, r.finishRollout(ctx, cur, log) // no accepted agent when released
	}
	advance := false
	if ro.Asked > ro.Continues {
		ro.Continues = ro.Asked
		ro.Accepted = failedAgents(ro)
		advance = true
		log.Info().Int("wave", ro.Wave+1).Str("stage", string(ro.Stage)).Msg("staged rollout: continued by an operator")
	}
	if advance {
		if ro.Wave+1 >= len(ro.Waves) {
			return true, r.finishRollout(ctx, cur, log)
		}
		ro.Wave++
		ro.Stage = record.StageDeploying
	}
	if ro.Sent <= ro.Wave && ro.Wave < len(ro.Waves) {
		if err := r.sendWave(ctx, &cur); err != nil {
			return false, err
		}
	}
	if err := r.waveStates(ctx, &cur); err != nil {
		return false, err
	}
	reached, failed := 0, failedAgents(ro)
	for _, w := range ro.Waves[:ro.Sent] {
		reached += len(w.Agents)
	}
	switch {
	case ro.Stage == record.StageHalted:
	case ro.Strategy.Exceeded(failed-ro.Accepted, reached):
		ro.Stage = record.StageHalted
		log.Warn().Int("wave", ro.Wave+1).Int("failed", failed).Int("reached", reached).Str("max_failed", ro.Strategy.MaxFailed).
			Msg("staged rollout halted: too many agents failed; tether release continue or abort")
	case ro.Stage == record.StageDeploying && ro.Waves[ro.Wave].PendingCount == 0:
		switch {
		case ro.Wave+1 >= len(ro.Waves):
			return true, r.finishRollout(ctx, cur, log)
		case ro.Strategy.Advance == record.AdvanceAuto:
			ro.Wave++
			ro.Stage = record.StageDeploying
		default:
			ro.Stage = record.StageWaiting
		}
	}
	if after, err := json.Marshal(cur); err != nil || bytes.Equal(before, after) {
		return false, err // nothing new
	}
	return false, r.recordRollout(ctx, cur)
}

// sendWave unpins the current wave's agents and fans the version out to
// them, adding what it did to cur's counts.
func (r *Releaser) sendWave(ctx context.Context, cur *record.Release) error {
	ro := cur.Rollout
	w := ro.Waves[ro.Wave]
	if err := r.store.UnpinAgents(ctx, cur.Env, w.Agents); err != nil {
		return err
	}
	sub := record.Release{ID: cur.ID, Env: cur.Env, Version: cur.Version}
	sub, err := r.fanout.ReleasedTo(ctx, sub, w.Agents, nil)
	cur.Sent += sub.Sent
	cur.UpToDate += sub.UpToDate
	for _, p := range sub.Pending {
		cur.Add(p)
	}
	if err != nil {
		return err
	}
	ro.Sent = ro.Wave + 1
	ro.Stage = record.StageDeploying
	r.log.Info().Str("env", cur.Env).Str("release", cur.ID).Int("wave", ro.Wave+1).Str("name", w.Name).Int("agents", len(w.Agents)).
		Msg("staged rollout: wave sent")
	return nil
}

// waveStates counts, for each wave sent, its agents that succeeded (every
// resource of the version deployed, or nothing to deploy), failed (a
// resource failed, was skipped for a failed requirement, or has no
// handler) and are still pending.
func (r *Releaser) waveStates(ctx context.Context, cur *record.Release) error {
	rows, err := r.store.Statuses(ctx, cur.Env, record.StatusFilter{})
	if err != nil {
		return err
	}
	const ok, pending, failed = 0, 1, 2
	by := map[string]int{}
	for _, st := range rows {
		if st.Version != cur.Version {
			continue
		}
		var v int
		switch st.State {
		case model.StateFailed, model.StateSkipped, model.StateUnavailable:
			v = failed
		case model.StateAvailable, model.StateDeploying, model.StateCancelled:
			v = pending
		}
		by[st.ID.Agent] = max(by[st.ID.Agent], v)
	}
	ro := cur.Rollout
	for i := range ro.Waves[:ro.Sent] {
		w := &ro.Waves[i]
		w.Succeeded, w.FailedCount, w.PendingCount, w.FailedAgents, w.PendingAgents = 0, 0, 0, nil, nil
		for _, a := range w.Agents {
			switch by[a] {
			case failed:
				w.FailedCount++
				if len(w.FailedAgents) < record.MaxListedPending {
					w.FailedAgents = append(w.FailedAgents, a)
				}
			case pending:
				w.PendingCount++
				if len(w.PendingAgents) < record.MaxListedPending {
					w.PendingAgents = append(w.PendingAgents, a)
				}
			default:
				w.Succeeded++
			}
		}
	}
	return nil
}

func failedAgents(ro *record.Rollout) int {
	n := 0
	for _, w := range ro.Waves[:ro.Sent] {
		n += w.FailedCount
	}
	return n
}

// finishRollout records a rollout whose every wave was sent.
func (r *Releaser) finishRollout(ctx context.Context, cur record.Release, log zerolog.Logger) error {
	cur.Rollout.Stage, cur.State = record.StageDone, record.ReleaseDone
	log.Info().Int("waves", len(cur.Rollout.Waves)).Int("failed", failedAgents(cur.Rollout)).Msg("staged rollout done: every wave was sent")
	return r.recordRollout(ctx, cur)
}

// recordRollout stores where the rollout stands and publishes it.
func (r *Releaser) recordRollout(ctx context.Context, cur record.Release) error {
	out, err := r.store.UpdateRelease(ctx, cur)
	if errors.Is(err, model.ErrConflict) {
		return nil // aborted meanwhile: the next step sees it
	}
	if err != nil {
		return err
	}
	kind := event.ReleaseProgress
	if out.State != record.ReleaseRunning {
		kind = event.ReleaseDone
	}
	r.feed.Publish(event.Event{Kind: kind, Env: out.Env, Generation: out.Version, Release: &out})
	return nil
}
