package cli

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	ucli "github.com/urfave/cli/v2"

	"github.com/tetherhq/tether/server/record"
)

// envCompileCommand is `tether env compile`: ask the server to compile the
// environment's model from its source.
func envCompileCommand(term *terminal) *ucli.Command {
	return remoteCommand(term, "compile", "ask the server to compile the model from the environment's source now, even when nothing changed", "", []ucli.Flag{
		&ucli.BoolFlag{Name: "wait", Usage: "wait for the compile to end and show its report (exit status 1 if it failed)"},
		&ucli.DurationFlag{Name: "timeout", Value: 10 * time.Minute, Usage: "with --wait, give up waiting after this long"},
	}, func(c *ucli.Context, cl *client, asJSON bool) error {
		p, err := envPath(cl, "")
		if err != nil {
			return err
		}
		var before []record.Compile
		if c.Bool("wait") {
			if err := cl.call(c.Context, "GET", p+"/compiles?limit=20", nil, &before); err != nil {
				return err
			}
		}
		var q record.CompileRequest
		if err := cl.call(c.Context, "POST", p+"/compile", nil, &q); err != nil {
			return err
		}
		if !c.Bool("wait") {
			if asJSON {
				return writeJSON(term.stdout, q)
			}
			if q.Running {
				fmt.Fprintf(term.stdout, "compile of %s queued: it starts when the one running ends\n", q.Env)
			} else {
				fmt.Fprintf(term.stdout, "compile of %s requested\n", q.Env)
			}
			fmt.Fprintln(term.stdout, "its report: tether compiles list (or run tether env compile --wait)")
			return nil
		}
		if q.Running && !asJSON {
			fmt.Fprintf(term.stderr, "a compile of %s runs now; this one starts after it…\n", q.Env)
		}
		ctx, cancel := context.WithTimeout(c.Context, c.Duration("timeout"))
		defer cancel()
		done, err := waitCompile(ctx, term, cl, p, before, asJSON)
		if err != nil {
			return err
		}
		if asJSON {
			if err := writeJSON(term.stdout, done); err != nil {
				return err
			}
		} else if err := showCompile(term, done); err != nil {
			return err
		}
		if done.Outcome == record.CompileFailed {
			return &exitError{code: 1, err: errPrinted}
		}
		return nil
	})
}

// waitCompile polls the compile reports for the one the request started:
// the first new one an operator triggered, until it ends.
func waitCompile(ctx context.Context, term *terminal, cl *client, p string, before []record.Compile, quiet bool) (record.Compile, error) {
	seen := map[string]bool{}
	for _, c := range before {
		seen[c.ID] = true
	}
	started := false
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	for {
		var list []record.Compile
		if err := cl.call(ctx, "GET", p+"/compiles?limit=20", nil, &list); err != nil {
			return record.Compile{}, err
		}
		// Oldest first: the first new one is ours.
		for i := len(list) - 1; i >= 0; i-- {
			c := list[i]
			if seen[c.ID] || !slices.ContainsFunc(c.Triggers, func(t record.Trigger) bool { return t.Kind == record.TriggerOperator }) {
				continue
			}
			if c.Outcome != record.CompileRunning {
				return c, nil
			}
			if !started && !quiet {
				fmt.Fprintf(term.stderr, "compiling (%s)…\n", shortID(c.ID))
				started = true
			}
			break
		}
		select {
		case <-ctx.Done():
			if errors.Is(ctx.Err(), context.DeadlineExceeded) {
				return record.Compile{}, fmt.Errorf("the compile did not end in time; it goes on on the server: tether compiles list")
			}
			return record.Compile{}, ctx.Err()
		case <-tick.C:
		}
	}
}

func shortID(id string) string {
	if len(id) > 8 {
		return id[:8]
	}
	return id
}

func shortRev(rev string) string {
	if len(rev) > 12 {
		return rev[:12]
	}
	return orDash(rev)
}

// compilesCommand is `tether compiles`: the reports of the compiles the
// server ran.
func compilesCommand(term *terminal) *ucli.Command {
	list := func(c *ucli.Context, cl *client, asJSON bool) error {
		p, err := envPath(cl, "/compiles?limit="+strconv.Itoa(c.Int("limit")))
		if err != nil {
			return err
		}
		var cs []record.Compile
		if err := cl.call(c.Context, "GET", p, nil, &cs); err != nil {
			return err
		}
		if asJSON {
			return writeJSON(term.stdout, cs)
		}
		if len(cs) == 0 {
			fmt.Fprintln(term.stdout, "no compiles yet (give the environment a source: tether env source set URL)")
			return nil
		}
		t := newTable(term, "ID", "STARTED", "TOOK", "TRIGGERS", "REVISION", "OUTCOME", "VERSION")
		for _, x := range cs {
			version := "-"
			if x.Version > 0 {
				version = strconv.FormatInt(x.Version, 10)
			}
			took := "-"
			if x.FinishedAt != nil {
				took = x.Duration().Round(time.Millisecond).String()
			}
			t.paintedRow([]colour{5: outcomeColour(x.Outcome)}, shortID(x.ID), x.StartedAt.Local().Format(time.DateTime), took,
				x.Triggers.String(), shortRev(x.Revision), string(x.Outcome), version)
		}
		return t.flush()
	}
	limit := &ucli.IntFlag{Name: "limit", Value: 20, Usage: "show the newest `N`"}
	return &ucli.Command{
		Name:  "compiles",
		Usage: "the server's compiles of the environment's model: what triggered them, what they released, what failed",
		Description: "The server compiles an environment's model itself once it has a source (tether env source).\n" +
			"Every compile is reported: its triggers, the revision it read, its outcome (released, unchanged,\n" +
			"candidate, failed, or skipped: nothing changed since the last that succeeded), diagnostics with\n" +
			"file:line:col, resources per agent, and what waits for facts.",
		Flags:  append(remoteFlags(), limit),
		Action: remoteAction("", list),
		Subcommands: []*ucli.Command{
			remoteCommand(term, "list", "list the newest compiles, newest first", "", []ucli.Flag{limit}, list),
			remoteCommand(term, "show", "show one compile's report (an ID or the start of one)", "ID", nil, func(c *ucli.Context, cl *client, asJSON bool) error {
				x, err := findCompile(c.Context, cl, c.Args().First())
				if err != nil {
					return err
				}
				if asJSON {
					return writeJSON(term.stdout, x)
				}
				return showCompile(term, x)
			}),
		},
	}
}

