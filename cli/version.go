package cli

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	ucli "github.com/urfave/cli/v2"

	"github.com/tetherhq/tether/bus"
	"github.com/tetherhq/tether/cli/agentcli"
	"github.com/tetherhq/tether/model"
	"github.com/tetherhq/tether/server/api"
	"github.com/tetherhq/tether/server/record"
)

func versionCommand(term *terminal) *ucli.Command {
	return &ucli.Command{
		Name:        "version",
		Usage:       "print the version of this tether binary and the agent protocol it speaks, or manage an environment's versions (list, show, diff, plan, release)",
		UsageText:   "tether version [-o json]\n   tether version list|show|diff|plan|release …",
		Flags:       []ucli.Flag{outputFlag()},
		Subcommands: versionSubcommands(term),
		Action: func(c *ucli.Context) error {
			format, err := outputFormat(c)
			if err != nil {
				return err
			}
			if c.NArg() > 0 {
				return usageError("version takes no arguments")
			}
			bi := readBuildInfo()
			if format == "json" {
				return writeJSON(term.stdout, struct {
					buildInfo
					Protocol string `json:"protocol"`
				}{bi, bus.Protocol})
			}
			commit := ""
			if bi.Commit != "" {
				commit = " (" + shortCommit(bi.Commit)
				if bi.Modified {
					commit += ", modified"
				}
				commit += ")"
			}
			_, err = fmt.Fprintf(term.stdout, "tether %s%s %s %s, protocol %s\n", bi.Version, commit, bi.Go, bi.Platform, bus.Protocol)
			return err
		},
	}
}

