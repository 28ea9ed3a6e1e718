package cli

import (
	"context"
	"crypto/ed25519"
	"encoding/base64"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"strings"
	"time"

	ucli "github.com/urfave/cli/v2"
	"github.com/urfave/cli/v2/altsrc"
	"golang.org/x/sync/errgroup"

	"github.com/tetherhq/tether/bus"
	"github.com/tetherhq/tether/bus/amqp"
	"github.com/tetherhq/tether/model"
	"github.com/tetherhq/tether/server"
	"github.com/tetherhq/tether/server/api"
	"github.com/tetherhq/tether/server/store"
	"github.com/tetherhq/tether/server/store/postgres"
)

const defaultServerConfig = "/etc/tether/server.toml"

// brokerFlags are the flags naming the broker, shared by the server and
// the agent; queueTypeUsage says what --queue-type means to each.
func brokerFlags(queueTypeUsage string) []ucli.Flag {
	return []ucli.Flag{
		altsrc.NewStringFlag(&ucli.StringFlag{Name: "amqp", Value: "amqp://guest:guest@127.0.0.1:5672/", EnvVars: []string{"TETHER_AMQP"},
			Usage: "RabbitMQ `URL` (amqps:// for TLS)"}),
		altsrc.NewStringFlag(&ucli.StringFlag{Name: "amqp-namespace", Value: "tether", EnvVars: []string{"TETHER_AMQP_NAMESPACE"},
			Usage: "`PREFIX` of every exchange and queue on the broker (the same for the server and its agents)"}),
		altsrc.NewStringFlag(&ucli.StringFlag{Name: "queue-type", Value: amqp.QueueQuorum, EnvVars: []string{"TETHER_QUEUE_TYPE"},
			Usage: queueTypeUsage}),
	}
}

func serverFlags() []ucli.Flag {
	flags := append([]ucli.Flag{
		&ucli.StringFlag{Name: "config", Value: defaultServerConfig, EnvVars: []string{"TETHER_SERVER_CONFIG"},
			Usage: "TOML `FILE` whose keys are these flags' names (read if it exists; flags and TETHER_* variables win)"},
		altsrc.NewStringFlag(&ucli.StringFlag{Name: "listen", Value: "127.0.0.1:8420", EnvVars: []string{"TETHER_LISTEN"},
			Usage: "`ADDRESS` the REST API listens on"}),
		altsrc.NewStringFlag(&ucli.StringFlag{Name: "postgres", EnvVars: []string{"TETHER_POSTGRES"},
			Usage: "PostgreSQL connection `URL`, e.g. postgres://tether@db/tether (add ?search_path=SCHEMA to use a schema)"}),
	}, brokerFlags("agent inbox queue `TYPE`: quorum (replicated) or classic (very large fleets)")...)
	return append(flags,
		altsrc.NewIntFlag(&ucli.IntFlag{Name: "ingest-consumers", Value: 8, EnvVars: []string{"TETHER_INGEST_CONSUMERS"},
			Usage: "how many consumers take agents' events off the broker (each handles 64 at once); events in hand are written together, in one transaction"}),
		altsrc.NewStringFlag(&ucli.StringFlag{Name: "admin-token", EnvVars: []string{"TETHER_ADMIN_TOKEN"},
			Usage: "use this `SECRET` as an admin token (created if missing) instead of generating a bootstrap token; for automation"}),
		altsrc.NewStringFlag(&ucli.StringFlag{Name: "tls-cert", EnvVars: []string{"TETHER_TLS_CERT"},
			Usage: "serve the API over HTTPS with this certificate `FILE` (PEM)"}),
		altsrc.NewStringFlag(&ucli.StringFlag{Name: "tls-key", EnvVars: []string{"TETHER_TLS_KEY"},
			Usage: "private key `FILE` (PEM) of --tls-cert"}),
	)
}

func serverCommand(term *terminal) *ucli.Command {
	flags := serverFlags()
	return &ucli.Command{
		Name:  "server",
		Usage: "run the Tether server: REST API, scheduler and event ingest, on PostgreSQL and RabbitMQ",
		Description: "The server stores every version of each environment's intent in PostgreSQL, sends agents their\n" +
			"desired state and deploy commands over RabbitMQ, and records what they report.\n\n" +
			"On its first start it prints a bootstrap admin token, once: keep it, then create narrower\n" +
			"tokens with `tether token create`. Several servers may share one database and broker.\n\n" +
			"   tether server --postgres postgres://postgres@127.0.0.1/test --amqp amqp://guest:guest@127.0.0.1:5672/",
		Flags:  flags,
		Before: configFileSource(flags),
		Action: func(c *ucli.Context) error { return runServer(c, term) },
	}
}

