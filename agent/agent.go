// Package agent is the process that enforces intent on a host. It connects
// outward to the bus, introduces itself (hello), keeps its slice of the
// released version up to date from the server's diffs, runs deploys and dry
// runs with the engine, and streams every result back in signed batches.
//
// This is the first cut: state lives in memory (the durable journal comes
// with the agent daemon), which is all the embedded mode needs.
package agent

import (
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"
	"os"
	"runtime"
	"sync"
	"time"

	"github.com/rs/zerolog"

	"github.com/tetherhq/tether/agent/engine"
	"github.com/tetherhq/tether/agent/handler"
	"github.com/tetherhq/tether/bus"
	"github.com/tetherhq/tether/model"
)

// Config configures one agent.
type Config struct {
	Env  string
	Name string
	// Labels are announced in hello; hostgroups select agents by them.
	Labels map[string]string
	// Parallelism bounds concurrent resources in a deploy.
	Parallelism int
	// Key is the agent's signing key (generated when nil).
	Key ed25519.PrivateKey
	// ServerKey pins the server's public key. When nil the agent trusts the
	// key the server presents in its first `enrolled` message.
	ServerKey ed25519.PublicKey
	// StatusBatch is the most results one resource.status message carries.
	StatusBatch int
	// StatusLinger is how long a partial batch waits for more results.
	StatusLinger time.Duration
}

// Default fills zero fields with defaults.
func (c *Config) Default() {
	if c.Parallelism <= 0 {
		c.Parallelism = engine.DefaultParallelism
	}
	if c.StatusBatch <= 0 {
		c.StatusBatch = 256
	}
	if c.StatusLinger <= 0 {
		c.StatusLinger = 20 * time.Millisecond
	}
}

// Validate checks the configuration.
func (c *Config) Validate() error {
	if err := model.ValidateEnvName(c.Env); err != nil {
		return fmt.Errorf("agent config: %w", err)
	}
	if err := model.ValidateAgentName(c.Name); err != nil {
		return fmt.Errorf("agent config: %w", err)
	}
	if c.ServerKey != nil && len(c.ServerKey) != ed25519.PublicKeySize {
		return errors.New("agent config: server key is not an ed25519 public key")
	}
	return nil
}

// Transport is what an agent needs of the bus.
type Transport interface {
	DeclareInbox(ctx context.Context, env, agent string) error
	ConsumeInbox(ctx context.Context, env, agent string, h bus.Handler) error
	Publish(ctx context.Context, e *bus.Envelope) error
}

// Agent enforces one agent's slice.
type Agent struct {
	cfg    Config
	bus    Transport
	reg    *handler.Registry
	engine *engine.Engine
	signer *bus.Signer
	dedup  *bus.Dedup
	deps   *dependencies
	log    zerolog.Logger

	mu        sync.Mutex
	serverKey ed25519.PublicKey
	slice     model.Slice
	// hashes are the resource hashes of slice.
	hashes map[model.ID]model.Hash
	// last is each resource's state after the latest deploy.
	last map[model.ID]model.ResourceState
	// dirty holds resources changed by desired state since they last
	// deployed successfully.
	dirty  map[model.ID]bool
	paused bool
	jobs   []job
	wake   chan struct{}
}

// job is a deploy or dry run waiting to run.
type job struct {
	id     string
	mode   bus.DeployMode
	dryRun bool
	gen    int64
}

// New returns an agent for cfg that talks over t and enforces with the
// handlers of reg.
func New(cfg Config, t Transport, reg *handler.Registry, log zerolog.Logger) (*Agent, error) {
	cfg.Default()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Key == nil {
		_, key, err := bus.GenerateKey()
		if err != nil {
			return nil, err
		}
		cfg.Key = key
	}
	log = log.With().Str("component", "agent").Str("agent", cfg.Name).Logger()
	return &Agent{
		cfg:       cfg,
		bus:       t,
		reg:       reg,
		engine:    engine.New(reg, log),
		signer:    bus.NewSigner(cfg.Key, uint64(time.Now().UnixNano())),
		dedup:     bus.NewDedup(4096),
		deps:      newDependencies(),
		log:       log,
		serverKey: cfg.ServerKey,
		slice:     model.Slice{Agent: cfg.Name},
		hashes:    map[model.ID]model.Hash{},
		last:      map[model.ID]model.ResourceState{},
		dirty:     map[model.ID]bool{},
		wake:      make(chan struct{}, 1),
	}, nil
}