func versionSubcommands(term *terminal) []*ucli.Command {
	return []*ucli.Command{
		remoteCommand(term, "list", "list the environment's versions, newest first", "", nil, func(c *ucli.Context, cl *client, asJSON bool) error {
			p, err := envPath(cl, "/versions")
			if err != nil {
				return err
			}
			var vs []model.Version
			if err := cl.call(c.Context, "GET", p, nil, &vs); err != nil {
				return err
			}
			if asJSON {
				return writeJSON(term.stdout, vs)
			}
			t := newTable(term, "VERSION", "STATE", "RESOURCES", "CREATED", "EXPORTED BY", "SOURCE")
			for _, v := range vs {
				source := v.Meta.Source
				if v.Meta.RollbackOf != 0 {
					source = fmt.Sprintf("rollback of %d (%s)", v.Meta.RollbackOf, source)
				}
				t.row(strconv.FormatInt(v.Number, 10), string(v.State), strconv.Itoa(v.Count), v.CreatedAt.Local().Format(time.DateTime), v.Meta.ExportedBy, source)
			}
			return t.flush()
		}),
		remoteCommand(term, "show", "show a version", "N", []ucli.Flag{&ucli.BoolFlag{Name: "resources", Usage: "include its resources (sensitive values redacted)"}},
			func(c *ucli.Context, cl *client, asJSON bool) error {
				p, err := envPath(cl, "/versions/"+url.PathEscape(c.Args().First())+"?resources="+strconv.FormatBool(c.Bool("resources") || asJSON))
				if err != nil {
					return err
				}
				var v model.Version
				if err := cl.call(c.Context, "GET", p, nil, &v); err != nil {
					return err
				}
				if asJSON {
					return writeJSON(term.stdout, v)
				}
				fmt.Fprintf(term.stdout, "version %d (%s): %d resources, created %s, exported by %s\n", v.Number, v.State, v.Count, v.CreatedAt.Local().Format(time.DateTime), v.Meta.ExportedBy)
				if v.Meta.RollbackOf != 0 {
					fmt.Fprintf(term.stdout, "a rollback: version %d's resources, released again\n", v.Meta.RollbackOf)
				}
				for _, r := range v.Resources {
					fmt.Fprintf(term.stdout, "  %s\n", r.ID)
				}
				return nil
			}),
		remoteCommand(term, "diff", "what changed between two versions (default FROM: the released one): resources added, removed and changed, with each attribute's old → new value (sensitive values redacted)", "[FROM] TO", nil, func(c *ucli.Context, cl *client, asJSON bool) error {
			if c.NArg() < 1 || c.NArg() > 2 {
				return usageError("version diff takes [FROM] TO")
			}
			q := ""
			to := c.Args().Get(c.NArg() - 1)
			if c.NArg() == 2 {
				q = "?from=" + url.QueryEscape(c.Args().First())
			}
			p, err := envPath(cl, "/versions/"+url.PathEscape(to)+"/diff"+q)
			if err != nil {
				return err
			}
			var d api.Diff
			if err := cl.call(c.Context, "GET", p, nil, &d); err != nil {
				return err
			}
			if asJSON {
				return writeJSON(term.stdout, d)
			}
			fmt.Fprintf(term.stdout, "version %d → %d: %d added, %d changed, %d removed, %d unchanged\n", d.From, d.To, len(d.Added), len(d.Changed), len(d.Removed), d.Unchanged)
			marks := map[string]struct {
				mark string
				c    colour
			}{api.DiffAdded: {"+", green}, api.DiffChanged: {"~", yellow}, api.DiffRemoved: {"-", red}}
			for _, rd := range d.Resources {
				m := marks[rd.Change]
				fmt.Fprintf(term.stdout, "  %s %s (%s)\n", term.paint(m.c, m.mark), rd.ID, rd.Change)
				for _, ch := range rd.Attributes {
					fmt.Fprintf(term.stdout, "      %s: %s → %s\n", ch.Name, showValue(ch.Old), showValue(ch.New))
				}
			}
			if d.Truncated {
				fmt.Fprintf(term.stdout, "  … the first %d resources are shown; -o json gives the same, tether version show N --resources each version whole\n", len(d.Resources))
			}
			return nil
		}),
		described(remoteCommand(term, "plan", "what releasing version N would change on each live agent, per attribute (a dry run; nothing is released or changed)", "N",
			[]ucli.Flag{
				&ucli.StringSliceFlag{Name: "agent", Usage: "ask only this agent (repeatable; default: every accepted agent)"},
				&ucli.DurationFlag{Name: "timeout", Value: record.DefaultPlanTimeout, Usage: fmt.Sprintf("how long to wait for the agents' answers (at most %s)", record.MaxPlanTimeout)},
			},
			func(c *ucli.Context, cl *client, asJSON bool) error {
				if c.NArg() != 1 {
					return usageError("version plan takes one version number N")
				}
				p, err := envPath(cl, "/versions/"+url.PathEscape(c.Args().First())+"/plan")
				if err != nil {
					return err
				}
				var plan record.Plan
				req := api.PlanRequest{Agents: c.StringSlice("agent"), Timeout: c.Duration("timeout").String()}
				if err := cl.call(c.Context, "POST", p, req, &plan); err != nil {
					return err
				}
				if asJSON {
					return writeJSON(term.stdout, plan)
				}
				printPlan(term, plan)
				return nil
			}),
			"Each accepted agent that is online is sent its part of version N (usually a candidate not released yet) as a dry run:\n"+
				"it reads its host and says, per resource and attribute, current → desired (sensitive values redacted).\n"+
				"Nothing is released, nothing changes on any host, and the released version stays released.\n"+
				"Agents offline, and those that do not answer within --timeout, are named. Paused agents answer too.\n"+
				"Example: tether version plan 4 --timeout 20s"),
		described(remoteCommand(term, "release", "release a version, a newer or an older one (rollback): it is released at once, and its fan-out to agents runs on the server (--wait follows it); a release that takes resources away from agents is confirmed first", "N",
			append(waitFlags("follow the release's fan-out to agents, then wait until every resource of the version is deployed or failed"), yesFlag()),
			func(c *ucli.Context, cl *client, asJSON bool) error {
				if c.NArg() != 1 {
					return usageError("version release takes one version number N")
				}
				n := c.Args().First()
				pv, err := confirmRelease(c, cl, term, n, asJSON)
				if err != nil {
					return err
				}
				p, err := envPath(cl, "/versions/"+url.PathEscape(n)+"/release")
				if err != nil {
					return err
				}
				out := releasedOutput{Leaving: pv.Leaving, LeavingNote: pv.Note}
				v := &out.Released
				if err := cl.call(c.Context, "POST", p, nil, v); err != nil {
					return err
				}
				if !asJSON {
					printReleased(term, *v)
				}
				if c.Bool("wait") && v.ReleaseID != "" {
					rel, err := followRelease(c, cl, term, v.ReleaseID, c.Duration("timeout"), asJSON)
					if err != nil {
						return err
					}
					v.Release = &rel
					if err := releaseOutcome(rel); err != nil {
						return err
					}
					if err := waitDeployed(c, cl, term, v.Number, c.Duration("timeout"), asJSON); err != nil {
						return err
					}
				}
				if asJSON {
					return writeJSON(term.stdout, out)
				}
				return nil
			}),
			"Before releasing, the server is asked what the release would take away (GET …/versions/N/release-preview): per accepted agent,\n"+
				"the resources it holds that version N does not have (orphaned: left on the host as they are, no longer managed;\n"+
				"absent: purged already), and the agents that leave the model (version N has nothing for them: a rollback to a\n"+
				"version made before they joined). If anything would be taken away it is listed, and the release waits for you to\n"+
				"type N; --yes releases without asking (needed when stdin is not a terminal). -o json adds the same facts (\"leaving\").\n"+
				"Example: tether version release 3"),
		remoteCommand(term, "releases", "list the environment's releases, newest first, or show one (ID) with the agents it did not reach", "[ID]...", nil,
			func(c *ucli.Context, cl *client, asJSON bool) error {
				if c.NArg() > 1 {
					return usageError("version releases takes at most one release ID")
				}
				if c.NArg() == 1 {
					p, err := envPath(cl, "/releases/"+url.PathEscape(c.Args().First()))
					if err != nil {
						return err
					}
					var r record.Release
					if err := cl.call(c.Context, "GET", p, nil, &r); err != nil {
						return err
					}
					if asJSON {
						return writeJSON(term.stdout, r)
					}
					fmt.Fprintf(term.stdout, "release %s of version %d: %s, started %s\n", r.ID, r.Version, r.State, r.StartedAt.Local().Format(time.DateTime))
					fmt.Fprintln(term.stdout, releaseCounts(r))
					printFanout(term.stdout, r.Fanout)
					return nil
				}
				p, err := envPath(cl, "/releases")
				if err != nil {
					return err
				}
				var rs []record.Release
				if err := cl.call(c.Context, "GET", p, nil, &rs); err != nil {
					return err
				}
				if asJSON {
					return writeJSON(term.stdout, rs)
				}
				t := newTable(term, "RELEASE", "VERSION", "STATE", "AGENTS", "SENT", "UP TO DATE", "PENDING", "STARTED", "TOOK")
				for _, r := range rs {
					took := ""
					if r.FinishedAt != nil {
						took = r.FinishedAt.Sub(r.StartedAt).Round(time.Millisecond).String()
					}
					t.row(r.ID, strconv.FormatInt(r.Version, 10), string(r.State), strconv.Itoa(r.Agents), strconv.Itoa(r.Sent), strconv.Itoa(r.UpToDate),
						strconv.Itoa(r.PendingCount), r.StartedAt.Local().Format(time.DateTime), took)
				}
				return t.flush()
			}),
	}
}

