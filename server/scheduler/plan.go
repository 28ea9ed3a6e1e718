package scheduler

import (
	"context"
	"fmt"
	"time"

	"github.com/tetherhq/tether/bus"
	"github.com/tetherhq/tether/server/record"
)

// SendPlan sends agent a dry run of its slice of version n (a plan), under
// the deploy id id; the command expires after expire. The agent evaluates
// the slice in memory and keeps its desired state: nothing is deployed,
// and the generation the scheduler believes the agent holds is not
// touched. The command's own Generation is the one the agent holds, so an
// agent older than plans, which ignores the plan, dry-runs what it holds
// (and answers with that generation) instead of waiting for a generation
// it will never be sent.
func (s *Scheduler) SendPlan(ctx context.Context, env string, a record.Agent, n int64, id string, expire time.Duration) error {
	slice, err := s.store.AgentSlice(ctx, env, n, a.Name)
	if err != nil {
		return err
	}
	hash, err := slice.Hash()
	if err != nil {
		return err
	}
	sealed, err := s.seal.SealFor(ctx, env, a.Name, slice.Resources)
	if err != nil {
		return fmt.Errorf("plan for %s: %w", a.Name, err)
	}
	body := bus.DryRun{DeployID: id, Generation: a.Generation, Plan: &bus.Plan{Generation: n, Resources: sealed, SliceHash: hash}}
	// Listed with the deploys, as a dry run set off by a plan.
	d := record.Deploy{ID: id, Env: env, Kind: record.OpDryRun, Trigger: record.DeployByPlan, Who: record.WhoOf(ctx), Version: n}
	if err := s.record(ctx, d, a.Name); err != nil {
		return err
	}
	err = s.sendTo(ctx, bus.KindDryRun, env, a.Name, body, bus.SendOptions{Expiration: expire})
	if err != nil {
		if end := s.store.EndDeployAgents(ctx, env, id, []string{a.Name}, "not sent: "+err.Error()); end != nil {
			s.log.Warn().Err(end).Str("env", env).Str("deploy", id).Msg("cannot record that a plan's dry run was not sent")
		}
	}
	return err
}
