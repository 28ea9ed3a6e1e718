package cli

import (
	"context"
	"crypto/ed25519"
	"encoding/base64"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	ucli "github.com/urfave/cli/v2"
	"github.com/urfave/cli/v2/altsrc"

	"github.com/tetherhq/tether/agent"
	"github.com/tetherhq/tether/agent/facts"
	"github.com/tetherhq/tether/agent/handler"
	"github.com/tetherhq/tether/agent/handler/builtin"
	"github.com/tetherhq/tether/bus"
	"github.com/tetherhq/tether/bus/amqp"
	"github.com/tetherhq/tether/model"
	"github.com/tetherhq/tether/server/api"
)

const defaultAgentConfig = "/etc/tether/agent.toml"

func agentRunFlags() []ucli.Flag {
	flags := append([]ucli.Flag{
		&ucli.StringFlag{Name: "config", Value: defaultAgentConfig, EnvVars: []string{"TETHER_AGENT_CONFIG"},
			Usage: "TOML `FILE` whose keys are these flags' names (read if it exists; flags and TETHER_* variables win)"},
	}, brokerFlags("`TYPE` of the inbox when the agent creates it: the server's --queue-type (quorum or classic)")...)
	return append(flags,
		altsrc.NewStringFlag(&ucli.StringFlag{Name: "tls-ca", EnvVars: []string{"TETHER_TLS_CA"}, Usage: "CA certificate `FILE` (PEM) to trust for amqps://"}),
		altsrc.NewStringFlag(&ucli.StringFlag{Name: "tls-cert", EnvVars: []string{"TETHER_TLS_CERT"}, Usage: "client certificate `FILE` (PEM) for amqps://"}),
		altsrc.NewStringFlag(&ucli.StringFlag{Name: "tls-key", EnvVars: []string{"TETHER_TLS_KEY"}, Usage: "private key `FILE` (PEM) of --tls-cert"}),
		altsrc.NewStringFlag(&ucli.StringFlag{Name: "env", EnvVars: []string{"TETHER_ENV"}, Usage: "the server environment `NAME` this agent belongs to (required)"}),
		altsrc.NewStringSliceFlag(&ucli.StringSliceFlag{Name: "name", EnvVars: []string{"TETHER_AGENT_NAME"},
			Usage: "agent `NAME` (default: the hostname); repeat to host several agents in one process (API-facing agents)"}),
		altsrc.NewStringFlag(&ucli.StringFlag{Name: "state-dir", Value: "/var/lib/tether", EnvVars: []string{"TETHER_STATE_DIR"},
			Usage: "`DIR` of the agent's journal: its key, desired state, results and outbox (one subdirectory per agent name)"}),
		altsrc.NewStringFlag(&ucli.StringFlag{Name: "root", Value: "/", EnvVars: []string{"TETHER_ROOT"},
			Usage: "`DIR` every managed path is below (/ on a real host; a directory for sandboxes and tests)"}),
		altsrc.NewStringSliceFlag(&ucli.StringSliceFlag{Name: "label", EnvVars: []string{"TETHER_LABELS"},
			Usage: "a label `KEY=VALUE` announced to the server (repeatable); hostgroups select agents by labels"}),
		altsrc.NewStringFlag(&ucli.StringFlag{Name: "token", EnvVars: []string{"TETHER_ENROLL_TOKEN"},
			Usage: "enrollment `TOKEN` (tether agent token create): accepted at once where the environment's enrollment is token"}),
		altsrc.NewStringFlag(&ucli.StringFlag{Name: "server-key", EnvVars: []string{"TETHER_SERVER_KEY"},
			Usage: "pin the server's public `KEY` (base64, from the server's log); default: trust the key of the first enrollment"}),
		altsrc.NewIntFlag(&ucli.IntFlag{Name: "parallelism", Value: 0, EnvVars: []string{"TETHER_PARALLELISM"},
			Usage: "how many resources a deploy runs at once (0: the default)"}),
		altsrc.NewDurationFlag(&ucli.DurationFlag{Name: "heartbeat", Value: 10 * time.Second, EnvVars: []string{"TETHER_HEARTBEAT"},
			Usage: "how often the agent tells the server it is alive"}),
	)
}

func agentRunCommand(term *terminal) *ucli.Command {
	flags := agentRunFlags()
	return &ucli.Command{
		Name:  "run",
		Usage: "run the agent daemon: connect out to the broker, enroll, and enforce this host's desired state",
		Description: "The agent connects outward to RabbitMQ (no inbound port is needed, so it works behind NAT\n" +
			"and firewalls), says hello to the server of its environment, and once enrolled keeps this host\n" +
			"as its desired state says. Its journal (--state-dir) keeps everything it must not forget across\n" +
			"restarts and broker outages. SIGTERM stops it cleanly.\n\n" +
			"   tether agent run --amqp amqps://agent:secret@broker.example.com/ --env prod --token <TOKEN> --label role=web\n\n" +
			"Two processes with the same --name share the work: one is primary, the other stands by and takes\n" +
			"over when it stops. See docs/agents.md.",
		Flags:  flags,
		Before: configFileSource(flags),
		Action: func(c *ucli.Context) error { return runAgents(c, term) },
	}
}

