// Package server is the orchestrator's core: it stores versions, decides what
// each agent must do (scheduler), ingests what agents report, and publishes
// live events. The embedded mode runs it on the SQLite store and the
// in-process bus; server mode on PostgreSQL and RabbitMQ. Same code.
//
// This package's root is the wiring: Server and Config (server.go), New
// (new.go, where every room is built and handed what it needs of the
// others) and Run (run.go) connect the rooms below it — live events
// (event), enrollment's state machine (enroll), the ingest of what agents
// send (ingest), trust and keys (trust), the compiler (compile), releases
// and rollouts (release), scheduling (scheduler), storage (store), the API
// (api) and the console (console). The root keeps the Server methods the
// API and the command line call, most of them one line handing over to a
// room (compile.go, ingest.go, release.go, trust.go), and two jobs of its
// own: operators' actions on environments (control.go) and the lead of
// each environment's scheduler (lead.go). The rooms never import the root,
// and no two of the root's files depend on each other both ways.
// docs/architecture.md has the map.
package server

import (
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"
	"time"

	"github.com/rs/zerolog"

	"github.com/tetherhq/tether/bus"
	"github.com/tetherhq/tether/model"
	"github.com/tetherhq/tether/server/brokerauth"
	"github.com/tetherhq/tether/server/compile"
	"github.com/tetherhq/tether/server/event"
	"github.com/tetherhq/tether/server/ingest"
	"github.com/tetherhq/tether/server/machines"
	"github.com/tetherhq/tether/server/notify"
	"github.com/tetherhq/tether/server/record"
	"github.com/tetherhq/tether/server/release"
	"github.com/tetherhq/tether/server/scheduler"
	"github.com/tetherhq/tether/server/store"
	"github.com/tetherhq/tether/server/trust"
)

// Config configures a server. Zero values take the defaults (Default).
type Config struct {
	// Key signs everything the server sends (generated when nil).
	Key ed25519.PrivateKey
	// Consumers is how many consumers take events off the events queue
	// (default 8); each hands the server several events at once (the
	// bus's event concurrency). Events in hand are written together, so
	// more in flight means larger ingest transactions.
	Consumers int
	// MaxBatch bounds the events written per ingest transaction (default 256).
	MaxBatch int
	// Writers is how many ingest transactions the server has in flight
	// at once (default 2): one is prepared and sent while the database
	// runs another, and a backlog on the broker drains faster.
	Writers int
	// LeadEvery is how often the server tries to take the lead of
	// environments whose scheduler nobody leads (default 5s): a standby
	// replica takes over within this time after a leader dies.
	LeadEvery time.Duration
	// AgentCacheTTL is how long the ingest path trusts its copy of an
	// agent's key and state (default 5s); changes through this server are
	// seen at once, through another replica within this time, unless the
	// store tells of them (PostgreSQL: at once), which AgentCacheListenTTL
	// then bounds (default 10m), should a notice be lost.
	AgentCacheTTL, AgentCacheListenTTL time.Duration
	// KeepIngested is how long (agent, seq) marks are kept to drop
	// redeliveries (default 24h).
	KeepIngested time.Duration
	// KeepActions is how long the action log keeps an entry (0: 90 days;
	// negative: for ever). The leader prunes it every hour.
	KeepActions time.Duration
	// Sources gives the models of the environments the server compiles
	// itself (nil: it compiles none; versions come from exports).
	Sources compile.Sources
	// CompileSettle is how long a compile waits after the first trigger
	// that asked for it, for more to fold in (default 200ms, at most a
	// minute).
	CompileSettle time.Duration
	// CompileTimeout bounds each compile (default 60s, the compiler's).
	CompileTimeout time.Duration
	// ProvisionTimeout bounds how long a host's machine has to boot and
	// enroll (default 10m; a host's provision_timeout overrides it), and
	// StopGrace how long a stop waits for the guest before forcing it off
	// (default 30s).
	ProvisionTimeout, StopGrace time.Duration
	// Keyring seals the master key of sealed values, which opens every
	// sensitive value the store holds, as it seals the signing key
	// (SigningKey). Nil (the embedded mode): the master key is kept in the
	// store as it is.
	Keyring trust.Sealer
	// SigningKeyRefresh is how often the server reads its signing keys
	// from the store (default 5s), when it has a Keyring: a rollover step
	// taken through another replica is seen within this time, and a
	// switch to the next key takes effect twice this long after it is
	// asked, on every replica at once.
	SigningKeyRefresh time.Duration
	// AgentEventRate bounds the events one accepted agent may send a
	// second (default 200, with bursts of ten times as many): beyond, its
	// events are dropped, counted and alerted.
	AgentEventRate float64
	// FloodWindow is the period over which one sender's security alerts
	// (5 stored, the rest summed up in one) and refused events (100
	// dead-lettered, the rest dropped) are bounded (default 1m).
	FloodWindow time.Duration
	// Fanout tunes releases' fan-outs to agents (zero fields: defaults).
	Fanout scheduler.FanoutConfig
	// Broker closes the broker connections of an agent that is rejected
	// or revoked, those of a key an agent's name no longer holds (a
	// pending name given another key by an enrollment token, a key an
	// agent rolled over from), and those of an agent beyond
	// MaxAgentConnections. Nil: they stay open until they drop; where the
	// broker asks the server about each agent, they cannot log in again.
	Broker BrokerAdmin
	// MaxAgentConnections bounds the broker connections of one agent
	// (its environment and name, whatever key it logs in with) where
	// Broker is set: beyond, the newest are closed (see server/ingest/brokerconns.go).
	// Zero takes the default, 2 (a primary and a standby); negative: no
	// bound.
	MaxAgentConnections int
	// ConnectionSweep is how often the agents' broker connections are
	// counted (default 5s).
	ConnectionSweep time.Duration
	// PendingSweep is how often an environment's leader forgets the
	// pending agents not heard from for its pending_expiry (default 1m).
	PendingSweep time.Duration
	// Stream configures the stored event log the event stream follows
	// (its retention: Stream.Keep).
	Stream notify.StreamConfig
	// Webhooks configures the sending of webhook deliveries.
	Webhooks notify.SenderConfig
}

