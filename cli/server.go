package cli

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"net"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/rs/zerolog"
	ucli "github.com/urfave/cli/v2"
	"github.com/urfave/cli/v2/altsrc"
	"golang.org/x/sync/errgroup"

	"github.com/tetherhq/tether/bus"
	"github.com/tetherhq/tether/bus/amqp"
	"github.com/tetherhq/tether/cli/agentcli"
	"github.com/tetherhq/tether/cli/ownagent"
	"github.com/tetherhq/tether/model"
	"github.com/tetherhq/tether/server"
	"github.com/tetherhq/tether/server/api"
	"github.com/tetherhq/tether/server/brokerauth"
	"github.com/tetherhq/tether/server/compile/source"
	"github.com/tetherhq/tether/server/keyring"
	"github.com/tetherhq/tether/server/notify"
	"github.com/tetherhq/tether/server/record"
	"github.com/tetherhq/tether/server/scheduler"
	"github.com/tetherhq/tether/server/store"
	"github.com/tetherhq/tether/server/store/postgres"
)

const (
	defaultServerConfig = "/etc/tether/server.toml"
	defaultKeyFile      = "/etc/tether/server.key"
)

// serverStoreFlags are the flags of the server's config file, database and
// key file, shared by the server and the commands that work on its
// database.
func serverStoreFlags() []ucli.Flag {
	return []ucli.Flag{
		&ucli.StringFlag{Name: "config", Value: defaultServerConfig, EnvVars: []string{"TETHER_SERVER_CONFIG"},
			Usage: "TOML `FILE` whose keys are these flags' names (read if it exists; flags and TETHER_* variables win)"},
		altsrc.NewStringFlag(&ucli.StringFlag{Name: "postgres", EnvVars: []string{"TETHER_POSTGRES"},
			Usage: "PostgreSQL connection `URL`, e.g. postgres://tether@db/tether (add ?search_path=SCHEMA to use a schema)"}),
		altsrc.NewIntFlag(&ucli.IntFlag{Name: "postgres-pool", Value: defaultPostgresPool, EnvVars: []string{"TETHER_POSTGRES_POOL"},
			Usage: "connections the server keeps to PostgreSQL at most: ingest, hellos, releases' fan-out and the API share them (each replica holds its own)"}),
		altsrc.NewStringFlag(&ucli.StringFlag{Name: "key-file", Value: defaultKeyFile, EnvVars: []string{"TETHER_KEY_FILE"},
			Usage: "key `FILE` (made by tether server keygen) whose keys seal the server's secrets in the database; " +
				"every server of one database needs the same file. TETHER_KEY may hold its keys instead"}),
	}
}

