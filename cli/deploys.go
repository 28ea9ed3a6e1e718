package cli

import (
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"time"

	ucli "github.com/urfave/cli/v2"

	"github.com/tetherhq/tether/server/api"
	"github.com/tetherhq/tether/server/record"
)

// envDeploysCommand is `tether env deploys`: the environment's deploys,
// repairs and dry runs, newest first.
func envDeploysCommand(term *terminal) *ucli.Command {
	cmd := remoteCommand(term, "deploys", "list deploys, repairs and dry runs, newest first: trigger, who asked, version, agents answered, outcome", "", []ucli.Flag{
		&ucli.StringFlag{Name: "agent", Usage: "only those sent to agent `NAME`"},
		&ucli.StringFlag{Name: "kind", Usage: "only this `KIND`: deploy, repair or dryrun"},
		&ucli.IntFlag{Name: "limit", Value: 20, Usage: "show the newest `N`"},
	}, func(c *ucli.Context, cl *client, asJSON bool) error {
		q := url.Values{}
		q.Set("limit", strconv.Itoa(c.Int("limit")))
		if a := c.String("agent"); a != "" {
			q.Set("agent", a)
		}
		if k := c.String("kind"); k != "" {
			q.Set("kind", k)
		}
		p, err := envPath(cl, "/deploys?"+q.Encode())
		if err != nil {
			return err
		}
		var ds []record.Deploy
		if err := cl.call(c.Context, "GET", p, nil, &ds); err != nil {
			return err
		}
		if asJSON {
			return writeJSON(term.stdout, ds)
		}
		t := newTable(term, "ID", "KIND", "TRIGGER", "WHO", "VERSION", "AGENTS", "OK", "FAILED", "OUTCOME", "STARTED", "TOOK")
		for _, d := range ds {
			t.paintedRow([]colour{8: deployColour(d.Outcome)}, d.ID, string(d.Kind), string(d.Trigger), d.Who, strconv.FormatInt(d.Version, 10),
				fmt.Sprintf("%d/%d", d.Answered, d.Asked), strconv.Itoa(d.OK), strconv.Itoa(d.Failed), string(d.Outcome),
				d.StartedAt.Local().Format(time.DateTime), took(d))
		}
		return t.flush()
	})
	cmd.Description = "Every deploy, repair and dry run sent to agents is listed: a release's fan-out (its id is the release's),\n" +
		"an operator's tether env deploy|repair|dryrun, a resume, the deploy-interval retry and the repair-interval\n" +
		"verification, the deploy of an agent that said hello behind, and a plan's dry run (tether version plan).\n" +
		"WHO is the API token's name, or server for what the server started by itself. AGENTS is answered/asked;\n" +
		"an agent that was not reached counts as failed. Show one with tether env report ID."
	return cmd
}

// envReportCommand is `tether env report ID`: one deploy, repair or dry
// run, each agent's outcome, the agents not answered, and what was done.
func envReportCommand(term *terminal) *ucli.Command {
	cmd := remoteCommand(term, "report", "show a deploy, repair or dry run: each agent's outcome, those that have not answered, and what it changed or would change", "ID", nil, func(c *ucli.Context, cl *client, asJSON bool) error {
		p, err := envPath(cl, "/deploys/"+url.PathEscape(c.Args().First()))
		if err != nil {
			return err
		}
		var rep api.Report
		if err := cl.call(c.Context, "GET", p, nil, &rep); err != nil {
			return err
		}
		if asJSON {
			return writeJSON(term.stdout, rep)
		}
		return showDeployReport(term, rep)
	})
	cmd.Description = "ID is a deploy's id, as tether env deploys lists it, tether env deploy|repair|dryrun prints it,\n" +
		"or a release's id (tether export --release prints it)."
	return cmd
}

func showDeployReport(term *terminal, rep api.Report) error {
	if d := rep.Deploy; d != nil {
		fmt.Fprintf(term.stdout, "%s %s of version %d (%s, by %s), started %s: %s, %d of %d agents answered (%d ok, %d failed)\n",
			d.Kind, d.ID, d.Version, d.Trigger, d.Who, d.StartedAt.Local().Format(time.DateTime),
			term.paint(deployColour(d.Outcome), string(d.Outcome)), d.Answered, d.Asked, d.OK, d.Failed)
		if len(rep.Waiting) > 0 {
			fmt.Fprintf(term.stdout, "not answered yet: %s\n", strings.Join(rep.Waiting, ", "))
		}
		if len(d.Agents) > 0 {
			fmt.Fprintln(term.stdout)
			t := newTable(term, "AGENT", "OUTCOME", "FAILED RESOURCES", "FINISHED", "ERROR")
			for _, a := range d.Agents {
				finished := ""
				if a.FinishedAt != nil {
					finished = a.FinishedAt.Local().Format(time.DateTime)
				}
				t.paintedRow([]colour{1: agentOutcomeColour(a.Outcome)}, a.Agent, string(a.Outcome), strconv.Itoa(a.FailedResources), finished, a.Error)
			}
			if err := t.flush(); err != nil {
				return err
			}
		}
		fmt.Fprintln(term.stdout)
	}
	if len(rep.Actions) == 0 {
		fmt.Fprintln(term.stdout, "no resource changed, failed or would change")
		return nil
	}
	return actionTable(term, rep.Actions)
}

