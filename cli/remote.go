package cli

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"time"

	ucli "github.com/urfave/cli/v2"

	"github.com/tetherhq/tether/model"
	"github.com/tetherhq/tether/server"
	"github.com/tetherhq/tether/server/api"
)

// remoteAction runs fn with a client and the output format.
func remoteAction(args string, fn func(c *ucli.Context, cl *client, json bool) error) ucli.ActionFunc {
	return func(c *ucli.Context) error {
		format, err := outputFormat(c)
		if err != nil {
			return err
		}
		if want := len(strings.Fields(args)); c.NArg() != want && !strings.HasSuffix(args, "...") {
			return usageError("%s takes %d argument(s): %s", c.Command.FullName(), want, args)
		}
		cl, err := newClient(c)
		if err != nil {
			return err
		}
		return fn(c, cl, format == "json")
	}
}

func remoteCommand(term *terminal, name, usage, args string, flags []ucli.Flag, fn func(c *ucli.Context, cl *client, json bool) error) *ucli.Command {
	return &ucli.Command{
		Name: name, Usage: usage, ArgsUsage: args,
		Flags:  append(remoteFlags(), flags...),
		Action: remoteAction(args, fn),
	}
}

func envPath(cl *client, rest string) (string, error) {
	env, err := cl.needEnv()
	if err != nil {
		return "", err
	}
	return "/envs/" + url.PathEscape(env) + rest, nil
}

