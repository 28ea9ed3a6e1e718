package agent

import (
	"time"

	"github.com/tetherhq/tether/agent/journal"
	"github.com/tetherhq/tether/bus"
	"github.com/tetherhq/tether/model"
)

// reporter streams a job's results to the server in batches: a batch
// leaves when it holds StatusBatch results or StatusLinger after its first
// result, whichever comes first, so results arrive within milliseconds
// without one signed message per resource. Each batch is journaled with
// the results it carries (the resources' last results) and, for the last,
// the job's end, in one transaction.
type reporter struct {
	a      *Agent
	kind   bus.Kind
	job    journal.Job
	gen    int64
	hashes map[model.ID]model.Hash
	// interrupted says the job is being cut short from outside: results
	// it cancelled are not reported, the resources run again later.
	interrupted func() bool

	results chan model.Result
	// final carries how the job ended; finish fills it before closing
	// results, so loop finds it when results ends.
	final   chan ending
	stopped chan error
}

type ending struct {
	done    bool
	errText string
}

func newReporter(a *Agent, kind bus.Kind, job journal.Job, gen int64, hashes map[model.ID]model.Hash, interrupted func() bool) *reporter {
	return &reporter{
		a: a, kind: kind, job: job, gen: gen, hashes: hashes, interrupted: interrupted,
		results: make(chan model.Result, a.cfg.StatusBatch),
		final:   make(chan ending, 1),
		stopped: make(chan error, 1),
	}
}

// add is the engine's report callback.
func (r *reporter) add(res model.Result) { r.results <- res }

// loop batches results until finish closes the channel.
func (r *reporter) loop() {
	var batch []model.Result
	var linger <-chan time.Time
	var err error
	send := func(end ending, last bool) {
		if err == nil && (len(batch) > 0 || last) {
			err = r.send(batch, end, last)
		}
		batch, linger = nil, nil
	}
	for {
		select {
		case res, ok := <-r.results:
			if !ok {
				end := <-r.final
				send(end, end.done)
				r.stopped <- err
				return
			}
			batch = append(batch, res)
			if len(batch) == 1 {
				linger = time.After(r.a.cfg.StatusLinger)
			}
			if len(batch) >= r.a.cfg.StatusBatch {
				send(ending{}, false)
			}
		case <-linger:
			send(ending{}, false)
		}
	}
}

// finish sends what is left. done says the job finished (else it was
// interrupted and stays journaled, and results it cancelled are dropped:
// the resources run again on the next start).
func (r *reporter) finish(done bool, errText string) error {
	r.final <- ending{done: done, errText: errText}
	close(r.results)
	return <-r.stopped
}

func (r *reporter) send(batch []model.Result, end ending, last bool) error {
	dryRun := r.kind == bus.KindDryRunResult
	kept := batch[:0]
	var record []journal.Result
	for _, res := range batch {
		if res.State == model.StateCancelled && r.interrupted() {
			continue
		}
		res.Hash = r.hashes[res.ID]
		if !dryRun {
			if in, ok := r.a.journal.Intent(res.ID); ok && len(res.Changes) == 0 && res.State == model.StateDeployed && in.Hash == res.Hash {
				// Applied before a crash, reported now: the change is
				// logged once, not lost.
				res.Changes, res.Message = in.Changes, "applied before the agent restarted"
			}
			record = append(record, journal.Result{ID: res.ID, Applied: journal.Applied{Hash: res.Hash, State: res.State}})
		}
		kept = append(kept, res)
	}
	if len(kept) == 0 && !end.done {
		return nil
	}
	tx := r.a.journal.Begin()
	if len(record) > 0 {
		tx.Record(record)
	}
	if end.done {
		tx.JobDone(r.job.ID)
	}
	body := bus.ResourceStatus{DeployID: r.job.ID, Generation: r.gen, Results: kept, Done: end.done, Error: end.errText}
	return r.a.emit(tx, r.kind, body)
}
