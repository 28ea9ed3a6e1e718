// Package server is the orchestrator's core: it stores versions, decides what
// each agent must do (scheduler), ingests what agents report, and publishes
// live events. The embedded mode runs it on the SQLite store and the
// in-process bus; server mode on PostgreSQL and RabbitMQ. Same code.
package server

import (
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"

	"github.com/tetherhq/tether/bus"
	"github.com/tetherhq/tether/model"
	"github.com/tetherhq/tether/server/scheduler"
	"github.com/tetherhq/tether/server/store"
)

// Config configures a server. Zero values take the defaults.
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
	// LeadEvery is how often the server tries to take the lead of
	// environments whose scheduler nobody leads (default 5s): a standby
	// replica takes over within this time after a leader dies.
	LeadEvery time.Duration
	// AgentCacheTTL is how long the ingest path trusts its copy of an
	// agent's key and state (default 5s); changes through this server are
	// seen at once, through another replica within this time.
	AgentCacheTTL time.Duration
	// KeepIngested is how long (agent, seq) marks are kept to drop
	// redeliveries (default 24h).
	KeepIngested time.Duration
}

func (c *Config) defaults() {
	if c.Consumers <= 0 {
		c.Consumers = 8
	}
	if c.MaxBatch <= 0 {
		c.MaxBatch = 256
	}
	if c.LeadEvery <= 0 {
		c.LeadEvery = 5 * time.Second
	}
	if c.AgentCacheTTL <= 0 {
		c.AgentCacheTTL = 5 * time.Second
	}
	if c.KeepIngested <= 0 {
		c.KeepIngested = 24 * time.Hour
	}
}

// Server is one server process's core.
type Server struct {
	cfg       Config
	store     store.Store
	bus       bus.Bus
	sched     *scheduler.Scheduler
	signer    *bus.Signer
	feed      *Feed
	dedup     *bus.Dedup
	agents    *agentCache
	committer *committer
	log       zerolog.Logger
	metrics   *Metrics
	handled   atomic.Uint64
}

// New returns a server over st and b.
func New(cfg Config, st store.Store, b bus.Bus, log zerolog.Logger) (*Server, error) {
	cfg.defaults()
	if cfg.Key == nil {
		_, key, err := bus.GenerateKey()
		if err != nil {
			return nil, err
		}
		cfg.Key = key
	}
	log = log.With().Str("component", "server").Logger()
	signer := bus.NewSigner(cfg.Key, uint64(time.Now().UnixNano()))
	m := newMetrics()
	return &Server{
		cfg:       cfg,
		store:     st,
		bus:       b,
		sched:     scheduler.New(st, b, signer, log),
		signer:    signer,
		feed:      newFeed(),
		dedup:     bus.NewDedup(1 << 16),
		agents:    newAgentCache(st, cfg.AgentCacheTTL),
		committer: newCommitter(st, cfg.MaxBatch, m),
		log:       log,
		metrics:   m,
	}, nil
}

// IngestStats counts what the ingest path did since the server started.
type IngestStats struct {
	// Events handled for good: written, duplicates dropped, rejected.
	Events uint64 `json:"events"`
	// Transactions that wrote events, and the events they wrote.
	Transactions uint64 `json:"transactions"`
	Written      uint64 `json:"written"`
}

// IngestStats returns the ingest counters.
func (s *Server) IngestStats() IngestStats {
	return IngestStats{Events: s.handled.Load(), Transactions: s.committer.commits.Load(), Written: s.committer.written.Load()}
}

// Metrics returns the server's metrics.
func (s *Server) Metrics() *Metrics { return s.metrics }

// PublicKey returns the key agents verify the server's messages with.
func (s *Server) PublicKey() ed25519.PublicKey { return s.signer.PublicKey() }

// Subscribe follows the server's live events.
func (s *Server) Subscribe() *Subscription { return s.feed.subscribe() }

// Run ingests agents' events and leads the schedulers of the environments
// no other replica leads, until ctx ends.
func (s *Server) Run(parent context.Context) error {
	ctx, cancel := context.WithCancel(parent)
	defer cancel()
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); s.committer.run(ctx) }()
	go func() { defer wg.Done(); s.lead(ctx) }()
	defer wg.Wait()

	consumers := []bus.Queue{bus.QueueCompliance}
	for range s.cfg.Consumers {
		consumers = append(consumers, bus.QueueEvents)
	}
	errs := make(chan error, len(consumers))
	for _, q := range consumers {
		go func() { errs <- s.bus.ConsumeEvents(ctx, q, s.handle) }()
	}
	err := <-errs
	cancel()
	for range len(consumers) - 1 {
		<-errs
	}
	if parent.Err() != nil || errors.Is(err, context.Canceled) {
		// Stopped: what consumers said while stopping (a closed bus)
		// is not an error.
		return context.Canceled
	}
	return err
}

// EnsureEnv returns the environment, creating it with settings if missing.
func (s *Server) EnsureEnv(ctx context.Context, name string, settings model.EnvSettings) (model.Environment, error) {
	env, err := s.store.GetEnv(ctx, name)
	if err == nil {
		return env, nil
	}
	if !errors.Is(err, store.ErrNotFound) {
		return env, err
	}
	env = model.Environment{Name: name, Settings: settings, CreatedAt: time.Now().UTC()}
	if err := s.store.CreateEnv(ctx, env); err != nil && !errors.Is(err, store.ErrExists) {
		return env, err
	}
	return s.store.GetEnv(ctx, name)
}

// Export stores resources as a new version of env, unless the newest version
// already holds exactly this resource set: then that version is returned and
// reused is true, so repeated exports of an unchanged model add nothing.
func (s *Server) Export(ctx context.Context, env string, resources []model.Resource, meta model.VersionMeta) (v model.Version, reused bool, err error) {
	setHash, err := model.SetHash(resources)
	if err != nil {
		return v, false, fmt.Errorf("export: %w: %w", store.ErrInvalid, err)
	}
	latest, err := s.store.LatestVersion(ctx, env)
	switch {
	case err == nil && latest.SetHash == setHash && latest.State != model.VersionRetired:
		return latest, true, nil
	case err != nil && !errors.Is(err, store.ErrNotFound):
		return v, false, err
	}
	v, err = s.store.PutVersion(ctx, env, meta, resources)
	return v, false, err
}

// Release makes version n of env the active one and hands it to the
// scheduler.
func (s *Server) Release(ctx context.Context, env string, n int64) (model.Version, error) {
	v, err := s.store.Release(ctx, env, n)
	if err != nil {
		return v, err
	}
	if err := s.sched.Released(ctx, env, n); err != nil {
		return v, err
	}
	s.prune(ctx, env)
	return v, nil
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