// releasedOutput is what `version release -o json` writes: the version
// released, and what the release took away from each agent (as the
// server previewed it just before).
type releasedOutput struct {
	record.Released
	Leaving     []record.Leaving `json:"leaving"`
	LeavingNote string           `json:"leaving_note,omitempty"`
}

// confirmRelease asks the server what releasing version n would take
// away and, when anything, lists it and asks the person to confirm (type
// n), unless --yes. Without a terminal and without --yes it refuses,
// writing the preview (-o json: as JSON on stdout), and nothing is
// released.
func confirmRelease(c *ucli.Context, cl *client, term *terminal, n string, asJSON bool) (record.ReleasePreview, error) {
	p, err := envPath(cl, "/versions/"+url.PathEscape(n)+"/release-preview")
	if err != nil {
		return record.ReleasePreview{}, err
	}
	var pv record.ReleasePreview
	if err := cl.call(c.Context, "GET", p, nil, &pv); err != nil {
		var ae *apiError
		if errors.As(err, &ae) && ae.body.Code == "no_route" {
			if c.Bool("yes") {
				return pv, nil
			}
			return pv, usageError("the server cannot say what releasing version %s would take away from its agents (it is older than this tether); pass --yes to release it without knowing", n)
		}
		return pv, err
	}
	if !pv.TakesAway() {
		return pv, nil
	}
	if c.Bool("yes") {
		if !asJSON {
			printPreview(term, term.stdout, pv)
		}
		return pv, nil
	}
	w := term.stdout
	if asJSON {
		w = term.stderr
	}
	printPreview(term, w, pv)
	what := "version " + n + " " + takesAway(pv)
	if !term.interactive {
		if asJSON {
			if err := writeJSON(term.stdout, pv); err != nil {
				return pv, err
			}
		}
		return pv, usageError("releasing %s: nothing was released; stdin is not a terminal to confirm it on: pass --yes to release it", what)
	}
	fmt.Fprintf(term.stderr, "Releasing %s.\nType %s to release it: ", what, n)
	line, err := bufio.NewReader(term.stdin).ReadString('\n')
	if strings.TrimSpace(line) != n {
		if err != nil && line == "" {
			fmt.Fprintln(term.stderr)
		}
		return pv, &exitError{code: exitFailed, err: errors.New("not confirmed: nothing was released")}
	}
	return pv, nil
}

