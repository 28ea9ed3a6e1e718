package cli

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	ucli "github.com/urfave/cli/v2"

	"github.com/tetherhq/tether/model"
	"github.com/tetherhq/tether/server/api"
	"github.com/tetherhq/tether/server/record"
)

func exportCommand(term *terminal) *ucli.Command {
	flags := append(remoteFlags(), modelFlags()...)
	flags = append(flags,
		&ucli.BoolFlag{Name: "release", Usage: "release the version at once: agents get it"},
		&ucli.BoolFlag{Name: "wait", Usage: "with --release: follow the release's fan-out to agents, then wait until every resource is deployed or failed"},
		&ucli.DurationFlag{Name: "timeout", Value: 10 * time.Minute, Usage: "how long --wait waits"},
	)
	return &ucli.Command{
		Name:      "export",
		Usage:     "compile a model here and upload it to the server as a new version",
		ArgsUsage: "DIR",
		Description: "Compiles DIR like `tether compile` and uploads the resource set to the environment (--env).\n" +
			"The model is compiled against the environment's live inventory on the server (its accepted\n" +
			"agents with their labels and facts), unless --inventory FILE names another.\n" +
			"An unchanged model adds no version. --release releases it: the server answers at once and sends\n" +
			"it to agents in the background; --wait follows that, then the deploy.\n\n" +
			"   tether export --release --wait examples/quickstart",
		Flags: flags,
		Action: remoteAction("DIR", func(c *ucli.Context, cl *client, asJSON bool) error {
			p, err := envPath(cl, "/versions?release="+strconv.FormatBool(c.Bool("release")))
			if err != nil {
				return err
			}
			opts, err := compileOptions(c)
			if err != nil {
				return err
			}
			if opts.Inventory == nil {
				if opts.Inventory, err = serverInventory(c.Context, cl); err != nil {
					return err
				}
			}
			res, err := compileDir(c.Context, term, c.Args().First(), opts)
			if err != nil {
				return err
			}
			var out api.ExportResponse
			meta := model.VersionMeta{Compiler: "tether " + readBuildInfo().Version, Source: c.Args().First()}
			if err := cl.call(c.Context, "POST", p, api.ExportRequest{Resources: res.Resources, Meta: meta}, &out); err != nil {
				return err
			}
			if !asJSON {
				what := "new version"
				if out.Reused {
					what = "unchanged; version"
				}
				fmt.Fprintf(term.stdout, "%s %d (%d resources), %s\n", what, out.Version.Number, out.Version.Count, out.Version.State)
				if out.ReleaseID != "" {
					fmt.Fprintf(term.stdout, "release %s: sending it to agents in the background (follow: tether version releases %s)\n", out.ReleaseID, out.ReleaseID)
				}
			}
			if c.Bool("wait") && out.ReleaseID != "" {
				rel, err := followRelease(c, cl, term, out.ReleaseID, c.Duration("timeout"), asJSON)
				if err != nil {
					return err
				}
				out.Release = &rel
				if err := releaseOutcome(rel); err != nil {
					return err
				}
			}
			if c.Bool("wait") && out.Released {
				if err := waitDeployed(c, cl, term, out.Version.Number, c.Duration("timeout"), asJSON); err != nil {
					return err
				}
			}
			if asJSON {
				return writeJSON(term.stdout, out)
			}
			return nil
		}),
	}
}

// waitDeployed polls the environment's resources of version n until none is
// still available or deploying, showing progress; it fails if any failed.
func waitDeployed(c *ucli.Context, cl *client, term *terminal, n int64, timeout time.Duration, quiet bool) error {
	p, err := envPath(cl, "/resources")
	if err != nil {
		return err
	}
	deadline := time.Now().Add(timeout)
	notice := &waitNotice{term: term, quiet: quiet}
	defer notice.end()
	for {
		var sts []record.ResourceStatus
		if err := cl.call(c.Context, "GET", p, nil, &sts); err != nil {
			return err
		}
		counts := map[model.ResourceState]int{}
		pending, total := 0, 0
		stuck := map[string]bool{}
		for _, s := range sts {
			if s.Version != n || s.State == model.StateOrphaned {
				continue
			}
			total++
			counts[s.State]++
			if s.State == model.StateAvailable || s.State == model.StateDeploying {
				pending++
				stuck[s.ID.Agent] = true
			}
		}
		if pending == 0 {
			notice.end()
			if counts[model.StateFailed]+counts[model.StateSkipped] > 0 {
				return &exitError{code: exitFailed, err: fmt.Errorf("version %d: %d failed, %d skipped: see tether resource list --state failed", n, counts[model.StateFailed], counts[model.StateSkipped])}
			}
			if !quiet {
				fmt.Fprintf(term.stdout, "version %d deployed: %d resources\n", n, counts[model.StateDeployed])
			}
			return nil
		}
		notice.show(fmt.Sprintf("version %d: %d/%d resources done (%d deployed, %d failed)%s", n, total-pending, total,
			counts[model.StateDeployed], counts[model.StateFailed], waitingFor(slices.Sorted(maps.Keys(stuck)))))
		if time.Now().After(deadline) {
			notice.end()
			return waitTimeout(c, cl, n, timeout, sts)
		}
		select {
		case <-c.Context.Done():
			return c.Context.Err()
		case <-time.After(time.Second):
		}
	}
}

// waitTimeout is the error of a wait for version n that timed out: it
// names the agents whose resources of n are not deployed yet (at most
// namedAgents of them), and how many of the version's agents they are.
func waitTimeout(c *ucli.Context, cl *client, n int64, timeout time.Duration, sts []record.ResourceStatus) error {
	all, stuck := map[string]bool{}, map[string]int{}
	for _, s := range sts {
		if s.Version != n || s.State == model.StateOrphaned {
			continue
		}
		all[s.ID.Agent] = true
		if s.State == model.StateAvailable || s.State == model.StateDeploying {
			stuck[s.ID.Agent]++
		}
	}
	// Say why an agent may be stuck, when the agent list says (best
	// effort: the timeout is the answer either way).
	why := map[string]string{}
	if p, err := envPath(cl, "/agents"); err == nil {
		var as []api.AgentView
		if cl.call(c.Context, "GET", p, nil, &as) == nil {
			for _, a := range as {
				switch {
				case a.State != record.AgentAccepted:
					why[a.Name] = string(a.State)
				case a.Paused:
					why[a.Name] = "paused"
				case !a.Online:
					why[a.Name] = "offline"
				}
			}
			for name := range stuck {
				if !slices.ContainsFunc(as, func(a api.AgentView) bool { return a.Name == name }) {
					why[name] = "never seen"
				}
			}
		}
	}
	names := slices.Sorted(maps.Keys(stuck))
	shown := make([]string, 0, min(len(names), namedAgents))
	for _, name := range names[:min(len(names), namedAgents)] {
		if w := why[name]; w != "" {
			name += " (" + w + ")"
		}
		shown = append(shown, name)
	}
	list := strings.Join(shown, ", ")
	if more := len(names) - len(shown); more > 0 {
		list += fmt.Sprintf(", … and %d more", more)
	}
	return fmt.Errorf("timed out after %s: %d of %d agents have not reported version %d deployed: %s; "+
		"the release stands and each gets it when it next says hello (tether agent list, tether resource list --state available)",
		timeout, len(names), len(all), n, list)
}

// namedAgents bounds the agents a wait's timeout names.
const namedAgents = 10
