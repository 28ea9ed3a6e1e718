package server

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime/debug"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/tetherhq/tether/model"
	"github.com/tetherhq/tether/model/lang"
	"github.com/tetherhq/tether/server/compilequeue"
	"github.com/tetherhq/tether/server/record"
)

// Server-side compiles: the server compiles an environment's model itself
// when something asks (an operator, an agent accepted or rejected, an
// agent's facts or labels that changed), from the source Config.Sources
// gives it, with the environment's live inventory. The compile queue folds
// the triggers (one compile running per environment, one waiting); a lease
// in the store ("compile/ENV") makes the replicas of a server take turns,
// so two never compile one environment at once, and no trigger a replica
// received is dropped for another's compile.

// Sources is where the server reads environments' models: a git repository
// or an uploaded archive. The server does not know which: it asks for the
// model's files at the revision the source names now.
type Sources interface {
	// Has reports whether env has a source to compile.
	Has(ctx context.Context, env string) (bool, error)
	// Resolve says which revision env's source names now, cheaply (a
	// listing of a repository's refs), without fetching it: a compile
	// that would read what the last one read is skipped before anything
	// is fetched, and polls ask it.
	Resolve(ctx context.Context, env string) (Resolved, error)
	// Checkout makes env's model ready to compile.
	Checkout(ctx context.Context, env string) (Checkout, error)
}

// Resolved is the revision a source names now.
type Resolved struct {
	// Revision is a commit id, an archive's hash. It may name what
	// Checkout finds (an annotated tag the listing does not peel): the
	// compile then runs.
	Revision string
	// Source is as Checkout's.
	Source string
}

// Checkout is an environment's model, ready to compile.
type Checkout struct {
	// Dir holds the model's files. The compile reads them (and may write
	// its module cache there); nothing else changes them until Release.
	Dir string
	// Revision is what Dir holds: a commit id, an archive's hash.
	Revision string
	// Source says what, besides the revision, decides the files: the
	// kind of source, a repository's URL, ref and sub-directory, the
	// limits; never credentials. It is one of the compile's inputs.
	Source string
	// Warnings go to the compile's report: what went wrong without
	// failing the checkout (a cache that could not be used).
	Warnings []string
	// Release is called once the compile is done with Dir (nil: nothing
	// to do).
	Release func()
}

// ErrNoSource: the environment has no source to compile, or the server
// compiles none (no Sources).
var ErrNoSource = errors.New("no source to compile")

// compileReportsKept is how many compile reports an environment keeps:
// older ones are deleted after each compile.
const compileReportsKept = 1000

// compileBy is who a server-side compile's versions say exported them.
const compileBy = "server compile"

// RequestCompile asks for a compile of env on behalf of by (an operator's
// token). It returns at once: the compile's report is in ListCompiles when
// it ends. An environment without a source is refused (model.ErrConflict,
// wrapping ErrNoSource), as is any when the server compiles nothing.
func (s *Server) RequestCompile(ctx context.Context, env, by string) (record.CompileRequest, error) {
	if _, err := s.store.GetEnv(ctx, env); err != nil {
		return record.CompileRequest{}, err
	}
	q := s.compiles.Load()
	if s.cfg.Sources == nil {
		return record.CompileRequest{}, fmt.Errorf("%w: %w: this server compiles no models (it was started without sources)", model.ErrConflict, ErrNoSource)
	}
	if q == nil {
		return record.CompileRequest{}, fmt.Errorf("%w: compile %s: the server is not running", model.ErrUnavailable, env)
	}
	has, err := s.cfg.Sources.Has(ctx, env)
	if err != nil {
		return record.CompileRequest{}, fmt.Errorf("compile %s: %w", env, err)
	}
	if !has {
		return record.CompileRequest{}, fmt.Errorf("%w: %w: environment %s has none: give it a source first", model.ErrConflict, ErrNoSource, env)
	}
	if err := q.Trigger(env, record.Trigger{Kind: record.TriggerOperator, By: by}); err != nil {
		return record.CompileRequest{}, fmt.Errorf("%w: compile %s: %w", model.ErrUnavailable, env, err)
	}
	running, queued := q.Pending(env)
	return record.CompileRequest{Env: env, Running: running, Queued: queued}, nil
}