func envCommand(term *terminal) *ucli.Command {
	op := func(name string, op model.Operation, usage string) *ucli.Command {
		return remoteCommand(term, name, usage, "", []ucli.Flag{
			&ucli.StringSliceFlag{Name: "agent", Usage: "act on this agent only (repeatable)"},
			&ucli.BoolFlag{Name: "full", Usage: "deploy every resource, not only what changed or has not succeeded"},
		}, func(c *ucli.Context, cl *client, asJSON bool) error {
			p, err := envPath(cl, "/"+string(op))
			if err != nil {
				return err
			}
			var d model.Deployment
			if err := cl.call(c.Context, "POST", p, api.OperationRequest{Agents: c.StringSlice("agent"), Full: c.Bool("full")}, &d); err != nil {
				return err
			}
			if asJSON {
				return writeJSON(term.stdout, d)
			}
			fmt.Fprintf(term.stdout, "%s %s of version %d sent to %s\n", op, d.ID, d.Generation, strings.Join(d.Agents, ", "))
			if len(d.Unreached) > 0 {
				fmt.Fprintf(term.stdout, "not connected (they get it on their next hello): %s\n", strings.Join(d.Unreached, ", "))
			}
			if op == model.OpDryRun {
				fmt.Fprintf(term.stdout, "report: tether env report %s\n", d.ID)
			}
			return nil
		})
	}
	showEnv := func(asJSON bool, env model.Environment) error {
		if asJSON {
			return writeJSON(term.stdout, env)
		}
		t := newTable(term.stdout, "NAME", "CREATED", "HALTED", "ENROLLMENT", "DRIFT POLICY")
		t.row(env.Name, env.CreatedAt.Local().Format(time.DateTime), strconv.FormatBool(env.Settings.Halted), string(env.Settings.Enrollment), string(env.Settings.DriftPolicy))
		return t.flush()
	}
	return &ucli.Command{
		Name:  "env",
		Usage: "manage environments on a server: create, list, settings, deploy, repair, dry run, halt",
		Description: "Environments (prod, staging…) each hold their own versions, agents and settings.\n" +
			"The server, environment and token come from --server/--env/--token, TETHER_SERVER/TETHER_ENV/TETHER_TOKEN,\n" +
			"or a .tether file in the project (server = \"…\", env = \"…\", token = \"…\").",
		Subcommands: []*ucli.Command{
			remoteCommand(term, "create", "create an environment", "NAME", []ucli.Flag{
				&ucli.StringSliceFlag{Name: "set", Usage: "a setting: --set drift_policy=heal (repeatable)"},
			}, func(c *ucli.Context, cl *client, asJSON bool) error {
				settings := map[string]string{}
				for _, kv := range c.StringSlice("set") {
					k, v, ok := strings.Cut(kv, "=")
					if !ok {
						return usageError("--set %q: want KEY=VALUE", kv)
					}
					settings[k] = v
				}
				var env model.Environment
				if err := cl.call(c.Context, "POST", "/envs", api.EnvRequest{Name: c.Args().First(), Settings: settings}, &env); err != nil {
					return err
				}
				return showEnv(asJSON, env)
			}),
			remoteCommand(term, "list", "list environments", "", nil, func(c *ucli.Context, cl *client, asJSON bool) error {
				var envs []model.Environment
				if err := cl.call(c.Context, "GET", "/envs", nil, &envs); err != nil {
					return err
				}
				if asJSON {
					return writeJSON(term.stdout, envs)
				}
				t := newTable(term.stdout, "NAME", "CREATED", "HALTED", "ENROLLMENT", "DRIFT POLICY")
				for _, e := range envs {
					t.row(e.Name, e.CreatedAt.Local().Format(time.DateTime), strconv.FormatBool(e.Settings.Halted), string(e.Settings.Enrollment), string(e.Settings.DriftPolicy))
				}
				return t.flush()
			}),
			remoteCommand(term, "show", "show the environment (--env)", "", nil, func(c *ucli.Context, cl *client, asJSON bool) error {
				p, err := envPath(cl, "")
				if err != nil {
					return err
				}
				var env model.Environment
				if err := cl.call(c.Context, "GET", p, nil, &env); err != nil {
					return err
				}
				return showEnv(asJSON, env)
			}),
			remoteCommand(term, "delete", "delete an environment and everything in it", "NAME", nil, func(c *ucli.Context, cl *client, asJSON bool) error {
				if err := cl.call(c.Context, "DELETE", "/envs/"+url.PathEscape(c.Args().First()), nil, nil); err != nil {
					return err
				}
				fmt.Fprintf(term.stderr, "environment %s deleted\n", c.Args().First())
				return nil
			}),
			{
				Name: "settings", Usage: "show settings, or change one: tether env settings set KEY VALUE",
				Flags: remoteFlags(),
				Action: remoteAction("", func(c *ucli.Context, cl *client, asJSON bool) error {
					return showSettings(c, cl, term, asJSON, "GET", nil)
				}),
				Subcommands: []*ucli.Command{remoteCommand(term, "set", "change a setting ("+strings.Join(model.SettingKeys(), ", ")+")", "KEY VALUE", nil,
					func(c *ucli.Context, cl *client, asJSON bool) error {
						return showSettings(c, cl, term, asJSON, "PATCH", map[string]string{c.Args().Get(0): c.Args().Get(1)})
					})},
			},
			op("deploy", model.OpDeploy, "deploy the released version (to every agent, or --agent NAME)"),
			op("repair", model.OpRepair, "verify every resource and repair drift"),
			op("dryrun", model.OpDryRun, "ask agents what a deploy would change; see the answer with `env report`"),
			remoteCommand(term, "report", "what a deploy, repair or dry run reported", "ID", nil, func(c *ucli.Context, cl *client, asJSON bool) error {
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
				return actionTable(term, rep.Actions)
			}),
			remoteCommand(term, "halt", "halt every deploy of the environment (agents pause)", "", nil, haltAction(term, "halt")),
			remoteCommand(term, "resume", "resume a halted environment", "", nil, haltAction(term, "resume")),
		},
	}
}

