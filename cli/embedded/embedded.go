// Package embedded runs Tether's whole pipeline in one process, as `tether
// deploy` does: an SQLite store in a state directory, the in-process bus,
// the server core, and one agent per host of the model, all enforcing on
// this machine. A run stores the model as a version (or reuses the one an
// earlier run stored for the same model), asks for exactly one deploy or
// dry run, waits for every result and, if asked, keeps the agents watching
// for drift until its context ends.
//
// The package prints nothing: the caller parses flags, compiles the model
// (showing its diagnostics), and shows the run through a Display.
package embedded

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"runtime/debug"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/rs/zerolog"

	"github.com/tetherhq/tether/agent"
	"github.com/tetherhq/tether/agent/facts"
	"github.com/tetherhq/tether/agent/handler"
	"github.com/tetherhq/tether/agent/handler/builtin"
	"github.com/tetherhq/tether/bus"
	"github.com/tetherhq/tether/model"
	"github.com/tetherhq/tether/model/lang"
	"github.com/tetherhq/tether/server"
	"github.com/tetherhq/tether/server/record"
	"github.com/tetherhq/tether/server/store/sqlite"
)

// Env is the environment of the embedded mode.
const Env = "local"

// onlineTimeout bounds how long the agents may take to come up.
const onlineTimeout = 30 * time.Second

// newBus makes a run's bus: the in-process one. A test wraps it to see
// every message that crosses it.
var newBus = func(log zerolog.Logger) runBus { return bus.NewLocal(log) }

// runBus is what a run needs of its bus.
type runBus interface {
	bus.Bus
	Close()
}

// ErrNoHosts: the model has no host, so there is nothing to deploy.
var ErrNoHosts = errors.New("the model declares no host")

// Options say what a run deploys, where its state lives and how the agents
// behave.
type Options struct {
	// Dir is the model's directory, recorded as the source of the versions.
	Dir string
	// StateDir holds the store (tether.db) and the compile cache.
	StateDir string
	// Root, if set, prefixes every path the handlers touch (a sandbox).
	Root string
	// Compile are the options the model is compiled with, part of the
	// compile cache's key.
	Compile lang.Options
	// DryRun asks the agents what a deploy would change, changing nothing.
	DryRun bool
	// Parallel bounds the resources each agent deploys at once (0: the
	// engine's default).
	Parallel int
	// Watch keeps the pipeline running after the deploy, the agents
	// watching what they deployed, and passes the live events to the
	// Display until the context ends.
	Watch bool
	// Policy, unless empty, becomes the environment's drift policy, kept
	// for later runs.
	Policy model.DriftPolicy
	// Compiler names this tether build in the versions the run stores.
	Compiler string
	// Salt identifies this tether binary in the compile cache's key: a
	// rebuild, even of the same version, may compile differently.
	Salt string
	// Facts gathers this machine's facts for the agent (nil: a gatherer
	// of Run's own). A caller that gathered them already, to compile the
	// model with, passes its gatherer (facts.Cached) so they are gathered
	// once.
	Facts func(context.Context) map[string]any
}

// Validate reports options a run cannot work with.
func (o Options) Validate() error {
	switch {
	case o.Dir == "" || o.StateDir == "":
		return errors.New("embedded run: the model's directory and the state directory must be set")
	case o.Parallel < 0:
		return fmt.Errorf("embedded run: parallelism %d is negative", o.Parallel)
	case o.Watch && o.DryRun:
		return errors.New("embedded run: a dry run leaves nothing to watch")
	case o.Policy != "" && o.Policy != model.DriftAlert && o.Policy != model.DriftHeal:
		return fmt.Errorf("embedded run: drift policy %q: want alert or heal", o.Policy)
	}
	return nil
}

// Display shows a run as it goes.
type Display interface {
	// Progress is called with each result of the deploy as it arrives.
	Progress(r *model.Result)
	// Deployed is called once, with the report, when every agent has
	// answered. With Options.Watch, watching starts when it returns, under
	// the environment's drift policy.
	Deployed(r *Report, policy model.DriftPolicy) error
	// Event is called, with Options.Watch, with each live event of the
	// environment until the context ends.
	Event(e server.Event) error
	// Warn is told of a failure that costs only speed (the compile cache
	// could not be written).
	Warn(err error)
}