// BrokerAdmin does to the broker what its clients cannot (see package
// ingest).
type BrokerAdmin = ingest.BrokerAdmin

// inboxDeleter is a bus that can delete an agent's inbox (found by type
// assertion).
type inboxDeleter interface {
	DeleteInbox(ctx context.Context, env, agent string) error
}

// Default returns the configuration New uses for zero (or negative)
// fields; a nil Key is generated.
func Default() Config {
	return Config{Consumers: 8, MaxBatch: 256, Writers: 2, LeadEvery: 5 * time.Second, AgentCacheTTL: 5 * time.Second, AgentCacheListenTTL: 10 * time.Minute, KeepIngested: 24 * time.Hour, KeepActions: 90 * 24 * time.Hour,
		CompileSettle: compile.Default().Settle, CompileTimeout: compile.Default().Timeout, AgentEventRate: 200, FloodWindow: time.Minute,
		ProvisionTimeout: 10 * time.Minute, StopGrace: 30 * time.Second,
		MaxAgentConnections: 2, ConnectionSweep: 5 * time.Second, SigningKeyRefresh: 5 * time.Second, PendingSweep: time.Minute}
}

// withDefaults fills the zero (or negative) fields of c from Default.
func (c Config) withDefaults() Config {
	def := Default()
	orDefault(&c.Consumers, def.Consumers)
	orDefault(&c.MaxBatch, def.MaxBatch)
	orDefault(&c.Writers, def.Writers)
	orDefault(&c.LeadEvery, def.LeadEvery)
	orDefault(&c.AgentCacheTTL, def.AgentCacheTTL)
	orDefault(&c.AgentCacheListenTTL, def.AgentCacheListenTTL)
	orDefault(&c.KeepIngested, def.KeepIngested)
	orDefault(&c.KeepActions, def.KeepActions)
	orDefault(&c.CompileSettle, def.CompileSettle)
	orDefault(&c.CompileTimeout, def.CompileTimeout)
	orDefault(&c.ProvisionTimeout, def.ProvisionTimeout)
	orDefault(&c.StopGrace, def.StopGrace)
	orDefault(&c.AgentEventRate, def.AgentEventRate)
	orDefault(&c.FloodWindow, def.FloodWindow)
	orDefault(&c.ConnectionSweep, def.ConnectionSweep)
	orDefault(&c.PendingSweep, def.PendingSweep)
	if c.MaxAgentConnections == 0 {
		c.MaxAgentConnections = def.MaxAgentConnections
	}
	orDefault(&c.SigningKeyRefresh, def.SigningKeyRefresh)
	return c
}

func orDefault[T int | float64 | time.Duration](v *T, def T) {
	if *v <= 0 {
		*v = def
	}
}

// ErrConfig is wrapped by every error Validate returns.
var ErrConfig = errors.New("invalid server configuration")

// Validate checks the configuration.
func (c Config) Validate() error {
	if c.Key != nil && len(c.Key) != ed25519.PrivateKeySize {
		return fmt.Errorf("%w: the signing key has %d bytes: want an ed25519 private key (%d)", ErrConfig, len(c.Key), ed25519.PrivateKeySize)
	}
	if err := (compile.Config{Settle: c.CompileSettle}).Validate(); err != nil {
		return fmt.Errorf("%w: %w", ErrConfig, err)
	}
	if err := c.Webhooks.Policy.Validate(); err != nil {
		return fmt.Errorf("%w: %w", ErrConfig, err)
	}
	return nil
}

// Server is one server process's core.
type Server struct {
	cfg    Config
	store  store.Store
	bus    bus.Bus
	sched  *scheduler.Scheduler
	signer *bus.Signer
	feed   *event.Feed
	stream *notify.Stream
	sender *notify.Sender
	// ingester ingests what agents send (package ingest).
	ingester *ingest.Ingester
	// notifyTurn holds the one RunNotify running.
	notifyTurn chan struct{}
	log        zerolog.Logger
	metrics    *Metrics
	// releases releases versions; Run runs their fan-outs.
	releases *release.Releaser
	// machines keeps machines' records, states and controls.
	machines *machines.Room
	// compiles compiles environments' models while Run runs and the
	// server has Config.Sources.
	compiles *compile.Compiler
	// keys are the signing keys, their rollover and the sealing of
	// sensitive values (package trust).
	keys *trust.Keys
}