// PublicKey returns the agent's public key.
func (a *Agent) PublicKey() ed25519.PublicKey { return a.signer.PublicKey() }

// Run connects, says hello and serves commands until ctx ends. It returns
// ctx's error on a clean stop, or the first error that stops it.
func (a *Agent) Run(ctx context.Context) error {
	if err := a.bus.DeclareInbox(ctx, a.cfg.Env, a.cfg.Name); err != nil {
		return fmt.Errorf("agent %s: declare inbox: %w", a.cfg.Name, err)
	}
	// The consumer and the worker stop together: when either returns, or
	// the caller's context ends.
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	errs := make(chan error, 2)
	wg.Add(2)
	go func() {
		defer wg.Done()
		errs <- a.bus.ConsumeInbox(runCtx, a.cfg.Env, a.cfg.Name, a.handle)
	}()
	go func() {
		defer wg.Done()
		errs <- a.work(runCtx)
	}()
	err := a.hello(runCtx)
	if err == nil {
		err = <-errs
	}
	cancel()
	wg.Wait()
	if ctx.Err() != nil {
		return ctx.Err() // a clean stop asked for by the caller
	}
	return err
}

func (a *Agent) hello(ctx context.Context) error {
	a.mu.Lock()
	s := a.slice
	a.mu.Unlock()
	hash, err := s.Hash()
	if err != nil {
		return err
	}
	return a.publish(ctx, bus.KindHello, bus.Hello{
		PublicKey:  a.PublicKey(),
		Labels:     a.cfg.Labels,
		Facts:      basicFacts(),
		Kinds:      a.reg.Kinds(),
		Generation: s.Generation,
		SliceHash:  hash,
	})
}

// basicFacts are the facts the first cut reports; the facts provider comes
// with the agent daemon.
func basicFacts() map[string]any {
	host, _ := os.Hostname()
	return map[string]any{"hostname": host, "os": runtime.GOOS, "arch": runtime.GOARCH, "cpus": runtime.NumCPU()}
}

func (a *Agent) publish(ctx context.Context, kind bus.Kind, body any) error {
	e, err := a.signer.Seal(kind, a.cfg.Env, a.cfg.Name, body)
	if err != nil {
		return err
	}
	if err := a.bus.Publish(ctx, e); err != nil {
		return fmt.Errorf("publish %s: %w", kind, err)
	}
	return nil
}

// handle processes one command from the inbox. Commands are handled in
// order; deploys are queued for the worker so the inbox keeps flowing
// (dependency.status must reach a deploy that waits for it).
func (a *Agent) handle(ctx context.Context, d bus.Delivery) error {
	e := d.Envelope
	if e.Env != a.cfg.Env || e.Agent != a.cfg.Name {
		return fmt.Errorf("%w: %s is addressed to %s/%s", bus.ErrReject, e, e.Env, e.Agent)
	}
	if err := a.verify(e); err != nil {
		a.log.Warn().Err(err).Str("message", e.String()).Msg("dropping a command that does not verify")
		return fmt.Errorf("%w: %w", bus.ErrReject, err)
	}
	if a.dedup.Has(e.ID) {
		return nil
	}
	err := a.command(ctx, e)
	if err == nil || errors.Is(err, bus.ErrReject) {
		a.dedup.Add(e.ID) // final: a redelivery changes nothing
	}
	return err
}

