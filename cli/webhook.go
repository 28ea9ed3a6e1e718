package cli

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	ucli "github.com/urfave/cli/v2"

	"github.com/tetherhq/tether/server/record"
)

// webhookCommand is `tether webhook`: where an environment's events are
// posted.
func webhookCommand(term *terminal) *ucli.Command {
	kindsFlag := &ucli.StringSliceFlag{Name: "kinds", Usage: "event `KIND`s to post, comma-separated, or * for all (default: the alerts: " +
		strings.Join(record.DefaultWebhookKinds, ",") + ")"}
	return &ucli.Command{
		Name:  "webhook",
		Usage: "post an environment's events (alerts by default) to a URL, signed",
		Description: "A webhook gets each event of the kinds it names as a JSON POST, signed with its secret\n" +
			"(headers Webhook-Id, Webhook-Timestamp, Webhook-Signature: the Standard Webhooks scheme;\n" +
			"docs/server.md says how to verify). Deliveries are queued in the server's store with the\n" +
			"event, retried with back-off for a day, and listed with their outcome. The secret is shown\n" +
			"once, when the webhook is added. Adding, changing and deleting need the admin role; listing\n" +
			"and testing, operator.\n\n" +
			"The server posts only where its operator allows: not to the server's own addresses, loopback,\n" +
			"link-local (cloud metadata), private, unique-local, documentation or other reserved addresses,\n" +
			"nor to a name resolving to one, unless the server runs with --webhook-allow naming them\n" +
			"(docs/server.md, Where webhooks may post).\n\n" +
			"   tether webhook add pager --url https://alerts.example.com/tether --env prod\n" +
			"   tether webhook add everything --url https://log.example.com/in --kinds '*' --env prod\n" +
			"   tether webhook test pager --env prod\n" +
			"   tether webhook deliveries pager --env prod",
		Subcommands: []*ucli.Command{
			remoteCommand(term, "add", "add a webhook; its secret is printed once", "NAME", []ucli.Flag{
				&ucli.StringFlag{Name: "url", Usage: "the `URL` events are posted to (http:// or https://; the server's own, private, loopback and reserved addresses only where the server allows them)", Required: true},
				kindsFlag,
				&ucli.StringFlag{Name: "secret-file", EnvVars: []string{"TETHER_WEBHOOK_SECRET_FILE"}, Usage: "sign with the secret in `FILE` (16 to 256 characters) instead of one the server makes"},
				&ucli.BoolFlag{Name: "disabled", Usage: "add it disabled: nothing is posted until it is enabled (tether webhook update --enable)"},
			}, func(c *ucli.Context, cl *client, asJSON bool) error {
				p, err := envPath(cl, "/webhooks")
				if err != nil {
					return err
				}
				u := c.String("url")
				req := record.WebhookRequest{Name: c.Args().First(), URL: &u}
				if c.IsSet("kinds") {
					kinds := splitKinds(c.StringSlice("kinds"))
					req.Kinds = &kinds
				}
				if c.Bool("disabled") {
					f := false
					req.Enabled = &f
				}
				if c.String("secret-file") != "" {
					s, err := readSecretFile(term, c.String("secret-file"), "secret-file")
					if err != nil {
						return err
					}
					req.Secret = &s
				}
				var w record.Webhook
				if err := cl.call(c.Context, "POST", p, req, &w); err != nil {
					return err
				}
				if asJSON {
					return writeJSON(term.stdout, w)
				}
				showWebhook(term, w)
				if req.Secret == nil {
					fmt.Fprintf(term.stdout, "\nSecret (shown once; give it to the receiver to verify the signatures):\n\n    %s\n", w.Secret)
				}
				return nil
			}),
			remoteCommand(term, "list", "list the environment's webhooks (never their secrets)", "", nil, func(c *ucli.Context, cl *client, asJSON bool) error {
				hooks, err := listWebhooks(c, cl)
				if err != nil {
					return err
				}
				if asJSON {
					return writeJSON(term.stdout, hooks)
				}
				t := newTable(term, "ID", "NAME", "URL", "KINDS", "ENABLED")
				for _, w := range hooks {
					t.row(strconv.FormatInt(w.ID, 10), w.Name, w.URL, strings.Join(w.Kinds, ","), yesNo(w.Enabled))
				}
				return t.flush()
			}),
			remoteCommand(term, "show", "show a webhook, by ID or NAME", "ID|NAME", nil, func(c *ucli.Context, cl *client, asJSON bool) error {
				w, p, err := pickWebhook(c, cl)
				if err != nil {
					return err
				}
				if err := cl.call(c.Context, "GET", p, nil, &w); err != nil {
					return err
				}
				if asJSON {
					return writeJSON(term.stdout, w)
				}
				showWebhook(term, w)
				return nil
			}),
			remoteCommand(term, "update", "change a webhook, by ID or NAME: the flags given", "ID|NAME", []ucli.Flag{
				&ucli.StringFlag{Name: "url", Usage: "post to `URL`"},
				kindsFlag,
				&ucli.BoolFlag{Name: "enable", Usage: "post events again"},
				&ucli.BoolFlag{Name: "disable", Usage: "post nothing (events meanwhile are not queued)"},
				&ucli.BoolFlag{Name: "rotate-secret", Usage: "make a new secret, printed once (the old one stops working)"},
			}, func(c *ucli.Context, cl *client, asJSON bool) error {
				if c.Bool("enable") && c.Bool("disable") {
					return usageError("--enable and --disable: choose one")
				}
				_, p, err := pickWebhook(c, cl)
				if err != nil {
					return err
				}
				var req record.WebhookRequest
				if c.IsSet("url") {
					u := c.String("url")
					req.URL = &u
				}
				if c.IsSet("kinds") {
					kinds := splitKinds(c.StringSlice("kinds"))
					req.Kinds = &kinds
				}
				if c.Bool("enable") || c.Bool("disable") {
					on := c.Bool("enable")
					req.Enabled = &on
				}
				req.RotateSecret = c.Bool("rotate-secret")
				var w record.Webhook
				if err := cl.call(c.Context, "PATCH", p, req, &w); err != nil {
					return err
				}
				if asJSON {
					return writeJSON(term.stdout, w)
				}
				showWebhook(term, w)
				if w.Secret != "" {
					fmt.Fprintf(term.stdout, "\nNew secret (shown once):\n\n    %s\n", w.Secret)
				}
				return nil
			}),
			remoteCommand(term, "delete", "delete a webhook, by ID or NAME, with its deliveries (those not sent are not sent)", "ID|NAME", nil, func(c *ucli.Context, cl *client, asJSON bool) error {
				w, p, err := pickWebhook(c, cl)
				if err != nil {
					return err
				}
				if err := cl.call(c.Context, "DELETE", p, nil, nil); err != nil {
					return err
				}
				if asJSON {
					return writeJSON(term.stdout, w)
				}
				fmt.Fprintf(term.stdout, "webhook %s (%d) deleted\n", w.Name, w.ID)
				return nil
			}),
			remoteCommand(term, "test", "send a test delivery (kind webhook.test) to a webhook, by ID or NAME", "ID|NAME", nil, func(c *ucli.Context, cl *client, asJSON bool) error {
				w, p, err := pickWebhook(c, cl)
				if err != nil {
					return err
				}
				var d record.Delivery
				if err := cl.call(c.Context, "POST", p+"/test", nil, &d); err != nil {
					return err
				}
				if asJSON {
					return writeJSON(term.stdout, d)
				}
				fmt.Fprintf(term.stdout, "test delivery %d to %s queued; tether webhook deliveries %s shows how it went\n", d.ID, w.Name, w.Name)
				return nil
			}),
			remoteCommand(term, "deliveries", "list a webhook's deliveries, newest first, with their outcome", "ID|NAME", []ucli.Flag{
				&ucli.IntFlag{Name: "limit", Value: 50, Usage: "list at most `N`"},
			}, func(c *ucli.Context, cl *client, asJSON bool) error {
				_, p, err := pickWebhook(c, cl)
				if err != nil {
					return err
				}
				var ds []record.Delivery
				if err := cl.call(c.Context, "GET", p+"/deliveries?limit="+strconv.Itoa(c.Int("limit")), nil, &ds); err != nil {
					return err
				}
				if asJSON {
					return writeJSON(term.stdout, ds)
				}
				t := newTable(term, "ID", "KIND", "STATE", "ATTEMPTS", "STATUS", "LATENCY", "CREATED", "NEXT / ERROR")
				for _, d := range ds {
					status, note := "-", d.Error
					if d.StatusCode != 0 {
						status = strconv.Itoa(d.StatusCode)
					}
					if d.State == record.DeliveryPending && d.Attempts > 0 {
						note = "retry " + d.NextAt.Local().Format(time.DateTime) + ": " + d.Error
					}
					t.row(strconv.FormatInt(d.ID, 10), d.Kind, string(d.State), strconv.Itoa(d.Attempts), status,
						(time.Duration(d.LatencyMS) * time.Millisecond).String(), d.CreatedAt.Local().Format(time.DateTime), note)
				}
				return t.flush()
			}),
		},
	}
}