// triggerCompile asks for a compile of env when the server compiles; what
// cannot be asked is logged, not returned: it is a consequence of
// something that happened already. Whether env has a source is asked once
// per folded batch, by compile, not here: this runs on the ingest path,
// once per agent whose facts changed.
func (s *Server) triggerCompile(_ context.Context, env string, t record.Trigger) {
	q := s.compiles.Load()
	if q == nil {
		return
	}
	if err := q.Trigger(env, t); err != nil && !errors.Is(err, compilequeue.ErrClosed) {
		s.log.Warn().Err(err).Str("env", env).Msg("compile not asked for")
	}
}

// ListCompiles returns env's newest compile reports, newest first.
func (s *Server) ListCompiles(ctx context.Context, env string, limit int) ([]record.Compile, error) {
	if _, err := s.store.GetEnv(ctx, env); err != nil {
		return nil, err
	}
	return s.store.ListCompiles(ctx, env, limit)
}

// GetCompile returns one compile report of env.
func (s *Server) GetCompile(ctx context.Context, env, id string) (record.Compile, error) {
	return s.store.GetCompile(ctx, env, id)
}

// startCompiles creates the compile queue when the server compiles, after
// marking failed the compiles a stopped server left running. The queue
// lives until stop is called.
func (s *Server) startCompiles(ctx context.Context) (stop func(), err error) {
	if s.cfg.Sources == nil {
		return func() {}, nil
	}
	q, err := compilequeue.New(ctx, compilequeue.Config{Settle: s.cfg.CompileSettle}, s.compile, s.log)
	if err != nil {
		return nil, err
	}
	s.failAbandoned(ctx)
	s.compiles.Store(q)
	return func() {
		s.compiles.Store(nil)
		q.Close()
	}, nil
}

// failAbandoned marks failed the compiles left running by a server that
// stopped before they ended. Replicas take turns compiling an environment
// under its compile lease: holding it, none of them runs.
func (s *Server) failAbandoned(ctx context.Context) {
	envs, err := s.store.ListEnvs(ctx)
	if err != nil {
		s.log.Warn().Err(err).Msg("cannot list environments to mark abandoned compiles failed")
		return
	}
	for _, env := range envs {
		lease, ok, err := s.store.Lead(ctx, compileLease(env.Name))
		if err != nil || !ok {
			continue // another replica compiles it now: its compile runs
		}
		cs, err := s.store.ListCompiles(ctx, env.Name, 20)
		for _, c := range cs {
			if c.Outcome != record.CompileRunning {
				continue
			}
			c.Outcome = record.CompileFailed
			c.Diagnostics = []record.CompileDiagnostic{{Severity: string(lang.SeverityError), Message: "the server stopped before the compile ended"}}
			if _, err := s.store.FinishCompile(ctx, c); err != nil {
				s.log.Warn().Err(err).Str("env", env.Name).Str("compile", c.ID).Msg("cannot mark an abandoned compile failed")
			}
		}
		lease.Release()
		if err != nil {
			s.log.Warn().Err(err).Str("env", env.Name).Msg("cannot list compiles to mark abandoned ones failed")
		}
	}
}

func compileLease(env string) string { return "compile/" + env }