// Run deploys m on this machine: it opens the store in o.StateDir (taking
// its lock), stores m as a version of Env and releases it, starts the
// server and one agent per host, asks for one full deploy (or dry run) and
// collects every result. With o.Watch it then passes the environment's
// live events to d until ctx ends, and returns nil. Resources that failed
// are counted in the report, not returned as an error; an error means the
// run itself failed (the store, the server, an agent, or compiling a model
// whose cached version the store no longer holds: that error is compile's
// own). The server and the agents have stopped when it returns.
func Run(ctx context.Context, o Options, m *Model, d Display, log zerolog.Logger) (*Report, error) {
	if err := o.Validate(); err != nil {
		return nil, err
	}
	if len(m.hosts) == 0 {
		return nil, ErrNoHosts
	}
	start := time.Now()
	report := NewReport(o)
	// The host's facts (the handlers' providers come from them) are
	// gathered while the store opens and the version is stored.
	gather := o.Facts
	if gather == nil {
		gather = facts.Cached(10*time.Second, facts.Gather)
	}
	gathered := make(chan map[string]any, 1)
	go func(ctx context.Context) { gathered <- gather(ctx) }(ctx) // ctx is narrowed below
	if err := os.MkdirAll(o.StateDir, 0o700); err != nil {
		return nil, fmt.Errorf("create the embedded store's directory: %w: pass --state-dir DIR to keep it elsewhere", err)
	}
	st, err := sqlite.Open(ctx, filepath.Join(o.StateDir, "tether.db"), sqlite.Config{})
	if err != nil {
		return nil, err
	}
	defer st.Close()

	b := newBus(log)
	defer b.Close()
	srv, err := server.New(server.Config{}, st, b, log)
	if err != nil {
		return nil, err
	}
	settings := record.DefaultEnvSettings()
	settings.AutoDeploy = false // a run asks for exactly one deploy or dry run
	settings.Enrollment = record.EnrollOpen
	env, err := srv.EnsureEnv(ctx, Env, settings)
	if err != nil {
		return nil, err
	}
	if o.Policy != "" {
		env, err = srv.UpdateEnvSettings(ctx, Env, func(s *record.EnvSettings) error {
			s.DriftPolicy = o.Policy
			return nil
		})
		if err != nil {
			return nil, err
		}
	}
	v, reused, err := exportModel(ctx, st, srv, o, m, d)
	if err != nil {
		return nil, err
	}
	if _, err := srv.Release(ctx, Env, v.Number); err != nil {
		return nil, err
	}
	report.Version, report.NewVersion, report.Compiled = v.Number, !reused, m.res != nil
	if o.Root != "" && o.Root != "/" && !o.DryRun {
		var resources []model.Resource
		if m.res != nil {
			resources = m.res.Resources
		} else {
			full, err := st.GetVersion(ctx, Env, v.Number, true)
			if err != nil {
				return nil, err
			}
			resources = full.Resources
		}
		if err := prepareRoot(o.Root, resources, m.hosts); err != nil {
			return nil, err
		}
	}
	if m.res != nil {
		// The compiled resources are in the store now, and storing them
		// left encoding garbage behind: release both, for the same reason
		// as after compiling.
		m.res = nil
		debug.FreeOSMemory()
	}
	hosts := m.hosts
	sub := srv.Subscribe()
	defer sub.Close()

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	failed := make(chan error, len(hosts)+1)
	wg.Add(1)
	go func() {
		defer wg.Done()
		if err := srv.Run(ctx); err != nil && !errors.Is(err, context.Canceled) {
			failed <- fmt.Errorf("server: %w", err)
		}
	}()
	pm, sm := facts.Providers(<-gathered)
	releaseAt := -1 // the process ends with the deploy
	if o.Watch {
		releaseAt = 0
	}
	for _, h := range hosts {
		reg, err := builtin.Registry(handler.Runtime{Root: o.Root, Sync: handler.NewSyncGroup(), PackageManager: pm, ServiceManager: sm})
		if err != nil {
			cancel()
			wg.Wait()
			return nil, err
		}
		// Without watching, the run ends with the deploy: nobody would
		// hear about drift.
		a, err := agent.New(agent.Config{Env: Env, Name: h, Parallelism: o.Parallel, ServerKey: srv.PublicKey(), Facts: gather, NoWatch: !o.Watch, ReleaseMemoryAt: releaseAt}, b, reg, log)
		if err != nil {
			cancel()
			wg.Wait()
			return nil, err
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer a.Close()
			if err := a.Run(ctx); err != nil && !errors.Is(err, context.Canceled) {
				failed <- fmt.Errorf("agent %s: %w", h, err)
			}
		}()
	}
	results, err := followDeploy(ctx, srv, sub, failed, o.DryRun, d, hosts)
	if err == nil {
		report.tally(results, hosts)
		report.Duration = time.Since(start)
		err = d.Deployed(report, env.Settings.DriftPolicy)
	}
	if err == nil && o.Watch {
		err = watch(ctx, sub, failed, d)
	}
	cancel()
	wg.Wait()
	if err != nil {
		return nil, err
	}
	return report, nil
}

// watch passes the live events of the environment (drift, healing,
// scheduled repairs) to d until ctx ends (nil) or a part of the pipeline
// fails (its error).
func watch(ctx context.Context, sub *server.Subscription, failed <-chan error, d Display) error {
	ctx, stop := endOnFailure(ctx, failed)
	defer stop(nil)
	for {
		e, err := sub.Next(ctx)
		if err != nil {
			if cause := context.Cause(ctx); cause != nil && !errors.Is(cause, context.Canceled) {
				return cause
			}
			return nil
		}
		if e.Env != Env {
			continue
		}
		if err := d.Event(e); err != nil {
			return err
		}
	}
}

