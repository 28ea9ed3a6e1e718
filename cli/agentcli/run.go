package agentcli

import (
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	ucli "github.com/urfave/cli/v2"
	"github.com/urfave/cli/v2/altsrc"

	"github.com/rs/zerolog"

	"github.com/tetherhq/tether/agent"
	"github.com/tetherhq/tether/agent/facts"
	"github.com/tetherhq/tether/agent/handler"
	"github.com/tetherhq/tether/agent/handler/builtin"
	"github.com/tetherhq/tether/agent/handler/libvirt"
	"github.com/tetherhq/tether/agent/journal"
	"github.com/tetherhq/tether/bus"
	"github.com/tetherhq/tether/bus/amqp"
	"github.com/tetherhq/tether/model"
)

// DefaultConfig is the agent's config file, read if it exists.
const DefaultConfig = "/etc/tether/agent.toml"

func runFlags() []ucli.Flag {
	flags := append([]ucli.Flag{
		&ucli.StringFlag{Name: "config", Value: DefaultConfig, EnvVars: []string{"TETHER_AGENT_CONFIG"},
			Usage: "TOML `FILE` whose keys are these flags' names (read if it exists; flags and TETHER_* variables win)"},
	}, BrokerFlags("unused by agents, kept so older configurations still start: the server declares every inbox, of its own --queue-type (`TYPE`)")...)
	def := agent.Default()
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
		FactsDirFlag(),
		altsrc.NewStringSliceFlag(&ucli.StringSliceFlag{Name: "label", EnvVars: []string{"TETHER_LABELS"},
			Usage: "a label `KEY=VALUE` announced to the server (repeatable); hostgroups select agents by labels"}),
		altsrc.NewStringFlag(&ucli.StringFlag{Name: "token", EnvVars: []string{"TETHER_ENROLL_TOKEN"},
			Usage: "enrollment `TOKEN` (tether agent token create): accepted at once where the environment's enrollment is token"}),
		altsrc.NewStringFlag(&ucli.StringFlag{Name: "server-key", EnvVars: []string{"TETHER_SERVER_KEY"},
			Usage: "the server's public `KEY` or its fingerprint SHA256:… (`tether server key` prints both); needed unless --token carries it"}),
		altsrc.NewDurationFlag(&ucli.DurationFlag{Name: "max-command-age", Value: def.MaxCommandAge, EnvVars: []string{"TETHER_MAX_COMMAND_AGE"},
			Usage: "refuse a command the server issued longer ago than this (by the server's clock): replays and stale backlog"}),
		altsrc.NewIntFlag(&ucli.IntFlag{Name: "parallelism", Value: 0, EnvVars: []string{"TETHER_PARALLELISM"},
			Usage: "how many resources a deploy runs at once (0: the default)"}),
		altsrc.NewStringSliceFlag(&ucli.StringSliceFlag{Name: "platform", EnvVars: []string{"TETHER_PLATFORMS"},
			Usage: "serve a platform machines are made on: `DRIVER[=URI]`, libvirt or pxe (machines booting from the network, as libvirt guests here), e.g. libvirt=qemu:///system (the hypervisor this host runs); the server registers it and sends it machine commands (repeatable)"}),
		altsrc.NewDurationFlag(&ucli.DurationFlag{Name: "heartbeat", Value: def.Heartbeat, EnvVars: []string{"TETHER_HEARTBEAT"},
			Usage: "how often the agent tells the server it is alive (the server shows an agent it has not heard from for 90s offline; any other event the agent sends counts as well)"}),
	)
}

// LoggerFunc builds the process's logger from the global flags.
type LoggerFunc func(*ucli.Context) (zerolog.Logger, error)