// resumeAbandoned, run by env's scheduler leader, finds compiles of env
// left running by a replica that died (none holds the compile lease): it
// marks them failed and asks for a compile with their triggers, so that
// what asked for them is not lost with the replica.
func (s *Server) resumeAbandoned(ctx context.Context, env string) {
	q := s.compiles.Load()
	if q == nil {
		return
	}
	cs, err := s.store.ListCompiles(ctx, env, 5)
	if err != nil || !slices.ContainsFunc(cs, func(c record.Compile) bool { return c.Outcome == record.CompileRunning }) {
		return
	}
	lease, ok, err := s.store.Lead(ctx, compileLease(env))
	if err != nil || !ok {
		return // a replica compiles it now
	}
	defer lease.Release()
	// Read again under the lease: a compile that ended meanwhile is not
	// abandoned.
	if cs, err = s.store.ListCompiles(ctx, env, 5); err != nil {
		return
	}
	for _, c := range cs {
		if c.Outcome != record.CompileRunning {
			continue
		}
		c.Outcome = record.CompileFailed
		c.Diagnostics = []record.CompileDiagnostic{{Severity: string(lang.SeverityError),
			Message: "the server running this compile stopped before it ended; compiled again by another"}}
		if _, err := s.store.FinishCompile(ctx, c); err != nil {
			s.log.Warn().Err(err).Str("env", env).Str("compile", c.ID).Msg("cannot mark an abandoned compile failed")
			continue
		}
		s.log.Warn().Str("env", env).Str("compile", c.ID).Msg("a compile was abandoned by a stopped server; compiling again")
		for _, t := range c.Triggers {
			if err := q.Trigger(env, t); err != nil {
				s.log.Warn().Err(err).Str("env", env).Msg("cannot ask for a compile again")
			}
		}
	}
}