// Metrics returns the server's metrics.
func (s *Server) Metrics() *Metrics { return s.metrics }

// PublicKey returns the key agents verify the server's messages with.
func (s *Server) PublicKey() ed25519.PublicKey { return s.signer.PublicKey() }

// Subscribe follows the server's live events.
func (s *Server) Subscribe() *event.Subscription { return s.feed.Subscribe() }

// EnsureEnv returns the environment, creating it with settings if missing.
func (s *Server) EnsureEnv(ctx context.Context, name string, settings record.EnvSettings) (record.Environment, error) {
	env, err := s.store.GetEnv(ctx, name)
	if err == nil {
		return env, nil
	}
	if !errors.Is(err, model.ErrNotFound) {
		return env, err
	}
	env = record.Environment{Name: name, Settings: settings, CreatedAt: time.Now().UTC()}
	if err := s.store.CreateEnv(ctx, env); err != nil && !errors.Is(err, model.ErrExists) {
		return env, err
	}
	return s.store.GetEnv(ctx, name)
}

// Export stores resources as a new version of env, unless the newest version
// already holds exactly this resource set: then that version is returned and
// reused is true, so repeated exports of an unchanged model add nothing.
// Every resource of a built-in kind must pass the catalogue's check
// (model.CheckKind), whether it comes from the API or from the embedded
// mode's compile: a version no agent could apply is refused with a
// *model.KindError naming the resource and the attribute, before anything
// is stored. Attributes the catalogue says are always sensitive are marked
// so, whoever wrote the upload, and every sensitive value is sealed under
// the server's key (in resources, which it changes) before it is hashed or
// stored.
func (s *Server) Export(ctx context.Context, env string, resources []model.Resource, meta model.VersionMeta) (v model.Version, reused bool, err error) {
	setHash, err := s.prepareExport(ctx, resources)
	if err != nil {
		return v, false, err
	}
	return s.exportPrepared(ctx, env, resources, meta, setHash)
}

// exportPrepared is Export of resources prepareExport accepted, with their
// set hash.
func (s *Server) exportPrepared(ctx context.Context, env string, resources []model.Resource, meta model.VersionMeta, setHash model.Hash) (v model.Version, reused bool, err error) {
	latest, err := s.store.LatestVersion(ctx, env)
	switch {
	case err == nil && latest.SetHash == setHash && latest.State != model.VersionRetired:
		return latest, true, nil
	case err != nil && !errors.Is(err, model.ErrNotFound):
		return v, false, err
	}
	v, err = s.store.PutVersion(ctx, env, meta, resources)
	return v, false, err
}

// prepareExport checks resources as Export does, marks their sensitive
// attributes, seals their sensitive values, and returns their set hash:
// over the digests of sealed values, never over a value in clear.
func (s *Server) prepareExport(ctx context.Context, resources []model.Resource) (model.Hash, error) {
	for i := range resources {
		if err := model.CheckKind(&resources[i]); err != nil {
			return model.Hash{}, fmt.Errorf("export: %w", err)
		}
		model.MarkSensitive(&resources[i])
	}
	if err := s.keys.SealAtRest(ctx, resources); err != nil {
		return model.Hash{}, fmt.Errorf("export: %w", err)
	}
	setHash, err := model.SetHash(resources)
	if err != nil {
		return model.Hash{}, fmt.Errorf("export: %w: %w", model.ErrInvalid, err)
	}
	return setHash, nil
}

// prune deletes the versions of env beyond its versions_to_keep setting.
// Failing to is logged, not returned: the release happened, and the next
// one prunes again.
func (s *Server) prune(ctx context.Context, env string) {
	e, err := s.store.GetEnv(ctx, env)
	if err == nil && e.Settings.VersionsToKeep > 0 {
		var n int
		n, err = s.store.PruneVersions(ctx, env, e.Settings.VersionsToKeep)
		if n > 0 {
			s.log.Info().Str("env", env).Int("deleted", n).Int("kept", e.Settings.VersionsToKeep).Msg("pruned old versions")
		}
	}
	if err != nil {
		s.log.Warn().Err(err).Str("env", env).Msg("cannot prune old versions; the next release tries again")
	}
}

// Deploy asks agents of env for a deploy or a dry run of the released version.
func (s *Server) Deploy(ctx context.Context, env string, req scheduler.DeployRequest) (scheduler.Deployment, error) {
	return s.sched.Deploy(ctx, env, req)
}

// BrokerAuth returns the answer to RabbitMQ's HTTP authentication backend
// for this server's agents (see package brokerauth), reading their records
// from the store and raising the server's security alerts.
func (s *Server) BrokerAuth(cfg brokerauth.Config) (*brokerauth.Backend, error) {
	b, err := brokerauth.New(cfg, s.store, s, s.log)
	if err == nil {
		s.ingester.AgentLogins()
	}
	return b, err
}