// takesAway says in a few words what a release takes away.
func takesAway(pv record.ReleasePreview) string {
	s := fmt.Sprintf("takes %s away from %s", counted(pv.Resources, "resource"), counted(pv.Agents, "agent"))
	var leave []string
	for _, l := range pv.Leaving {
		if l.LeavesModel {
			leave = append(leave, l.Agent)
		}
	}
	switch {
	case len(leave) == 1:
		s += " (" + leave[0] + " leaves the model)"
	case len(leave) > 1:
		s += fmt.Sprintf(" (%d leave the model: %s)", len(leave), model.Clip(strings.Join(leave, ", "), 200))
	}
	return s
}

// counted writes n things: "1 resource", "3 resources".
func counted(n int, what string) string { return fmt.Sprintf("%d %s", n, plural(n, what, what+"s")) }

// printPreview lists what a release would take away, per agent.
func printPreview(term *terminal, w io.Writer, pv record.ReleasePreview) {
	how := "releasing"
	if pv.Rollback {
		how = "rolling back to"
	}
	fmt.Fprintf(w, "%s version %d %s:\n", how, pv.Version, takesAway(pv))
	for _, l := range pv.Leaving {
		fmt.Fprintf(w, "\nagent %s\n", l.Agent)
		printLeaving(term, w, pv.Version, l)
	}
	if pv.Staged {
		fmt.Fprintln(w, "\nthe environment releases in waves: each agent loses these when its wave comes")
	}
	printFates(w, pv.Note)
}

// printLeaving lists what a release of version n takes away from one
// agent, indented.
func printLeaving(term *terminal, w io.Writer, n int64, l record.Leaving) {
	if l.LeavesModel {
		fmt.Fprintf(w, "  %s: version %d has nothing for it; a release takes away everything it holds (%s, of version %d):\n",
			term.paint(red, "leaves the model"), n, counted(l.Count(), "resource"), l.From)
	} else {
		fmt.Fprintf(w, "  a release takes away %s it holds (of version %d) that version %d does not have:\n", counted(l.Count(), "resource"), l.From, n)
	}
	for _, r := range l.Resources {
		c := yellow
		if r.Fate == record.FateAbsent {
			c = green
		}
		fmt.Fprintf(w, "  - %s %s\n", term.paint(c, fmt.Sprintf("%-8s", r.Fate)), r.ID)
	}
	if more := l.Unlisted(); more > 0 {
		fmt.Fprintf(w, "  … and %d more (-o json lists up to %d in all)\n", more, record.MaxLeavingListed)
	}
}

// printFates says what the fates of resources taken away mean, and the
// note on purge_on_delete, if any.
func printFates(w io.Writer, note string) {
	fmt.Fprintln(w, "\norphaned: left on the host as it is, no longer managed; absent: purged already (purged = true), no longer kept absent")
	if note != "" {
		fmt.Fprintln(w, note)
	}
}

// printReleased says what a release did: which version it released (for
// a rollback, the copy and the version it copies), and the id of the
// release, which the deploys it sends to agents carry too.
func printReleased(term *terminal, v record.Released) {
	switch {
	case v.AlreadyReleased:
		fmt.Fprintf(term.stdout, "version %d is the released version already: nothing changed (tether version releases lists its releases)\n", v.Number)
		return
	case v.Meta.RollbackOf != 0:
		fmt.Fprintf(term.stdout, "version %d released again as version %d (rollback: agents only take desired state newer than what they hold)\n", v.Meta.RollbackOf, v.Number)
	default:
		fmt.Fprintf(term.stdout, "version %d released\n", v.Number)
	}
	if v.ReleaseID != "" {
		fmt.Fprintf(term.stdout, "release %s: sending it to agents in the background (follow: tether version releases %s)\n", v.ReleaseID, v.ReleaseID)
	}
}

