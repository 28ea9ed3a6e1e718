package cli

import (
	"fmt"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"time"

	ucli "github.com/urfave/cli/v2"

	"github.com/tetherhq/tether/model"
	"github.com/tetherhq/tether/server/api"
	"github.com/tetherhq/tether/server/record"
)

func resourceCommand(term *terminal) *ucli.Command {
	return &ucli.Command{
		Name:  "resource",
		Usage: "list and inspect the resources of a server environment",
		Subcommands: []*ucli.Command{
			remoteCommand(term, "list", "every resource with its state and compliance", "", []ucli.Flag{
				&ucli.StringFlag{Name: "agent", Usage: "only this agent's"},
				&ucli.StringFlag{Name: "type", Usage: "only this type (file, package…)"},
				&ucli.StringFlag{Name: "state", Usage: "only in this state (deployed, failed…)"},
				&ucli.StringFlag{Name: "compliance", Usage: "only compliant, non_compliant or unknown"},
			}, func(c *ucli.Context, cl *client, asJSON bool) error {
				q := url.Values{}
				for _, f := range []string{"agent", "type", "state", "compliance"} {
					if v := c.String(f); v != "" {
						q.Set(f, v)
					}
				}
				p, err := envPath(cl, "/resources?"+q.Encode())
				if err != nil {
					return err
				}
				var sts []record.ResourceStatus
				if err := cl.call(c.Context, "GET", p, nil, &sts); err != nil {
					return err
				}
				if asJSON {
					return writeJSON(term.stdout, sts)
				}
				t := newTable(term, "RESOURCE", "STATE", "COMPLIANCE", "VERSION", "UPDATED", "MESSAGE")
				for _, s := range sts {
					t.paintedRow([]colour{none, stateColour(s.State)}, s.ID.String(), string(s.State), string(s.Compliance), strconv.FormatInt(s.Version, 10), s.UpdatedAt.Local().Format(time.DateTime), s.Message)
				}
				return t.flush()
			}),
			remoteCommand(term, "show", "a resource's state and attributes", "ID", nil, func(c *ucli.Context, cl *client, asJSON bool) error {
				p, err := envPath(cl, "/resources/"+url.PathEscape(c.Args().First()))
				if err != nil {
					return err
				}
				var v api.ResourceView
				if err := cl.call(c.Context, "GET", p, nil, &v); err != nil {
					return err
				}
				if asJSON {
					return writeJSON(term.stdout, v)
				}
				fmt.Fprintf(term.stdout, "%s\n  state       %s\n  compliance  %s\n  version     %d\n", v.ID, v.State, v.Compliance, v.Version)
				if v.Message != "" {
					fmt.Fprintf(term.stdout, "  message     %s\n", v.Message)
				}
				if v.Resource != nil {
					keys := make([]string, 0, len(v.Resource.Attributes))
					for k := range v.Resource.Attributes {
						keys = append(keys, k)
					}
					sort.Strings(keys)
					for _, k := range keys {
						fmt.Fprintf(term.stdout, "  %-11s %v\n", k, v.Resource.Attributes[k])
					}
				}
				return nil
			}),
			remoteCommand(term, "log", "a resource's action log, newest first", "ID", nil, func(c *ucli.Context, cl *client, asJSON bool) error {
				p, err := envPath(cl, "/resources/"+url.PathEscape(c.Args().First())+"/log")
				if err != nil {
					return err
				}
				var acts []record.Action
				if err := cl.call(c.Context, "GET", p, nil, &acts); err != nil {
					return err
				}
				if asJSON {
					return writeJSON(term.stdout, acts)
				}
				return actionTable(term, acts)
			}),
		},
	}
}

func stateColour(s model.ResourceState) colour {
	switch s {
	case model.StateDeployed:
		return green
	case model.StateFailed:
		return red
	case model.StateSkipped, model.StateUndefined, model.StateSkippedForUndefined, model.StateOrphaned:
		return yellow
	}
	return none
}

func actionTable(term *terminal, acts []record.Action) error {
	t := newTable(term, "WHEN", "RESOURCE", "KIND", "STATE", "VERSION", "CHANGES", "MESSAGE")
	for _, a := range acts {
		var names []string
		for k := range a.Changes {
			names = append(names, k)
		}
		sort.Strings(names)
		state := string(a.State)
		if a.Kind == record.ActionDryRun {
			// A dry run deployed nothing: say what a deploy would do.
			state = model.DryRunOutcome(a.State, a.Changes)
		}
		t.row(a.At.Local().Format(time.DateTime), a.ID.String(), string(a.Kind), state, strconv.FormatInt(a.Version, 10), strings.Join(names, ","), a.Message)
	}
	return t.flush()
}
