// Package engine executes an agent's slice: it orders resources by their
// requirements, runs independent ones in parallel (bounded), never runs a
// resource before its requirements were deployed, marks dependants of a
// failure as skipped (naming the requirement), and reports each result as soon
// as it is known. A dry run reads and diffs but applies nothing.
package engine

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"sync"
	"time"

	"github.com/rs/zerolog"

	"github.com/tetherhq/tether/agent/handler"
	"github.com/tetherhq/tether/model"
	"github.com/tetherhq/tether/model/graph"
)

// DefaultParallelism is how many resources run at once unless told otherwise.
// Handlers mostly wait on the file system and on commands, so it is well above
// the CPU count; 32 writers let file handlers share durable flushes
// (docs/performance.md).
const DefaultParallelism = 32

// Options tune one run.
type Options struct {
	// Parallelism bounds how many resources run at once (0: DefaultParallelism).
	Parallelism int
	// DryRun reads and diffs every resource but applies nothing.
	DryRun bool
	// Dependencies resolves requirements on resources outside the slice
	// (other agents). Nil: such requirements are never met and their
	// dependants are skipped.
	Dependencies Dependencies
	// BeforeApply, when set, is called with a resource's changes just
	// before its handler applies them; an error fails the resource
	// without applying it. The agent journals its intent here, so a
	// change made just before a crash is still reported after it.
	BeforeApply func(res *model.Resource, changes model.Changes) error
	// Open, when set, returns a resource with sealed sensitive values
	// opened, in memory: it is called just before the handler sees the
	// resource, and what it returns is never kept past the resource's
	// run. An error fails the resource without reading it.
	Open func(res *model.Resource) (model.Resource, error)
}

// Dependencies reports the outcome of resources outside the slice.
type Dependencies interface {
	// Wait blocks until the resource reached a final state in the current
	// deploy and returns it.
	Wait(ctx context.Context, id model.ID) (model.ResourceState, error)
}

// Result is the outcome of one resource (the model's type, so the bus and
// the store carry it unchanged).
type Result = model.Result

// Engine runs slices with the handlers of one registry.
type Engine struct {
	reg *handler.Registry
	log zerolog.Logger
}

// New returns an engine using the handlers in reg.
func New(reg *handler.Registry, log zerolog.Logger) *Engine {
	return &Engine{reg: reg, log: log.With().Str("component", "engine").Logger()}
}

// Run executes resources and returns one result per resource, in the order of
// resources. report, when not nil, is called once per result as soon as it is
// known, never concurrently. An error is returned when the slice cannot run
// at all (a requirement cycle) or the context ended; in the latter case the
// results hold what ran and `cancelled` for the rest.
func (e *Engine) Run(ctx context.Context, resources []model.Resource, opts Options, report func(Result)) ([]Result, error) {
	g := graph.FromResources(resources)
	if g.Len() != len(resources) {
		return nil, fmt.Errorf("run: %d resources share an ID", len(resources)-g.Len())
	}
	if _, err := g.Sort(); err != nil {
		return nil, fmt.Errorf("run: %w", err)
	}
	if opts.Parallelism <= 0 {
		opts.Parallelism = DefaultParallelism
	}
	r := &run{
		engine:    e,
		ctx:       ctx,
		opts:      opts,
		resources: resources,
		g:         g,
		report:    report,
		results:   make([]Result, len(resources)),
		final:     make([]bool, len(resources)),
		changed:   make([]bool, len(resources)),
		triggers:  make([][]model.ID, len(resources)),
		pending:   make([]int, len(resources)),
		extWait:   make([]bool, len(resources)),
		done:      make(chan Result),
		extDone:   make(chan extOutcome),
	}
	return r.execute()
}

// run is the state of one Run. Only the coordinator goroutine (execute)
// touches it; workers receive an index and send back a Result.
type run struct {
	engine    *Engine
	ctx       context.Context
	opts      Options
	resources []model.Resource
	g         *graph.Graph
	report    func(Result)

	results  []Result
	final    []bool
	changed  []bool       // deployed with changes (in a dry run: would change)
	triggers [][]model.ID // per node, the subscribed resources that changed
	pending  []int        // requirements inside the slice not yet deployed
	extWait  []bool       // external requirements still being waited for
	runnable []int
	finished int
	running  int
	waiting  int // external-requirement waiters still running

	done    chan Result
	extDone chan extOutcome
}

type extOutcome struct {
	node    int
	state   model.ResourceState
	message string
}

