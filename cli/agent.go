package cli

import (
	"cmp"
	"fmt"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/rs/zerolog"
	ucli "github.com/urfave/cli/v2"

	"github.com/tetherhq/tether/cli/agentcli"
	"github.com/tetherhq/tether/model"
	"github.com/tetherhq/tether/server/api"
	"github.com/tetherhq/tether/server/record"
)

func agentCommand(term *terminal) *ucli.Command {
	action := func(verb record.AgentAction, usage string) *ucli.Command {
		return namedAction(term, string(verb), verb, usage)
	}
	revoke := namedAction(term, "revoke", record.AgentReject, "revoke an agent's enrollment (reject it): its broker login is refused, its connections closed, its inbox and the desired state in it deleted, its events dropped")
	revoke.Description = "Revoking is rejecting an accepted agent. Where the broker asks the server about each agent\n" +
		"(--broker-auth-listen), the agent cannot log in again once the broker's authentication cache\n" +
		"expires; with --broker-admin-url its open connections are closed at once. Its inbox is deleted.\n" +
		"To let the host back in with the key it had, accept it again.\n\n" +
		"   tether agent revoke web-7 --env prod"
	return &ucli.Command{
		Name:  "agent",
		Usage: "run an agent; list, inspect, accept and pause the agents of a server environment; manage enrollment tokens; make install scripts for new hosts",
		Subcommands: []*ucli.Command{
			agentcli.RunCommand(term.stderr, func(c *ucli.Context) (zerolog.Logger, error) { return logger(c, term.stderr) }),
			agentTokenCommand(term),
			agentcli.ResetJournalCommand(term.stdout),
			agentInstallScriptCommand(term),
			agentCloudInitCommand(term),
			remoteCommand(term, "list", "agents with their state, whether they are online, and why one is not accepted (NOTE)", "", nil, func(c *ucli.Context, cl *client, asJSON bool) error {
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
				t := newTable(term, "NAME", "STATE", "ONLINE", "PAUSED", "GENERATION", "VERSION", "LAST SEEN", "OS/ARCH", "LABELS", "NOTE")
				for _, a := range as {
					var labels []string
					for k, v := range a.Labels {
						labels = append(labels, k+"="+v)
					}
					sort.Strings(labels)
					platform := platformOf(a.Facts)
					t.row(a.Name, string(a.State), strconv.FormatBool(a.Online), pausedText(a), strconv.FormatInt(a.Generation, 10), agentVersionText(a.Agent), a.LastSeen.Local().Format(time.DateTime), platform, strings.Join(labels, ","), a.Note)
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
				fmt.Fprintf(term.stdout, "%s\n  state       %s\n  online      %v\n  paused      %s\n  generation  %d\n  key         %s\n",
					a.Name, a.State, a.Online, pausedText(a), a.Generation, a.Key)
				switch {
				case a.PreviousKey != "" && a.PreviousUntil == nil:
					fmt.Fprintf(term.stdout, "  previous    %s (still taken: the agent has not switched to its new key yet)\n", a.PreviousKey)
				case a.PreviousKey != "":
					fmt.Fprintf(term.stdout, "  previous    %s (its events taken until %s)\n", a.PreviousKey, a.PreviousUntil.Local().Format(time.DateTime))
				}
				fmt.Fprintf(term.stdout, "  version     %s\n", agentVersionText(a.Agent))
				if a.Note != "" {
					fmt.Fprintf(term.stdout, "  note        %s\n", a.Note)
				}
				if len(a.ServerKeys) > 0 {
					fmt.Fprintf(term.stdout, "  takes       %s (the server keys it takes commands signed by)\n", strings.Join(a.ServerKeys, ", "))
				}
				fmt.Fprintf(term.stdout, "  last seen   %s\n  facts:\n", a.LastSeen.Local().Format(time.DateTime))
				return writeJSON(term.stdout, a.Facts)
			}),
			agentAcceptCommand(term),
			action(record.AgentReject, "reject an agent: its events are dropped; an accepted one is revoked (see revoke)"),
			revoke,
			action(record.AgentPause, "pause an agent, hands off: it changes nothing on its host (no deploy, repair or heal; drift is still reported) until resumed"),
			action(record.AgentResume, "resume a paused agent: what it missed is deployed at once, and drift healed under drift_policy=heal"),
			agentFactsRefreshCommand(term),
			agentRotateKeyCommand(term),
			agentDeleteCommand(term),
		},
	}
}

// agentVersionText is an agent's version and protocol as shown: "v1.4.0
// (protocol 1.1)"; an agent older than versions says neither.
func agentVersionText(a record.Agent) string {
	if a.AgentVersion == "" && a.Protocol == "" {
		return "unknown (protocol 1.0)"
	}
	return fmt.Sprintf("%s (protocol %s)", cmp.Or(a.AgentVersion, "unknown"), cmp.Or(a.Protocol, "1.0"))
}

func agentTokenCommand(term *terminal) *ucli.Command {
	return &ucli.Command{
		Name:  "token",
		Usage: "manage enrollment tokens: agents started with one are accepted at once (enrollment policy token)",
		Subcommands: []*ucli.Command{
			remoteCommand(term, "create", "create an enrollment token; its secret is printed once", "NAME", []ucli.Flag{
				&ucli.IntFlag{Name: "max-uses", Usage: "how many agents it may enroll (default: no bound)"},
				&ucli.StringFlag{Name: "expires-in", Usage: "lifetime, e.g. 24h (default: never expires)"},
			}, func(c *ucli.Context, cl *client, asJSON bool) error {
				p, err := envPath(cl, "/enrollment-tokens")
				if err != nil {
					return err
				}
				if c.Args().First() == "" {
					return usageError("name the token: tether agent token create NAME (what it is for: a rack, a team, an image)")
				}
				var nt api.NewEnrollmentToken
				req := api.EnrollmentTokenRequest{Name: c.Args().First(), MaxUses: c.Int("max-uses"), ExpiresIn: c.String("expires-in")}
				if err := cl.call(c.Context, "POST", p, req, &nt); err != nil {
					return err
				}
				if asJSON {
					return writeJSON(term.stdout, nt)
				}
				fp, _ := model.TokenFingerprint(nt.Token)
				fmt.Fprintf(term.stdout, "enrollment token %s (%s) for environment %s: shown once, store it now:\n\n    %s\n\n"+
					"Start agents with: tether agent run --env %s --token %s ...\n"+
					"It carries the server key's fingerprint (%s): agents started with it trust only this server.\n"+
					"It enrolls agents only while the environment's enrollment is token: tether env settings set enrollment token\n",
					nt.Name, nt.ID, nt.Env, nt.Token, nt.Env, nt.Token, fp)
				return nil
			}),
			remoteCommand(term, "list", "list enrollment tokens (never their secrets)", "", nil, func(c *ucli.Context, cl *client, asJSON bool) error {
				p, err := envPath(cl, "/enrollment-tokens")
				if err != nil {
					return err
				}
				var ts []record.EnrollmentToken
				if err := cl.call(c.Context, "GET", p, nil, &ts); err != nil {
					return err
				}
				if asJSON {
					return writeJSON(term.stdout, ts)
				}
				t := newTable(term, "ID", "NAME", "USES", "CREATED", "EXPIRES")
				for _, tok := range ts {
					exp, uses := "never", fmt.Sprintf("%d", tok.Uses)
					if tok.ExpiresAt != nil {
						exp = tok.ExpiresAt.Local().Format(time.DateTime)
					}
					if tok.MaxUses > 0 {
						uses += fmt.Sprintf("/%d", tok.MaxUses)
					}
					t.row(tok.ID, tok.Name, uses, tok.CreatedAt.Local().Format(time.DateTime), exp)
				}
				return t.flush()
			}),
			remoteCommand(term, "revoke", "revoke an enrollment token, by ID or NAME (agents it enrolled stay enrolled)", "ID|NAME", nil, func(c *ucli.Context, cl *client, asJSON bool) error {
				p, err := envPath(cl, "/enrollment-tokens")
				if err != nil {
					return err
				}
				var ts []record.EnrollmentToken
				if err := cl.call(c.Context, "GET", p, nil, &ts); err != nil {
					return err
				}
				tok, err := pickToken(c.Args().First(), ts, func(t record.EnrollmentToken) (string, string) { return t.ID, t.Name }, "tether agent token list")
				if err != nil {
					return err
				}
				if err := cl.call(c.Context, "DELETE", p+"/"+url.PathEscape(tok.ID), nil, nil); err != nil {
					return err
				}
				if asJSON {
					return writeJSON(term.stdout, tok)
				}
				fmt.Fprintf(term.stdout, "enrollment token %s (%s) of environment %s revoked; agents it enrolled stay enrolled\n", tok.Name, tok.ID, tok.Env)
				return nil
			}),
		},
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

// agentFactsRefreshCommand is `tether agent facts-refresh NAME`: the server
// asks the agent to report its host's facts again, rather than at its next
// check (every minute) or only when they changed.
func agentFactsRefreshCommand(term *terminal) *ucli.Command {
	cmd := remoteCommand(term, "facts-refresh", "ask an agent to report its facts again (tether agent show NAME shows them once reported)", "NAME", nil,
		func(c *ucli.Context, cl *client, asJSON bool) error {
			a, err := postAgent(c, cl, "facts-refresh")
			if err != nil {
				return err
			}
			if asJSON {
				return writeJSON(term.stdout, a)
			}
			fmt.Fprintf(term.stdout, "agent %s: asked to report its facts again; `tether agent show %s` shows them once it has\n", a.Name, a.Name)
			return nil
		})
	cmd.Description = "The agent reports its host's facts at once, changed or not: use it after changing\n" +
		"a host (an address, a package manager) to compile against its new facts without waiting for the\n" +
		"agent's next check. An agent that is not connected reports its facts when it says hello again.\n" +
		"Needs an operator token; only an accepted agent can be asked."
	return cmd
}

// agentRotateKeyCommand is `tether agent rotate-key NAME`: the server asks
// the agent to replace its key by a signed rollover.
func agentRotateKeyCommand(term *terminal) *ucli.Command {
	cmd := remoteCommand(term, "rotate-key", "ask an agent to replace its key (tether agent show NAME shows the new key once it has)", "NAME", nil,
		func(c *ucli.Context, cl *client, asJSON bool) error {
			a, err := postAgent(c, cl, "rotate-key")
			if err != nil {
				return err
			}
			if asJSON {
				return writeJSON(term.stdout, a)
			}
			fmt.Fprintf(term.stdout, "agent %s: asked to replace its key %s; `tether agent show %s` shows the new one once it has\n", a.Name, a.Key, a.Name)
			return nil
		})
	cmd.Description = "The agent makes a new key, keeps it on disk, and proposes it to the server signed by its current\n" +
		"key with the new key's proof of possession; the server makes it the agent's key and the agent\n" +
		"switches to it, its broker login with it. Nothing the agent sent is lost meanwhile. The request waits\n" +
		"an hour in the inbox of an agent that is not connected. Needs an operator token; only an accepted\n" +
		"agent can be asked. See docs/operations.md, \"Rotating an agent's key\"."
	return cmd
}

// postAgent posts an operation on the agent named by the first argument
// and returns the agent as the server answers it.
func postAgent(c *ucli.Context, cl *client, op string) (api.AgentView, error) {
	return postAgentNamed(c, cl, c.Args().First(), op)
}

// postAgentNamed posts an operation on the agent name and returns the agent
// as the server answers it.
func postAgentNamed(c *ucli.Context, cl *client, name, op string) (api.AgentView, error) {
	var a api.AgentView
	p, err := envPath(cl, "/agents/"+url.PathEscape(name)+"/"+op)
	if err != nil {
		return a, err
	}
	err = cl.call(c.Context, "POST", p, nil, &a)
	return a, err
}

// acceptAtOnce is how many pending agents `agent accept --all-pending`
// accepts without --max: more is what a flood of invented names looks
// like, or a fleet installed at once, and only the operator knows which.
const acceptAtOnce = 10

// agentAcceptCommand is `tether agent accept NAME... | --all-pending`: it
// accepts each agent named, or every pending one, and says which it
// accepted. One it cannot accept does not stop the others; the command then
// exits 1 naming it.
//
// Anyone who reaches the broker can say hello under a name, labels and
// facts of their choice, so --all-pending does not enroll more than the
// operator says they expect: beyond acceptAtOnce it wants --max N (the
// hosts they installed), and when more than that wait it accepts none and
// shows them. A filter on labels or facts would not do: an agent says
// them itself.
func agentAcceptCommand(term *terminal) *ucli.Command {
	cmd := remoteCommand(term, "accept", "accept discovered agents (NAME..., or --all-pending): they are enrolled and get their desired state", "[NAME]...", []ucli.Flag{
		&ucli.BoolFlag{Name: "all-pending", Usage: "accept every agent waiting for acceptance (at most --max)"},
		&ucli.IntFlag{Name: "max", Value: acceptAtOnce, Usage: "with --all-pending: accept none unless at most this many wait; pass the number of hosts you installed"},
		&ucli.BoolFlag{Name: "dry-run", Usage: "with --all-pending: list the agents it would accept, accept none"},
	}, func(c *ucli.Context, cl *client, asJSON bool) error {
		names := c.Args().Slice()
		all := c.Bool("all-pending")
		switch {
		case all && len(names) > 0:
			return usageError("name agents or pass --all-pending, not both (see 'tether agent accept --help')")
		case !all && (c.IsSet("max") || c.Bool("dry-run")):
			return usageError("--max and --dry-run go with --all-pending (see 'tether agent accept --help')")
		case c.IsSet("max") && c.Int("max") < 1:
			return usageError("--max %d: want the number of agents you expect to wait, 1 or more", c.Int("max"))
		case all:
			p, err := envPath(cl, "/agents")
			if err != nil {
				return err
			}
			var as []api.AgentView
			if err := cl.call(c.Context, "GET", p, nil, &as); err != nil {
				return err
			}
			var pending []api.AgentView
			for _, a := range as {
				if a.State == record.AgentPending {
					pending = append(pending, a)
				}
			}
			limit := c.Int("max")
			if c.Bool("dry-run") || len(pending) > limit {
				if asJSON {
					if err := writeJSON(term.stdout, pending); err != nil {
						return err
					}
				} else if err := pendingTable(term, pending); err != nil {
					return err
				}
				if len(pending) > limit {
					how := fmt.Sprintf("pass --max %d if you installed that many hosts", len(pending))
					if c.IsSet("max") {
						how = fmt.Sprintf("more than the %d you expected (--max): some are not your hosts, or more were installed; %s", limit, how)
					} else {
						how = fmt.Sprintf("more than %d at once: %s", limit, how)
					}
					return fmt.Errorf("%d agents wait for acceptance, none accepted: %s, or accept them by name "+
						"(anyone who reaches the broker can say hello under a name, labels and facts of their choice; tether agent reject NAME refuses one)",
						len(pending), how)
				}
				return nil
			}
			for _, a := range pending {
				names = append(names, a.Name)
			}
		case len(names) == 0:
			return usageError("name the agents to accept: tether agent accept NAME... (or --all-pending; tether agent list shows them)")
		}
		accepted := []api.AgentView{}
		var failed []string
		for _, name := range names {
			a, err := postAgentNamed(c, cl, name, string(record.AgentAccept))
			if err != nil {
				fmt.Fprintf(term.stderr, "tether: agent %s: %v\n", name, err)
				failed = append(failed, name)
				continue
			}
			accepted = append(accepted, a)
		}
		if asJSON {
			if err := writeJSON(term.stdout, accepted); err != nil {
				return err
			}
		} else {
			for _, a := range accepted {
				fmt.Fprintf(term.stdout, "agent %s: %s\n", a.Name, a.State)
			}
			if len(names) == 0 {
				fmt.Fprintln(term.stdout, "no agent is waiting for acceptance")
			}
		}
		if len(failed) > 0 {
			return fmt.Errorf("%d of %d agents not accepted: %s", len(failed), len(names), strings.Join(failed, ", "))
		}
		return nil
	})
	cmd.Description = "Accepting an agent enrolls it: the server takes its events and sends it its desired state.\n\n" +
		"   tether agent accept web-7 web-8\n" +
		"   tether agent accept --all-pending             # every agent `tether agent list` shows as pending, if at most 10\n" +
		"   tether agent accept --all-pending --dry-run   # which those are\n" +
		"   tether agent accept --all-pending --max 40    # the 40 hosts just installed: none if more wait\n\n" +
		"Anyone who reaches the broker can say hello under a name, labels and facts of their choice, and wait\n" +
		"as a pending agent: --all-pending accepts more than 10 only with --max, and none when more wait than\n" +
		"--max says. Hosts enrolled by token (tether agent token create) need no acceptance."
	return cmd
}

// pendingTable shows agents waiting for acceptance: what an operator
// checks before accepting them.
func pendingTable(term *terminal, as []api.AgentView) error {
	t := newTable(term, "NAME", "FIRST SEEN", "LAST SEEN", "KEY", "OS/ARCH", "LABELS", "NOTE")
	for _, a := range as {
		var labels []string
		for k, v := range a.Labels {
			labels = append(labels, k+"="+v)
		}
		sort.Strings(labels)
		t.row(a.Name, a.FirstSeen.Local().Format(time.DateTime), a.LastSeen.Local().Format(time.DateTime), a.Key, platformOf(a.Facts), strings.Join(labels, ","), a.Note)
	}
	return t.flush()
}

// namedAction is a command that applies an agent action to the agent NAME.
func namedAction(term *terminal, name string, verb record.AgentAction, usage string) *ucli.Command {
	return remoteCommand(term, name, usage, "NAME", nil, func(c *ucli.Context, cl *client, asJSON bool) error {
		a, err := postAgent(c, cl, string(verb))
		if err != nil {
			return err
		}
		if asJSON {
			return writeJSON(term.stdout, a)
		}
		fmt.Fprintf(term.stdout, "agent %s: %s, paused=%s\n", a.Name, a.State, pausedText(a))
		if verb == record.AgentResume && a.Halted {
			fmt.Fprintf(term.stdout, "its environment is halted: it stays hands off until 'tether env resume %s'\n", a.Env)
		}
		return nil
	})
}

// pausedText says whether an agent is hands off: paused by an operator
// ("true"), by its environment's halt ("halted"), or both.
func pausedText(a api.AgentView) string {
	switch {
	case a.Paused && a.Halted:
		return "true (halted)"
	case a.Halted:
		return "halted"
	}
	return strconv.FormatBool(a.Paused)
}

// agentDeleteCommand is `tether agent delete NAME`: after a confirmation
// (the name typed, or --yes), the server forgets the agent and removes its
// inbox.
func agentDeleteCommand(term *terminal) *ucli.Command {
	cmd := remoteCommand(term, "delete", "forget an agent (its record and what it reported) and remove its inbox from the broker (asks to type its name, or --yes)", "NAME", []ucli.Flag{yesFlag()},
		func(c *ucli.Context, cl *client, asJSON bool) error {
			name := c.Args().First()
			p, err := envPath(cl, "/agents/"+url.PathEscape(name))
			if err != nil {
				return err
			}
			if err := confirm(c, term, fmt.Sprintf("This forgets agent %s of environment %s and removes its inbox with what is queued for it", name, cl.env), name); err != nil {
				return err
			}
			var a api.AgentView
			if err := cl.call(c.Context, "DELETE", p, nil, &a); err != nil {
				return err
			}
			if asJSON {
				return writeJSON(term.stdout, a)
			}
			fmt.Fprintf(term.stdout, "agent %s deleted (it was %s)\n", a.Name, a.State)
			return nil
		})
	cmd.Description = "Deleting an agent forgets it: its record and its inbox go, and its resources are\n" +
		"available again, compliance unknown (its actions and alerts stay, as history). Nothing on its host changes. If it says hello\n" +
		"again it is a new agent: pending until accepted, or accepted at once with a valid\n" +
		"enrollment token (or in an open environment). To keep a host out, reject it instead.\n" +
		"On a terminal it asks you to type the agent's name; in a script it needs --yes.\n\n" +
		"   tether agent delete web-7 --env prod\n" +
		"   tether agent delete web-7 --env prod --yes"
	return cmd
}
