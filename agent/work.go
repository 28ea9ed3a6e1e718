package agent

import (
	"context"
	"errors"
	"slices"
	"sync"
	"time"

	"github.com/tetherhq/tether/agent/engine"
	"github.com/tetherhq/tether/agent/journal"
	"github.com/tetherhq/tether/bus"
	"github.com/tetherhq/tether/model"
	"github.com/tetherhq/tether/model/secret"
)

// worker runs the journal's jobs in order while the agent is primary.
type worker struct {
	cancel context.CancelFunc
	done   chan struct{}
}

// The compliance monitor runs with the worker: only the primary process of
// an agent name watches and heals.
func (a *Agent) startWorker(ctx context.Context) *worker {
	ctx, cancel := context.WithCancel(ctx)
	w := &worker{cancel: cancel, done: make(chan struct{})}
	monDone := make(chan struct{})
	if a.cfg.NoWatch {
		close(monDone)
	} else {
		mon := newMonitor(a)
		// Drift while the agent was down or not primary, under the policy
		// in force.
		a.enforcing(func() { mon.arm(true, nil) })
		a.mu.Lock()
		a.mon = mon
		a.mu.Unlock()
		go func() {
			defer close(monDone)
			mon.run(ctx)
		}()
	}
	go func() {
		defer close(w.done)
		defer func() { <-monDone }()
		a.work(ctx)
	}()
	return w
}

// stop cancels the running job (its handler sees the cancellation) and
// waits for the worker to end. The job stays journaled: it runs again.
func (w *worker) stop() {
	w.cancel()
	<-w.done
}

// work runs queued jobs, in order, once the slice they were sent for is
// held, until ctx ends.
func (a *Agent) work(ctx context.Context) {
	waiting := "" // the deploy said to wait for a newer state
	for ctx.Err() == nil {
		j, ok, behind := a.nextJob()
		switch {
		case ok:
		case behind > 0:
			if waiting != j.ID {
				waiting = j.ID
				a.log.Info().Str("deploy", j.ID).Int64("held", a.journal.Slice().Generation).Int64("named", behind).
					Msg("the server named a newer desired state than the one held: the deploy waits for it")
			}
			a.awaitState(ctx, behind)
			continue
		default:
			select {
			case <-a.wake:
			case <-ctx.Done():
			}
			continue
		}
		if err := a.run(ctx, j); err != nil && ctx.Err() == nil {
			a.log.Error().Err(err).Str("deploy", j.ID).Msg("job failed; retrying")
			sleep(ctx, jitter(5*time.Second))
		}
	}
}

// awaitState waits for the worker to be woken while a deploy waits for
// the desired state of generation want. The server sends it after its
// answer to the hello that named it; should it not come within
// askAgainAfter (a send that failed), the agent asks for it.
func (a *Agent) awaitState(ctx context.Context, want int64) {
	t := time.NewTimer(askAgainAfter)
	defer t.Stop()
	select {
	case <-a.wake:
	case <-t.C:
		if err := a.requestState(ctx, a.journal.Begin(), nil, want); err != nil && ctx.Err() == nil {
			a.log.Warn().Err(err).Msg("cannot ask for the desired state a deploy waits for; asking again later")
		}
	case <-ctx.Done():
	}
}

// nextJob returns the first job if it can run: not paused, and the slice
// is at (or past) the job's generation. A deploy or repair also waits while
// the slice is older than the newest generation the server named (the
// floor): behind is then that generation. Inbox order alone does not keep
// a superseded deploy from running: the server answers the hello of an
// agent back from an absence (the answer names the released version)
// before it sends the desired state the agent lacks, and a release's
// fan-out still under way may queue the newest state after the answer. A
// deploy of an older state queued before would run at once, enforcing a
// state already replaced; waiting, it runs against the newest state, or
// is superseded by the deploy that comes with it.
func (a *Agent) nextJob() (j journal.Job, ok bool, behind int64) {
	if paused, _ := a.journal.Paused(); paused {
		return journal.Job{}, false, 0
	}
	jobs := a.journal.Jobs()
	held := a.journal.Slice().Generation
	if len(jobs) == 0 || held < jobs[0].Generation {
		return journal.Job{}, false, 0
	}
	j = jobs[0]
	if floor := a.floor(); held < floor && j.Kind != string(bus.KindDryRun) {
		return j, false, floor
	}
	return j, true, 0
}

