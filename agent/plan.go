package agent

import (
	"context"
	"time"

	"github.com/tetherhq/tether/agent/engine"
	"github.com/tetherhq/tether/agent/journal"
	"github.com/tetherhq/tether/bus"
	"github.com/tetherhq/tether/model"
)

// errPlanBusy is the answer to a plan that arrives while another runs.
const errPlanBusy = "another plan is running on this agent: ask again when it ends"

// startPlan answers a dry run that carries a candidate's desired state
// (bus.Plan): the candidate is dry-run in memory and reported under its
// generation; it is never journaled as the agent's desired state, never
// deployed, and does not wait in the job queue. A plan runs while the
// agent is paused (it changes nothing) and alongside a running job,
// without taking the enforce lock: it only reads, and it must not wait
// behind a deploy that waits for other agents. One plan runs at a time; a
// plan lost to a restart is not answered, which the server reports.
func (a *Agent) startPlan(ctx context.Context, tx *journal.Tx, id string, p bus.Plan) error {
	if err := tx.Commit(); err != nil {
		return err
	}
	s := model.Slice{Agent: a.cfg.Name, Generation: p.Generation, Resources: p.Resources}
	if err := a.checkSlice(s, p.SliceHash); err != nil {
		a.log.Warn().Err(err).Str("plan", id).Msg("plan refused")
		return a.endPlan(id, p.Generation, "plan refused: "+err.Error())
	}
	select {
	case a.planning <- struct{}{}:
	default:
		return a.endPlan(id, p.Generation, errPlanBusy)
	}
	a.plans.Add(1)
	go func() {
		defer a.plans.Done()
		defer func() { <-a.planning }()
		if err := a.runPlan(ctx, id, s); err != nil {
			a.log.Warn().Err(err).Str("plan", id).Msg("plan not answered")
		}
	}()
	return nil
}

// endPlan answers a plan that does not run.
func (a *Agent) endPlan(id string, gen int64, why string) error {
	return a.emit(a.journal.Begin(), bus.KindDryRunResult, bus.ResourceStatus{DeployID: id, Generation: gen, Done: true, Error: why})
}

// runPlan dry-runs slice s and reports every result as a dry run's.
func (a *Agent) runPlan(ctx context.Context, id string, s model.Slice) error {
	hashes := make(map[model.ID]model.Hash, len(s.Resources))
	for i := range s.Resources {
		h, err := s.Resources[i].Hash()
		if err != nil {
			return a.endPlan(id, s.Generation, "plan refused: "+err.Error())
		}
		hashes[s.Resources[i].ID] = h
	}
	job := journal.Job{ID: id, Kind: string(bus.KindDryRun), Full: true, Generation: s.Generation}
	rep := newReporter(a, bus.KindDryRunResult, job, s.Generation, hashes, func() bool { return false })
	go rep.loop()
	start := time.Now()
	results, runErr := a.engine.Run(ctx, s.Resources, engine.Options{
		Parallelism:  a.cfg.Parallelism,
		DryRun:       true,
		Dependencies: assumeDeployed{},
		Open:         a.open,
	}, rep.add)
	errText := ""
	if runErr != nil {
		errText = runErr.Error()
	}
	if err := rep.finish(true, errText); err != nil {
		return err
	}
	a.log.Info().Str("plan", id).Int64("generation", s.Generation).Int("resources", len(s.Resources)).Int("results", len(results)).
		Dur("took", time.Since(start)).Msg("plan finished")
	return nil
}

// assumeDeployed answers a plan's requirements on other agents: a plan
// shows what each resource would change if its requirements were met, and
// does not wait for other agents' deploys that will not come.
type assumeDeployed struct{}

func (assumeDeployed) Wait(context.Context, model.ID) (model.ResourceState, error) {
	return model.StateDeployed, nil
}

var _ engine.Dependencies = assumeDeployed{}