func (r *run) execute() ([]Result, error) {
	n := len(r.resources)
	// Waiters for other agents' resources stop when the run ends, even if
	// the resource they wait for was skipped for another reason meanwhile.
	wctx, stopWaiters := context.WithCancel(r.ctx)
	var workers sync.WaitGroup
	work := make(chan int)
	defer func() {
		stopWaiters()
		for r.waiting > 0 {
			<-r.extDone
			r.waiting--
		}
		close(work)
		workers.Wait()
	}()

	for i := range r.resources {
		r.pending[i] = len(r.g.Requirements(i))
	}
	// Undefined resources never run; their dependants are skipped below.
	for i := range r.resources {
		if r.resources[i].Undefined && !r.final[i] {
			r.finish(Result{ID: r.resources[i].ID, State: model.StateUndefined,
				Message: "depends on a value not known at compile time"})
		}
	}
	for i := range r.resources {
		if r.final[i] {
			continue
		}
		if ext := r.g.External(i); len(ext) > 0 {
			r.extWait[i] = true
			r.waiting++
			go r.waitExternal(wctx, i, ext)
		} else if r.pending[i] == 0 {
			r.runnable = append(r.runnable, i)
		}
	}

	for w := 0; w < min(r.opts.Parallelism, n); w++ {
		workers.Add(1)
		go func() {
			defer workers.Done()
			r.worker(work)
		}()
	}

	for r.finished < n {
		if r.ctx.Err() != nil {
			return r.cancel()
		}
		var send chan int
		next := -1
		if len(r.runnable) > 0 && r.running < r.opts.Parallelism {
			send, next = work, r.runnable[0]
		}
		if next >= 0 {
			r.triggers[next] = r.changedSubscriptions(next)
		}
		select {
		case send <- next:
			r.runnable = r.runnable[1:]
			r.running++
		case res := <-r.done:
			r.running--
			r.finish(res)
		case x := <-r.extDone:
			r.waiting--
			r.extWait[x.node] = false
			if r.final[x.node] {
				break
			}
			if x.message != "" {
				r.finish(Result{ID: r.resources[x.node].ID, State: x.state, Message: x.message})
			} else if r.pending[x.node] == 0 {
				r.runnable = append(r.runnable, x.node)
			}
		case <-r.ctx.Done():
		}
	}
	return r.results, nil
}

// finish records a final result, reports it, and releases or skips the
// resource's dependants.
func (r *run) finish(res Result) {
	i, _ := r.g.Index(res.ID)
	if r.final[i] {
		return
	}
	r.final[i] = true
	r.finished++
	r.results[i] = res
	r.changed[i] = res.State == model.StateDeployed && len(res.Changes) > 0
	if r.report != nil {
		r.report(res)
	}
	r.engine.log.Debug().Str("resource", res.ID.String()).Str("state", string(res.State)).
		Dur("duration", res.Duration).Msg(res.Message)

	for _, d := range r.g.Dependants(i) {
		if r.final[d] {
			continue
		}
		if res.State == model.StateDeployed {
			r.pending[d]--
			if r.pending[d] == 0 && !r.extWait[d] {
				r.runnable = append(r.runnable, d)
			}
			continue
		}
		r.finish(skipFor(r.resources[d].ID, res.ID, res.State))
	}
}

// skipFor is the result of a resource whose requirement req ended in state.
func skipFor(id, req model.ID, state model.ResourceState) Result {
	switch state {
	case model.StateUndefined, model.StateSkippedForUndefined:
		return Result{ID: id, State: model.StateSkippedForUndefined,
			Message: fmt.Sprintf("requirement %s is undefined", req)}
	case model.StateCancelled:
		return Result{ID: id, State: model.StateCancelled,
			Message: fmt.Sprintf("requirement %s was cancelled", req)}
	case model.StateFailed:
		return Result{ID: id, State: model.StateSkipped,
			Message: fmt.Sprintf("requirement %s failed", req)}
	default:
		return Result{ID: id, State: model.StateSkipped,
			Message: fmt.Sprintf("requirement %s was %s", req, state)}
	}
}

// cancel waits for the resources in flight, marks the rest cancelled and
// returns the context's error.
func (r *run) cancel() ([]Result, error) {
	for r.running > 0 {
		r.finish(<-r.done)
		r.running--
	}
	for i := range r.resources {
		if !r.final[i] {
			r.finish(Result{ID: r.resources[i].ID, State: model.StateCancelled, Message: "deploy cancelled: " + r.ctx.Err().Error()})
		}
	}
	return r.results, r.ctx.Err()
}

