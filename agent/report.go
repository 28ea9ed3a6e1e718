package agent

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/tetherhq/tether/bus"
	"github.com/tetherhq/tether/model"
)

// reporter streams a run's results to the server in batches: a batch leaves
// when it holds StatusBatch results or StatusLinger after its first result,
// whichever comes first, so results arrive within milliseconds without one
// signed message per resource.
type reporter struct {
	a        *Agent
	kind     bus.Kind
	deployID string
	gen      int64

	results chan model.Result
	// final carries the run's error text; finish fills it before closing
	// results, so loop finds it when results ends.
	final   chan string
	stopped chan error
}

func newReporter(a *Agent, kind bus.Kind, deployID string, gen int64) *reporter {
	return &reporter{
		a: a, kind: kind, deployID: deployID, gen: gen,
		results: make(chan model.Result, a.cfg.StatusBatch),
		final:   make(chan string, 1),
		stopped: make(chan error, 1),
	}
}

// add is the engine's report callback.
func (r *reporter) add(res model.Result) { r.results <- res }

// loop batches results until finish closes the channel.
func (r *reporter) loop(ctx context.Context) {
	var batch []model.Result
	var linger <-chan time.Time
	var err error
	send := func(done bool, errText string) {
		if err == nil {
			err = r.send(ctx, batch, done, errText)
		}
		batch, linger = nil, nil
	}
	for {
		select {
		case res, ok := <-r.results:
			if !ok {
				send(true, <-r.final)
				r.stopped <- err
				return
			}
			batch = append(batch, res)
			if len(batch) == 1 {
				linger = time.After(r.a.cfg.StatusLinger)
			}
			if len(batch) >= r.a.cfg.StatusBatch {
				send(false, "")
			}
		case <-linger:
			send(false, "")
		}
	}
}

// finish sends what is left as the run's last batch.
func (r *reporter) finish(ctx context.Context, errText string) error {
	r.final <- errText
	close(r.results)
	select {
	case err := <-r.stopped:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (r *reporter) send(ctx context.Context, batch []model.Result, done bool, errText string) error {
	body := bus.ResourceStatus{DeployID: r.deployID, Generation: r.gen, Results: batch, Done: done, Error: errText}
	// Until the journal's outbox exists, a failed publish is retried here
	// while the agent runs.
	for pause := 100 * time.Millisecond; ; pause = min(2*pause, 5*time.Second) {
		err := r.a.publish(ctx, r.kind, body)
		if err == nil {
			return nil
		}
		r.a.log.Warn().Err(err).Dur("retry_in", pause).Msg("cannot report results")
		select {
		case <-time.After(pause):
		case <-ctx.Done():
			return fmt.Errorf("report %d results: %w", len(batch), ctx.Err())
		}
	}
}

// dependencies holds what the server said about other agents' resources.
type dependencies struct {
	mu      sync.Mutex
	states  map[model.ID]model.ResourceState
	changed chan struct{}
}

func newDependencies() *dependencies {
	return &dependencies{states: map[model.ID]model.ResourceState{}, changed: make(chan struct{})}
}

func (d *dependencies) set(id model.ID, st model.ResourceState) {
	d.mu.Lock()
	d.states[id] = st
	close(d.changed)
	d.changed = make(chan struct{})
	d.mu.Unlock()
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
