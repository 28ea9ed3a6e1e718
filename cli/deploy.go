package cli

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/rs/zerolog"
	ucli "github.com/urfave/cli/v2"

	"github.com/tetherhq/tether/agent"
	"github.com/tetherhq/tether/agent/engine"
	"github.com/tetherhq/tether/agent/facts"
	"github.com/tetherhq/tether/agent/handler"
	"github.com/tetherhq/tether/agent/handler/builtin"
	"github.com/tetherhq/tether/bus"
	"github.com/tetherhq/tether/model"
	"github.com/tetherhq/tether/model/lang"
	"github.com/tetherhq/tether/server"
	"github.com/tetherhq/tether/server/store/sqlite"
)

// embeddedEnv is the environment of the embedded mode.
const embeddedEnv = "local"

// onlineTimeout bounds how long the embedded agents may take to come up.
const onlineTimeout = 30 * time.Second

func deployCommand(term *terminal) *ucli.Command {
	return &ucli.Command{
		Name:      "deploy",
		Usage:     "compile a model and deploy it on this machine (embedded mode)",
		UsageText: "tether deploy [DIR] [--dry-run | --watch [--drift-policy heal]] [--var name=value]... [--root DIR] [-o json]",
		Description: "Runs the whole pipeline in one process: compiles the model in DIR (default: the current\n" +
			"directory), stores it as a version in an SQLite file under DIR/.tether/deploy/, and deploys\n" +
			"every host of the model on this machine with local agents. Every resource is verified:\n" +
			"what drifted since the last deploy is repaired. Exits 1 if a resource failed, 2 if the\n" +
			"model does not compile.\n\n" +
			"With --watch the pipeline keeps running after the deploy: the agents watch what they\n" +
			"deployed and every drift (a file edited, a package removed, a service stopped) is shown\n" +
			"as it happens; under --drift-policy heal it is re-applied at once. Ctrl-C stops. With\n" +
			"-o json, --watch prints one JSON value per line: the deploy's report, then each event.\n\n" +
			"Examples:\n" +
			"   tether deploy examples/quickstart\n" +
			"   tether deploy examples/quickstart --dry-run          # show what would change\n" +
			"   tether deploy examples/quickstart --root /tmp/sandbox  # write every path below /tmp/sandbox\n" +
			"   tether deploy examples/quickstart --watch --drift-policy heal  # then edit a file it wrote",
		Flags: append(modelFlags(),
			&ucli.BoolFlag{Name: "dry-run", Usage: "report what would change, change nothing"},
			&ucli.StringFlag{Name: "root", Usage: "prefix every path the handlers touch with `DIR` (a sandbox)"},
			&ucli.StringFlag{Name: "state-dir", Usage: "keep the embedded store in `DIR` (default: DIR/.tether/deploy)"},
			&ucli.IntFlag{Name: "parallel", Value: engine.DefaultParallelism, Usage: "deploy at most `N` resources at once per agent"},
			&ucli.BoolFlag{Name: "recompile", Usage: "compile the model even if nothing it reads changed since the last deploy"},
			&ucli.BoolFlag{Name: "watch", Usage: "keep running after the deploy and show drift and healing live (Ctrl-C stops)"},
			&ucli.StringFlag{Name: "drift-policy", Usage: "what the agents do about drift: `alert` (report it) or heal (re-apply it); kept for later deploys"},
			outputFlag(),
		),
		Action: func(c *ucli.Context) error {
			format, err := outputFormat(c)
			if err != nil {
				return err
			}
			if c.Int("parallel") < 1 {
				return usageError("--parallel must be at least 1")
			}
			if c.Bool("watch") && c.Bool("dry-run") {
				return usageError("--watch watches what a deploy leaves on the machine, and a dry run leaves nothing: drop --dry-run or --watch")
			}
			policy := model.DriftPolicy(c.String("drift-policy"))
			if policy != "" && policy != model.DriftAlert && policy != model.DriftHeal {
				return usageError("--drift-policy %q: want alert or heal", policy)
			}
			log, err := logger(c, term.stderr)
			if err != nil {
				return err
			}
			dir, err := modelDir(c)
			if err != nil {
				return err
			}
			copts, err := compileOptions(c)
			if err != nil {
				return err
			}
			opts := embeddedOptions{
				dir:      dir,
				compile:  copts,
				stateDir: c.String("state-dir"),
				root:     c.String("root"),
				dryRun:   c.Bool("dry-run"),
				parallel: c.Int("parallel"),
				progress: term.progress && format == "table",
				watch:    c.Bool("watch"),
				policy:   policy,
				json:     format == "json",
			}
			if opts.stateDir == "" {
				opts.stateDir = filepath.Join(dir, ".tether", "deploy")
			}
			// Compile first (unless nothing the model reads changed): a
			// model that does not compile leaves no state behind.
			m := &embeddedModel{}
			if !c.Bool("recompile") {
				if cache := loadCompileCache(opts.stateDir, dir, copts); cache != nil {
					m.cached(cache)
				}
			}
			if m.cache == nil {
				res, err := compileDir(c.Context, term, dir, copts)
				if err != nil {
					return err
				}
				m.compiled(res)
				// Parsing leaves ~15 MB of garbage (HCL's token buffers);
				// give it back now so it does not count towards the
				// rest of this short-lived process.
				debug.FreeOSMemory()
			} else {
				printWarnings(term, m.cache.Warnings)
			}
			report, err := deployEmbedded(c.Context, term, log, opts, m)
			if err != nil {
				return err
			}
			if report.Summary.Failed > 0 {
				return &exitError{code: exitFailed, err: errPrinted}
			}
			return nil
		},
	}
}

