package compile

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/tetherhq/tether/model"
	"github.com/tetherhq/tether/model/lang"
	"github.com/tetherhq/tether/server/compile/queue"
	"github.com/tetherhq/tether/server/event"
	"github.com/tetherhq/tether/server/record"
)

// compile is the compile queue's function: it compiles env once, records
// the report, and stores and releases what the policy says.
func (cc *Compiler) compile(ctx context.Context, env string, b queue.Batch) error {
	// An environment without a source compiles nothing and reports
	// nothing: its agents' triggers are folded and dropped here.
	has, err := cc.cfg.Sources.Has(ctx, env)
	if err != nil {
		return fmt.Errorf("compile %s: cannot tell whether it has a source: %w", env, err)
	}
	if !has {
		return nil
	}
	release, err := cc.takeCompileLease(ctx, env)
	if err != nil {
		return fmt.Errorf("compile %s: take the compile lease: %w", env, err)
	}
	defer release()
	c, err := cc.store.StartCompile(ctx, record.Compile{Env: env, Triggers: b.Triggers})
	if err != nil {
		return err
	}
	cc.feed.Publish(event.Event{Kind: event.CompileStarted, Env: env, Compile: &c})
	ph := &phases{}
	// An operator's request compiles whatever the inputs: to see a
	// report of the model as it is, or after something the inputs do
	// not see changed.
	force := slices.ContainsFunc(b.Triggers, func(t record.Trigger) bool { return t.Kind == record.TriggerOperator })
	cc.runCompile(ctx, &c, force, ph)
	cc.counted(c.Outcome)
	cc.log.Info().Str("env", env).Str("compile", c.ID).Str("outcome", string(c.Outcome)).Int64("version", c.Version).Str("same_as", c.SameAs).
		Dur("fetch", ph.fetch).Dur("inventory", ph.inventory).Dur("compile", ph.compile).Dur("store", ph.store).Dur("release", ph.release).Dur("fanout", ph.fanout).
		Msg("compile finished")
	// The report is written even when the server stops: a compile left
	// running is marked failed only at the next start.
	done, err := cc.store.FinishCompile(context.WithoutCancel(ctx), c)
	if err != nil {
		return err
	}
	cc.alertCompile(context.WithoutCancel(ctx), done)
	if _, err := cc.store.PruneCompiles(context.WithoutCancel(ctx), env, compileReportsKept); err != nil {
		cc.log.Warn().Err(err).Str("env", env).Msg("cannot prune old compile reports")
	}
	cc.feed.Publish(event.Event{Kind: event.CompileFinished, Env: env, Compile: &done})
	if done.Outcome == record.CompileFailed {
		return fmt.Errorf("compile %s: %s", env, firstError(done.Diagnostics))
	}
	return nil
}

// phases are how long each step of a compile took, for the log.
type phases struct {
	fetch, inventory, compile, store, release, fanout time.Duration
}

func since(d *time.Duration, t time.Time) { *d = time.Since(t) }

// fail ends c failed, saying why.
func fail(c *record.Compile, format string, args ...any) {
	c.Outcome, c.Version, c.SameAs = record.CompileFailed, 0, ""
	c.Diagnostics = append(c.Diagnostics, record.CompileDiagnostic{Severity: string(lang.SeverityError), Message: fmt.Sprintf(format, args...)})
}

