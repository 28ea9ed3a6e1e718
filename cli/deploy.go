package cli

import (
	"context"
	"fmt"
	"maps"
	"path/filepath"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"time"

	ucli "github.com/urfave/cli/v2"

	"github.com/tetherhq/tether/agent/engine"
	"github.com/tetherhq/tether/agent/facts"
	"github.com/tetherhq/tether/cli/agentcli"
	"github.com/tetherhq/tether/cli/embedded"
	"github.com/tetherhq/tether/model"
	"github.com/tetherhq/tether/model/lang"
	"github.com/tetherhq/tether/server"
)

func deployCommand(term *terminal) *ucli.Command {
	return &ucli.Command{
		Name:      "deploy",
		Usage:     "compile a model and deploy it on this machine (embedded mode)",
		UsageText: "tether deploy [DIR] [--host NAME] [--label key=value]... [--dry-run | --watch [--drift-policy heal]] [--var name=value]... [--root DIR] [-o json]",
		Description: "Runs the whole pipeline in one process: compiles the model in DIR (default: the current\n" +
			"directory), stores it as a version in an SQLite file under DIR/.tether/deploy/, and deploys\n" +
			"this machine's host of the model with a local agent: the host --host names, else the host\n" +
			"named like this machine's hostname, else the host named local. This machine's facts\n" +
			"(host.facts.*) are gathered here and --label gives it labels, so hostgroups select it as\n" +
			"they would an agent's host; other hosts of a fleet model are left to a server. Every resource is verified:\n" +
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
			"   tether deploy examples/quickstart --watch --drift-policy heal  # then edit a file it wrote\n" +
			"   tether deploy examples/webfarm --host web-1 --label role=web --dry-run  # one host of a fleet model",
		Flags: append(modelFlags(),
			&ucli.BoolFlag{Name: "dry-run", Usage: "report what would change, change nothing"},
			&ucli.StringFlag{Name: "root", Usage: "prefix every path the handlers touch with `DIR` (a sandbox; created, with the parent directories of the model's paths that this machine has and the model does not manage)"},
			&ucli.StringFlag{Name: "state-dir", Usage: "keep the embedded store in `DIR` (default: DIR/.tether/deploy)"},
			&ucli.IntFlag{Name: "parallel", Value: engine.DefaultParallelism, Usage: "deploy at most `N` resources at once per agent"},
			&ucli.BoolFlag{Name: "recompile", Usage: "compile the model even if nothing it reads changed since the last deploy"},
			&ucli.BoolFlag{Name: "watch", Usage: "keep running after the deploy and show drift and healing live (Ctrl-C stops)"},
			&ucli.StringFlag{Name: "drift-policy", Usage: "what the agents do about drift: `alert` (report it) or heal (re-apply it); kept for later deploys"},
			&ucli.StringFlag{Name: "host", Usage: "deploy the model's host `NAME` on this machine (default: the host named like this machine's hostname, else local)"},
			&ucli.StringSliceFlag{Name: "label", Usage: "give this machine the label `key=value` for the model's hostgroups (repeatable)"},
			agentcli.FactsDirFlag(),
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
			opts := embedded.Options{
				Dir:      dir,
				Compile:  copts,
				StateDir: c.String("state-dir"),
				Root:     c.String("root"),
				DryRun:   c.Bool("dry-run"),
				Parallel: c.Int("parallel"),
				Watch:    c.Bool("watch"),
				Policy:   policy,
				Compiler: readBuildInfo().Version,
				Salt:     compilerSalt(),
			}
			if opts.StateDir == "" {
				opts.StateDir = filepath.Join(dir, ".tether", "deploy")
			}
			// This machine is one host of the model: its facts and
			// --label make it an inventory host, and only its resources
			// are deployed.
			labels, err := localLabels(c)
			if err != nil {
				return err
			}
			candidates, err := hostCandidates(c)
			if err != nil {
				return err
			}
			candidates = likelyFirst(dir, candidates)
			// Gathered once, for the compile and then the agent.
			opts.Facts = facts.Cached(10*time.Second, facts.Host{Dir: c.String("facts-dir")}.Gather)
			here := localHost{labels: labels, facts: opts.Facts(c.Context), base: copts.Inventory}
			// Compile first (unless nothing the model reads changed): a
			// model that does not compile leaves no state behind.
			var m *embedded.Model
			if !c.Bool("recompile") {
				for _, name := range candidates {
					o := opts
					o.Compile.Inventory = here.inventory(name)
					if m = embedded.Cached(o, func(ctx context.Context) (*lang.Result, error) {
						return compileForHost(ctx, term, dir, copts, here, name)
					}); m != nil {
						opts = o
						break
					}
				}
			}
			if m == nil {
				for i, name := range candidates {
					o := copts
					o.Inventory = here.inventory(name)
					res, err := compileDir(c.Context, term, dir, o)
					if err != nil {
						return err
					}
					last := i == len(candidates)-1
					if declared := declaredHosts(res); last && !declares(res, name) && c.String("host") == "" && len(declared) > 0 {
						return usageError("the model in %s has no host for this machine (a host block named %s): pass --host NAME to deploy one of its hosts here (%s), with --label key=value for the labels its hostgroups match",
							dir, strings.Join(candidates, " or "), strings.Join(declared, ", "))
					}
					if !declares(res, name) && !last {
						continue // the next candidate may be declared
					}
					if res, err = onlyHost(res, name); err != nil {
						return err
					}
					opts.Compile = o
					m = embedded.Compiled(res)
					break
				}
				// Parsing leaves ~15 MB of garbage (HCL's token buffers);
				// give it back now so it does not count towards the
				// rest of this short-lived process.
				debug.FreeOSMemory()
			} else {
				printWarnings(term, m.Warnings())
			}
			asJSON := format == "json"
			if len(m.Hosts()) == 0 {
				fmt.Fprintf(term.stderr, "tether: the model in %s declares no host: nothing to deploy\n", dir)
				return showReport(term, embedded.NewReport(opts), asJSON, false)
			}
			display := &deployDisplay{term: term, progress: newProgress(term, term.progress && format == "table", m.Resources(), opts.DryRun),
				json: asJSON, watch: opts.Watch, resources: m.Resources(), hosts: len(m.Hosts())}
			report, err := embedded.Run(c.Context, opts, m, display, log)
			display.progress.done()
			if err != nil {
				return err
			}
			if opts.Watch {
				fmt.Fprintln(term.stderr, "stopped watching")
			}
			if report.Summary.Failed > 0 {
				return &exitError{code: exitFailed, err: errPrinted}
			}
			if n := report.Undefined(); n > 0 && !opts.DryRun {
				// Not deployed is not done: a script must not take this
				// run for a converged host.
				fmt.Fprintf(term.stderr, "tether: %d %s not deployed: %s on facts this host does not report (the DETAIL column names them); report the facts or give a default with try(...) or lookup(...)\n",
					n, plural(n, "resource was", "resources were"), plural(n, "it depends", "they depend"))
				return &exitError{code: exitFailed, err: errPrinted}
			}
			return nil
		},
	}
}