// takeCompileLease waits until this server holds env's compile lease.
func (s *Server) takeCompileLease(ctx context.Context, env string) (release func(), err error) {
	for {
		lease, ok, err := s.store.Lead(ctx, compileLease(env))
		if err != nil {
			return nil, err
		}
		if ok {
			return lease.Release, nil
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// compile is the compile queue's function: it compiles env once, records
// the report, and stores and releases what the policy says.
func (s *Server) compile(ctx context.Context, env string, b compilequeue.Batch) error {
	// An environment without a source compiles nothing and reports
	// nothing: its agents' triggers are folded and dropped here.
	has, err := s.cfg.Sources.Has(ctx, env)
	if err != nil {
		return fmt.Errorf("compile %s: cannot tell whether it has a source: %w", env, err)
	}
	if !has {
		return nil
	}
	release, err := s.takeCompileLease(ctx, env)
	if err != nil {
		return fmt.Errorf("compile %s: take the compile lease: %w", env, err)
	}
	defer release()
	c, err := s.store.StartCompile(ctx, record.Compile{Env: env, Triggers: b.Triggers})
	if err != nil {
		return err
	}
	s.feed.Publish(Event{Kind: EventCompileStarted, Env: env, Compile: &c})
	ph := &phases{}
	// An operator's request compiles whatever the inputs: to see a
	// report of the model as it is, or after something the inputs do
	// not see changed.
	force := slices.ContainsFunc(b.Triggers, func(t record.Trigger) bool { return t.Kind == record.TriggerOperator })
	s.runCompile(ctx, &c, force, ph)
	s.metrics.compiles.WithLabelValues(string(c.Outcome)).Inc()
	s.log.Info().Str("env", env).Str("compile", c.ID).Str("outcome", string(c.Outcome)).Int64("version", c.Version).Str("same_as", c.SameAs).
		Dur("fetch", ph.fetch).Dur("inventory", ph.inventory).Dur("compile", ph.compile).Dur("store", ph.store).Dur("release", ph.release).Dur("fanout", ph.fanout).
		Msg("compile finished")
	// The report is written even when the server stops: a compile left
	// running is marked failed only at the next start.
	done, err := s.store.FinishCompile(context.WithoutCancel(ctx), c)
	if err != nil {
		return err
	}
	s.alertCompile(context.WithoutCancel(ctx), done)
	if _, err := s.store.PruneCompiles(context.WithoutCancel(ctx), env, compileReportsKept); err != nil {
		s.log.Warn().Err(err).Str("env", env).Msg("cannot prune old compile reports")
	}
	s.feed.Publish(Event{Kind: EventCompileFinished, Env: env, Compile: &done})
	if done.Outcome == record.CompileFailed {
		return fmt.Errorf("compile %s: %s", env, firstError(done.Diagnostics))
	}
	return nil
}

// runCompile fetches, compiles, stores and releases, and says how it went
// in c: its outcome, revision and result.
// phases are how long each step of a compile took, for the log.
type phases struct {
	fetch, inventory, compile, store, release, fanout time.Duration
}

func (s *Server) runCompile(ctx context.Context, c *record.Compile, force bool, ph *phases) {
	since := func(d *time.Duration, t time.Time) { *d = time.Since(t) }
	fail := func(format string, args ...any) {
		c.Outcome, c.Version, c.SameAs = record.CompileFailed, 0, ""
		c.Diagnostics = append(c.Diagnostics, record.CompileDiagnostic{Severity: string(lang.SeverityError), Message: fmt.Sprintf(format, args...)})
	}
	// Fetching and compiling share the compile's time limit.
	deadline := time.Now().Add(s.cfg.CompileTimeout)
	fetchCtx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	fetchFailed := func(err error) {
		if errors.Is(err, context.DeadlineExceeded) || errors.Is(fetchCtx.Err(), context.DeadlineExceeded) {
			fail("fetch the source: not done within the compile timeout (%s): %v", s.cfg.CompileTimeout, err)
			return
		}
		fail("fetch the source: %v", err)
	}
	t := time.Now()
	agents, err := s.store.ListAgents(ctx, c.Env)
	if err != nil {
		fail("read the inventory: %v", err)
		return
	}
	inv := record.Inventory(agents)
	e, err := s.store.GetEnv(ctx, c.Env)
	if err != nil {
		fail("read the environment's settings: %v", err)
		return
	}
	// A module on the server's disk is read only where file:// sources are
	// allowed: a commit must not make the server read its repositories.
	local, _ := s.cfg.Sources.(interface{ allowsLocal() bool })
	opts := lang.Options{Inventory: &inv, NoLocalModules: local == nil || !local.allowsLocal()}
	in := compileInputs{Format: 1, Compiler: compilerBuild(), Env: e.Incarnation(), Settings: e.Settings, Inventory: inv, Vars: opts.Vars,
		NoLocalModules: opts.NoLocalModules}
	since(&ph.inventory, t)
	if !force {
		// The revision first, from a listing: nothing is fetched for a
		// compile that would read what the last one read.
		t = time.Now()
		res, err := s.cfg.Sources.Resolve(fetchCtx, c.Env)
		if err != nil {
			since(&ph.fetch, t)
			fetchFailed(err)
			return
		}
		c.Revision, in.Revision, in.Source = res.Revision, res.Revision, res.Source
		skipped, err := s.skipUnchanged(ctx, c, in)
		since(&ph.fetch, t)
		if err != nil {
			fail("%v", err)
			return
		}
		if skipped {
			return
		}
	}
	t = time.Now()
	co, err := s.cfg.Sources.Checkout(fetchCtx, c.Env)
	ph.fetch += time.Since(t)
	if err != nil {
		fetchFailed(err)
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
		fail("the source took the whole compile timeout (%s) to fetch", s.cfg.CompileTimeout)
		return
	}
	opts.Timeout = left
	t = time.Now()
	res, err := lang.Compile(ctx, dir, opts)
	since(&ph.compile, t)
	var le *lang.Error
	switch {
	case errors.As(err, &le):
		c.Outcome = record.CompileFailed
		c.Diagnostics = append(c.Diagnostics, diagnostics(dir, le.Diagnostics)...)
		return
	case err != nil:
		fail("%v", err)
		return
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
		if released, err := s.releasedRef(context.WithoutCancel(ctx), c.Env); err == nil {
			in.Released = released
			c.Inputs = in.digest()
		}
	}()

	t = time.Now()
	setHash, err := s.prepareExport(ctx, res.Resources)
	if err != nil {
		fail("%v", err)
		return
	}
	released, err := s.store.ReleasedVersion(ctx, c.Env)
	switch {
	case err == nil && released.SetHash == setHash:
		c.Outcome = record.CompileUnchanged
		return
	case err != nil && !errors.Is(err, model.ErrNotFound):
		fail("read the released version: %v", err)
		return
	}
	v, _, err := s.exportPrepared(ctx, c.Env, res.Resources, model.VersionMeta{Compiler: "tether server", Source: c.Revision, ExportedBy: compileBy}, setHash)
	since(&ph.store, t)
	if err != nil {
		fail("store the version: %v", err)
		return
	}
	c.Version = v.Number
	if !e.Settings.AutoRelease {
		c.Outcome = record.CompileCandidate
		return
	}
	t = time.Now()
	_, err = s.store.Release(ctx, c.Env, v.Number)
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
	if _, err := s.releases.StartRelease(ctx, c.Env, v.Number); err != nil {
		s.log.Error().Err(err).Str("env", c.Env).Int64("version", v.Number).Msg("version released but its fan-out could not be recorded; agents get it on their next hello")
	}
	since(&ph.fanout, t)
	c.Outcome = record.CompileReleased
}

// compileInputs is what a compile's outcome depends on besides the
// model's files: equal inputs (and revision) make an equal outcome, so a
// compile whose inputs are those of the last one that succeeded is
// skipped. It is kept as a digest (record.Compile.Inputs).
type compileInputs struct {
	// Format changes when what is counted changes: every compile then
	// runs once more.
	Format int `json:"format"`
	// Compiler is the server's build.
	Compiler string `json:"compiler"`
	// Source and Revision: what the files are (Checkout).
	Source   string `json:"source"`
	Revision string `json:"revision"`
	// Env is the environment's incarnation, Settings its settings (which
	// decide a release, a candidate).
	Env      string             `json:"env"`
	Settings record.EnvSettings `json:"settings"`
	// Inventory is the live inventory: accepted agents, their labels
	// and facts, whichever the model reads.
	Inventory      model.Inventory   `json:"inventory"`
	Vars           map[string]string `json:"vars"`
	NoLocalModules bool              `json:"no_local_modules"`
	// Released is the version released after the compile (number and
	// resource set): another release since (a rollback, an export)
	// makes the next compile run, as it would have before.
	Released string `json:"released"`
}

// digest is the inputs' SHA-256, of their JSON (maps in key order).
func (in compileInputs) digest() string {
	in.Inventory.Agents = slices.Clone(in.Inventory.Agents)
	slices.SortFunc(in.Inventory.Agents, func(a, b model.InventoryAgent) int { return strings.Compare(a.Name, b.Name) })
	b, err := json.Marshal(in)
	if err != nil {
		return "" // never equal to another: the compile runs
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// releasedRef names env's released version for the inputs: its number and
// resource set; "" when none is released.
func (s *Server) releasedRef(ctx context.Context, env string) (string, error) {
	v, err := s.store.ReleasedVersion(ctx, env)
	switch {
	case errors.Is(err, model.ErrNotFound):
		return "", nil
	case err != nil:
		return "", err
	}
	return fmt.Sprintf("%d %s", v.Number, v.SetHash), nil
}

// skipUnchanged ends c as skipped when its revision and inputs are those
// of the newest compile of its environment that ended, and that one
// succeeded: the report names it and keeps what it found.
func (s *Server) skipUnchanged(ctx context.Context, c *record.Compile, in compileInputs) (bool, error) {
	released, err := s.releasedRef(ctx, c.Env)
	if err != nil {
		return false, fmt.Errorf("read the released version: %w", err)
	}
	in.Released = released
	digest := in.digest()
	cs, err := s.store.ListCompiles(ctx, c.Env, 10)
	if err != nil {
		return false, fmt.Errorf("read the last compile: %w", err)
	}
	for _, p := range cs {
		if p.ID == c.ID || p.Outcome == record.CompileRunning {
			continue // this one, or one a stopped replica left
		}
		if !p.Outcome.Succeeded() || p.Inputs == "" || p.Inputs != digest || p.Revision != c.Revision {
			return false, nil
		}
		c.Outcome, c.Inputs, c.SameAs = record.CompileSkipped, digest, cmp.Or(p.SameAs, p.ID)
		c.ResourcesPerAgent, c.Undefined, c.UndefinedTotal = p.ResourcesPerAgent, p.Undefined, p.UndefinedTotal
		return true, nil
	}
	return false, nil
}

// compilerBuild names the server's build, which compiles: a compile by
// another build is never skipped for one by this one. It is the digest of
// the executable where it can be read (a development build changes
// without its version), else its version and commit.
var compilerBuild = sync.OnceValue(func() string {
	h := sha256.New()
	if bi, ok := debug.ReadBuildInfo(); ok {
		fmt.Fprintln(h, bi.Main.Path, bi.Main.Version, bi.GoVersion)
		for _, s := range bi.Settings {
			fmt.Fprintln(h, s.Key, s.Value)
		}
	}
	if exe, err := os.Executable(); err == nil {
		if f, err := os.Open(exe); err == nil {
			_, _ = io.Copy(h, f)
			f.Close()
		}
	}
	return hex.EncodeToString(h.Sum(nil))
})

// diagnostics are the compiler's diagnostics of the model in dir as a
// report keeps them, their files relative to the source's root.
func diagnostics(dir string, ds []lang.Diagnostic) []record.CompileDiagnostic {
	out := make([]record.CompileDiagnostic, 0, len(ds))
	for _, d := range ds {
		if rel, err := filepath.Rel(dir, d.File); err == nil && filepath.IsAbs(d.File) && !strings.HasPrefix(rel, "..") {
			d.File = filepath.ToSlash(rel)
		}
		msg := d.Summary
		if d.Detail != "" {
			msg += ": " + d.Detail
		}
		out = append(out, record.CompileDiagnostic{File: d.File, Line: d.Start.Line, Col: d.Start.Column, Severity: string(d.Severity), Message: msg})
	}
	return out
}

// firstError is the first error of a report's diagnostics, as file:line:col:
// message.
func firstError(ds []record.CompileDiagnostic) string {
	i := slices.IndexFunc(ds, func(d record.CompileDiagnostic) bool { return d.Severity == string(lang.SeverityError) })
	if i < 0 {
		return "failed"
	}
	return diagnosticString(ds[i])
}

func diagnosticString(d record.CompileDiagnostic) string {
	if d.File == "" {
		return d.Message
	}
	return fmt.Sprintf("%s:%d:%d: %s", d.File, d.Line, d.Col, d.Message)
}

// alertCompile raises a compile.failed alert when a compile fails after
// one that did not (the first of a streak), and a compile.recovered one
// when a compile succeeds after a streak of failures. The newest compile
// alert says where the environment stands, so the streak survives a
// restart.
func (s *Server) alertCompile(ctx context.Context, c record.Compile) {
	last, err := s.store.Alerts(ctx, record.AlertFilter{Env: c.Env, Kinds: []record.AlertKind{record.AlertCompileFailed, record.AlertCompileRecovered}, Limit: 1})
	if err != nil {
		s.log.Warn().Err(err).Str("env", c.Env).Msg("cannot read the compile alerts; none raised")
		return
	}
	failing := len(last) > 0 && last[0].Kind == record.AlertCompileFailed && last[0].Compliance == model.NonCompliant
	var a record.Alert
	kind := EventCompileAlert
	switch {
	case c.Outcome == record.CompileFailed && !failing:
		a = record.Alert{Kind: record.AlertCompileFailed, Compliance: model.NonCompliant,
			Message: fmt.Sprintf("compile %s of revision %q failed: %s", c.ID, c.Revision, firstError(c.Diagnostics))}
	case c.Outcome != record.CompileFailed && failing:
		a = record.Alert{Kind: record.AlertCompileRecovered, Compliance: model.Compliant, Version: c.Version,
			Message: fmt.Sprintf("compile %s of revision %q succeeded (%s): compiles fail no more", c.ID, c.Revision, c.Outcome)}
		kind = EventCompileRecovered
	default:
		return
	}
	a.At, a.Env = time.Now().UTC(), c.Env
	ev := Event{Kind: kind, Env: c.Env, Alert: &a, At: a.At}
	events, err := inLog(&ev)
	if err != nil {
		s.log.Error().Err(err).Str("env", c.Env).Msg("cannot record a compile alert")
		return
	}
	if err := s.store.RecordAlerts(ctx, []record.Alert{a}, events...); err != nil {
		s.log.Warn().Err(err).Str("env", c.Env).Msg("cannot record a compile alert")
		return
	}
	s.logged(ev)
}