// runCompile fetches, compiles, stores and releases, and says how it went
// in c: its outcome, revision and result.
func (cc *Compiler) runCompile(ctx context.Context, c *record.Compile, force bool, ph *phases) {
	// Fetching and compiling share the compile's time limit.
	deadline := time.Now().Add(cc.cfg.Timeout)
	fetchCtx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	t := time.Now()
	e, in, opts, err := cc.readInputs(ctx, c.Env)
	if err != nil {
		fail(c, "%v", err)
		return
	}
	since(&ph.inventory, t)
	if !force && cc.resolveUnchanged(ctx, fetchCtx, c, &in, ph) {
		return
	}
	t = time.Now()
	co, err := cc.cfg.Sources.Checkout(fetchCtx, c.Env)
	ph.fetch += time.Since(t)
	if err != nil {
		cc.fetchFailed(fetchCtx, c, err)
		return
	}
	if co.Release != nil {
		defer co.Release()
	}
	c.Revision, in.Revision, in.Source = co.Revision, co.Revision, co.Source
	for _, w := range co.Warnings {
		c.Diagnostics = append(c.Diagnostics, record.CompileDiagnostic{Severity: string(lang.SeverityWarning), Message: w})
	}
	dir := co.Dir
	left := time.Until(deadline)
	if left <= 0 {
		fail(c, "the source took the whole compile timeout (%s) to fetch", cc.cfg.Timeout)
		return
	}
	opts.Timeout = left
	t = time.Now()
	res, err := lang.Compile(ctx, dir, opts)
	since(&ph.compile, t)
	if !compiled(c, dir, res, err) || !cc.declare(ctx, c, res) {
		return
	}
	cc.storeAndRelease(ctx, c, e, in, res, ph)
}

// declare hands the machines the model of c declares to the server's
// room of machines, whose diagnostics join c's: a declaration it refuses
// fails c, as a resource the server refuses would. It reports whether c
// goes on.
func (cc *Compiler) declare(ctx context.Context, c *record.Compile, res *lang.Result) bool {
	if cc.machines == nil {
		return true
	}
	var d model.DeclaredMachines
	if res.Machines != nil {
		d = *res.Machines
	}
	diags, err := cc.machines.Declare(ctx, c.Env, d, "compile "+c.ID)
	c.Diagnostics = append(c.Diagnostics, diags...)
	if err != nil {
		fail(c, "make the machines the model declares: %v", err)
		return false
	}
	if slices.ContainsFunc(diags, func(d record.CompileDiagnostic) bool { return d.Severity == string(lang.SeverityError) }) {
		c.Outcome, c.Version, c.SameAs = record.CompileFailed, 0, ""
		return false
	}
	return true
}

// readInputs reads what env's compile depends on besides the model's
// files: the environment, its live inventory, and the compiler's options.
func (cc *Compiler) readInputs(ctx context.Context, env string) (record.Environment, compileInputs, lang.Options, error) {
	agents, err := cc.store.ListAgents(ctx, env)
	if err != nil {
		return record.Environment{}, compileInputs{}, lang.Options{}, fmt.Errorf("read the inventory: %w", err)
	}
	inv := record.Inventory(agents)
	e, err := cc.store.GetEnv(ctx, env)
	if err != nil {
		return record.Environment{}, compileInputs{}, lang.Options{}, fmt.Errorf("read the environment's settings: %w", err)
	}
	// A module on the server's disk is read only where file:// sources are
	// allowed: a commit must not make the server read its repositories.
	local, _ := cc.cfg.Sources.(interface{ allowsLocal() bool })
	opts := lang.Options{Inventory: &inv, NoLocalModules: local == nil || !local.allowsLocal()}
	in := compileInputs{Format: 1, Compiler: compilerBuild(), Env: e.Incarnation(), Settings: e.Settings, Inventory: inv, Vars: opts.Vars,
		NoLocalModules: opts.NoLocalModules}
	return e, in, opts, nil
}

// resolveUnchanged asks the source which revision it names, from a
// listing: nothing is fetched for a compile that would read what the last
// one read. It reports whether c ended: skipped, or failed.
func (cc *Compiler) resolveUnchanged(ctx, fetchCtx context.Context, c *record.Compile, in *compileInputs, ph *phases) (ended bool) {
	t := time.Now()
	res, err := cc.cfg.Sources.Resolve(fetchCtx, c.Env)
	if err != nil {
		since(&ph.fetch, t)
		cc.fetchFailed(fetchCtx, c, err)
		return true
	}
	c.Revision, in.Revision, in.Source = res.Revision, res.Revision, res.Source
	skipped, err := cc.skipUnchanged(ctx, c, *in)
	since(&ph.fetch, t)
	if err != nil {
		fail(c, "%v", err)
		return true
	}
	return skipped
}

// fetchFailed ends c failed for a source that could not be fetched or
// resolved under fetchCtx.
func (cc *Compiler) fetchFailed(fetchCtx context.Context, c *record.Compile, err error) {
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(fetchCtx.Err(), context.DeadlineExceeded) {
		fail(c, "fetch the source: not done within the compile timeout (%s): %v", cc.cfg.Timeout, err)
		return
	}
	fail(c, "fetch the source: %v", err)
}

