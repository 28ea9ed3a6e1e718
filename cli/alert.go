package cli

import (
	"net/url"
	"strconv"
	"time"

	ucli "github.com/urfave/cli/v2"

	"github.com/tetherhq/tether/model"
	"github.com/tetherhq/tether/server/record"
)

func alertCommand(term *terminal) *ucli.Command {
	return &ucli.Command{
		Name:  "alert",
		Usage: "list an environment's alerts: drift and restores, forged or misdirected messages (security), compiles that fail and recover",
		Subcommands: []*ucli.Command{
			remoteCommand(term, "list", "alerts, newest first", "", []ucli.Flag{
				&ucli.StringFlag{Name: "agent", Usage: "only those about this agent"},
				&ucli.StringFlag{Name: "kind", Usage: "only alerts of this `KIND`: " + record.AlertKindsHelp},
				&ucli.IntFlag{Name: "limit", Value: 100, Usage: "at most this many"},
			}, func(c *ucli.Context, cl *client, asJSON bool) error {
				q := url.Values{}
				for _, f := range []string{"agent", "kind"} {
					if v := c.String(f); v != "" {
						q.Set(f, v)
					}
				}
				q.Set("limit", strconv.Itoa(c.Int("limit")))
				p, err := envPath(cl, "/alerts?"+q.Encode())
				if err != nil {
					return err
				}
				var as []record.Alert
				if err := cl.call(c.Context, "GET", p, nil, &as); err != nil {
					return err
				}
				if asJSON {
					return writeJSON(term.stdout, as)
				}
				t := newTable(term, "AT", "KIND", "AGENT", "RESOURCE", "MESSAGE")
				for _, a := range as {
					id := ""
					if a.ID != nil {
						id = a.ID.String()
					}
					t.paintedRow([]colour{1: alertColour(a)}, a.At.Local().Format(time.DateTime), string(a.Kind), a.Agent, id, a.Message)
				}
				return t.flush()
			}),
		},
	}
}

// alertColour is an alert's colour: good news (a drift restored, a
// compile recovered) green, bad news red.
func alertColour(a record.Alert) colour {
	switch {
	case a.Kind.Good(), a.Kind == record.AlertDrift && a.Compliance == model.Compliant:
		return green
	case a.Kind == record.AlertSecurity:
		return boldRed
	}
	return red
}