// configFileSource reads the TOML config file under the flags: from
// --config when given (it must exist), else from the default path if present.
func configFileSource(flags []ucli.Flag) ucli.BeforeFunc {
	return altsrc.InitInputSourceWithContext(flags, func(c *ucli.Context) (altsrc.InputSourceContext, error) {
		path := c.String("config")
		if _, err := os.Stat(path); err != nil {
			if c.IsSet("config") {
				return nil, usageError("--config %s: %v", path, err)
			}
			return &altsrc.MapInputSource{}, nil
		}
		src, err := altsrc.NewTomlSourceFromFile(path)
		if err != nil {
			return nil, usageError("config file %s: %v", path, err)
		}
		return src, nil
	})
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
	if c.Int("ingest-consumers") < 1 {
		return usageError("--ingest-consumers must be at least 1")
	}
	ctx := c.Context
	st, err := postgres.Open(ctx, postgres.Config{URL: c.String("postgres")})
	if err != nil {
		return fmt.Errorf("open the database: %w", err)
	}
	defer st.Close()
	key, err := st.Secret(ctx, "server-signing-key", func() ([]byte, error) {
		_, k, err := bus.GenerateKey()
		return k, err
	})
	if err != nil {
		return fmt.Errorf("server key: %w", err)
	}
	bcfg := amqp.Default()
	bcfg.URL, bcfg.Namespace, bcfg.QueueType = c.String("amqp"), c.String("amqp-namespace"), c.String("queue-type")
	bcfg.ConnectionName = "tether server"
	if err := bcfg.Validate(); err != nil {
		return usageError("%v", err)
	}
	b, err := amqp.New(bcfg, log)
	if err != nil {
		return err
	}
	defer b.Close()
	srv, err := server.New(server.Config{Key: ed25519.PrivateKey(key), Consumers: c.Int("ingest-consumers")}, st, b, log)
	if err != nil {
		return err
	}
	if err := bootstrapToken(ctx, st, c.String("admin-token"), term); err != nil {
		return err
	}
	ln, err := net.Listen("tcp", c.String("listen"))
	if err != nil {
		return fmt.Errorf("listen on %s: %w (is another server running? pick another --listen)", c.String("listen"), err)
	}
	info := readBuildInfo()
	handler := api.New(api.Config{Version: info.Version}, server.APIServices(srv, srv.Metrics().Handler()), log).Handler()
	hs := &http.Server{Handler: handler, ReadHeaderTimeout: 10 * time.Second}
	scheme := "http"
	if c.String("tls-cert") != "" {
		scheme = "https"
	}
	log.Info().Str("url", scheme+"://"+ln.Addr().String()).Str("version", info.Version).
		Str("server_key", base64.StdEncoding.EncodeToString(srv.PublicKey())).Msg("tether server listening (agents may pin server_key with --server-key)")
	fmt.Fprintf(term.stderr, "tether server: API on %s://%s, database %s, broker %s\n", scheme, ln.Addr(), redactURL(c.String("postgres")), redactURL(bcfg.URL))

	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error {
		err := srv.Run(gctx)
		if errors.Is(err, context.Canceled) {
			return nil
		}
		return err
	})
	g.Go(func() error {
		var err error
		if scheme == "https" {
			err = hs.ServeTLS(ln, c.String("tls-cert"), c.String("tls-key"))
		} else {
			err = hs.Serve(ln)
		}
		if errors.Is(err, http.ErrServerClosed) {
			return nil
		}
		return err
	})
	g.Go(func() error {
		<-gctx.Done()
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		return hs.Shutdown(sctx)
	})
	err = g.Wait()
	if ctx.Err() != nil {
		log.Info().Msg("tether server stopped")
		return nil
	}
	return err
}

// bootstrapToken makes sure an admin can get in: with --admin-token, that
// secret is an admin token; otherwise, when no token exists at all, one is
// generated and printed, once.
func bootstrapToken(ctx context.Context, st store.Store, secret string, term *terminal) error {
	if secret != "" {
		if len(secret) < 16 {
			return usageError("--admin-token must be at least 16 characters")
		}
		if _, err := st.TokenByHash(ctx, model.HashSecret(secret)); err == nil {
			return nil
		} else if !errors.Is(err, store.ErrNotFound) {
			return err
		}
		t, _, err := api.IssueToken("admin-token", model.RoleAdmin, "", "tether server --admin-token", time.Now())
		if err != nil {
			return err
		}
		t.Hash = model.HashSecret(secret)
		if err := st.CreateToken(ctx, t); err != nil && !errors.Is(err, store.ErrExists) {
			return err
		}
		return nil
	}
	tokens, err := st.ListTokens(ctx)
	if err != nil || len(tokens) > 0 {
		return err
	}
	t, s, err := api.IssueToken("bootstrap", model.RoleAdmin, "", "tether server", time.Now())
	if err != nil {
		return err
	}
	if err := st.CreateToken(ctx, t); err != nil {
		return err
	}
	fmt.Fprintf(term.stdout, "Bootstrap admin token (shown once; store it now):\n\n    %s\n\nUse it with: export TETHER_TOKEN=%s\n", s, s)
	return nil
}

// redactURL hides a URL's credentials.
func redactURL(u string) string {
	at, scheme := strings.LastIndex(u, "@"), strings.Index(u, "://")
	if at > 0 && scheme >= 0 && scheme < at {
		return u[:scheme+3] + "…" + u[at:]
	}
	return u
}