// waitExternal waits for requirements on other agents.
func (r *run) waitExternal(ctx context.Context, i int, ext []model.ID) {
	out := extOutcome{node: i}
	for _, id := range ext {
		if r.opts.Dependencies == nil {
			out.state, out.message = model.StateSkipped,
				fmt.Sprintf("requirement %s is on agent %s and cross-agent requirements are not available here", id, id.Agent)
			break
		}
		state, err := r.opts.Dependencies.Wait(ctx, id)
		if err != nil {
			out.state, out.message = model.StateCancelled, fmt.Sprintf("waiting for %s: %v", id, err)
			break
		}
		if state != model.StateDeployed {
			res := skipFor(r.resources[i].ID, id, state)
			out.state, out.message = res.State, res.Message
			break
		}
	}
	r.extDone <- out
}

// changedSubscriptions lists the resources node i subscribes to that
// changed in this run. They are final: subscriptions order like
// requirements.
func (r *run) changedSubscriptions(i int) []model.ID {
	var out []model.ID
	for _, id := range r.resources[i].Subscribes {
		if j, ok := r.g.Index(id); ok && r.changed[j] {
			out = append(out, id)
		}
	}
	return out
}

func (r *run) worker(work <-chan int) {
	for i := range work {
		r.done <- r.engine.apply(r.ctx, &r.resources[i], r.opts, r.triggers[i])
	}
}

// apply runs one resource through its handler: validate, read, diff, apply,
// and refresh when triggers (subscribed resources that changed) are given.
func (e *Engine) apply(ctx context.Context, res *model.Resource, opts Options, triggers []model.ID) (out Result) {
	dryRun := opts.DryRun
	start := time.Now()
	out = Result{ID: res.ID, DryRun: dryRun}
	defer func() {
		if p := recover(); p != nil {
			e.log.Error().Str("resource", res.ID.String()).Interface("panic", p).Bytes("stack", debug.Stack()).Msg("handler panicked")
			out.State, out.Message = model.StateFailed, fmt.Sprintf("handler panicked: %v", p)
		}
		out.Duration = time.Since(start)
	}()

	h, ok := e.reg.Lookup(res.ID.Type)
	if !ok {
		out.State, out.Message = model.StateUnavailable, fmt.Sprintf("no handler for %q resources on this agent", res.ID.Type)
		return out
	}
	if opts.Open != nil && len(res.Sealed) > 0 {
		opened, err := opts.Open(res)
		if err != nil {
			out.State, out.Message = model.StateFailed, "sensitive values: "+err.Error()
			return out
		}
		res = &opened
	}
	if err := h.Validate(res); err != nil {
		out.State, out.Message = model.StateFailed, err.Error()
		return out
	}
	current, exists, err := h.Read(ctx, res)
	if err != nil {
		out.State, out.Message = model.StateFailed, "read: "+err.Error()
		return out
	}
	changes := handler.ComputeChanges(res, current, exists)
	out.Changes = changes.Redact(res)
	defer func() {
		if out.State == model.StateDeployed && len(triggers) > 0 {
			e.refresh(ctx, h, res, changes, triggers, &out)
		}
	}()
	if dryRun || len(changes) == 0 {
		out.State = model.StateDeployed
		return out
	}
	if opts.BeforeApply != nil {
		if err := opts.BeforeApply(res, out.Changes); err != nil {
			out.State, out.Message = model.StateFailed, "not applied: "+err.Error()
			return out
		}
	}
	if err := h.Apply(ctx, res, current, changes); err != nil {
		if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
			out.State, out.Message = model.StateCancelled, "apply: "+err.Error()
			return out
		}
		out.State, out.Message = model.StateFailed, "apply: "+err.Error()
		return out
	}
	out.State = model.StateDeployed
	return out
}

// refresh runs a deployed resource's Refresher after subscribed resources
// changed, and says so in its result; a dry run only says it would.
func (e *Engine) refresh(ctx context.Context, h handler.Handler, res *model.Resource, applied handler.Changes, triggers []model.ID, out *Result) {
	rf, ok := h.(handler.Refresher)
	if !ok {
		return
	}
	why := triggers[0].String()
	if len(triggers) > 1 {
		why = fmt.Sprintf("%s and %d more", why, len(triggers)-1)
	}
	if out.DryRun {
		out.Message = "would refresh: " + why + " would change"
		return
	}
	did, err := rf.Refresh(ctx, res, applied)
	switch {
	case err != nil:
		out.State, out.Message = model.StateFailed, "refresh after "+why+" changed: "+err.Error()
	case did != "":
		out.Message = did + " after " + why + " changed"
		out.Refreshed = true
	}
}
