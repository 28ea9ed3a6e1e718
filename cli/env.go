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

func envCommand(term *terminal) *ucli.Command {
	op := func(name string, op record.Operation, usage string) *ucli.Command {
		return remoteCommand(term, name, usage, "", append([]ucli.Flag{
			&ucli.StringSliceFlag{Name: "agent", Usage: "act on this agent only (repeatable)"},
			&ucli.BoolFlag{Name: "full", Usage: "deploy every resource, not only what changed or has not succeeded"},
		}, waitFlags("wait until every agent it was sent to answered, naming those it waits for, and show its report (exit status 1 if an agent failed)")...), func(c *ucli.Context, cl *client, asJSON bool) error {
			p, err := envPath(cl, "/"+string(op))
			if err != nil {
				return err
			}
			var d record.Deployment
			if err := cl.call(c.Context, "POST", p, api.OperationRequest{Agents: c.StringSlice("agent"), Full: c.Bool("full")}, &d); err != nil {
				return err
			}
			wait := c.Bool("wait")
			if asJSON && !wait {
				return writeJSON(term.stdout, d)
			}
			if !asJSON {
				// While it waits, what was sent is said on stderr: stdout
				// gets the report.
				out := term.stdout
				if wait {
					out = term.stderr
				}
				fmt.Fprintf(out, "%s %s of version %d sent to %s\n", op, d.ID, d.Generation, strings.Join(d.Agents, ", "))
				if len(d.Unreached) > 0 {
					fmt.Fprintf(out, "not connected (they get it on their next hello): %s\n", strings.Join(d.Unreached, ", "))
				}
			}
			if !wait {
				fmt.Fprintf(term.stdout, "report: tether env report %s (or wait for it: --wait)\n", d.ID)
				return nil
			}
			rep, err := followDeploy(c, cl, term, d.ID, c.Duration("timeout"), asJSON)
			if err != nil {
				return err
			}
			if asJSON {
				err = writeJSON(term.stdout, rep)
			} else {
				err = showDeployReport(term, rep)
			}
			if err == nil && rep.Deploy != nil && rep.Deploy.Outcome == record.DeployFailed {
				err = &exitError{code: exitFailed, err: errPrinted}
			}
			return err
		})
	}
	showEnv := func(asJSON bool, env record.Environment) error {
		if asJSON {
			return writeJSON(term.stdout, env)
		}
		t := newTable(term, "NAME", "CREATED", "HALTED", "ENROLLMENT", "DRIFT POLICY")
		t.row(env.Name, env.CreatedAt.Local().Format(time.DateTime), strconv.FormatBool(env.Settings.Halted), string(env.Settings.Enrollment), string(env.Settings.DriftPolicy))
		return t.flush()
	}
	return &ucli.Command{
		Name:  "env",
		Usage: "manage environments on a server: create, list, settings, source, compile, deploy, repair, dry run, halt",
		Description: "Environments (prod, staging…) each hold their own versions, agents and settings.\n" +
			"The server, environment and token come from --server/--env/--token, TETHER_SERVER/TETHER_ENV/TETHER_TOKEN,\n" +
			"or a .tether.toml file in the project (server = \"…\", env = \"…\", token = \"…\").",
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
				var env record.Environment
				if err := cl.call(c.Context, "POST", "/envs", api.EnvRequest{Name: c.Args().First(), Settings: settings}, &env); err != nil {
					return err
				}
				return showEnv(asJSON, env)
			}),
			remoteCommand(term, "list", "list environments", "", nil, func(c *ucli.Context, cl *client, asJSON bool) error {
				var envs []record.Environment
				if err := cl.call(c.Context, "GET", "/envs", nil, &envs); err != nil {
					return err
				}
				if asJSON {
					return writeJSON(term.stdout, envs)
				}
				t := newTable(term, "NAME", "CREATED", "HALTED", "ENROLLMENT", "DRIFT POLICY")
				for _, e := range envs {
					t.row(e.Name, e.CreatedAt.Local().Format(time.DateTime), strconv.FormatBool(e.Settings.Halted), string(e.Settings.Enrollment), string(e.Settings.DriftPolicy))
				}
				return t.flush()
			}),
			remoteCommand(term, "show", "show an environment: NAME, or the one of --env", "[NAME]", nil, func(c *ucli.Context, cl *client, asJSON bool) error {
				if name := c.Args().First(); name != "" {
					cl.env = name
				}
				p, err := envPath(cl, "")
				if err != nil {
					return err
				}
				var env record.Environment
				if err := cl.call(c.Context, "GET", p, nil, &env); err != nil {
					return err
				}
				return showEnv(asJSON, env)
			}),
			envDeleteCommand(term),
			{
				Name: "settings", Usage: "show settings, or change one: tether env settings set KEY VALUE",
				Flags: remoteFlags(),
				Action: remoteAction("", func(c *ucli.Context, cl *client, asJSON bool) error {
					return showSettings(c, cl, term, asJSON, "GET", nil)
				}),
				Subcommands: []*ucli.Command{remoteCommand(term, "set", "change a setting ("+strings.Join(record.SettingKeys(), ", ")+")", "KEY VALUE", nil,
					func(c *ucli.Context, cl *client, asJSON bool) error {
						return showSettings(c, cl, term, asJSON, "PATCH", map[string]string{c.Args().Get(0): c.Args().Get(1)})
					})},
			},
			op("deploy", record.OpDeploy, "deploy the released version (to every agent, or --agent NAME)"),
			op("repair", record.OpRepair, "verify every resource and repair drift"),
			op("dryrun", record.OpDryRun, "ask agents what a deploy would change; see the answer with `env report`"),
			envDeploysCommand(term),
			envReportCommand(term),
			sourceCommand(term),
			envCompileCommand(term),
			remoteCommand(term, "halt", "hands off: the environment's agents change nothing on their hosts (no deploy, repair or heal; drift is still reported) until resumed", "", nil, haltAction(term, "halt")),
			remoteCommand(term, "resume", "resume a halted environment: what its agents missed is deployed at once, and drift healed under drift_policy=heal", "", nil, haltAction(term, "resume")),
		},
	}
}