func serverFlags() []ucli.Flag {
	flags := append(serverStoreFlags(),
		altsrc.NewStringFlag(&ucli.StringFlag{Name: "listen", Value: "127.0.0.1:8420", EnvVars: []string{"TETHER_LISTEN"},
			Usage: "`ADDRESS` the REST API listens on"}))
	flags = append(flags, agentcli.BrokerFlags("agent inbox queue `TYPE`: quorum (replicated) or classic (very large fleets)")...)
	flags = append(flags,
		// --tls-* serve the API: the broker's TLS files are --amqp-tls-*.
		altsrc.NewStringFlag(&ucli.StringFlag{Name: "amqp-tls-ca", EnvVars: []string{"TETHER_AMQP_TLS_CA"},
			Usage: "CA certificate `FILE` (PEM) to trust for an amqps:// broker (default: the system's CAs)"}),
		altsrc.NewStringFlag(&ucli.StringFlag{Name: "amqp-tls-cert", EnvVars: []string{"TETHER_AMQP_TLS_CERT"},
			Usage: "client certificate `FILE` (PEM) for an amqps:// broker that asks for one"}),
		altsrc.NewStringFlag(&ucli.StringFlag{Name: "amqp-tls-key", EnvVars: []string{"TETHER_AMQP_TLS_KEY"},
			Usage: "private key `FILE` (PEM) of --amqp-tls-cert"}),

		altsrc.NewIntFlag(&ucli.IntFlag{Name: "ingest-consumers", Value: server.Default().Consumers, EnvVars: []string{"TETHER_INGEST_CONSUMERS"},
			Usage: "how many consumers take agents' events off the broker (each handles 64 at once); events in hand are written together, in one transaction"}),
		altsrc.NewIntFlag(&ucli.IntFlag{Name: "ingest-writers", Value: server.Default().Writers, EnvVars: []string{"TETHER_INGEST_WRITERS"},
			Usage: "how many ingest transactions are in flight at once (each holds a PostgreSQL connection of the pool while it runs)"}),
		altsrc.NewBoolFlag(&ucli.BoolFlag{Name: "no-compile", EnvVars: []string{"TETHER_NO_COMPILE"},
			Usage: "compile no models here: versions come only from tether export (sources cannot be set)"}),
		altsrc.NewDurationFlag(&ucli.DurationFlag{Name: "compile-timeout", Value: server.Default().CompileTimeout, EnvVars: []string{"TETHER_COMPILE_TIMEOUT"},
			Usage: "time one server-side compile may take, fetching the source included; then it is stopped and reported failed"}),
		altsrc.NewDurationFlag(&ucli.DurationFlag{Name: "provision-timeout", Value: server.Default().ProvisionTimeout, EnvVars: []string{"TETHER_PROVISION_TIMEOUT"},
			Usage: "time a host's new machine has to boot and enroll; then the host fails and its machine is destroyed (a host's provision_timeout setting overrides it)"}),
		altsrc.NewDurationFlag(&ucli.DurationFlag{Name: "stop-grace", Value: server.Default().StopGrace, EnvVars: []string{"TETHER_STOP_GRACE"},
			Usage: "time a machine's stop waits for the guest to power off before forcing it off"}),
		altsrc.NewStringFlag(&ucli.StringFlag{Name: "source-max-size", Value: formatSize(source.DefaultLimits().MaxBytes), EnvVars: []string{"TETHER_SOURCE_MAX_SIZE"},
			Usage: "largest model source `SIZE` the server checks out (the files, not the history)"}),
		altsrc.NewIntFlag(&ucli.IntFlag{Name: "source-max-files", Value: source.DefaultLimits().MaxFiles, EnvVars: []string{"TETHER_SOURCE_MAX_FILES"},
			Usage: "most files a model source may hold"}),
		altsrc.NewStringFlag(&ucli.StringFlag{Name: "state-dir", Value: defaultServerStateDir(), EnvVars: []string{"TETHER_SERVER_STATE_DIR"},
			Usage: "`DIR` where this server keeps what it can fetch again: a clone of each environment's git source and the work tree of its last compile " +
				"(DIR/sources), so that a compile fetches only what is new; and the journals of its --own-agent agents (DIR/agents: their keys, which are not fetched again). " +
				"Each server of a database has its own. Empty: none (every compile fetches its source afresh; no --own-agent). " +
				"Default: $STATE_DIRECTORY (systemd's StateDirectory), else the user's cache directory"}),
		altsrc.NewStringSliceFlag(&ucli.StringSliceFlag{Name: "own-agent", EnvVars: []string{"TETHER_OWN_AGENTS"},
			Usage: "run agent `ENV/NAME` inside this server (e.g. prod/hv1), for this host or a hypervisor it reaches, instead of a tether agent run of its own: " +
				"it connects to the broker and enrolls as any agent, with a token this server makes for it (accepted whatever the enrollment policy), " +
				"keeps its journal in --state-dir/agents/ENV/NAME, is labelled tether-served-by=server, and is started again if it stops (repeat for several)"}),
		altsrc.NewStringSliceFlag(&ucli.StringSliceFlag{Name: "own-agent-platform", EnvVars: []string{"TETHER_OWN_AGENT_PLATFORMS"},
			Usage: "let own agent ENV/NAME serve a platform machines are made on: `ENV/NAME=DRIVER[=URI]`, e.g. prod/hv1=libvirt or prod/hv1=libvirt=qemu+tcp://hv:16509/system " +
				"(as tether agent run --platform); the server registers the hypervisor as platform NAME-libvirt (repeatable)"}),
		altsrc.NewStringFlag(&ucli.StringFlag{Name: "own-agent-amqp", EnvVars: []string{"TETHER_OWN_AGENT_AMQP"},
			Usage: "RabbitMQ `URL` the own agents connect to, with --amqp-tls-*; default: --amqp, without its user when --broker-auth-listen is set (each agent then logs in as itself)"}),
		altsrc.NewBoolFlag(&ucli.BoolFlag{Name: "allow-file-sources", EnvVars: []string{"TETHER_ALLOW_FILE_SOURCES"},
			Usage: "let operators set file:// repositories (on this server's disk) as sources: for tests and local mirrors"}),
		altsrc.NewStringFlag(&ucli.StringFlag{Name: "admin-token", EnvVars: []string{"TETHER_ADMIN_TOKEN"},
			Usage: "use this `SECRET` as an admin token (created if missing) instead of generating a bootstrap token; for automation"}),
		altsrc.NewStringFlag(&ucli.StringFlag{Name: "admin-password", EnvVars: []string{"TETHER_ADMIN_PASSWORD"},
			Usage: "the `PASSWORD` of the bootstrap admin user (admin), made when the default organization has no user; default: a random one, printed once"}),
		altsrc.NewFloat64Flag(&ucli.Float64Flag{Name: "agent-event-rate", Value: server.Default().AgentEventRate, EnvVars: []string{"TETHER_AGENT_EVENT_RATE"},
			Usage: "events one agent may send a second (bursts of ten times as many); beyond, its events are dropped, counted and alerted"}),
		altsrc.NewStringFlag(&ucli.StringFlag{Name: "broker-auth-listen", EnvVars: []string{"TETHER_BROKER_AUTH_LISTEN"},
			Usage: "answer RabbitMQ's HTTP authentication backend on this `ADDRESS` (a network only the broker reaches): each agent logs in as itself and may touch only its own inbox and events (see docs/operations.md)"}),
		altsrc.NewDurationFlag(&ucli.DurationFlag{Name: "broker-login-skew", Value: brokerauth.Default().Skew, EnvVars: []string{"TETHER_BROKER_LOGIN_SKEW"},
			Usage: "how far an agent's clock may be from this server's for its broker login to hold"}),
		altsrc.NewStringFlag(&ucli.StringFlag{Name: "broker-admin-url", EnvVars: []string{"TETHER_BROKER_ADMIN_URL"},
			Usage: "RabbitMQ management API `URL` (http://user:password@host:15672): rejecting or revoking an agent closes its broker connections at once, and so do a key a pending name lost to an enrollment token and a key an agent rolled over from; an agent's connections beyond --broker-max-agent-connections are closed"}),
		altsrc.NewIntFlag(&ucli.IntFlag{Name: "broker-max-agent-connections", Value: server.Default().MaxAgentConnections, EnvVars: []string{"TETHER_BROKER_MAX_AGENT_CONNECTIONS"},
			Usage: "broker connections one agent (a name, whatever its key) may hold, with --broker-admin-url; the newest beyond are closed and alerted (0: no limit)"}),
		altsrc.NewIntFlag(&ucli.IntFlag{Name: "fanout-page-size", Value: scheduler.DefaultFanout().PageSize, EnvVars: []string{"TETHER_FANOUT_PAGE_SIZE"},
			Usage: "a release's fan-out reads, diffs and sends to this many agents at once (at most 1000)"}),
		altsrc.NewIntFlag(&ucli.IntFlag{Name: "fanout-workers", Value: scheduler.DefaultFanout().Workers, EnvVars: []string{"TETHER_FANOUT_WORKERS"},
			Usage: "pages of agents a release's fan-out has in hand at once (one computes while others wait for the broker's confirms)"}),
		altsrc.NewDurationFlag(&ucli.DurationFlag{Name: "keep-actions", Value: server.Default().KeepActions, EnvVars: []string{"TETHER_KEEP_ACTIONS"},
			Usage: "how long the action log (every change an agent made, `tether resource log`) keeps an entry; older ones are deleted every hour (0: keep them for ever)"}),
		altsrc.NewDurationFlag(&ucli.DurationFlag{Name: "keep-events", Value: notify.DefaultStream().Keep, EnvVars: []string{"TETHER_KEEP_EVENTS"},
			Usage: "how long the event log keeps an event (what `tether watch` resumes from with Last-Event-ID) and a finished webhook delivery; older ones are deleted every hour (0: keep them for ever)"}),
		altsrc.NewStringSliceFlag(&ucli.StringSliceFlag{Name: "webhook-allow", EnvVars: []string{"TETHER_WEBHOOK_ALLOW"},
			Usage: "let webhooks reach this `NETWORK` (10.0.0.0/8), address or host name (hooks.internal, *.internal) although denied: webhooks may not reach this server's own addresses, loopback, link-local (cloud metadata), private, unique-local, documentation (192.0.2.0/24…), benchmarking, multicast or other reserved addresses (docs/server.md lists them) unless allowed here; allow wins over deny (repeat, or separate with commas)"}),
		altsrc.NewStringSliceFlag(&ucli.StringSliceFlag{Name: "webhook-deny", EnvVars: []string{"TETHER_WEBHOOK_DENY"},
			Usage: "also refuse webhooks this `NETWORK` or address (a public range of your own, or the public address a NAT forwards to this server), besides the default denied ones (repeat, or separate with commas)"}),
		altsrc.NewStringFlag(&ucli.StringFlag{Name: "tls-cert", EnvVars: []string{"TETHER_TLS_CERT"},
			Usage: "serve the API over HTTPS with this certificate `FILE` (PEM)"}),
		altsrc.NewStringFlag(&ucli.StringFlag{Name: "tls-key", EnvVars: []string{"TETHER_TLS_KEY"},
			Usage: "private key `FILE` (PEM) of --tls-cert"}),
	)
	return append(flags, httpFlags()...)
}