// RunCommand is `run`: the agent daemon. It writes its one line of
// greeting to stderr and logs with the logger logger builds.
func RunCommand(stderr io.Writer, logger LoggerFunc) *ucli.Command {
	flags := runFlags()
	return &ucli.Command{
		Name:  "run",
		Usage: "run the agent daemon: connect out to the broker, enroll, and enforce this host's desired state",
		Description: "The agent connects outward to RabbitMQ (no inbound port is needed, so it works behind NAT\n" +
			"and firewalls), says hello to the server of its environment, and once enrolled keeps this host\n" +
			"as its desired state says. Its journal (--state-dir) keeps everything it must not forget across\n" +
			"restarts and broker outages. SIGTERM stops it cleanly.\n\n" +
			"   tether agent run --amqp amqps://broker.example.com/ --tls-ca ca.pem --env prod --token <TOKEN> --label role=web\n\n" +
			"With no user in the --amqp URL the agent logs in to the broker as itself (its key signs its login) and\n" +
			"may touch only its own inbox and events; with a user, the agents share it (trusted networks only).\n\n" +
			"Two processes with the same --name share the work: one is primary, the other stands by and takes\n" +
			"over when it stops. See docs/agents.md.",
		Flags:  flags,
		Before: ConfigFileSource(flags),
		Action: func(c *ucli.Context) error { return runAgents(c, stderr, logger) },
	}
}