// waitFlags are the flags of a command that can wait: --wait, and how
// long it waits.
func waitFlags(what string) []ucli.Flag {
	return []ucli.Flag{
		&ucli.BoolFlag{Name: "wait", Usage: what},
		&ucli.DurationFlag{Name: "timeout", Value: 10 * time.Minute, Usage: "how long --wait waits"},
	}
}

// releaseCounts says how far a release's fan-out got.
func releaseCounts(r record.Release) string {
	return fmt.Sprintf("%d/%d agents: %d sent, %d up to date, %d pending", r.Done(), r.Agents, r.Sent, r.UpToDate, r.PendingCount)
}

// followRelease polls release id until its fan-out ends, showing its
// progress: a line redrawn on a terminal, a line each few seconds when it
// moved otherwise, nothing with quiet (-o json).
func followRelease(c *ucli.Context, cl *client, term *terminal, id string, timeout time.Duration, quiet bool) (record.Release, error) {
	p, err := envPath(cl, "/releases/"+url.PathEscape(id))
	if err != nil {
		return record.Release{}, err
	}
	deadline := time.Now().Add(timeout)
	notice := &waitNotice{term: term, quiet: quiet}
	var asked time.Time
	var waiting []string
	for {
		var r record.Release
		if err := cl.call(c.Context, "GET", p, nil, &r); err != nil {
			notice.end()
			return r, err
		}
		if r.State == record.ReleaseRunning && time.Since(asked) >= 2*time.Second {
			// The agents the fan-out sent the deploy to and that have
			// not answered it yet (the release's deploy has its id).
			waiting, asked = deployWaiting(c, cl, r.ID), time.Now()
		}
		if r.State == record.ReleaseRunning {
			notice.show("release " + shortID(r.ID) + ": " + releaseCounts(r) + waitingFor(waiting))
		}
		if r.State != record.ReleaseRunning {
			notice.end()
			if !quiet {
				fmt.Fprintf(term.stdout, "release %s %s: %s\n", r.ID, r.State, releaseCounts(r))
				printFanout(term.stdout, r.Fanout)
			}
			return r, nil
		}
		if ro := r.Rollout; ro != nil && (ro.Stage == record.StageHalted || ro.Stage == record.StageWaiting) {
			if !quiet && term.progress {
				fmt.Fprintln(term.stderr)
			}
			why := "halted: more agents failed than release_max_failed allows; agents not reached keep the version they had"
			if ro.Stage == record.StageWaiting {
				why = "waiting for an operator to continue (release_advance = manual)"
			}
			return r, &exitError{code: exitFailed, err: fmt.Errorf("release %s: staged rollout %s at wave %d of %d; see tether release status %s, then continue or abort it",
				r.ID, why, ro.Wave+1, len(ro.Waves), r.ID)}
		}
		if time.Now().After(deadline) {
			notice.end()
			return r, fmt.Errorf("release %s: still sending after %s (%s%s); it goes on on the server: tether version releases %s", r.ID, timeout, releaseCounts(r), waitingFor(waiting), r.ID)
		}
		select {
		case <-c.Context.Done():
			return r, c.Context.Err()
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// releaseOutcome is the exit of a command that followed a release: a
// failed fan-out fails it (the version stays released; agents get it on
// their next hello).
func releaseOutcome(r record.Release) error {
	if r.State == record.ReleaseFailed {
		return &exitError{code: exitFailed, err: fmt.Errorf("release %s of version %d: %s", r.ID, r.Version, r.Note)}
	}
	if r.Rollout != nil && r.Rollout.Stage == record.StageAborted {
		return &exitError{code: exitFailed, err: fmt.Errorf("release %s of version %d: the staged rollout was aborted: %s", r.ID, r.Version, r.Note)}
	}
	return nil
}

// printFanout lists the agents a release did not reach at once, and what
// brings it to them.
func printFanout(w io.Writer, f record.Fanout) {
	if f.Note != "" {
		fmt.Fprintln(w, f.Note)
	}
	if f.PendingCount == 0 {
		return
	}
	fmt.Fprintf(w, "%d agent(s) not reached at once; they get it later:\n", f.PendingCount)
	for _, p := range f.Pending {
		fmt.Fprintf(w, "  %s  %s: %s\n", p.Agent, p.Reason, p.Later)
	}
	if n := f.PendingCount - len(f.Pending); n > 0 {
		fmt.Fprintf(w, "  … and %d more\n", n)
	}
}

// buildInfo says which build this binary is.
type buildInfo = agentcli.BuildInfo

func readBuildInfo() buildInfo { return agentcli.ReadBuildInfo() }

// compilerSalt identifies this tether binary: a rebuild, even of the same
// version, may compile differently.
func compilerSalt() string {
	bi := readBuildInfo()
	salt := fmt.Sprintf("%s %s %v", bi.Version, bi.Commit, bi.Modified)
	if exe, err := os.Executable(); err == nil {
		if st, err := os.Stat(exe); err == nil {
			salt += fmt.Sprintf(" %d %d", st.Size(), st.ModTime().UnixNano())
		}
	}
	return salt
}

func shortCommit(c string) string {
	if len(c) > 12 {
		return c[:12]
	}
	return c
}

// printPlan shows a plan per agent: what a deploy would do to each
// resource, and each attribute's current and desired value.
func printPlan(term *terminal, p record.Plan) {
	w := term.stdout
	released := "none released"
	if p.Released != 0 {
		released = fmt.Sprintf("released: %d", p.Released)
	}
	fmt.Fprintf(w, "plan %s of version %d (%s): a dry run, nothing was changed\n", p.ID, p.Version, released)
	colours := map[string]colour{model.WouldCreate: green, model.WouldChange: yellow, model.WouldRemove: yellow, string(model.StateFailed): red}
	var leaving []record.Leaving
	for _, a := range p.Agents {
		status := "offline"
		if a.Online {
			status = "online"
		}
		if a.Paused {
			status += ", paused"
		}
		fmt.Fprintf(w, "\nagent %s (%s): %s", a.Name, status, strings.ReplaceAll(a.Outcome, "_", " "))
		if a.Outcome == record.PlanAnswered || len(a.Resources) > 0 {
			fmt.Fprintf(w, ", %d to change, %d unchanged", len(a.Resources), a.Unchanged)
		}
		if l := a.Leaving; l != nil {
			fmt.Fprintf(w, ", %d to take away", l.Count())
			if l.LeavesModel {
				fmt.Fprint(w, ": leaves the model")
			}
		}
		fmt.Fprintln(w)
		if a.Note != "" {
			fmt.Fprintf(w, "  %s\n", a.Note)
		}
		for _, r := range a.Resources {
			fmt.Fprintf(w, "  %s %s", term.paint(colours[r.Would], r.Would), r.ID)
			if r.Message != "" {
				fmt.Fprintf(w, ": %s", r.Message)
			}
			fmt.Fprintln(w)
			for _, name := range slices.Sorted(maps.Keys(r.Changes)) {
				ch := r.Changes[name]
				fmt.Fprintf(w, "      %s: %s → %s\n", name, showValue(ch.Current), showValue(ch.Desired))
			}
		}
		if a.Leaving != nil {
			printLeaving(term, w, p.Version, *a.Leaving)
			leaving = append(leaving, *a.Leaving)
		}
	}
	if len(p.NotAnswered) > 0 {
		fmt.Fprintf(w, "\nnot answered within %s: %s\n", p.Timeout, strings.Join(p.NotAnswered, ", "))
	}
	if len(leaving) > 0 {
		pv := record.ReleasePreview{Version: p.Version, Leaving: leaving, Agents: len(leaving)}
		for _, l := range leaving {
			pv.Resources += l.Count()
		}
		fmt.Fprintf(w, "\nreleasing version %d %s: tether version release %d lists it again and asks before it does\n", p.Version, takesAway(pv), p.Version)
		printFates(w, p.Note)
	}
}

// showValue writes an attribute's value on one line: strings quoted and
// clipped, nil as (none).
func showValue(v any) string {
	const max = 80
	var s string
	switch v := v.(type) {
	case nil:
		return "(none)"
	case string:
		if v == model.RedactedValue {
			return v
		}
		s = strconv.Quote(v)
	default:
		b, err := json.Marshal(v)
		if err != nil {
			return fmt.Sprint(v)
		}
		s = string(b)
	}
	return model.Clip(s, max)
}

// described gives a command a longer description for its --help.
func described(c *ucli.Command, description string) *ucli.Command {
	c.Description = description
	return c
}