// httpFlags bind server.HTTPConfig: how the API treats slow, greedy and
// hostile clients. Defaults come from server.DefaultHTTP.
func httpFlags() []ucli.Flag {
	def := server.DefaultHTTP()
	d := def.API
	dur := func(name, env string, value time.Duration, usage string) ucli.Flag {
		return altsrc.NewDurationFlag(&ucli.DurationFlag{Name: name, Value: value, EnvVars: []string{env}, Usage: usage})
	}
	num := func(name, env string, value int, usage string) ucli.Flag {
		return altsrc.NewIntFlag(&ucli.IntFlag{Name: name, Value: value, EnvVars: []string{env}, Usage: usage})
	}
	rate := func(name, env string, value float64, usage string) ucli.Flag {
		return altsrc.NewFloat64Flag(&ucli.Float64Flag{Name: name, Value: value, EnvVars: []string{env}, Usage: usage})
	}
	bytes := func(name, env string, value int64, usage string) ucli.Flag {
		return altsrc.NewStringFlag(&ucli.StringFlag{Name: name, Value: formatSize(value), EnvVars: []string{env}, Usage: usage})
	}
	return []ucli.Flag{
		altsrc.NewStringFlag(&ucli.StringFlag{Name: "ops-listen", EnvVars: []string{"TETHER_OPS_LISTEN"},
			Usage: "also serve /healthz, /readyz and /metrics on this `ADDRESS` (a private network): they keep answering when the API listener is full, and /metrics leaves the API listener"}),
		num("max-conns", "TETHER_MAX_CONNS", def.MaxConns, "connections the API listener holds open; more wait in the kernel's accept queue (or, see max-anonymous-conns, take an unauthenticated one's place)"),
		num("max-conns-per-client", "TETHER_MAX_CONNS_PER_CLIENT", def.MaxConnsPerClient, "connections one client address (an IPv6 /64) may hold; more are closed at once"),
		num("max-anonymous-conns", "TETHER_MAX_ANONYMOUS_CONNS", def.MaxAnonymousConns, "connections of the API listener on which no request authenticated yet (new, slow or without a token; 0: a quarter of max-conns); when these or the listener are full, one is closed for each new connection, of the address holding the most, so slow clients cannot keep authenticated ones out"),
		bytes("max-body", "TETHER_MAX_BODY", d.MaxBody, "largest request `SIZE` but for version uploads (e.g. 1MiB)"),
		bytes("max-upload", "TETHER_MAX_UPLOAD", d.MaxUpload, "largest version upload `SIZE` (e.g. 64MiB); each upload in progress holds its resource set in memory"),
		bytes("min-upload-rate", "TETHER_MIN_UPLOAD_RATE", d.MinUploadRate, "slowest pace a request body (an upload or any other) may keep, `SIZE` a second on average, with read-timeout to spare"),
		num("max-uploads", "TETHER_MAX_UPLOADS", d.MaxUploads, fmt.Sprintf("version uploads handled at once; another waits up to %s, then is answered busy", d.UploadWait)),
		bytes("upload-memory", "TETHER_UPLOAD_MEMORY", d.UploadMemory, "memory `SIZE` the version uploads in progress may hold together (their resources as stored, counted as they arrive); an upload needing more on its own is refused too_large, one finding the rest held by others busy"),
		dur("read-header-timeout", "TETHER_READ_HEADER_TIMEOUT", d.ReadHeaderTimeout, "time a client has to send a request's headers"),
		dur("read-timeout", "TETHER_READ_TIMEOUT", d.ReadTimeout, "time a request's body has beyond its pace at min-upload-rate (its read deadline moves on as its bytes come); a request without a body has none after its headers"),
		dur("write-timeout", "TETHER_WRITE_TIMEOUT", d.WriteTimeout, "time an answer may take to be written (event streams: per write)"),
		dur("idle-timeout", "TETHER_IDLE_TIMEOUT", d.IdleTimeout, "an idle kept-alive connection is closed after this"),
		dur("handler-timeout", "TETHER_HANDLER_TIMEOUT", d.HandlerTimeout, "time the work behind a request may take (not uploads nor event streams); then: error timeout"),
		num("max-header-bytes", "TETHER_MAX_HEADER_BYTES", d.MaxHeaderBytes, "largest request headers, in bytes"),
		rate("anonymous-rate", "TETHER_ANONYMOUS_RATE", d.AnonymousRate, "requests a second one client address may send without a token (health checks excepted)"),
		num("anonymous-burst", "TETHER_ANONYMOUS_BURST", d.AnonymousBurst, "requests without a token one client address may send at once"),
		rate("auth-failure-rate", "TETHER_AUTH_FAILURE_RATE", d.AuthFailureRate, "failed authentications a second one client address may make; beyond, its bad tokens are answered 429 (a valid token always gets in)"),
		num("auth-failure-burst", "TETHER_AUTH_FAILURE_BURST", d.AuthFailureBurst, "failed authentications one client address may make at once"),
		altsrc.NewStringSliceFlag(&ucli.StringSliceFlag{Name: "trusted-proxy", EnvVars: []string{"TETHER_TRUSTED_PROXIES"},
			Usage: "`NETWORK` (e.g. 10.0.0.0/8) of a reverse proxy whose X-Forwarded-For names the client for rate limits (repeat for several)"}),
		dur("session-idle", "TETHER_SESSION_IDLE", d.SessionIdle, "a login session unused this long ends"),
		dur("session-max-age", "TETHER_SESSION_MAX_AGE", d.SessionMaxAge, "a login session ends this long after the login, used or not"),
		altsrc.NewBoolFlag(&ucli.BoolFlag{Name: "secure-cookies", EnvVars: []string{"TETHER_SECURE_COOKIES"},
			Usage: "mark the session cookie Secure on plain HTTP too: the server is behind a proxy that serves TLS (with --tls-cert it always is)"}),
		num("login-free-failures", "TETHER_LOGIN_FREE_FAILURES", d.LoginFreeFailures, "failed logins of a user name from one address before each further one doubles that address's wait (an address across names, and a name across addresses, get four times as many; past those, the addresses that failed a name take turns while others are not held back)"),
		dur("login-max-delay", "TETHER_LOGIN_MAX_DELAY", d.LoginMaxDelay, "longest wait a run of failed logins imposes on an address"),
	}
}