func took(d record.Deploy) string {
	if d.FinishedAt == nil {
		return ""
	}
	return d.FinishedAt.Sub(d.StartedAt).Round(time.Millisecond).String()
}

func deployColour(o record.DeployOutcome) colour {
	switch o {
	case record.DeployOK:
		return green
	case record.DeployFailed:
		return red
	}
	return yellow
}

func agentOutcomeColour(o record.DeployAgentOutcome) colour {
	switch o {
	case record.AgentOK:
		return green
	case record.AgentFailed:
		return red
	}
	return yellow
}

// waitNotice shows what a wait is waiting for: a line redrawn in place
// on a terminal, or, when stderr is piped, a line when it changed (at
// most every 5 seconds) and at least every 30 seconds.
type waitNotice struct {
	term    *terminal
	quiet   bool
	drawn   int
	last    string
	printed time.Time
}

func (w *waitNotice) show(line string) {
	switch {
	case w.quiet:
	case w.term.progress:
		pad := max(w.drawn-len(line), 0)
		fmt.Fprintf(w.term.stderr, "\r%s%s", line, strings.Repeat(" ", pad))
		w.drawn = len(line)
	case (line != w.last && time.Since(w.printed) >= 5*time.Second) || time.Since(w.printed) >= 30*time.Second:
		fmt.Fprintln(w.term.stderr, line)
		w.last, w.printed = line, time.Now()
	}
}

// end ends a line drawn in place.
func (w *waitNotice) end() {
	if !w.quiet && w.term.progress && w.drawn > 0 {
		fmt.Fprintln(w.term.stderr)
		w.drawn = 0
	}
}

// waitingFor names the agents a wait waits for, at most namedAgents of
// them.
func waitingFor(names []string) string {
	if len(names) == 0 {
		return ""
	}
	shown := names[:min(len(names), namedAgents)]
	s := "; waiting for " + strings.Join(shown, ", ")
	if more := len(names) - len(shown); more > 0 {
		s += fmt.Sprintf(" and %d more", more)
	}
	return s
}

// deployWaiting returns the agents deploy id of the environment was sent
// to that have not answered it; nil when that cannot be said (the server
// does not list deploys).
func deployWaiting(c *ucli.Context, cl *client, id string) []string {
	p, err := envPath(cl, "/deploys/"+url.PathEscape(id))
	if err != nil {
		return nil
	}
	var rep api.Report
	if cl.call(c.Context, "GET", p, nil, &rep) != nil {
		return nil
	}
	return rep.Waiting
}

// followDeploy waits until every agent deploy id was sent to answered it,
// naming those it waits for, and returns its report.
func followDeploy(c *ucli.Context, cl *client, term *terminal, id string, timeout time.Duration, quiet bool) (api.Report, error) {
	p, err := envPath(cl, "/deploys/"+url.PathEscape(id))
	if err != nil {
		return api.Report{}, err
	}
	deadline := time.Now().Add(timeout)
	notice := &waitNotice{term: term, quiet: quiet}
	defer notice.end()
	for {
		var rep api.Report
		if err := cl.call(c.Context, "GET", p, nil, &rep); err != nil {
			return rep, err
		}
		d := rep.Deploy
		if d == nil {
			return rep, fmt.Errorf("deploy %s is not listed by the server: see tether env report %s", id, id)
		}
		if d.Outcome != record.DeployRunning {
			return rep, nil
		}
		notice.show(fmt.Sprintf("%s %s: %d of %d agents answered%s", d.Kind, shortID(d.ID), d.Answered, d.Asked, waitingFor(rep.Waiting)))
		if time.Now().After(deadline) {
			return rep, fmt.Errorf("timed out after %s: %d of %d agents have not answered %s %s: %s; see tether env report %s (tether agent list says which are offline)",
				timeout, len(rep.Waiting), d.Asked, d.Kind, d.ID, strings.TrimPrefix(waitingFor(rep.Waiting), "; waiting for "), d.ID)
		}
		select {
		case <-c.Context.Done():
			return rep, c.Context.Err()
		case <-time.After(500 * time.Millisecond):
		}
	}
}