type embeddedOptions struct {
	dir, stateDir, root string
	compile             lang.Options
	dryRun              bool
	parallel            int
	progress            bool
	// watch keeps the pipeline running after the deploy, showing events.
	watch bool
	// policy, unless empty, becomes the embedded environment's drift policy.
	policy model.DriftPolicy
	// json prints the report (and, watching, the events) as JSON.
	json bool
}

// embeddedModel is the model of a deploy: freshly compiled, or known from
// the compile cache.
type embeddedModel struct {
	res   *lang.Result
	cache *compileCache
	// hosts and count describe the model either way.
	hosts []string
	count int
}

func (m *embeddedModel) compiled(res *lang.Result) {
	m.res, m.hosts, m.count = res, res.Agents(), len(res.Resources)
}

func (m *embeddedModel) cached(c *compileCache) {
	m.cache, m.hosts, m.count = c, c.Hosts, c.Resources
}

// deployReport is what a deploy prints (and, as JSON, what scripts read).
type deployReport struct {
	Dir        string            `json:"dir"`
	Env        string            `json:"env"`
	Version    int64             `json:"version"`
	NewVersion bool              `json:"new_version"`
	Compiled   bool              `json:"compiled"`
	DryRun     bool              `json:"dry_run"`
	Duration   time.Duration     `json:"duration_ns"`
	Summary    counts            `json:"summary"`
	Agents     map[string]counts `json:"agents"`
	Results    []model.Result    `json:"results"`
}

// counts tallies results by outcome.
type counts struct {
	Created   int `json:"created"`
	Changed   int `json:"changed"`
	Removed   int `json:"removed"`
	Unchanged int `json:"unchanged"`
	Failed    int `json:"failed"`
	Skipped   int `json:"skipped"`
}

// outcome names what happened to a resource, for people.
func outcome(r *model.Result) string {
	switch r.State {
	case model.StateDeployed:
		switch {
		case r.Changes.Created():
			return "created"
		case r.Changes.Removed():
			return "removed"
		case len(r.Changes) > 0:
			return "changed"
		}
		return "unchanged"
	case model.StateFailed, model.StateUnavailable:
		return "failed"
	}
	return "skipped"
}

func (c *counts) add(r *model.Result) {
	switch outcome(r) {
	case "created":
		c.Created++
	case "removed":
		c.Removed++
	case "changed":
		c.Changed++
	case "unchanged":
		c.Unchanged++
	case "failed":
		c.Failed++
	default:
		c.Skipped++
	}
}