// command carries out one verified command.
func (a *Agent) command(ctx context.Context, e *bus.Envelope) error {
	switch e.Kind {
	case bus.KindEnrolled:
		return nil // verify pinned the key
	case bus.KindDesiredFull:
		var body bus.DesiredFull
		if err := e.DecodeBody(&body); err != nil {
			return fmt.Errorf("%w: %w", bus.ErrReject, err)
		}
		return a.setSlice(ctx, model.Slice{Agent: a.cfg.Name, Generation: body.Generation, Resources: body.Resources}, body.SliceHash)
	case bus.KindDesiredDiff:
		var body bus.DesiredDiff
		if err := e.DecodeBody(&body); err != nil {
			return fmt.Errorf("%w: %w", bus.ErrReject, err)
		}
		return a.applyDiff(ctx, body)
	case bus.KindDeploy, bus.KindRepair:
		var body bus.Deploy
		if err := e.DecodeBody(&body); err != nil {
			return fmt.Errorf("%w: %w", bus.ErrReject, err)
		}
		a.enqueue(job{id: body.DeployID, mode: body.Mode, gen: body.Generation})
	case bus.KindDryRun:
		var body bus.DryRun
		if err := e.DecodeBody(&body); err != nil {
			return fmt.Errorf("%w: %w", bus.ErrReject, err)
		}
		a.enqueue(job{id: body.DeployID, mode: bus.DeployFull, dryRun: true, gen: body.Generation})
	case bus.KindDependencyStatus:
		var body bus.DependencyStatus
		if err := e.DecodeBody(&body); err != nil {
			return fmt.Errorf("%w: %w", bus.ErrReject, err)
		}
		a.deps.set(body.ID, body.State)
	case bus.KindPause, bus.KindResume:
		a.mu.Lock()
		a.paused = e.Kind == bus.KindPause
		a.mu.Unlock()
		a.poke()
	default:
		a.log.Info().Str("kind", string(e.Kind)).Msg("command not handled by this agent version; ignored")
	}
	return nil
}

// verify checks a command's signature against the server key, pinning the
// key of the first `enrolled` message when none is configured.
func (a *Agent) verify(e *bus.Envelope) error {
	a.mu.Lock()
	key := a.serverKey
	a.mu.Unlock()
	if key == nil {
		if e.Kind != bus.KindEnrolled {
			return fmt.Errorf("%s arrived before enrollment: no server key to verify it with", e.Kind)
		}
		var body bus.Enrolled
		if err := e.DecodeBody(&body); err != nil {
			return err
		}
		if err := bus.Verify(e, body.ServerKey); err != nil {
			return err
		}
		a.mu.Lock()
		a.serverKey = ed25519.PublicKey(body.ServerKey)
		a.mu.Unlock()
		a.log.Info().Str("server_key", bus.Fingerprint(body.ServerKey)).Msg("enrolled; server key pinned")
		return nil
	}
	return bus.Verify(e, key)
}

func (a *Agent) setSlice(ctx context.Context, s model.Slice, want model.Hash) error {
	hashes := make(map[model.ID]model.Hash, len(s.Resources))
	list := make([]model.Hash, 0, len(s.Resources))
	for i := range s.Resources {
		r := &s.Resources[i]
		if r.ID.Agent != a.cfg.Name {
			return fmt.Errorf("%w: desired state holds %s of another agent", bus.ErrReject, r.ID)
		}
		h, err := r.Hash()
		if err != nil {
			return fmt.Errorf("%w: desired state: %w", bus.ErrReject, err)
		}
		hashes[r.ID] = h
		list = append(list, h)
	}
	if model.SetHashOf(list) != want {
		a.log.Error().Int64("generation", s.Generation).Msg("desired state does not match its hash; asking for the full state")
		return a.publish(ctx, bus.KindStateRequest, bus.StateRequest{Generation: a.generation()})
	}
	a.mu.Lock()
	for id, h := range hashes {
		if prev, ok := a.hashes[id]; !ok || prev != h {
			a.dirty[id] = true
		}
	}
	a.slice, a.hashes = s, hashes
	a.mu.Unlock()
	a.log.Debug().Int64("generation", s.Generation).Int("resources", len(s.Resources)).Msg("desired state updated")
	a.poke()
	return nil
}