// findCompile reads the compile id names: a whole ID, or the start of one
// among the newest hundred.
func findCompile(ctx context.Context, cl *client, id string) (record.Compile, error) {
	var x record.Compile
	p, err := envPath(cl, "/compiles")
	if err != nil {
		return x, err
	}
	if len(id) == 36 {
		err := cl.call(ctx, "GET", p+"/"+url.PathEscape(id), nil, &x)
		return x, err
	}
	var cs []record.Compile
	if err := cl.call(ctx, "GET", p+"?limit=100", nil, &cs); err != nil {
		return x, err
	}
	var found []record.Compile
	for _, c := range cs {
		if id != "" && strings.HasPrefix(c.ID, id) {
			found = append(found, c)
		}
	}
	switch len(found) {
	case 0:
		return x, usageError("no compile of %s starts with %q among the newest 100 (tether compiles list)", cl.env, id)
	case 1:
		return found[0], nil
	}
	return x, usageError("%d compiles start with %q: give more of the ID", len(found), id)
}

func outcomeColour(o record.CompileOutcome) colour {
	switch o {
	case record.CompileFailed:
		return red
	case record.CompileReleased:
		return green
	case record.CompileCandidate, record.CompileRunning:
		return yellow
	}
	return none
}

// showCompile prints a compile's report for a person.
func showCompile(term *terminal, x record.Compile) error {
	w := term.stdout
	fmt.Fprintf(w, "compile %s of %s: %s\n", x.ID, x.Env, term.paint(outcomeColour(x.Outcome), string(x.Outcome)))
	fmt.Fprintf(w, "  triggered by  %s\n", x.Triggers.String())
	fmt.Fprintf(w, "  revision      %s\n", orDash(x.Revision))
	took := "(running)"
	if x.FinishedAt != nil {
		took = x.Duration().Round(time.Millisecond).String()
	}
	fmt.Fprintf(w, "  started       %s, took %s\n", x.StartedAt.Local().Format(time.DateTime), took)
	switch x.Outcome {
	case record.CompileReleased:
		fmt.Fprintf(w, "  version       %d, released\n", x.Version)
	case record.CompileCandidate:
		fmt.Fprintf(w, "  version       %d, a candidate: release it with tether version release %d\n", x.Version, x.Version)
	case record.CompileUnchanged:
		fmt.Fprintf(w, "  version       none: the resources equal the released version's\n")
	case record.CompileFailed:
		fmt.Fprintf(w, "  version       none: the released version stays deployed\n")
	case record.CompileSkipped:
		fmt.Fprintf(w, "  skipped       nothing changed since compile %s: the same revision, inventory, variables, settings,\n"+
			"                released version and server build; not compiled again (tether env compile compiles anyway)\n", x.SameAs)
	}
	if len(x.ResourcesPerAgent) == 0 && x.Outcome != record.CompileFailed && x.Outcome != record.CompileRunning {
		fmt.Fprintf(w, "  resources     none: no accepted agent is a host of the model yet (tether agent list)\n")
	}
	if len(x.ResourcesPerAgent) > 0 {
		agents := make([]string, 0, len(x.ResourcesPerAgent))
		total := 0
		for a, n := range x.ResourcesPerAgent {
			agents = append(agents, a)
			total += n
		}
		sort.Strings(agents)
		noun := "agents"
		if len(agents) == 1 {
			noun = "agent"
		}
		fmt.Fprintf(w, "  resources     %d for %d %s\n", total, len(agents), noun)
		const shown = 20
		for i, a := range agents {
			if i == shown {
				fmt.Fprintf(w, "    … and %d more agents (-o json lists them all)\n", len(agents)-shown)
				break
			}
			fmt.Fprintf(w, "    %-24s %d\n", a, x.ResourcesPerAgent[a])
		}
	}
	if len(x.Undefined) > 0 {
		fmt.Fprintf(w, "  waiting for facts (%d; compiled again when they arrive):\n", max(x.UndefinedTotal, len(x.Undefined)))
		for _, u := range x.Undefined {
			fmt.Fprintf(w, "    %s: %s\n", u.Name, strings.Join(u.Facts, ", "))
		}
	}
	if len(x.Diagnostics) > 0 {
		fmt.Fprintf(w, "  diagnostics (%d):\n", max(x.DiagnosticsTotal, len(x.Diagnostics)))
		for _, d := range x.Diagnostics {
			where := ""
			if d.File != "" {
				where = fmt.Sprintf("%s:%d:%d: ", d.File, d.Line, d.Col)
			}
			sev := d.Severity
			if sev == "error" {
				sev = term.paint(red, sev)
			}
			fmt.Fprintf(w, "    %s%s: %s\n", where, sev, d.Message)
		}
	}
	return nil
}
