package cli

import (
	"fmt"
	"io"
	"net/url"
	"strconv"
	"strings"

	ucli "github.com/urfave/cli/v2"

	"github.com/tetherhq/tether/server/record"
)

func releaseCommand(term *terminal) *ucli.Command {
	return &ucli.Command{
		Name:  "release",
		Usage: "follow and steer a staged rollout (release_strategy = waves): status, continue, abort",
		Description: "An environment whose release_strategy is waves releases a version wave by wave: canary agents first,\n" +
			"then percentages of the others, and halts when more agents fail than release_max_failed allows.\n" +
			"Agents a rollout has not reached keep the version they had. Without ID these commands act on the\n" +
			"environment's newest release. To release a version: tether version release N.",
		Subcommands: []*ucli.Command{
			remoteCommand(term, "status", "show a release's waves: which one is current, and each wave's agents succeeded, failed and pending", "[ID]",
				nil, func(c *ucli.Context, cl *client, asJSON bool) error {
					r, err := releaseByArg(c, cl)
					if err != nil {
						return err
					}
					if asJSON {
						return writeJSON(term.stdout, r)
					}
					printRollout(term, r)
					return nil
				}),
			remoteCommand(term, "continue", "send the rollout's next wave now (whatever the current wave's agents reported), or go on past a halt (accepting the failures so far)", "[ID]",
				nil, rolloutVerb(term, "continue")),
			remoteCommand(term, "abort", "stop the rollout: no further wave is sent, and the agents not reached keep the version they had until the next release", "[ID]",
				nil, rolloutVerb(term, "abort")),
		},
	}
}

// releaseByArg reads the release the command's argument names, or the
// environment's newest.
func releaseByArg(c *ucli.Context, cl *client) (record.Release, error) {
	var r record.Release
	id, err := releaseID(c, cl)
	if err != nil {
		return r, err
	}
	p, err := envPath(cl, "/releases/"+url.PathEscape(id))
	if err != nil {
		return r, err
	}
	return r, cl.call(c.Context, "GET", p, nil, &r)
}

// releaseID is the command's argument, or the id of the environment's
// newest release.
func releaseID(c *ucli.Context, cl *client) (string, error) {
	switch c.NArg() {
	case 0:
	case 1:
		return c.Args().First(), nil
	default:
		return "", usageError("%s takes at most one release ID", c.Command.FullName())
	}
	p, err := envPath(cl, "/releases?limit=1")
	if err != nil {
		return "", err
	}
	var rs []record.Release
	if err := cl.call(c.Context, "GET", p, nil, &rs); err != nil {
		return "", err
	}
	if len(rs) == 0 {
		return "", fmt.Errorf("no release in %s yet: release a version first (tether version release N)", cl.env)
	}
	return rs[0].ID, nil
}

func rolloutVerb(term *terminal, verb string) func(c *ucli.Context, cl *client, asJSON bool) error {
	return func(c *ucli.Context, cl *client, asJSON bool) error {
		id, err := releaseID(c, cl)
		if err != nil {
			return err
		}
		p, err := envPath(cl, "/releases/"+url.PathEscape(id)+"/"+verb)
		if err != nil {
			return err
		}
		var r record.Release
		if err := cl.call(c.Context, "POST", p, nil, &r); err != nil {
			return err
		}
		if asJSON {
			return writeJSON(term.stdout, r)
		}
		switch verb {
		case "continue":
			fmt.Fprintf(term.stdout, "release %s: continuing (the server sends the next wave within a second; tether release status %s)\n", r.ID, r.ID)
		default:
			fmt.Fprintf(term.stdout, "release %s aborted: no further wave is sent; agents not reached keep the version they had until the next release\n", r.ID)
		}
		return nil
	}
}

// printRollout shows a release and, when staged, its waves.
func printRollout(term *terminal, r record.Release) {
	w := term.stdout
	ro := r.Rollout
	if ro == nil {
		fmt.Fprintf(w, "release %s of version %d: %s, to every agent at once (release_strategy all)\n", r.ID, r.Version, r.State)
		fmt.Fprintln(w, releaseCounts(r))
		printFanout(w, r.Fanout)
		return
	}
	prev := "none"
	if ro.Previous > 0 {
		prev = "version " + strconv.FormatInt(ro.Previous, 10)
	}
	fmt.Fprintf(w, "release %s of version %d: %s, wave %d of %d (agents not reached keep %s)\n", r.ID, r.Version, ro.Stage, min(ro.Wave+1, len(ro.Waves)), len(ro.Waves), prev)
	if r.Note != "" {
		fmt.Fprintln(w, r.Note)
	}
	switch ro.Stage {
	case record.StageHalted:
		fmt.Fprintf(w, "halted: more agents failed than release_max_failed (%s) allows; tether release continue %s goes on, tether release abort %s stops\n", ro.Strategy.MaxFailed, r.ID, r.ID)
	case record.StageWaiting:
		fmt.Fprintf(w, "wave %d succeeded; the next waits for: tether release continue %s\n", ro.Wave+1, r.ID)
	}
	t := newTable(term, "WAVE", "NAME", "AGENTS", "SUCCEEDED", "FAILED", "PENDING", "STATE")
	for i, wv := range ro.Waves {
		state := "sent"
		switch {
		case i >= ro.Sent:
			state = "not sent"
		case wv.PendingCount == 0 && wv.FailedCount == 0:
			state = "succeeded"
		case wv.PendingCount == 0:
			state = "failed"
		}
		t.row(strconv.Itoa(i+1), wv.Name, strconv.Itoa(len(wv.Agents)), strconv.Itoa(wv.Succeeded), strconv.Itoa(wv.FailedCount), strconv.Itoa(wv.PendingCount), state)
	}
	_ = t.flush()
	for i, wv := range ro.Waves[:min(ro.Sent, len(ro.Waves))] {
		listAgents(w, fmt.Sprintf("wave %d failed", i+1), wv.FailedAgents, wv.FailedCount)
		listAgents(w, fmt.Sprintf("wave %d pending", i+1), wv.PendingAgents, wv.PendingCount)
	}
	if len(ro.Moved) > 0 {
		fmt.Fprintf(w, "in a later wave than their share, for requiring an agent of that wave: %s\n", strings.Join(ro.Moved, ", "))
	}
}

func listAgents(w io.Writer, what string, names []string, count int) {
	if count == 0 {
		return
	}
	more := ""
	if n := count - len(names); n > 0 {
		more = fmt.Sprintf(" … and %d more", n)
	}
	fmt.Fprintf(w, "%s: %s%s\n", what, strings.Join(names, ", "), more)
}