// stopRunning cancels the running deploy or repair, if any, with cause.
func (a *Agent) stopRunning(cause error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.running != nil && a.running.job.Kind != string(bus.KindDryRun) {
		a.log.Info().Str("deploy", a.running.job.ID).Err(cause).Msg("stopping the running job; it runs again when resumed")
		a.running.cancel(cause)
	}
}

// reverify has the compliance monitor verify every watched resource: drift
// is reported, and healed if the policy says so and the agent is not
// paused.
func (a *Agent) reverify() {
	a.mu.Lock()
	mon := a.mon
	a.mu.Unlock()
	if mon != nil {
		mon.suspectAll()
	}
}

// supersedeRepair cancels a running repair: a deploy that arrived during
// it replaces it.
func (a *Agent) supersedeRepair(deployID string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.running != nil && a.running.job.Kind == string(bus.KindRepair) {
		a.log.Info().Str("repair", a.running.job.ID).Str("deploy", deployID).Msg("a deploy supersedes the running repair")
		a.running.cancel(errSuperseded)
	}
}

// supersededBy returns the job queued after j that makes running j
// pointless: every deploy runs against the latest desired state, so of
// several queued (an agent back from an absence finds one per version it
// missed) only the last needs to run. A full deploy is superseded only by
// a full one or a repair; a repair, as while it runs, by any deploy; a dry
// run never.
func (a *Agent) supersededBy(j journal.Job) (string, bool) {
	if j.Kind != string(bus.KindDeploy) && j.Kind != string(bus.KindRepair) {
		return "", false
	}
	jobs := a.journal.Jobs()
	i := slices.IndexFunc(jobs, func(k journal.Job) bool { return k.ID == j.ID })
	if i < 0 {
		return "", false
	}
	for _, k := range jobs[i+1:] {
		switch {
		case k.Kind == string(bus.KindDeploy) && (j.Kind == string(bus.KindRepair) || k.Full || !j.Full):
			return k.ID, true
		case k.Kind == string(bus.KindRepair): // verifies and repairs everything
			return k.ID, true
		}
	}
	return "", false
}