// deployReport is the report `tether deploy` prints.
type deployReport = embedded.Report

// deployDisplay shows an embedded run on the terminal: progress while it
// deploys, then the report, then (watching) the live events.
type deployDisplay struct {
	term     *terminal
	progress *progress
	json     bool
	watch    bool
	// resources and hosts are the model's, for the watching banner.
	resources, hosts int
}

func (d *deployDisplay) Progress(r *model.Result) { d.progress.step(r) }

func (d *deployDisplay) Deployed(r *deployReport, policy model.DriftPolicy) error {
	d.progress.done()
	if err := showReport(d.term, r, d.json, d.watch); err != nil {
		return err
	}
	if d.watch {
		fmt.Fprintf(d.term.stderr, "\nwatching %d %s on %d %s for drift (drift policy %s); Ctrl-C stops\n",
			d.resources, plural(d.resources, "resource", "resources"), d.hosts, plural(d.hosts, "agent", "agents"), policy)
	}
	return nil
}

func (d *deployDisplay) Event(e server.Event) error {
	if d.json {
		return writeJSONLine(d.term.stdout, e)
	}
	_, err := fmt.Fprintln(d.term.stdout, eventLine(d.term, e))
	return err
}

func (d *deployDisplay) Warn(err error) { fmt.Fprintf(d.term.stderr, "tether: %v\n", err) }

var _ embedded.Display = (*deployDisplay)(nil)

// showReport prints the report: a table, or JSON (on one line when events
// follow it, so that every line is one JSON value).
func showReport(term *terminal, r *deployReport, asJSON, lines bool) error {
	if !asJSON {
		return printReport(term, r)
	}
	if !lines {
		return writeJSON(term.stdout, r)
	}
	return writeJSONLine(term.stdout, r)
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

// done clears the line; the progress draws nothing after.
func (p *progress) done() {
	if p.on && p.n > 0 {
		fmt.Fprint(p.term.stderr, "\r\033[K")
	}
	p.on = false
}

// maxListed bounds the resources listed by name in the table output.
const maxListed = 50

func printReport(term *terminal, r *deployReport) error {
	w := term.stdout
	verbs := map[string]string{"created": "created", "changed": "changed", "removed": "removed"}
	if r.DryRun {
		verbs = map[string]string{"created": "would create", "changed": "would change", "removed": "would remove"}
	}
	colors := map[string]colour{"created": green, "changed": yellow, "removed": yellow, "failed": red, "skipped": yellow}
	listed := 0
	type row struct {
		color             colour
		label, id, detail string
	}
	var rows []row
	for i := range r.Results {
		res := &r.Results[i]
		o := embedded.Outcome(res)
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
		t := newTable(term, "OUTCOME", "RESOURCE", "DETAIL")
		for _, r := range rows {
			t.paintedRow([]colour{r.color}, r.label, r.id, r.detail)
		}
		if err := t.flush(); err != nil {
			return err
		}
		if listed > maxListed {
			fmt.Fprintf(w, "... and %d more (tether deploy -o json lists every result)\n", listed-maxListed)
		}
		fmt.Fprintln(w)
	}

	t := newTable(term, "AGENT", "CREATED", "CHANGED", "REMOVED", "UNCHANGED", "FAILED", "SKIPPED")
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
	count := strconv.Itoa(total)
	if done := total - s.Failed - s.Skipped; done < total {
		// Not "7 resources deployed" when one failed and six waited.
		count = fmt.Sprintf("%d of %d", done, total)
	}
	version := fmt.Sprintf("version %d", r.Version)
	if !r.NewVersion {
		version += ", model unchanged"
	}
	words := [3]string{"created", "changed", "removed"}
	if r.DryRun {
		words = [3]string{"to create", "to change", "to remove"}
	}
	_, err := fmt.Fprintf(w, "\n%s %s %s in %.2fs (%s): %d %s, %d %s, %d %s, %d unchanged, %s, %d skipped\n",
		count, plural(total, "resource", "resources"), what, r.Duration.Seconds(), version,
		s.Created, words[0], s.Changed, words[1], s.Removed, words[2], s.Unchanged,
		term.paint(failColor(s.Failed), fmt.Sprintf("%d failed", s.Failed)), s.Skipped)
	return err
}

func failColor(n int) colour {
	if n > 0 {
		return boldRed
	}
	return none
}

func changedAttrs(c model.Changes) []string { return slices.Sorted(maps.Keys(c)) }