// deployEmbedded runs store → schedule → bus → agents → status in this
// process for a compiled (or cached) model and returns the results.
func deployEmbedded(ctx context.Context, term *terminal, log zerolog.Logger, o embeddedOptions, m *embeddedModel) (*deployReport, error) {
	start := time.Now()
	report := &deployReport{Dir: o.dir, Env: embeddedEnv, DryRun: o.dryRun, Agents: map[string]counts{}}
	if len(m.hosts) == 0 {
		fmt.Fprintf(term.stderr, "tether: the model in %s declares no host: nothing to deploy\n", o.dir)
		return report, report.show(term, o.json, false)
	}
	// The host's facts (the handlers' providers come from them) are
	// gathered while the store opens and the version is stored.
	gather := facts.Cached(10*time.Second, facts.Gather)
	gathered := make(chan map[string]any, 1)
	go func() { gathered <- gather(ctx) }()
	if err := os.MkdirAll(o.stateDir, 0o700); err != nil {
		return nil, fmt.Errorf("create the embedded store's directory: %w: pass --state-dir DIR to keep it elsewhere", err)
	}
	st, err := sqlite.Open(ctx, filepath.Join(o.stateDir, "tether.db"), sqlite.Options{})
	if err != nil {
		return nil, err
	}
	defer st.Close()

	b := bus.NewLocal(log)
	defer b.Close()
	srv, err := server.New(server.Config{}, st, b, log)
	if err != nil {
		return nil, err
	}
	settings := model.DefaultEnvSettings()
	settings.AutoDeploy = false // this command asks for exactly one deploy or dry run
	settings.Enrollment = model.EnrollOpen
	env, err := srv.EnsureEnv(ctx, embeddedEnv, settings)
	if err != nil {
		return nil, err
	}
	if o.policy != "" {
		env, err = srv.UpdateEnvSettings(ctx, embeddedEnv, func(s *model.EnvSettings) error {
			s.DriftPolicy = o.policy
			return nil
		})
		if err != nil {
			return nil, err
		}
	}
	v, reused, err := exportModel(ctx, term, st, srv, o, m)
	if err != nil {
		return nil, err
	}
	if _, err := srv.Release(ctx, embeddedEnv, v.Number); err != nil {
		return nil, err
	}
	report.Version, report.NewVersion, report.Compiled = v.Number, !reused, m.res != nil
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
	if o.watch {
		releaseAt = 0
	}
	for _, h := range hosts {
		reg, err := builtin.Registry(handler.Runtime{Root: o.root, Sync: handler.NewSyncGroup(), PackageManager: pm, ServiceManager: sm})
		if err != nil {
			cancel()
			wg.Wait()
			return nil, err
		}
		// Without --watch the process ends with the deploy: nobody would
		// hear about drift.
		a, err := agent.New(agent.Config{Env: embeddedEnv, Name: h, Parallelism: o.parallel, ServerKey: srv.PublicKey(), Facts: gather, NoWatch: !o.watch, ReleaseMemoryAt: releaseAt}, b, reg, log)
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
	results, err := followDeploy(ctx, term, srv, sub, failed, o, hosts, m.count)
	if err == nil {
		report.tally(results, hosts)
		report.Duration = time.Since(start)
		err = report.show(term, o.json, o.watch)
	}
	if err == nil && o.watch {
		err = watchEmbedded(ctx, term, sub, failed, o.json, env.Settings.DriftPolicy, m.count, len(hosts))
	}
	cancel()
	wg.Wait()
	if err != nil {
		return nil, err
	}
	return report, nil
}

// tally adds the results to the report's counts.
func (r *deployReport) tally(results []model.Result, hosts []string) {
	r.Results = results
	for i := range results {
		res := &results[i]
		r.Summary.add(res)
		c := r.Agents[res.ID.Agent]
		c.add(res)
		r.Agents[res.ID.Agent] = c
	}
	for _, h := range hosts {
		if _, ok := r.Agents[h]; !ok {
			r.Agents[h] = counts{}
		}
	}
}

// show prints the report: a table, or JSON (on one line when events
// follow it, so that every line is one JSON value).
func (r *deployReport) show(term *terminal, asJSON, lines bool) error {
	if !asJSON {
		return r.print(term)
	}
	if !lines {
		return writeJSON(term.stdout, r)
	}
	return writeJSONLine(term.stdout, r)
}

// watchEmbedded shows the live events of the embedded environment (drift,
// healing, scheduled repairs) until ctx ends (Ctrl-C) or a part of the
// pipeline fails.
func watchEmbedded(ctx context.Context, term *terminal, sub *server.Subscription, failed <-chan error, asJSON bool, policy model.DriftPolicy, resources, hosts int) error {
	ctx, stop := endOnFailure(ctx, failed)
	defer stop(nil)
	fmt.Fprintf(term.stderr, "\nwatching %d %s on %d %s for drift (drift policy %s); Ctrl-C stops\n",
		resources, plural(resources, "resource", "resources"), hosts, plural(hosts, "agent", "agents"), policy)
	for {
		e, err := sub.Next(ctx)
		if err != nil {
			if cause := context.Cause(ctx); cause != nil && !errors.Is(cause, context.Canceled) {
				return cause
			}
			fmt.Fprintln(term.stderr, "stopped watching")
			return nil
		}
		if e.Env != embeddedEnv {
			continue
		}
		if asJSON {
			if err := writeJSONLine(term.stdout, e); err != nil {
				return err
			}
			continue
		}
		if _, err := fmt.Fprintln(term.stdout, eventLine(term, e)); err != nil {
			return err
		}
	}
}

// exportModel makes the model a version of the embedded environment: the
// cached version when the compile cache holds and the store still has it,
// else the freshly compiled resources (compiling now if the cache let us
// down), recording the compile in the cache.
func exportModel(ctx context.Context, term *terminal, st *sqlite.Store, srv *server.Server, o embeddedOptions, m *embeddedModel) (model.Version, bool, error) {
	if m.cache != nil {
		v, err := st.GetVersion(ctx, embeddedEnv, m.cache.Version, false)
		if err == nil && v.SetHash == m.cache.SetHash && v.State != model.VersionRetired {
			return v, true, nil
		}
		m.cache = nil
		res, err := compileDir(ctx, term, o.dir, o.compile)
		if err != nil {
			return model.Version{}, false, err
		}
		m.compiled(res)
	}
	abs, _ := filepath.Abs(o.dir)
	v, reused, err := srv.Export(ctx, embeddedEnv, m.res.Resources, model.VersionMeta{Compiler: readBuildInfo().Version, Source: abs, ExportedBy: "tether deploy"})
	if err != nil {
		return v, false, err
	}
	cache := &compileCache{
		Fingerprint: lang.Fingerprint(m.res.Inputs, o.compile, compilerSalt()),
		Inputs:      m.res.Inputs,
		Version:     v.Number,
		SetHash:     v.SetHash,
		Hosts:       m.res.Agents(),
		Resources:   len(m.res.Resources),
		Warnings:    m.res.Warnings,
	}
	if err := saveCompileCache(o.stateDir, cache); err != nil {
		// Only speed is lost: the next deploy compiles again.
		fmt.Fprintf(term.stderr, "tether: cannot write the compile cache: %v\n", err)
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
// results, drawing progress on a terminal.
func followDeploy(ctx context.Context, term *terminal, srv *server.Server, sub *server.Subscription, failed <-chan error, o embeddedOptions, hosts []string, total int) ([]model.Result, error) {
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

	op := model.OpDeploy
	if o.dryRun {
		op = model.OpDryRun
	}
	d, err := srv.Deploy(ctx, embeddedEnv, model.DeployRequest{Operation: op, Full: true})
	if err != nil {
		return nil, err
	}
	pending := map[string]bool{}
	for _, a := range d.Agents {
		pending[a] = true
	}
	prog := newProgress(term, o.progress, total, o.dryRun)
	defer prog.done()
	var results []model.Result
	var agentErrs []string
	for len(pending) > 0 {
		e, err := next(ctx)
		if err != nil {
			return nil, err
		}
		if e.DeployID != d.ID {
			continue
		}
		switch e.Kind {
		case server.EventResult:
			results = append(results, *e.Result)
			prog.step(e.Result)
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

// progress draws one line on stderr while resources deploy.
type progress struct {
	term     *terminal
	on       bool
	total    int
	n        int
	verb     string
	lastDraw time.Time
}

func newProgress(term *terminal, on bool, total int, dryRun bool) *progress {
	verb := "deploying"
	if dryRun {
		verb = "checking"
	}
	return &progress{term: term, on: on, total: total, verb: verb}
}

func (p *progress) step(r *model.Result) {
	p.n++
	if !p.on || (time.Since(p.lastDraw) < 50*time.Millisecond && p.n < p.total) {
		return
	}
	p.lastDraw = time.Now()
	line := fmt.Sprintf("%s %d/%d  %s", p.verb, p.n, p.total, r.ID)
	if len(line) > 100 {
		line = line[:97] + "..."
	}
	fmt.Fprintf(p.term.stderr, "\r\033[K%s", line)
}

func (p *progress) done() {
	if p.on && p.n > 0 {
		fmt.Fprint(p.term.stderr, "\r\033[K")
	}
}

// maxListed bounds the resources listed by name in the table output.
const maxListed = 50

func (r *deployReport) print(term *terminal) error {
	w := term.stdout
	verbs := map[string]string{"created": "created", "changed": "changed", "removed": "removed"}
	if r.DryRun {
		verbs = map[string]string{"created": "would create", "changed": "would change", "removed": "would remove"}
	}
	colors := map[string]string{"created": green, "changed": yellow, "removed": yellow, "failed": red, "skipped": yellow}
	listed := 0
	type row struct{ color, label, id, detail string }
	var rows []row
	for i := range r.Results {
		res := &r.Results[i]
		o := outcome(res)
		if o == "unchanged" {
			continue
		}
		listed++
		if listed > maxListed {
			continue
		}
		label := o
		if v, ok := verbs[o]; ok {
			label = v
		}
		detail := res.Message
		if detail == "" && o == "changed" {
			detail = strings.Join(changedAttrs(res.Changes), ", ")
		}
		rows = append(rows, row{colors[o], label, res.ID.String(), detail})
	}
	if len(rows) > 0 {
		t := newTable(w, "OUTCOME", "RESOURCE", "DETAIL")
		for _, r := range rows {
			t.paintedRow([]string{term.colour(r.color)}, r.label, r.id, r.detail)
		}
		if err := t.flush(); err != nil {
			return err
		}
		if listed > maxListed {
			fmt.Fprintf(w, "... and %d more (tether deploy -o json lists every result)\n", listed-maxListed)
		}
		fmt.Fprintln(w)
	}

	t := newTable(w, "AGENT", "CREATED", "CHANGED", "REMOVED", "UNCHANGED", "FAILED", "SKIPPED")
	for _, a := range slices.Sorted(maps.Keys(r.Agents)) {
		c := r.Agents[a]
		t.row(a, strconv.Itoa(c.Created), strconv.Itoa(c.Changed), strconv.Itoa(c.Removed), strconv.Itoa(c.Unchanged), strconv.Itoa(c.Failed), strconv.Itoa(c.Skipped))
	}
	if err := t.flush(); err != nil {
		return err
	}
	s := r.Summary
	total := s.Created + s.Changed + s.Removed + s.Unchanged + s.Failed + s.Skipped
	what := "deployed"
	if r.DryRun {
		what = "checked (dry run, nothing changed)"
	}
	version := fmt.Sprintf("version %d", r.Version)
	if !r.NewVersion {
		version += ", model unchanged"
	}
	words := [3]string{"created", "changed", "removed"}
	if r.DryRun {
		words = [3]string{"to create", "to change", "to remove"}
	}
	_, err := fmt.Fprintf(w, "\n%d %s %s in %.2fs (%s): %d %s, %d %s, %d %s, %d unchanged, %s, %d skipped\n",
		total, plural(total, "resource", "resources"), what, r.Duration.Seconds(), version,
		s.Created, words[0], s.Changed, words[1], s.Removed, words[2], s.Unchanged,
		term.paint(failColor(s.Failed), fmt.Sprintf("%d failed", s.Failed)), s.Skipped)
	return err
}

func failColor(n int) string {
	if n > 0 {
		return red + bold
	}
	return ""
}

func changedAttrs(c model.Changes) []string { return slices.Sorted(maps.Keys(c)) }