func haltAction(term *terminal, verb string) func(c *ucli.Context, cl *client, asJSON bool) error {
	return func(c *ucli.Context, cl *client, asJSON bool) error {
		p, err := envPath(cl, "/"+verb)
		if err != nil {
			return err
		}
		var env model.Environment
		if err := cl.call(c.Context, "POST", p, nil, &env); err != nil {
			return err
		}
		if asJSON {
			return writeJSON(term.stdout, env)
		}
		fmt.Fprintf(term.stdout, "environment %s: halted=%v\n", env.Name, env.Settings.Halted)
		return nil
	}
}

func showSettings(c *ucli.Context, cl *client, term *terminal, asJSON bool, method string, body any) error {
	p, err := envPath(cl, "/settings")
	if err != nil {
		return err
	}
	var s map[string]string
	if err := cl.call(c.Context, method, p, body, &s); err != nil {
		return err
	}
	if asJSON {
		return writeJSON(term.stdout, s)
	}
	t := newTable(term.stdout, "SETTING", "VALUE")
	for _, k := range model.SettingKeys() {
		t.row(k, s[k])
	}
	return t.flush()
}

func actionTable(term *terminal, acts []model.Action) error {
	t := newTable(term.stdout, "WHEN", "RESOURCE", "KIND", "STATE", "VERSION", "CHANGES", "MESSAGE")
	for _, a := range acts {
		var names []string
		for k := range a.Changes {
			names = append(names, k)
		}
		sort.Strings(names)
		t.row(a.At.Local().Format(time.DateTime), a.ID.String(), string(a.Kind), string(a.State), strconv.FormatInt(a.Version, 10), strings.Join(names, ","), a.Message)
	}
	return t.flush()
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
			t := newTable(term.stdout, "VERSION", "STATE", "RESOURCES", "CREATED", "EXPORTED BY", "SOURCE")
			for _, v := range vs {
				t.row(strconv.FormatInt(v.Number, 10), string(v.State), strconv.Itoa(v.Count), v.CreatedAt.Local().Format(time.DateTime), v.Meta.ExportedBy, v.Meta.Source)
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
				for _, r := range v.Resources {
					fmt.Fprintf(term.stdout, "  %s\n", r.ID)
				}
				return nil
			}),
		remoteCommand(term, "diff", "what changed between two versions (default FROM: the released one)", "[FROM] TO", nil, func(c *ucli.Context, cl *client, asJSON bool) error {
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
			for _, set := range []struct {
				mark string
				ids  []model.ID
			}{{"+", d.Added}, {"~", d.Changed}, {"-", d.Removed}} {
				for _, id := range set.ids {
					fmt.Fprintf(term.stdout, "  %s %s\n", set.mark, id)
				}
			}
			return nil
		}),
		remoteCommand(term, "release", "release a version: agents get it", "N", nil, func(c *ucli.Context, cl *client, asJSON bool) error {
			p, err := envPath(cl, "/versions/"+url.PathEscape(c.Args().First())+"/release")
			if err != nil {
				return err
			}
			var v model.Version
			if err := cl.call(c.Context, "POST", p, nil, &v); err != nil {
				return err
			}
			if asJSON {
				return writeJSON(term.stdout, v)
			}
			fmt.Fprintf(term.stdout, "version %d released\n", v.Number)
			return nil
		}),
	}
}