func runAgents(c *ucli.Context, stderr io.Writer, logger LoggerFunc) error {
	log, err := logger(c)
	if err != nil {
		return err
	}
	env := c.String("env")
	if env == "" {
		return UsageError("no environment: pass --env NAME, set TETHER_ENV, or put env = \"...\" in %s", DefaultConfig)
	}
	if err := model.ValidateEnvName(env); err != nil {
		return UsageError("--env: %v", err)
	}
	names := c.StringSlice("name")
	if len(names) == 0 {
		host, err := os.Hostname()
		if err != nil {
			return UsageError("cannot read the hostname (%v): pass --name", err)
		}
		names = []string{strings.ToLower(strings.Split(host, ".")[0])}
	}
	seen := map[string]bool{}
	for _, n := range names {
		if err := model.ValidateAgentName(n); err != nil {
			return UsageError("--name: %v", err)
		}
		if seen[n] {
			return UsageError("--name %s given twice", n)
		}
		seen[n] = true
	}
	labels := map[string]string{}
	for _, l := range c.StringSlice("label") {
		k, v, ok := strings.Cut(l, "=")
		if !ok || k == "" {
			return UsageError("--label %q: want KEY=VALUE", l)
		}
		labels[k] = v
	}
	var serverKey ed25519.PublicKey
	var fingerprint string
	if s := c.String("server-key"); s != "" {
		if serverKey, fingerprint, err = model.ParseServerKey(s); err != nil {
			return UsageError("--server-key: %v", err)
		}
	}
	bcfg := amqp.Default()
	bcfg.URL, bcfg.Namespace, bcfg.QueueType = c.String("amqp"), c.String("amqp-namespace"), c.String("queue-type")
	bcfg.CAFile, bcfg.CertFile, bcfg.KeyFile = c.String("tls-ca"), c.String("tls-cert"), c.String("tls-key")
	bcfg.ConnectionName = "tether agent " + strings.Join(names, ",")
	bcfg.Agent = true
	if err := bcfg.Validate(); err != nil {
		return UsageError("%v", err)
	}
	// A broker URL without a user: each agent logs in as itself, with a
	// login signed by its key (the broker asks the server what it may
	// do), so each has a connection of its own. With a user in the URL,
	// the agents share it and one connection.
	ctx := c.Context
	host := Hosting{Broker: bcfg, Root: c.String("root"), Sync: handler.NewSyncGroup(),
		Facts: facts.Cached(10*time.Second, facts.Host{Dir: c.String("facts-dir")}.Gather)}
	if BrokerUser(bcfg.URL) != "" {
		if host.Shared, err = amqp.New(bcfg, log); err != nil {
			return err
		}
		defer host.Shared.Close()
	}
	platforms, err := OpenPlatforms(c.StringSlice("platform"), len(names))
	if err != nil {
		return err
	}
	var agents []*agent.Agent
	var releases []func()
	defer func() {
		for _, release := range releases {
			release()
		}
	}()
	for _, name := range names {
		a, release, err := host.NewAgent(ctx, agent.Config{
			Env: env, Name: name, StateDir: filepath.Join(c.String("state-dir"), env, name), Labels: labels,
			Token: c.String("token"), ServerKey: serverKey, ServerFingerprint: fingerprint, MaxCommandAge: c.Duration("max-command-age"),
			Parallelism: c.Int("parallelism"), Heartbeat: c.Duration("heartbeat"), Platforms: platforms,
		}, log)
		if errors.Is(err, agent.ErrNoServerKey) {
			return UsageError("%v", err)
		}
		if err != nil {
			return err
		}
		agents, releases = append(agents, a), append(releases, release)
		log.Info().Str("agent", name).Str("env", env).Str("key", bus.Fingerprint(a.PublicKey())).
			Str("state_dir", a.Journal().Dir()).Bool("own_broker_login", host.Shared == nil).Msg("tether agent starting")
	}
	fmt.Fprintf(stderr, "tether agent: %s in environment %s, broker %s\n", strings.Join(names, ", "), env, RedactURL(bcfg.URL))
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

// ResetJournalCommand is `reset-journal`; it reports to stdout.
func ResetJournalCommand(stdout io.Writer) *ucli.Command {
	return &ucli.Command{
		Name:      "reset-journal",
		Usage:     "move a damaged agent journal aside so the agent starts over from an empty one, keeping its identity",
		ArgsUsage: "DIR",
		Description: "DIR is the agent's own state directory (--state-dir/ENV/NAME), as the agent's error names it.\n" +
			"The log and snapshot are moved into DIR/damaged-<time>/; the key and the identity (its name, the server\n" +
			"key it pinned, its sequence numbers) stay, so the agent needs no new enrollment. Started again, it says\n" +
			"it holds nothing and the server sends its whole desired state; results it had not delivered are lost.\n" +
			"Stop the agent first.\n\n" +
			"   tether agent reset-journal /var/lib/tether/prod/web-1",
		Action: func(c *ucli.Context) error {
			if c.NArg() != 1 {
				return UsageError("name the agent's state directory: tether agent reset-journal DIR")
			}
			dir := c.Args().First()
			aside, err := journal.Reset(dir)
			if err != nil {
				return err
			}
			if aside == "" {
				fmt.Fprintf(stdout, "%s: no log to move aside; an empty one is ready\n", dir)
				return nil
			}
			fmt.Fprintf(stdout, "%s: the log and snapshot are in %s; start the agent again: the server sends it its whole desired state\n", dir, aside)
			return nil
		},
	}
}

// Hosting is what the agents of one process share: the broker, the host
// they manage (its root, its facts, one flush group, so that concurrent
// deploys share each flush of the file system instead of one each).
type Hosting struct {
	// Broker is the agents' broker. A URL without a user: each agent
	// logs in as itself (its key signs its login), on a bus of its own.
	Broker amqp.Config
	// Shared is the one bus of every agent of the process, when they
	// share the URL's user (nil: each has its own bus).
	Shared *amqp.Bus
	Root   string
	Sync   *handler.SyncGroup
	// Facts gathers the host's facts once for every agent (facts.Cached):
	// it also tells the handlers which tools the host has.
	Facts func(context.Context) map[string]any
}

// NewAgent makes one agent of the process from cfg, which it completes
// (version, facts, broker login), with the built-in handlers and, unless
// the agents share a bus, a bus of its own. close releases the agent and
// its bus once Run returned; the agent closes its platforms. On an error
// cfg's platforms are left to the caller.
func (h Hosting) NewAgent(ctx context.Context, cfg agent.Config, log zerolog.Logger) (a *agent.Agent, release func(), err error) {
	pm, sm := facts.Providers(h.Facts(ctx))
	reg, err := builtin.Registry(handler.Runtime{Root: h.Root, Sync: h.Sync, PackageManager: pm, ServiceManager: sm})
	if err != nil {
		return nil, nil, err
	}
	b, login := h.Shared, &agentLogin{ready: make(chan struct{})}
	closeBus := func() {}
	if b == nil {
		own := h.Broker
		own.ConnectionName = "tether agent " + cfg.Name
		own.Agent = true
		if BrokerUser(own.URL) == "" {
			own.Login = login.credentials
		}
		if b, err = amqp.New(own, log); err != nil {
			return nil, nil, err
		}
		if own.Login != nil {
			cfg.Relogin = b.Relogin
		}
		closeBus = func() { b.Close() }
	}
	cfg.Version, cfg.Facts = ReadBuildInfo().Version, h.Facts
	a, err = agent.New(cfg, b, reg, log)
	login.set(a)
	if err != nil {
		closeBus()
		return nil, nil, err
	}
	return a, func() { a.Close(); closeBus() }, nil
}

// agentLogin hands an agent's broker login to its bus, which starts
// connecting before the agent (which holds the key) exists.
type agentLogin struct {
	ready chan struct{}
	a     *agent.Agent
}

// set gives the agent (nil when it could not be made: logins fail).
func (l *agentLogin) set(a *agent.Agent) {
	l.a = a
	close(l.ready)
}

func (l *agentLogin) credentials() (string, string, error) {
	select {
	case <-l.ready:
	case <-time.After(time.Minute):
		return "", "", errors.New("the agent's key is not loaded yet")
	}
	if l.a == nil {
		return "", "", errors.New("the agent did not start")
	}
	return l.a.BrokerLogin()
}

// BrokerUser returns the user an AMQP URL names ("" for none).
func BrokerUser(s string) string {
	u, err := url.Parse(s)
	if err != nil || u.User == nil {
		return ""
	}
	return u.User.Username()
}

// OpenPlatforms connects to the platforms --platform names, for the one
// agent of the process (a platform is served by one agent).
func OpenPlatforms(specs []string, agents int) ([]handler.MachineDriver, error) {
	if len(specs) == 0 {
		return nil, nil
	}
	if agents > 1 {
		return nil, UsageError("--platform: a platform is served by one agent: run it in a process of its own (one --name)")
	}
	var out []handler.MachineDriver
	for _, spec := range specs {
		driver, uri, _ := strings.Cut(spec, "=")
		if driver != "libvirt" && driver != "pxe" {
			return nil, UsageError("--platform %s: unknown driver %q: want libvirt or pxe", spec, driver)
		}
		d, err := libvirt.New(uri)
		if err != nil {
			for _, o := range out {
				_ = o.Close()
			}
			return nil, fmt.Errorf("--platform %s: %w", spec, err)
		}
		if driver == "pxe" {
			out = append(out, pxePlatform{d})
		} else {
			out = append(out, d)
		}
	}
	return out, nil
}

// pxePlatform serves a PXE platform: its machines boot from the network
// (an iPXE script and a TFTP tree the libvirt driver writes), here as
// libvirt guests of the hypervisor the agent runs on.
type pxePlatform struct{ d *libvirt.Driver }

func (p pxePlatform) Driver() string { return "pxe" }
func (p pxePlatform) Close() error   { return p.d.Close() }

func (p pxePlatform) Provision(ctx context.Context, spec model.MachineSpec) (model.InstanceState, error) {
	return p.d.Provision(ctx, spec)
}

func (p pxePlatform) Control(ctx context.Context, machine string, op model.MachineOp, grace time.Duration) (model.InstanceState, error) {
	return p.d.Control(ctx, machine, op, grace)
}

func (p pxePlatform) Destroy(ctx context.Context, machine string) error {
	return p.d.Destroy(ctx, machine)
}

func (p pxePlatform) Inventory(ctx context.Context) (model.PlatformState, []model.InstanceState, error) {
	s, all, err := p.d.Inventory(ctx)
	s.Driver = "pxe"
	return s, all, err
}