// exportModel makes the model a version of the embedded environment: the
// cached version when the compile cache holds and the store still has it,
// else the freshly compiled resources (compiling now if the cache let us
// down), recording the compile in the cache.
func exportModel(ctx context.Context, st *sqlite.Store, srv *server.Server, o Options, m *Model, d Display) (model.Version, bool, error) {
	if m.cache != nil {
		v, err := st.GetVersion(ctx, Env, m.cache.Version, false)
		if err == nil && v.SetHash == m.cache.SetHash && v.State != model.VersionRetired {
			return v, true, nil
		}
		m.cache = nil
		res, err := m.compile(ctx)
		if err != nil {
			return model.Version{}, false, err
		}
		m.compiled(res)
	}
	abs, _ := filepath.Abs(o.Dir)
	v, reused, err := srv.Export(ctx, Env, m.res.Resources, model.VersionMeta{Compiler: o.Compiler, Source: abs, ExportedBy: "tether deploy"})
	if err != nil {
		return v, false, err
	}
	cache := &compileCache{
		Fingerprint: lang.Fingerprint(m.res.Inputs, o.Compile, o.Salt),
		Inputs:      m.res.Inputs,
		Version:     v.Number,
		SetHash:     v.SetHash,
		Hosts:       m.res.Agents(),
		Resources:   len(m.res.Resources),
		Warnings:    m.res.Warnings,
	}
	if err := saveCompileCache(o.StateDir, cache); err != nil {
		// Only speed is lost: the next run compiles again.
		d.Warn(fmt.Errorf("cannot write the compile cache: %w", err))
	}
	return v, reused, nil
}

// endOnFailure returns a context that ends, with the error as its cause,
// when a part of the pipeline (the server, an agent) fails.
func endOnFailure(ctx context.Context, failed <-chan error) (context.Context, context.CancelCauseFunc) {
	ctx, stop := context.WithCancelCause(ctx)
	go func() {
		select {
		case err := <-failed:
			stop(err)
		case <-ctx.Done():
		}
	}()
	return ctx, stop
}

// followDeploy waits for the agents, asks for the deploy and collects its
// results, passing each to d as it comes.
func followDeploy(ctx context.Context, srv *server.Server, sub *server.Subscription, failed <-chan error, dryRun bool, d Display, hosts []string) ([]model.Result, error) {
	ctx, stop := endOnFailure(ctx, failed)
	defer stop(nil)
	next := func(ctx context.Context) (server.Event, error) {
		e, err := sub.Next(ctx)
		if err != nil {
			if cause := context.Cause(ctx); cause != nil && !errors.Is(cause, context.Canceled) && !errors.Is(cause, context.DeadlineExceeded) {
				return e, cause
			}
		}
		return e, err
	}

	waiting := map[string]bool{}
	for _, h := range hosts {
		waiting[h] = true
	}
	onlineCtx, cancelOnline := context.WithTimeout(ctx, onlineTimeout)
	for len(waiting) > 0 {
		e, err := next(onlineCtx)
		if err != nil {
			cancelOnline()
			if ctx.Err() == nil && errors.Is(err, context.DeadlineExceeded) {
				return nil, fmt.Errorf("agents %s did not come online within %v: run with --log-level debug to see why", strings.Join(slices.Sorted(maps.Keys(waiting)), ", "), onlineTimeout)
			}
			return nil, err
		}
		if e.Kind == server.EventAgentOnline {
			delete(waiting, e.Agent)
		}
	}
	cancelOnline()

	op := record.OpDeploy
	if dryRun {
		op = record.OpDryRun
	}
	dep, err := srv.Deploy(ctx, Env, record.DeployRequest{Operation: op, Full: true})
	if err != nil {
		return nil, err
	}
	pending := map[string]bool{}
	for _, a := range dep.Agents {
		pending[a] = true
	}
	var results []model.Result
	var agentErrs []string
	for len(pending) > 0 {
		e, err := next(ctx)
		if err != nil {
			return nil, err
		}
		if e.DeployID != dep.ID {
			continue
		}
		switch e.Kind {
		case server.EventResult:
			results = append(results, *e.Result)
			d.Progress(e.Result)
		case server.EventDeployDone:
			delete(pending, e.Agent)
			if e.Error != "" {
				agentErrs = append(agentErrs, e.Agent+": "+e.Error)
			}
		}
	}
	if len(agentErrs) > 0 {
		return nil, fmt.Errorf("deploy did not complete: %s", strings.Join(agentErrs, "; "))
	}
	slices.SortFunc(results, func(a, b model.Result) int { return a.ID.Compare(b.ID) })
	return results, nil
}