func alertCommand(term *terminal) *ucli.Command {
	return &ucli.Command{
		Name:  "alert",
		Usage: "list an environment's alerts: drift and restores, forged or misdirected messages (security)",
		Subcommands: []*ucli.Command{
			remoteCommand(term, "list", "alerts, newest first", "", []ucli.Flag{
				&ucli.StringFlag{Name: "agent", Usage: "only those about this agent"},
				&ucli.StringFlag{Name: "kind", Usage: "only drift or security"},
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
				var as []model.Alert
				if err := cl.call(c.Context, "GET", p, nil, &as); err != nil {
					return err
				}
				if asJSON {
					return writeJSON(term.stdout, as)
				}
				t := newTable(term.stdout, "AT", "KIND", "AGENT", "RESOURCE", "MESSAGE")
				for _, a := range as {
					id := ""
					if a.ID != nil {
						id = a.ID.String()
					}
					t.row(a.At.Local().Format(time.DateTime), string(a.Kind), a.Agent, id, a.Message)
				}
				return t.flush()
			}),
		},
	}
}

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
				var sts []model.ResourceStatus
				if err := cl.call(c.Context, "GET", p, nil, &sts); err != nil {
					return err
				}
				if asJSON {
					return writeJSON(term.stdout, sts)
				}
				t := newTable(term.stdout, "RESOURCE", "STATE", "COMPLIANCE", "VERSION", "UPDATED", "MESSAGE")
				for _, s := range sts {
					t.paintedRow([]string{"", stateColour(s.State)}, s.ID.String(), string(s.State), string(s.Compliance), strconv.FormatInt(s.Version, 10), s.UpdatedAt.Local().Format(time.DateTime), s.Message)
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
				var acts []model.Action
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

func stateColour(s model.ResourceState) string {
	switch s {
	case model.StateDeployed:
		return "green"
	case model.StateFailed:
		return "red"
	case model.StateSkipped, model.StateUndefined, model.StateSkippedForUndefined, model.StateOrphaned:
		return "yellow"
	}
	return ""
}

func agentCommand(term *terminal) *ucli.Command {
	action := func(verb model.AgentAction, usage string) *ucli.Command {
		return remoteCommand(term, string(verb), usage, "NAME", nil, func(c *ucli.Context, cl *client, asJSON bool) error {
			p, err := envPath(cl, "/agents/"+url.PathEscape(c.Args().First())+"/"+string(verb))
			if err != nil {
				return err
			}
			var a api.AgentView
			if err := cl.call(c.Context, "POST", p, nil, &a); err != nil {
				return err
			}
			if asJSON {
				return writeJSON(term.stdout, a)
			}
			fmt.Fprintf(term.stdout, "agent %s: %s, paused=%v\n", a.Name, a.State, a.Paused)
			return nil
		})
	}
	return &ucli.Command{
		Name:  "agent",
		Usage: "run an agent; list, inspect, accept and pause the agents of a server environment; manage enrollment tokens",
		Subcommands: []*ucli.Command{
			agentRunCommand(term),
			agentTokenCommand(term),
			remoteCommand(term, "list", "agents with their state, and whether they are online", "", nil, func(c *ucli.Context, cl *client, asJSON bool) error {
				p, err := envPath(cl, "/agents")
				if err != nil {
					return err
				}
				var as []api.AgentView
				if err := cl.call(c.Context, "GET", p, nil, &as); err != nil {
					return err
				}
				if asJSON {
					return writeJSON(term.stdout, as)
				}
				t := newTable(term.stdout, "NAME", "STATE", "ONLINE", "PAUSED", "GENERATION", "LAST SEEN", "OS/ARCH", "LABELS")
				for _, a := range as {
					var labels []string
					for k, v := range a.Labels {
						labels = append(labels, k+"="+v)
					}
					sort.Strings(labels)
					platform := platformOf(a.Facts)
					t.row(a.Name, string(a.State), strconv.FormatBool(a.Online), strconv.FormatBool(a.Paused), strconv.FormatInt(a.Generation, 10), a.LastSeen.Local().Format(time.DateTime), platform, strings.Join(labels, ","))
				}
				return t.flush()
			}),
			remoteCommand(term, "show", "an agent with its facts", "NAME", nil, func(c *ucli.Context, cl *client, asJSON bool) error {
				p, err := envPath(cl, "/agents/"+url.PathEscape(c.Args().First()))
				if err != nil {
					return err
				}
				var a api.AgentView
				if err := cl.call(c.Context, "GET", p, nil, &a); err != nil {
					return err
				}
				if asJSON {
					return writeJSON(term.stdout, a)
				}
				fmt.Fprintf(term.stdout, "%s\n  state       %s\n  online      %v\n  paused      %v\n  generation  %d\n  key         %s\n  last seen   %s\n  facts:\n",
					a.Name, a.State, a.Online, a.Paused, a.Generation, a.Key, a.LastSeen.Local().Format(time.DateTime))
				return writeJSON(term.stdout, a.Facts)
			}),
			action(model.AgentAccept, "accept a discovered agent: it is enrolled and gets its desired state"),
			action(model.AgentReject, "reject an agent: its events are dropped"),
			action(model.AgentPause, "pause an agent: it is sent no deploy until resumed"),
			action(model.AgentResume, "resume a paused agent"),
		},
	}
}

func tokenCommand(term *terminal) *ucli.Command {
	return &ucli.Command{
		Name:  "token",
		Usage: "manage API tokens (admin)",
		Subcommands: []*ucli.Command{
			remoteCommand(term, "create", "create a token; its secret is printed once", "NAME", []ucli.Flag{
				&ucli.StringFlag{Name: "role", Value: "viewer", Usage: "admin, operator or viewer"},
				&ucli.StringFlag{Name: "for-env", Usage: "scope the token to this environment (default: every one)"},
				&ucli.StringFlag{Name: "expires-in", Usage: "lifetime, e.g. 720h (default: never expires)"},
			}, func(c *ucli.Context, cl *client, asJSON bool) error {
				var nt api.NewToken
				req := api.TokenRequest{Name: c.Args().First(), Role: model.Role(c.String("role")), Env: c.String("for-env"), ExpiresIn: c.String("expires-in")}
				if err := cl.call(c.Context, "POST", "/tokens", req, &nt); err != nil {
					return err
				}
				if asJSON {
					return writeJSON(term.stdout, nt)
				}
				fmt.Fprintf(term.stdout, "token %s (%s, role %s): shown once, store it now:\n\n    %s\n", nt.Name, nt.ID, nt.Role, nt.Secret)
				return nil
			}),
			remoteCommand(term, "list", "list tokens (never their secrets)", "", nil, func(c *ucli.Context, cl *client, asJSON bool) error {
				var ts []model.Token
				if err := cl.call(c.Context, "GET", "/tokens", nil, &ts); err != nil {
					return err
				}
				if asJSON {
					return writeJSON(term.stdout, ts)
				}
				t := newTable(term.stdout, "ID", "NAME", "ROLE", "ENV", "CREATED", "EXPIRES")
				for _, tok := range ts {
					exp := "never"
					if tok.ExpiresAt != nil {
						exp = tok.ExpiresAt.Local().Format(time.DateTime)
					}
					env := tok.Env
					if env == "" {
						env = "*"
					}
					t.row(tok.ID, tok.Name, string(tok.Role), env, tok.CreatedAt.Local().Format(time.DateTime), exp)
				}
				return t.flush()
			}),
			remoteCommand(term, "revoke", "revoke a token", "ID", nil, func(c *ucli.Context, cl *client, asJSON bool) error {
				return cl.call(c.Context, "DELETE", "/tokens/"+url.PathEscape(c.Args().First()), nil, nil)
			}),
		},
	}
}

func watchCommand(term *terminal) *ucli.Command {
	return remoteCommand(term, "watch", "follow live events: results, deploys, agents, alerts (Ctrl-C stops)", "", nil,
		func(c *ucli.Context, cl *client, asJSON bool) error {
			q := ""
			if cl.env != "" {
				q = "?env=" + url.QueryEscape(cl.env)
			}
			req, err := http.NewRequestWithContext(c.Context, "GET", cl.base+"/api/v1/events"+q, nil)
			if err != nil {
				return usageError("server URL %q: %v", cl.base, err)
			}
			req.Header.Set("Authorization", "Bearer "+cl.token)
			resp, err := (&http.Client{}).Do(req)
			if err != nil {
				if c.Context.Err() != nil {
					return nil
				}
				return fmt.Errorf("cannot reach the server at %s: %v", cl.base, err)
			}
			defer resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				return fmt.Errorf("server answered %s: check the token and --env", resp.Status)
			}
			sc := bufio.NewScanner(resp.Body)
			sc.Buffer(make([]byte, 64<<10), 16<<20)
			var kind string
			for sc.Scan() {
				line := sc.Text()
				if v, ok := strings.CutPrefix(line, "event: "); ok {
					kind = v
					continue
				}
				data, ok := strings.CutPrefix(line, "data: ")
				if !ok {
					continue
				}
				if asJSON {
					fmt.Fprintln(term.stdout, data)
					continue
				}
				var e server.Event
				if err := json.Unmarshal([]byte(data), &e); err != nil {
					// A newer server's event: show it as it came.
					fmt.Fprintf(term.stdout, "%s  %s  %s\n", time.Now().Format("15:04:05.000"), kind, data)
					continue
				}
				fmt.Fprintln(term.stdout, eventLine(term, e))
			}
			if c.Context.Err() != nil {
				return nil
			}
			return sc.Err()
		})
}