func haltAction(term *terminal, verb string) func(c *ucli.Context, cl *client, asJSON bool) error {
	return func(c *ucli.Context, cl *client, asJSON bool) error {
		p, err := envPath(cl, "/"+verb)
		if err != nil {
			return err
		}
		var env record.Environment
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
	t := newTable(term, "SETTING", "VALUE")
	for _, k := range record.SettingKeys() {
		t.row(k, s[k])
	}
	return t.flush()
}

// envDeleteCommand is `tether env delete NAME`: after a confirmation (the
// name typed, or --yes), the environment goes with everything in it, and
// its agents' inboxes from the broker.
func envDeleteCommand(term *terminal) *ucli.Command {
	cmd := remoteCommand(term, "delete", "delete an environment and everything in it (asks to type its name, or --yes)", "NAME", []ucli.Flag{yesFlag()},
		func(c *ucli.Context, cl *client, asJSON bool) error {
			name := c.Args().First()
			if err := confirm(c, term, fmt.Sprintf("This deletes environment %s: its versions, agents, resource states and history, and its agents' inboxes on the broker", name), name); err != nil {
				return err
			}
			if err := cl.call(c.Context, "DELETE", "/envs/"+url.PathEscape(name), nil, nil); err != nil {
				return err
			}
			if asJSON {
				return writeJSON(term.stdout, map[string]any{"env": name, "deleted": true})
			}
			fmt.Fprintf(term.stderr, "environment %s deleted\n", name)
			return nil
		})
	cmd.Description = "Deleting an environment cannot be undone. On a terminal it asks you to type the\n" +
		"environment's name; in a script (stdin not a terminal) it refuses unless --yes is given.\n" +
		"Agents still running for it are refused from then on.\n\n" +
		"   tether env delete staging\n" +
		"   tether env delete staging --yes"
	return cmd
}