func (a *Agent) applyDiff(ctx context.Context, d bus.DesiredDiff) error {
	a.mu.Lock()
	cur := a.slice
	a.mu.Unlock()
	next, err := cur.Apply(d.Diff)
	if errors.Is(err, model.ErrGenerationMismatch) {
		a.log.Info().Int64("held", cur.Generation).Int64("diff_from", d.From).Msg("diff from another generation; asking for the full state")
		return a.publish(ctx, bus.KindStateRequest, bus.StateRequest{Generation: cur.Generation})
	}
	if err != nil {
		return fmt.Errorf("%w: %w", bus.ErrReject, err)
	}
	return a.setSlice(ctx, next, d.SliceHash)
}

func (a *Agent) generation() int64 {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.slice.Generation
}

func (a *Agent) enqueue(j job) {
	a.mu.Lock()
	a.jobs = append(a.jobs, j)
	a.mu.Unlock()
	a.poke()
}

func (a *Agent) poke() {
	select {
	case a.wake <- struct{}{}:
	default:
	}
}

// work runs queued jobs, in order, once the slice they were sent for is held.
func (a *Agent) work(ctx context.Context) error {
	for {
		j, resources, ok := a.nextJob()
		if !ok {
			select {
			case <-a.wake:
				continue
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		if err := a.run(ctx, j, resources); err != nil {
			return err
		}
	}
}

// nextJob takes the first job if it can run: not paused, and the slice is
// at (or past) the job's generation.
func (a *Agent) nextJob() (job, []model.Resource, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if len(a.jobs) == 0 || a.paused || a.slice.Generation < a.jobs[0].gen {
		return job{}, nil, false
	}
	j := a.jobs[0]
	a.jobs = a.jobs[1:]
	var rs []model.Resource
	for _, r := range a.slice.Resources {
		if j.mode == bus.DeployFull || a.dirty[r.ID] || a.last[r.ID] != model.StateDeployed {
			rs = append(rs, r)
		}
	}
	if j.gen < a.slice.Generation {
		j.gen = a.slice.Generation
	}
	return j, rs, true
}

// run deploys (or dry-runs) resources and reports every result.
func (a *Agent) run(ctx context.Context, j job, resources []model.Resource) error {
	kind := bus.KindResourceStatus
	if j.dryRun {
		kind = bus.KindDryRunResult
	}
	rep := newReporter(a, kind, j.id, j.gen)
	go rep.loop(ctx)
	start := time.Now()
	results, runErr := a.engine.Run(ctx, resources, engine.Options{
		Parallelism:  a.cfg.Parallelism,
		DryRun:       j.dryRun,
		Dependencies: a.dependencyView(),
	}, rep.add)
	if !j.dryRun {
		a.mu.Lock()
		for _, r := range results {
			a.last[r.ID] = r.State
			if r.State == model.StateDeployed {
				delete(a.dirty, r.ID)
			}
		}
		a.mu.Unlock()
	}
	errText := ""
	if runErr != nil {
		errText = runErr.Error()
	}
	if err := rep.finish(ctx, errText); err != nil {
		return err
	}
	a.log.Info().Str("deploy", j.id).Bool("dry_run", j.dryRun).Int("resources", len(resources)).
		Dur("took", time.Since(start)).Msg("deploy finished")
	if ctx.Err() != nil {
		return ctx.Err()
	}
	return nil
}

// dependencyView answers the engine's questions about requirements outside
// the resources of a run: this agent's own resources by their last state,
// other agents' by what the server reported.
func (a *Agent) dependencyView() engine.Dependencies {
	return depFunc(func(ctx context.Context, id model.ID) (model.ResourceState, error) {
		if id.Agent == a.cfg.Name {
			a.mu.Lock()
			st, ok := a.last[id]
			a.mu.Unlock()
			if !ok {
				return model.StateSkipped, nil
			}
			return st, nil
		}
		return a.deps.wait(ctx, id)
	})
}

type depFunc func(ctx context.Context, id model.ID) (model.ResourceState, error)

func (f depFunc) Wait(ctx context.Context, id model.ID) (model.ResourceState, error) {
	return f(ctx, id)
}