// run deploys (or dry-runs) a job's resources and reports every result.
// A job cut short by the worker stopping stays journaled and runs again;
// one superseded or finished is done.
func (a *Agent) run(parent context.Context, j journal.Job) error {
	if later, ok := a.supersededBy(j); ok {
		a.log.Info().Str("deploy", j.ID).Str("by", later).Msg("job superseded by a later one before it ran")
		body := bus.ResourceStatus{DeployID: j.ID, Generation: a.journal.Slice().Generation, Done: true, Error: errSuperseded.Error() + " " + later}
		return a.emit(a.journal.Begin().JobDone(j.ID), bus.KindResourceStatus, body)
	}
	ctx, cancel := context.WithCancelCause(parent)
	defer cancel(nil)
	// Where the agent's locks nest: enforce for the whole job, mu briefly
	// under it (lock order: enforce, then mu; see Agent).
	a.enforce.Lock()
	defer a.enforce.Unlock()
	a.mu.Lock()
	a.running = &runningJob{job: j, cancel: cancel}
	hashes := a.hashes
	a.mu.Unlock()
	defer func() {
		a.mu.Lock()
		a.running = nil
		a.mu.Unlock()
	}()

	dryRun := j.Kind == string(bus.KindDryRun)
	s := a.journal.Slice()
	var resources []model.Resource
	runs := map[model.ID]bool{}
	for _, r := range s.Resources {
		last, ok := a.journal.Applied(r.ID)
		if j.Full || !ok || last.State != model.StateDeployed || last.Hash != hashes[r.ID] {
			resources = append(resources, r)
			runs[r.ID] = true
		}
	}
	// A subscriber of a resource that runs runs too, unchanged or not: it
	// is refreshed when that resource changes.
	for _, r := range s.Resources {
		if !runs[r.ID] && slices.ContainsFunc(r.Subscribes, func(id model.ID) bool { return runs[id] }) {
			resources = append(resources, r)
		}
	}
	kind := bus.KindResourceStatus
	if dryRun {
		kind = bus.KindDryRunResult
	}
	// Stopped from outside (shutdown, another process became primary,
	// the server paused the agent): not finished; what was not done is
	// done after the restart or the resume.
	stopped := func() bool { return parent.Err() != nil || errors.Is(context.Cause(ctx), errPaused) }
	rep := newReporter(a, kind, j, s.Generation, hashes, stopped)
	go rep.loop()
	opts := engine.Options{
		Parallelism:  a.cfg.Parallelism,
		DryRun:       dryRun,
		Dependencies: a.dependencyView(),
		Open:         a.open,
	}
	if !dryRun {
		opts.BeforeApply = func(res *model.Resource, changes model.Changes) error {
			return a.journal.Begin().Intend(res.ID, hashes[res.ID], changes).Commit()
		}
	}
	start := time.Now()
	results, runErr := a.engine.Run(ctx, resources, opts, rep.add)
	interrupted := stopped()
	errText := ""
	switch {
	case interrupted:
	case errors.Is(context.Cause(ctx), errSuperseded):
		errText = errSuperseded.Error()
	case runErr != nil:
		errText = runErr.Error()
	}
	if err := rep.finish(!interrupted, errText); err != nil {
		return err
	}
	if interrupted {
		a.log.Info().Str("deploy", j.ID).Msg("job interrupted; it runs again on the next start, or when resumed")
		return nil
	}
	// Memory is handed back once: by the monitor's verification that
	// follows, if that is as large, else here.
	verifying := 0
	if !dryRun {
		a.mu.Lock()
		mon := a.mon
		a.mu.Unlock()
		if mon != nil {
			settled := make(map[model.ID]bool, len(results))
			for _, r := range results {
				if r.State == model.StateDeployed {
					settled[r.ID] = true
				}
			}
			verifying = mon.arm(false, settled)
		}
	}
	if verifying < a.cfg.ReleaseMemoryAt {
		a.releaseMemory(len(resources))
	}
	a.log.Info().Str("deploy", j.ID).Str("kind", j.Kind).Int("resources", len(resources)).Int("results", len(results)).
		Dur("took", time.Since(start)).Msg("job finished")
	return nil
}

// open returns res with its sealed values opened with the agent's
// key-agreement key, for a handler: in memory only, never journaled.
func (a *Agent) open(res *model.Resource) (model.Resource, error) {
	return secret.Open(a.journal.Kex(), res)
}

// dependencyView answers the engine's questions about requirements outside
// the resources of a run: this agent's own resources by their last result,
// other agents' by what the server reported.
func (a *Agent) dependencyView() engine.Dependencies {
	return depFunc(func(ctx context.Context, id model.ID) (model.ResourceState, error) {
		if id.Agent == a.cfg.Name {
			last, ok := a.journal.Applied(id)
			if !ok {
				return model.StateSkipped, nil
			}
			return last.State, nil
		}
		return a.deps.wait(ctx, id)
	})
}

type depFunc func(ctx context.Context, id model.ID) (model.ResourceState, error)

func (f depFunc) Wait(ctx context.Context, id model.ID) (model.ResourceState, error) {
	return f(ctx, id)
}

// dependencies holds what the server said about other agents' resources.
type dependencies struct {
	mu     sync.Mutex
	states map[model.ID]model.ResourceState
	// at is when the server issued each state: an older word on a
	// resource (reordered, or replayed) does not overwrite a newer one.
	at      map[model.ID]time.Time
	changed chan struct{}
}

func newDependencies() *dependencies {
	return &dependencies{states: map[model.ID]model.ResourceState{}, at: map[model.ID]time.Time{}, changed: make(chan struct{})}
}

func (d *dependencies) set(id model.ID, st model.ResourceState, at time.Time) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if at.Before(d.at[id]) {
		return
	}
	d.states[id], d.at[id] = st, at
	close(d.changed)
	d.changed = make(chan struct{})
}

// wait blocks until the server reported a final state for id.
func (d *dependencies) wait(ctx context.Context, id model.ID) (model.ResourceState, error) {
	for {
		d.mu.Lock()
		st, ok := d.states[id]
		ch := d.changed
		d.mu.Unlock()
		if ok && st.Done() {
			return st, nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return "", ctx.Err()
		}
	}
}