// httpConfig reads the HTTP flags.
func httpConfig(c *ucli.Context) (server.HTTPConfig, error) {
	cfg := server.DefaultHTTP()
	cfg.TLSCert, cfg.TLSKey = c.String("tls-cert"), c.String("tls-key")
	cfg.MaxConns, cfg.MaxConnsPerClient, cfg.MaxAnonymousConns = c.Int("max-conns"), c.Int("max-conns-per-client"), c.Int("max-anonymous-conns")
	a := &cfg.API
	for _, f := range []struct {
		name string
		to   *int64
	}{{"max-body", &a.MaxBody}, {"max-upload", &a.MaxUpload}, {"min-upload-rate", &a.MinUploadRate}, {"upload-memory", &a.UploadMemory}} {
		n, err := parseSize(c.String(f.name))
		if err != nil {
			return cfg, usageError("--%s %q: %v", f.name, c.String(f.name), err)
		}
		*f.to = n
	}
	a.MaxUploads, a.MaxHeaderBytes = c.Int("max-uploads"), c.Int("max-header-bytes")
	a.ReadHeaderTimeout, a.ReadTimeout = c.Duration("read-header-timeout"), c.Duration("read-timeout")
	a.WriteTimeout, a.IdleTimeout, a.HandlerTimeout = c.Duration("write-timeout"), c.Duration("idle-timeout"), c.Duration("handler-timeout")
	a.AnonymousRate, a.AnonymousBurst = c.Float64("anonymous-rate"), c.Int("anonymous-burst")
	a.AuthFailureRate, a.AuthFailureBurst = c.Float64("auth-failure-rate"), c.Int("auth-failure-burst")
	a.SessionIdle, a.SessionMaxAge, a.SecureCookies = c.Duration("session-idle"), c.Duration("session-max-age"), c.Bool("secure-cookies")
	a.LoginFreeFailures, a.LoginMaxDelay = c.Int("login-free-failures"), c.Duration("login-max-delay")
	for _, s := range c.StringSlice("trusted-proxy") {
		for _, part := range strings.Split(s, ",") {
			p, err := parseNetwork(strings.TrimSpace(part))
			if err != nil {
				return cfg, usageError("--trusted-proxy %q: %v", part, err)
			}
			a.TrustedProxies = append(a.TrustedProxies, p)
		}
	}
	if err := cfg.Validate(); err != nil {
		return cfg, usageError("%v", err)
	}
	return cfg, nil
}

// parseWebhookPolicy reads --webhook-allow (networks, addresses, host
// names) and --webhook-deny (networks, addresses), each value repeated
// or separated by commas.
func parseWebhookPolicy(allow, deny []string) (notify.Policy, error) {
	var p notify.Policy
	for _, flag := range []struct {
		name   string
		values []string
	}{{"webhook-allow", allow}, {"webhook-deny", deny}} {
		for _, s := range flag.values {
			for _, part := range strings.Split(s, ",") {
				part = strings.TrimSpace(part)
				if part == "" {
					continue
				}
				n, err := parseNetwork(part)
				switch {
				case err == nil && flag.name == "webhook-allow":
					p.Allow = append(p.Allow, n)
				case err == nil:
					p.Deny = append(p.Deny, n)
				case flag.name == "webhook-allow" && !strings.ContainsAny(part, "/:"):
					p.AllowHosts = append(p.AllowHosts, part)
				case flag.name == "webhook-allow":
					return p, usageError("--webhook-allow %q: want a network such as 10.0.0.0/8, an address or a host name", part)
				default:
					return p, usageError("--webhook-deny %q: want a network such as 203.0.113.0/24 or an address", part)
				}
			}
		}
	}
	if err := p.Validate(); err != nil {
		return p, usageError("%v", err)
	}
	return p, nil
}

// parseNetwork reads a network (10.0.0.0/8) or a single address.
func parseNetwork(s string) (netip.Prefix, error) {
	if p, err := netip.ParsePrefix(s); err == nil {
		return p.Masked(), nil
	}
	a, err := netip.ParseAddr(s)
	if err != nil {
		return netip.Prefix{}, errors.New("want a network such as 10.0.0.0/8 or an address")
	}
	return netip.PrefixFrom(a.Unmap(), a.Unmap().BitLen()), nil
}