// splitKinds reads --kinds: repeated, or comma-separated.
func splitKinds(in []string) []string {
	out := []string{}
	for _, s := range in {
		for _, k := range strings.Split(s, ",") {
			if k = strings.TrimSpace(k); k != "" {
				out = append(out, k)
			}
		}
	}
	return out
}

func listWebhooks(c *ucli.Context, cl *client) ([]record.Webhook, error) {
	p, err := envPath(cl, "/webhooks")
	if err != nil {
		return nil, err
	}
	var hooks []record.Webhook
	return hooks, cl.call(c.Context, "GET", p, nil, &hooks)
}

// pickWebhook finds the webhook the first argument names (ID or name) and
// returns it with its API path.
func pickWebhook(c *ucli.Context, cl *client) (record.Webhook, string, error) {
	arg := c.Args().First()
	hooks, err := listWebhooks(c, cl)
	if err != nil {
		return record.Webhook{}, "", err
	}
	for _, w := range hooks {
		if w.Name == arg || strconv.FormatInt(w.ID, 10) == arg {
			p, _ := envPath(cl, "/webhooks/"+strconv.FormatInt(w.ID, 10))
			return w, p, nil
		}
	}
	return record.Webhook{}, "", fmt.Errorf("no webhook %q in environment %s: tether webhook list shows them", arg, cl.env)
}

func showWebhook(term *terminal, w record.Webhook) {
	t := newTable(term, "FIELD", "VALUE")
	t.row("id", strconv.FormatInt(w.ID, 10))
	t.row("name", w.Name)
	t.row("environment", w.Env)
	t.row("url", w.URL)
	t.row("kinds", strings.Join(w.Kinds, ","))
	t.row("enabled", yesNo(w.Enabled))
	if w.CreatedBy != "" {
		t.row("created by", w.CreatedBy)
	}
	t.row("created", w.CreatedAt.Local().Format(time.DateTime))
	_ = t.flush()
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}