func exportCommand(term *terminal) *ucli.Command {
	flags := append(remoteFlags(), modelFlags()...)
	flags = append(flags,
		&ucli.BoolFlag{Name: "release", Usage: "release the version at once: agents get it"},
		&ucli.BoolFlag{Name: "wait", Usage: "with --release: wait until every resource is deployed or failed"},
		&ucli.DurationFlag{Name: "timeout", Value: 10 * time.Minute, Usage: "how long --wait waits"},
	)
	return &ucli.Command{
		Name:      "export",
		Usage:     "compile a model here and upload it to the server as a new version",
		ArgsUsage: "DIR",
		Description: "Compiles DIR like `tether compile` and uploads the resource set to the environment (--env).\n" +
			"An unchanged model adds no version. --release releases it; --wait then follows the deploy.\n\n" +
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
	for {
		var sts []model.ResourceStatus
		if err := cl.call(c.Context, "GET", p, nil, &sts); err != nil {
			return err
		}
		counts := map[model.ResourceState]int{}
		pending, total := 0, 0
		for _, s := range sts {
			if s.Version != n || s.State == model.StateOrphaned {
				continue
			}
			total++
			counts[s.State]++
			if s.State == model.StateAvailable || s.State == model.StateDeploying {
				pending++
			}
		}
		if !quiet && term.progress {
			fmt.Fprintf(term.stderr, "\r%d/%d done (%d deployed, %d failed)   ", total-pending, total, counts[model.StateDeployed], counts[model.StateFailed])
		}
		if pending == 0 {
			if !quiet && term.progress {
				fmt.Fprintln(term.stderr)
			}
			if counts[model.StateFailed]+counts[model.StateSkipped] > 0 {
				return &exitError{code: exitFailed, err: fmt.Errorf("version %d: %d failed, %d skipped: see tether resource list --state failed", n, counts[model.StateFailed], counts[model.StateSkipped])}
			}
			if !quiet {
				fmt.Fprintf(term.stdout, "version %d deployed: %d resources\n", n, counts[model.StateDeployed])
			}
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("version %d: %d of %d resources not deployed after %s: are the agents running? (tether agent list)", n, pending, total, timeout)
		}
		select {
		case <-c.Context.Done():
			return c.Context.Err()
		case <-time.After(time.Second):
		}
	}
}

// platformOf is the short platform an agent's facts describe: "debian 12
// amd64", or "-" when it did not report it.
func platformOf(facts map[string]any) string {
	var parts []string
	if osf, ok := facts["os"].(map[string]any); ok {
		for _, k := range []string{"id", "release"} {
			if v, ok := osf[k].(string); ok && v != "" {
				parts = append(parts, v)
			}
		}
	}
	if arch, ok := facts["arch"].(string); ok {
		parts = append(parts, arch)
	}
	if len(parts) == 0 {
		return "-"
	}
	return strings.Join(parts, " ")
}