// sizeUnits are the suffixes parseSize reads, largest first.
var sizeUnits = []struct {
	suffix string
	n      int64
}{{"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}, {"B", 1}, {"", 1}}

// parseSize reads a byte count: 1048576, 1MiB, 512KiB.
func parseSize(s string) (int64, error) {
	for _, u := range sizeUnits {
		if num, ok := strings.CutSuffix(s, u.suffix); ok {
			n, err := strconv.ParseInt(strings.TrimSpace(num), 10, 64)
			if err != nil || n < 0 || n > (1<<62)/u.n {
				break
			}
			return n * u.n, nil
		}
	}
	return 0, errors.New("want a size such as 1048576, 512KiB, 64MiB or 1GiB")
}

// formatSize writes a byte count as parseSize reads it, in the largest
// unit that divides it.
func formatSize(n int64) string {
	for _, u := range sizeUnits {
		if u.n > 1 && n >= u.n && n%u.n == 0 {
			return strconv.FormatInt(n/u.n, 10) + u.suffix
		}
	}
	return strconv.FormatInt(n, 10)
}

func serverCommand(term *terminal) *ucli.Command {
	flags := serverFlags()
	return &ucli.Command{
		Name:  "server",
		Usage: "run the Tether server: REST API, scheduler and event ingest, on PostgreSQL and RabbitMQ",
		Description: "The server stores every version of each environment's intent in PostgreSQL, sends agents their\n" +
			"desired state and deploy commands over RabbitMQ, and records what they report.\n\n" +
			"Its signing key, which agents pin, is kept in the database sealed with a key of its key file\n" +
			"(--key-file), which the database does not hold: create the file once, keep it apart from database\n" +
			"backups, and give every server of the database the same one.\n\n" +
			"On its first start it prints a bootstrap admin token, once: keep it, then create narrower\n" +
			"tokens with `tether token create`. It also makes the bootstrap admin user, admin, and prints\n" +
			"its password once (or takes --admin-password): log in with it, then add people with\n" +
			"`tether user add`. Several servers may share one database and broker.\n\n" +
			"The server can run agents itself (--own-agent ENV/NAME): for this host, or a hypervisor it reaches\n" +
			"(--own-agent-platform ENV/NAME=libvirt), with no tether agent run to install. Each enrolls as any agent\n" +
			"does, with a token the server makes for it, keeps its journal in --state-dir/agents, and is started\n" +
			"again if it stops. See docs/server.md.\n\n" +
			"   tether server keygen /etc/tether/server.key\n" +
			"   tether server --postgres postgres://postgres@127.0.0.1/test --amqp amqp://guest:guest@127.0.0.1:5672/\n" +
			"   tether server --postgres postgres://postgres@127.0.0.1/test --own-agent prod/hv1 --own-agent-platform prod/hv1=libvirt",
		Flags:  flags,
		Before: agentcli.ConfigFileSource(flags),
		Action: func(c *ucli.Context) error { return runServer(c, term) },
		Subcommands: []*ucli.Command{
			serverKeygenCommand(term),
			serverRotateKeyCommand(term),
			serverSigningKeyCommand(term),
			remoteCommand(term, "key", "print the public key of the server you talk to, and its fingerprint, for agents' --server-key", "",
				nil, func(c *ucli.Context, cl *client, asJSON bool) error {
					var info api.ServerInfo
					if err := cl.call(c.Context, "GET", "/server", nil, &info); err != nil {
						return err
					}
					if asJSON {
						return writeJSON(term.stdout, info)
					}
					fmt.Fprintf(term.stdout, "fingerprint  %s\npublic key   %s\n\nPin it on agents that enroll without a token: tether agent run --server-key %s ...\n",
						info.Fingerprint, base64.StdEncoding.EncodeToString(info.PublicKey), info.Fingerprint)
					return nil
				}),
		},
	}
}

func serverKeygenCommand(term *terminal) *ucli.Command {
	return &ucli.Command{
		Name:      "keygen",
		Usage:     "create the server's key file (mode 0600), or put a new key first in one to rotate keys",
		ArgsUsage: "FILE",
		Description: "The keys of the key file seal the server's secrets (its signing key) in the database, so that a copy\n" +
			"of the database cannot command the agents. The first key seals, every key opens. An existing FILE is\n" +
			"never replaced; --add puts a new key first in it, the keys it holds kept after it (see rotate-key).\n\n" +
			"   tether server keygen /etc/tether/server.key\n" +
			"   tether server keygen --add /etc/tether/server.key",
		Flags: []ucli.Flag{
			&ucli.BoolFlag{Name: "add", Usage: "put a new key first in the existing FILE, keeping its keys after it: the first step of a key rotation"},
		},
		Action: func(c *ucli.Context) error {
			if c.NArg() != 1 {
				return usageError("name the key file: tether server keygen %s", defaultKeyFile)
			}
			path := c.Args().First()
			if c.Bool("add") {
				id, err := keyring.AddKey(path)
				if errors.Is(err, fs.ErrNotExist) {
					return usageError("%v: --add puts a key in an existing key file; create one with tether server keygen %s", err, path)
				} else if err != nil {
					return err
				}
				r, err := keyring.Load(path)
				if err != nil {
					return err
				}
				fmt.Fprintf(term.stdout, "added key %s first in %s, which holds keys %s.\n\n"+
					"Next: give every server of the database this file and restart them; then seal the secrets with the new key:\n"+
					"tether server rotate-key --key-file %s --postgres … (or --config, the servers' config file).\n"+
					"After that, the older keys can be removed from the file.\n",
					id, path, strings.Join(r.KeyIDs(), ", "), path)
				return nil
			}
			id, err := keyring.Create(path)
			switch {
			case errors.Is(err, fs.ErrExist):
				return usageError("%s exists and was not changed (to add a key for a rotation: tether server keygen --add %s)", path, path)
			case errors.Is(err, fs.ErrNotExist):
				return usageError("%v: create the directory first", err)
			case err != nil:
				return err
			}
			fmt.Fprintf(term.stdout, "created %s (mode 0600) holding key %s.\n\n"+
				"Start the server with it: tether server --key-file %s … (the default is %s).\n"+
				"Every server of one database needs this same file. Back it up apart from the database: without it the\n"+
				"database's signing key cannot be read, and every agent would have to enroll again.\n",
				path, id, path, defaultKeyFile)
			return nil
		},
	}
}

func serverRotateKeyCommand(term *terminal) *ucli.Command {
	flags := serverStoreFlags()
	return &ucli.Command{
		Name:  "rotate-key",
		Usage: "seal the server's secrets in the database again with the first key of the key file, so older keys can be removed",
		Description: "The steps of a rotation: put a new key first in the key file (tether server keygen --add FILE), give\n" +
			"every server of the database that file and restart them, run this command, then remove the older keys\n" +
			"from the file. It reads the database and the key file as the server does (same flags and config file),\n" +
			"may run while servers run, and may run again: a second run finds nothing left to do.\n\n" +
			"   tether server rotate-key --postgres postgres://tether@db/tether --key-file /etc/tether/server.key",
		Flags:  flags,
		Before: agentcli.ConfigFileSource(flags),
		Action: func(c *ucli.Context) error {
			log, err := logger(c, term.stderr)
			if err != nil {
				return err
			}
			if c.String("postgres") == "" {
				return usageError("no database: pass --postgres postgres://USER@HOST/DB, set TETHER_POSTGRES, or put postgres = \"...\" in %s", defaultServerConfig)
			}
			ring, err := loadKeyring(c, log)
			if err != nil {
				return err
			}
			st, err := postgres.Open(c.Context, postgres.Config{URL: c.String("postgres")})
			if err != nil {
				return fmt.Errorf("open the database: %w", err)
			}
			defer st.Close()
			done, err := server.Reseal(c.Context, st, ring)
			if err != nil {
				return err
			}
			var from []string
			n := 0
			for _, id := range slices.Sorted(maps.Keys(done.From)) {
				was := "with key " + id
				if id == "" {
					was = "in clear"
				}
				from = append(from, fmt.Sprintf("%d %s", done.From[id], was))
				n += done.From[id]
			}
			switch {
			case n == 0 && done.Kept == 0:
				fmt.Fprintln(term.stdout, "nothing to do: the database holds no secret yet (a server makes its signing key when it first starts)")
			case n == 0:
				fmt.Fprintf(term.stdout, "nothing to do: the %d secret(s) in the database are sealed with key %s already\n", done.Kept, done.Key)
			default:
				fmt.Fprintf(term.stdout, "sealed %d secret(s) again with key %s (%s); %d were sealed with it already\n", n, done.Key, strings.Join(from, ", "), done.Kept)
			}
			if older := ring.KeyIDs()[1:]; len(older) > 0 {
				fmt.Fprintf(term.stdout, "No secret needs key(s) %s any more: remove them from the key file of every server.\n", strings.Join(older, ", "))
			}
			return nil
		},
	}
}

// loadKeyring reads the server's keys: from TETHER_KEY if set, else from
// the key file. Without either it says how to make a key file.
func loadKeyring(c *ucli.Context, log zerolog.Logger) (*keyring.Ring, error) {
	path := c.String("key-file")
	if text := os.Getenv("TETHER_KEY"); strings.TrimSpace(text) != "" {
		if c.IsSet("key-file") && path != "" {
			return nil, usageError("TETHER_KEY and --key-file both give the server's keys: keep one (unset TETHER_KEY, or drop --key-file, TETHER_KEY_FILE and key-file from the config file)")
		}
		r, err := keyring.Parse([]byte(text))
		if err != nil {
			return nil, usageError("TETHER_KEY: %v", err)
		}
		log.Info().Strs("key_ids", r.KeyIDs()).Msg("server keys read from TETHER_KEY")
		return r, nil
	}
	if path == "" {
		return nil, usageError("--key-file is empty: name the server's key file (made by tether server keygen), or put its keys in TETHER_KEY")
	}
	r, err := keyring.Load(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, usageError("no key file at %s: the server keeps its signing key sealed with a key of that file, which the database does not hold. "+
			"Create it once:\n\n    tether server keygen %s\n\nthen start again%s. Every server of the database needs the same file; "+
			"back it up apart from the database (or put its keys in TETHER_KEY)", path, path, keyFileHint(path))
	} else if err != nil {
		return nil, usageError("%v", err)
	}
	if fi, err := os.Stat(path); err == nil && fi.Mode().Perm()&0o077 != 0 {
		log.Warn().Str("key_file", path).Msgf("the key file can be read by other users (mode %04o): chmod 600 %s", fi.Mode().Perm(), path)
	}
	log.Info().Str("key_file", path).Strs("key_ids", r.KeyIDs()).Msg("server keys read")
	return r, nil
}

// keyFileHint says how to name a key file that is not the default one.
func keyFileHint(path string) string {
	if path == defaultKeyFile {
		return ""
	}
	return " with --key-file " + path
}

// defaultServerStateDir is where the server keeps its state by default:
// the directory systemd gives the service (StateDirectory=), else the
// user's cache directory; "" when neither is known.
func defaultServerStateDir() string {
	if dir := os.Getenv("STATE_DIRECTORY"); dir != "" {
		// systemd lists several, separated by colons, when the unit
		// names several: the first is the server's.
		first, _, _ := strings.Cut(dir, ":")
		return first
	}
	if dir, err := os.UserCacheDir(); err == nil {
		return filepath.Join(dir, "tether", "server")
	}
	return ""
}

func runServer(c *ucli.Context, term *terminal) error {
	log, err := logger(c, term.stderr)
	if err != nil {
		return err
	}
	if c.String("postgres") == "" {
		return usageError("no database: pass --postgres postgres://USER@HOST/DB, set TETHER_POSTGRES, or put postgres = \"...\" in %s", defaultServerConfig)
	}
	if (c.String("tls-cert") == "") != (c.String("tls-key") == "") {
		return usageError("--tls-cert and --tls-key go together")
	}
	if c.Float64("agent-event-rate") <= 0 {
		return usageError("--agent-event-rate must be more than 0 (events a second)")
	}
	if c.Int("ingest-consumers") < 1 {
		return usageError("--ingest-consumers must be at least 1")
	}
	hcfg, err := httpConfig(c)
	if err != nil {
		return err
	}
	policy, err := parseWebhookPolicy(c.StringSlice("webhook-allow"), c.StringSlice("webhook-deny"))
	if err != nil {
		return err
	}
	sourceCache := ""
	if dir := c.String("state-dir"); dir != "" && !c.Bool("no-compile") {
		sourceCache = filepath.Join(dir, "sources")
		if err := os.MkdirAll(sourceCache, 0o700); err != nil {
			return usageError("--state-dir %s: %v: give the server a directory it can write (or --state-dir \"\" to fetch every compile's source afresh)", dir, err)
		}
	}
	owned, err := ownagent.ParseSpecs(c.StringSlice("own-agent"), c.StringSlice("own-agent-platform"))
	if err != nil {
		return usageError("%v", err)
	}
	ownDir := ""
	if len(owned) > 0 {
		if c.String("state-dir") == "" {
			return usageError("--own-agent needs --state-dir: the agents the server runs keep their journals (their keys) in DIR/agents")
		}
		ownDir = filepath.Join(c.String("state-dir"), "agents")
		if err := os.MkdirAll(ownDir, 0o700); err != nil {
			return usageError("--state-dir %s: %v: give the server a directory it can write, where its own agents keep their journals", c.String("state-dir"), err)
		}
	}
	ring, err := loadKeyring(c, log)
	if err != nil {
		return err
	}
	ctx := c.Context
	if n := c.Int("postgres-pool"); n < 1 || n > 1000 {
		return usageError("--postgres-pool %d: want 1 to 1000 connections", n)
	}
	st, err := postgres.Open(ctx, postgres.Config{URL: c.String("postgres"), MaxConns: int32(c.Int("postgres-pool"))})
	if err != nil {
		return fmt.Errorf("open the database: %w", err)
	}
	defer st.Close()
	key, err := server.SigningKey(ctx, st, ring, log)
	if err != nil {
		return err
	}
	bcfg := amqp.Default()
	bcfg.URL, bcfg.Namespace, bcfg.QueueType = c.String("amqp"), c.String("amqp-namespace"), c.String("queue-type")
	bcfg.CAFile, bcfg.CertFile, bcfg.KeyFile = c.String("amqp-tls-ca"), c.String("amqp-tls-cert"), c.String("amqp-tls-key")
	bcfg.ConnectionName = "tether server"
	if err := bcfg.Validate(); err != nil {
		return usageError("%v", err)
	}
	var ownBroker amqp.Config
	if len(owned) > 0 {
		if ownBroker, err = ownAgentBroker(c, bcfg); err != nil {
			return err
		}
	}
	b, err := amqp.New(bcfg, log)
	if err != nil {
		return err
	}
	defer b.Close()
	cfg := server.Config{Key: key, Keyring: ring, Consumers: c.Int("ingest-consumers"), Writers: c.Int("ingest-writers"), CompileTimeout: c.Duration("compile-timeout"),
		ProvisionTimeout: c.Duration("provision-timeout"), StopGrace: c.Duration("stop-grace"),
		AgentEventRate: c.Float64("agent-event-rate")}
	if !c.Bool("no-compile") {
		limits := source.Limits{MaxFiles: c.Int("source-max-files")}
		if limits.MaxBytes, err = parseSize(c.String("source-max-size")); err != nil {
			return usageError("--source-max-size %q: %v", c.String("source-max-size"), err)
		}
		if err := limits.Validate(); err != nil {
			return usageError("%v", err)
		}
		cfg.Sources = server.StoredSources(st, server.SourceOptions{Limits: limits, AllowFile: c.Bool("allow-file-sources"), CacheDir: sourceCache})
	}
	if u := c.String("broker-admin-url"); u != "" {
		if cfg.Broker, err = amqp.NewAdmin(u); err != nil {
			return usageError("--broker-admin-url: %v", err)
		}
	}
	switch n := c.Int("broker-max-agent-connections"); {
	case n < 0:
		return usageError("--broker-max-agent-connections %d: want 0 (no limit) or more", n)
	case n == 0:
		cfg.MaxAgentConnections = -1
	default:
		cfg.MaxAgentConnections = n
	}
	if p, w := c.Int("fanout-page-size"), c.Int("fanout-workers"); p < 1 || p > 1000 || w < 1 {
		return usageError("--fanout-page-size %d, --fanout-workers %d: want a page of 1 to 1000 agents and at least 1 worker", p, w)
	}
	cfg.Fanout = scheduler.FanoutConfig{PageSize: c.Int("fanout-page-size"), Workers: c.Int("fanout-workers")}
	switch d := c.Duration("keep-actions"); {
	case d < 0:
		return usageError("--keep-actions %v: want 0 (for ever) or more", d)
	case d == 0:
		cfg.KeepActions = -1
	default:
		cfg.KeepActions = d
	}
	switch d := c.Duration("keep-events"); {
	case d < 0:
		return usageError("--keep-events %v: want 0 (for ever) or more", d)
	case d == 0:
		cfg.Stream.Keep = -1
	default:
		cfg.Stream.Keep = d
	}
	cfg.Webhooks.Policy = policy
	srv, err := server.New(cfg, st, b, log)
	if err != nil {
		return err
	}
	// A rollover of the signing key under way may have switched it.
	if err := srv.LoadSigningKeys(ctx); err != nil {
		return err
	}
	var auth *brokerauth.Backend
	if c.String("broker-auth-listen") != "" {
		acfg := brokerauth.Config{Namespace: bcfg.Namespace, VHost: vhostOf(bcfg.URL), Skew: c.Duration("broker-login-skew")}
		if auth, err = srv.BrokerAuth(acfg); err != nil {
			return usageError("%v", err)
		}
	}
	if err := bootstrapToken(ctx, st, c.String("admin-token"), term); err != nil {
		return err
	}
	firstLogin, err := bootstrapAdmin(ctx, st, c.String("admin-password"), term, log)
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", c.String("listen"))
	if err != nil {
		return fmt.Errorf("listen on %s: %w (is another server running? pick another --listen)", c.String("listen"), err)
	}
	var ops net.Listener
	if addr := c.String("ops-listen"); addr != "" {
		if ops, err = net.Listen("tcp", addr); err != nil {
			ln.Close()
			return fmt.Errorf("listen on %s: %w (pick another --ops-listen)", addr, err)
		}
	}
	var authLn net.Listener
	if addr := c.String("broker-auth-listen"); addr != "" {
		if authLn, err = net.Listen("tcp", addr); err != nil {
			ln.Close()
			if ops != nil {
				ops.Close()
			}
			return fmt.Errorf("listen on %s: %w (pick another --broker-auth-listen)", addr, err)
		}
	}
	info := readBuildInfo()
	hcfg.API.Version = info.Version
	scheme := "http"
	if c.String("tls-cert") != "" {
		scheme = "https"
	}
	console := consoleURL(scheme, ln.Addr())
	log.Info().Str("url", scheme+"://"+ln.Addr().String()).Str("console", console).Str("version", info.Version).
		Str("server_key", base64.StdEncoding.EncodeToString(srv.PublicKey())).Str("fingerprint", bus.Fingerprint(srv.PublicKey())).
		Msg("tether server listening (agents pin the key with --server-key, or get it in their enrollment token)")
	fmt.Fprintf(term.stderr, "tether server: API on %s://%s, database %s, broker %s\nserver key %s (agents pin it: --server-key, or an enrollment token)\n",
		scheme, ln.Addr(), agentcli.RedactURL(c.String("postgres")), agentcli.RedactURL(bcfg.URL), bus.Fingerprint(srv.PublicKey()))
	if firstLogin != "" {
		fmt.Fprintf(term.stderr, "tether server: console on %s: log in as admin (organization: empty) %s\n", console, firstLogin)
	} else {
		fmt.Fprintf(term.stderr, "tether server: console on %s\n", console)
	}
	if ops != nil {
		fmt.Fprintf(term.stderr, "tether server: health and metrics on http://%s\n", ops.Addr())
	}
	if authLn != nil {
		fmt.Fprintf(term.stderr, "tether server: broker authentication on http://%s (auth_http.user_path = http://%s/user, …)\n", authLn.Addr(), authLn.Addr())
	}

	g, gctx := errgroup.WithContext(ctx)
	srvCtx := gctx
	if len(owned) > 0 {
		ocfg := ownagent.Default()
		ocfg.Agents, ocfg.StateDir, ocfg.Broker, ocfg.ServerKey = owned, ownDir, ownBroker, srv.PublicKey()
		ocfg.Env = func(ctx context.Context, env string) error {
			_, err := st.GetEnv(ctx, env)
			return err
		}
		ocfg.Token = srv.OwnAgentToken
		names := make([]string, len(owned))
		for i, o := range owned {
			names[i] = o.String()
		}
		fmt.Fprintf(term.stderr, "tether server: runs agents %s itself (journals in %s, broker %s)\n", strings.Join(names, ", "), ownDir, agentcli.RedactURL(ocfg.Broker.URL))
		// The server (its ingest, and the answers to the broker's
		// questions about agents) stops once its own agents have: their
		// goodbyes reach it.
		var stopSrv context.CancelFunc
		srvCtx, stopSrv = context.WithCancel(context.WithoutCancel(gctx))
		g.Go(func() error {
			defer stopSrv()
			return ownagent.Run(gctx, ocfg, log)
		})
	}
	g.Go(func() error {
		err := srv.Run(srvCtx)
		if errors.Is(err, context.Canceled) {
			return nil
		}
		return err
	})
	g.Go(func() error {
		h := server.NewHTTP(hcfg, srv, log)
		if authLn != nil {
			h.ServeBrokerAuth(authLn, auth)
		}
		return h.Serve(srvCtx, ln, ops)
	})
	err = g.Wait()
	if ctx.Err() != nil {
		log.Info().Msg("tether server stopped")
		return nil
	}
	return err
}

// ownAgentBroker is the broker as the server's own agents reach it:
// --own-agent-amqp, else the server's own URL, less its user when the
// broker asks this server about each agent (so that they log in as
// themselves, with an agent's rights), with the server's TLS files.
func ownAgentBroker(c *ucli.Context, servers amqp.Config) (amqp.Config, error) {
	b := amqp.Default()
	b.URL, b.Namespace, b.QueueType = servers.URL, servers.Namespace, servers.QueueType
	b.CAFile, b.CertFile, b.KeyFile = servers.CAFile, servers.CertFile, servers.KeyFile
	b.Agent = true
	switch {
	case c.String("own-agent-amqp") != "":
		b.URL = c.String("own-agent-amqp")
	case c.String("broker-auth-listen") != "":
		if u, err := url.Parse(b.URL); err == nil {
			u.User = nil
			b.URL = u.String()
		}
	}
	if err := b.Validate(); err != nil {
		return b, usageError("--own-agent-amqp: %v", err)
	}
	return b, nil
}

// bootstrapToken makes sure an admin can get in: with --admin-token, that
// secret is an admin token; otherwise, when no token exists at all, one is
// generated and printed, once.
func bootstrapToken(ctx context.Context, st store.Store, secret string, term *terminal) error {
	if secret != "" {
		if len(secret) < 16 {
			return usageError("--admin-token must be at least 16 characters")
		}
		if _, err := st.TokenByHash(ctx, record.HashSecret(secret)); err == nil {
			return nil
		} else if !errors.Is(err, model.ErrNotFound) {
			return err
		}
		t, _, err := api.IssueToken("admin-token", record.RoleAdmin, "", "tether server --admin-token", time.Now())
		if err != nil {
			return err
		}
		t.Hash = record.HashSecret(secret)
		if err := st.CreateToken(ctx, t); err != nil && !errors.Is(err, model.ErrExists) {
			return err
		}
		return nil
	}
	tokens, err := st.ListTokens(ctx)
	if err != nil || len(tokens) > 0 {
		return err
	}
	t, s, err := api.IssueToken("bootstrap", record.RoleAdmin, "", "tether server", time.Now())
	if err != nil {
		return err
	}
	if err := st.CreateToken(ctx, t); err != nil {
		return err
	}
	fmt.Fprintf(term.stdout, "Bootstrap admin token (shown once; store it now):\n\n    %s\n\nUse it with: export TETHER_TOKEN=%s\n", s, s)
	return nil
}

// consoleURL is the console's address for a browser: a listener on every
// address (0.0.0.0, ::) is named localhost.
func consoleURL(scheme string, addr net.Addr) string {
	host, port, err := net.SplitHostPort(addr.String())
	if err != nil {
		return scheme + "://" + addr.String() + "/"
	}
	if ip, err := netip.ParseAddr(host); err == nil && ip.IsUnspecified() {
		host = "localhost"
	}
	return scheme + "://" + net.JoinHostPort(host, port) + "/"
}

// bootstrapAdmin makes sure a person can log in: when the default
// organization has no user, it makes the admin user "admin" (an admin of
// every environment of it, so a server admin) with the password given, or
// a random one printed once, and says how to log in in the log at its
// default level (warn), without the password. It returns which password
// the admin it made logs in with ("" when it made none), for the line
// that names the console.
func bootstrapAdmin(ctx context.Context, st store.Store, password string, term *terminal, log zerolog.Logger) (string, error) {
	users, err := st.ListUsers(ctx, record.DefaultOrg)
	if err != nil || len(users) > 0 {
		return "", err
	}
	made := password == ""
	if made {
		secret, err := record.NewSessionSecret()
		if err != nil {
			return "", err
		}
		password = secret[:24]
	} else if err := record.ValidatePassword(password); err != nil {
		return "", usageError("--admin-password: %v", err)
	}
	hash, err := record.HashPassword(password, record.DefaultPasswordParams)
	if err != nil {
		return "", err
	}
	now := time.Now().UTC()
	u := record.User{ID: uuid.NewString(), Org: record.DefaultOrg, Name: "admin", Role: record.RoleAdmin, Password: hash,
		CreatedBy: "tether server", CreatedAt: now, PasswordChangedAt: now}
	if err := st.CreateUser(ctx, u); errors.Is(err, model.ErrExists) {
		return "", nil // another server made it first
	} else if err != nil {
		return "", err
	}
	if made {
		fmt.Fprintf(term.stdout, "Bootstrap admin user (password shown once; store it now):\n\n    user admin, password %s\n\nLog in to the web console as admin, or with POST /api/v1/session {\"name\": \"admin\", \"password\": …}, then change it: tether user passwd admin\n", password)
		log.Warn().Str("user", "admin").Str("org", record.DefaultOrg).Msg("bootstrap admin user created: log in as admin with the password printed once on the server's standard output (change it with tether user passwd admin)")
		return "with the password printed above", nil
	}
	log.Warn().Str("user", "admin").Str("org", record.DefaultOrg).Msg("bootstrap admin user created: log in as admin with the password of --admin-password (TETHER_ADMIN_PASSWORD)")
	return "with the password of --admin-password", nil
}

// vhostOf returns the virtual host an AMQP URL names (/ when none).
func vhostOf(s string) string {
	u, err := url.Parse(s)
	if err != nil || u.Path == "" || u.Path == "/" {
		return "/"
	}
	return strings.TrimPrefix(u.Path, "/")
}

// defaultPostgresPool is the server's pool of PostgreSQL connections by
// default: more than pgx's own (4 on a 2-core machine), which a release's
// fan-out, ingest and hellos at once wait on.
const defaultPostgresPool = 16
