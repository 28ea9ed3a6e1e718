package cli

import (
	"net/url"
	"strings"
	"time"

	ucli "github.com/urfave/cli/v2"

	"github.com/tetherhq/tether/server/record"
)

// instanceCommand is `tether instance`: the machines the platforms'
// agents report.
func instanceCommand(term *terminal) *ucli.Command {
	return describe(&ucli.Command{
		Name:  "instance",
		Usage: "instances: the real machines the platforms' agents report, with their power state, addresses and host",
		Description: "An instance is a real machine: one made from a host (tether host provision), or one a\n" +
			"platform's agent reported without a host (discovered: made otherwise). Its ID is its driver's\n" +
			"(a libvirt domain's UUID). The agents report instances when they make, start, stop or destroy\n" +
			"them, and when asked for their platform's inventory (tether platform inventory). Reading needs\n" +
			"the viewer role.\n\n" +
			"   tether instance list --env prod\n" +
			"   tether instance show 9b2e4c1a-0f3d-4a57-8c11-2d5e6f7a8b9c --env prod",
		Subcommands: []*ucli.Command{
			remoteCommand(term, "list", "list the environment's instances", "", nil, func(c *ucli.Context, cl *client, asJSON bool) error {
				p, err := envPath(cl, "/instances")
				if err != nil {
					return err
				}
				var is []record.Instance
				if err := cl.call(c.Context, "GET", p, nil, &is); err != nil {
					return err
				}
				if asJSON {
					return writeJSON(term.stdout, is)
				}
				t := newTable(term, "ID", "HOST", "PLATFORM", "POWER", "UPTIME", "ADDRESSES", "AGENT", "SEEN")
				now := time.Now()
				for _, i := range is {
					t.paintedRow([]colour{3: powerColour(i.Power)}, i.ID, dash(i.Host), dash(i.Platform), string(i.Power), uptime(i, now),
						dash(strings.Join(i.Addresses, ",")), dash(i.Agent), i.SeenAt.Local().Format(time.DateTime))
				}
				return t.flush()
			}),
			remoteCommand(term, "show", "show an instance", "ID", nil, func(c *ucli.Context, cl *client, asJSON bool) error {
				p, err := envPath(cl, "/instances/"+url.PathEscape(c.Args().First()))
				if err != nil {
					return err
				}
				var i record.Instance
				if err := cl.call(c.Context, "GET", p, nil, &i); err != nil {
					return orNotFound(err, "tether instance list shows the instances")
				}
				if asJSON {
					return writeJSON(term.stdout, i)
				}
				t := newTable(term, "FIELD", "VALUE")
				t.row("id", i.ID)
				t.row("environment", i.Env)
				t.row("host", dash(i.Host))
				t.row("platform", dash(i.Platform))
				t.paintedRow([]colour{1: powerColour(i.Power)}, "power", string(i.Power))
				t.row("uptime", uptime(i, time.Now()))
				t.row("addresses", dash(strings.Join(i.Addresses, ", ")))
				t.row("agent", dash(i.Agent))
				if len(i.Labels) > 0 {
					t.row("labels", joinPairs(i.Labels))
				}
				if len(i.Hardware) > 0 {
					t.row("hardware", joinPairs(i.Hardware))
				}
				t.row("seen", i.SeenAt.Local().Format(time.DateTime))
				return t.flush()
			}),
		},
	}, map[string]string{
		"list": "Each instance with its host (- for a discovered one), its platform, its power state, how long it\n" +
			"has run and its addresses.\n\n   tether instance list --env prod",
		"show": "ID is the instance's, as tether instance list shows it (quote one of the form agent:NAME).\n\n" +
			"   tether instance show 9b2e4c1a-0f3d-4a57-8c11-2d5e6f7a8b9c --env prod",
	})
}

// uptime is how long an instance has run, or - when it does not.
func uptime(i record.Instance, now time.Time) string {
	if up := i.Uptime(now); up > 0 {
		return up.Round(time.Second).String()
	}
	return "-"
}