func runAgents(c *ucli.Context, term *terminal) error {
	log, err := logger(c, term.stderr)
	if err != nil {
		return err
	}
	env := c.String("env")
	if env == "" {
		return usageError("no environment: pass --env NAME, set TETHER_ENV, or put env = \"...\" in %s", defaultAgentConfig)
	}
	if err := model.ValidateEnvName(env); err != nil {
		return usageError("--env: %v", err)
	}
	names := c.StringSlice("name")
	if len(names) == 0 {
		host, err := os.Hostname()
		if err != nil {
			return usageError("cannot read the hostname (%v): pass --name", err)
		}
		names = []string{strings.ToLower(strings.Split(host, ".")[0])}
	}
	seen := map[string]bool{}
	for _, n := range names {
		if err := model.ValidateAgentName(n); err != nil {
			return usageError("--name: %v", err)
		}
		if seen[n] {
			return usageError("--name %s given twice", n)
		}
		seen[n] = true
	}
	labels := map[string]string{}
	for _, l := range c.StringSlice("label") {
		k, v, ok := strings.Cut(l, "=")
		if !ok || k == "" {
			return usageError("--label %q: want KEY=VALUE", l)
		}
		labels[k] = v
	}
	var serverKey ed25519.PublicKey
	if s := c.String("server-key"); s != "" {
		b, err := base64.StdEncoding.DecodeString(s)
		if err != nil || len(b) != ed25519.PublicKeySize {
			return usageError("--server-key: want the server's ed25519 public key in base64 (44 characters)")
		}
		serverKey = b
	}
	bcfg := amqp.Default()
	bcfg.URL, bcfg.Namespace, bcfg.QueueType = c.String("amqp"), c.String("amqp-namespace"), c.String("queue-type")
	bcfg.CAFile, bcfg.CertFile, bcfg.KeyFile = c.String("tls-ca"), c.String("tls-cert"), c.String("tls-key")
	bcfg.ConnectionName = "tether agent " + strings.Join(names, ",")
	bcfg.Agent = true
	if err := bcfg.Validate(); err != nil {
		return usageError("%v", err)
	}
	b, err := amqp.New(bcfg, log)
	if err != nil {
		return err
	}
	defer b.Close()

	ctx := c.Context
	var agents []*agent.Agent
	defer func() {
		for _, a := range agents {
			a.Close()
		}
	}()
	// One flush group for every agent of the process: concurrent deploys
	// share each flush of the file system instead of one each.
	syncs := handler.NewSyncGroup()
	// The agents of one process share a host: one gathering of facts
	// serves them all, and tells the handlers which tools the host has.
	gather := facts.Cached(10*time.Second, facts.Gather)
	pm, sm := facts.Providers(gather(ctx))
	for _, name := range names {
		reg, err := builtin.Registry(handler.Runtime{Root: c.String("root"), Sync: syncs, PackageManager: pm, ServiceManager: sm})
		if err != nil {
			return err
		}
		a, err := agent.New(agent.Config{
			Env: env, Name: name, StateDir: filepath.Join(c.String("state-dir"), env, name), Labels: labels,
			Token: c.String("token"), ServerKey: serverKey, Parallelism: c.Int("parallelism"), Heartbeat: c.Duration("heartbeat"),
			Facts: gather,
		}, b, reg, log)
		if err != nil {
			return fmt.Errorf("agent %s: %w", name, err)
		}
		agents = append(agents, a)
		log.Info().Str("agent", name).Str("env", env).Str("key", bus.Fingerprint(a.PublicKey())).
			Str("state_dir", a.Journal().Dir()).Msg("tether agent starting")
	}
	fmt.Fprintf(term.stderr, "tether agent: %s in environment %s, broker %s\n", strings.Join(names, ", "), env, redactURL(bcfg.URL))
	var wg sync.WaitGroup
	errs := make(chan error, len(agents))
	for _, a := range agents {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := a.Run(ctx); err != nil && !errors.Is(err, context.Canceled) {
				errs <- err
			}
		}()
	}
	wg.Wait()
	close(errs)
	return <-errs
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
				fmt.Fprintf(term.stdout, "enrollment token %s (%s) for environment %s: shown once, store it now:\n\n    %s\n\n"+
					"Start agents with: tether agent run --env %s --token %s ...\n"+
					"It enrolls agents only while the environment's enrollment is token: tether env settings set enrollment token\n",
					nt.Name, nt.ID, nt.Env, nt.Token, nt.Env, nt.Token)
				return nil
			}),
			remoteCommand(term, "list", "list enrollment tokens (never their secrets)", "", nil, func(c *ucli.Context, cl *client, asJSON bool) error {
				p, err := envPath(cl, "/enrollment-tokens")
				if err != nil {
					return err
				}
				var ts []model.EnrollmentToken
				if err := cl.call(c.Context, "GET", p, nil, &ts); err != nil {
					return err
				}
				if asJSON {
					return writeJSON(term.stdout, ts)
				}
				t := newTable(term.stdout, "ID", "NAME", "USES", "CREATED", "EXPIRES")
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
			remoteCommand(term, "revoke", "revoke an enrollment token (agents it enrolled stay enrolled)", "ID", nil, func(c *ucli.Context, cl *client, asJSON bool) error {
				p, err := envPath(cl, "/enrollment-tokens/"+url.PathEscape(c.Args().First()))
				if err != nil {
					return err
				}
				return cl.call(c.Context, "DELETE", p, nil, nil)
			}),
		},
	}
}