// compiled records in c what the compiler said of the model in dir, and
// reports whether it compiled.
func compiled(c *record.Compile, dir string, res *lang.Result, err error) bool {
	var le *lang.Error
	switch {
	case errors.As(err, &le):
		c.Outcome = record.CompileFailed
		c.Diagnostics = append(c.Diagnostics, diagnostics(dir, le.Diagnostics)...)
		return false
	case err != nil:
		fail(c, "%v", err)
		return false
	}
	c.Diagnostics = append(c.Diagnostics, diagnostics(dir, res.Warnings)...)
	c.ResourcesPerAgent = map[string]int{}
	for _, h := range res.Hosts {
		c.ResourcesPerAgent[h.Agent] += h.Resources
	}
	for _, u := range res.Undefined {
		name := u.ID
		if name == "" {
			name = u.Block
		}
		facts := make([]string, 0, len(u.Missing))
		for _, f := range u.Missing {
			facts = append(facts, f.String())
		}
		c.Undefined = append(c.Undefined, record.UndefinedBlock{Name: name, Facts: facts})
	}
	return true
}

// storeAndRelease stores what the compile of c made as a version of e,
// unless the released version holds it, and releases it when e's
// settings say so.
func (cc *Compiler) storeAndRelease(ctx context.Context, c *record.Compile, e record.Environment, in compileInputs, res *lang.Result, ph *phases) {
	releaseFailed := false
	// The inputs are those of the environment as the compile leaves it:
	// the version released after it is one of them. A git module followed
	// by branch or tag may move without the revision: such a model is
	// compiled every time.
	repeatable := !slices.ContainsFunc(res.Modules, func(m lang.Module) bool { return m.Commit != "" && m.Ref != m.Commit })
	defer func() {
		// A version stored but not released for an error is released
		// by the next compile: none is skipped before.
		if !repeatable || !c.Outcome.Succeeded() || releaseFailed {
			return
		}
		if released, err := cc.releasedRef(context.WithoutCancel(ctx), c.Env); err == nil {
			in.Released = released
			c.Inputs = in.digest()
		}
	}()

	t := time.Now()
	setHash, err := cc.export.PrepareExport(ctx, res.Resources)
	if err != nil {
		fail(c, "%v", err)
		return
	}
	released, err := cc.store.ReleasedVersion(ctx, c.Env)
	switch {
	case err == nil && released.SetHash == setHash:
		c.Outcome = record.CompileUnchanged
		return
	case err != nil && !errors.Is(err, model.ErrNotFound):
		fail(c, "read the released version: %v", err)
		return
	}
	v, _, err := cc.export.ExportPrepared(ctx, c.Env, res.Resources, model.VersionMeta{Compiler: "tether server", Source: c.Revision, ExportedBy: compileBy}, setHash)
	since(&ph.store, t)
	if err != nil {
		fail(c, "store the version: %v", err)
		return
	}
	c.Version = v.Number
	if !e.Settings.AutoRelease {
		c.Outcome = record.CompileCandidate
		return
	}
	t = time.Now()
	_, err = cc.store.Release(ctx, c.Env, v.Number)
	since(&ph.release, t)
	if err != nil {
		// Stored, not released: an operator can release it.
		c.Outcome, releaseFailed = record.CompileCandidate, true
		c.Diagnostics = append(c.Diagnostics, record.CompileDiagnostic{Severity: string(lang.SeverityWarning),
			Message: fmt.Sprintf("version %d stored but not released: %v; release it with tether version release", v.Number, err)})
		return
	}
	t = time.Now()
	// The fan-out runs in the background, as for any release: the
	// compile's report does not wait for it.
	if _, err := cc.release.StartRelease(ctx, c.Env, v.Number); err != nil {
		cc.log.Error().Err(err).Str("env", c.Env).Int64("version", v.Number).Msg("version released but its fan-out could not be recorded; agents get it on their next hello")
	}
	since(&ph.fanout, t)
	c.Outcome = record.CompileReleased
}
