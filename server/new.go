package server

import (
	"context"
	"time"

	"github.com/rs/zerolog"

	"github.com/tetherhq/tether/bus"
	"github.com/tetherhq/tether/model"
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

// New returns a server over st and b. It builds the server's rooms and
// connects them: what each needs of the others is handed over here, and
// nowhere else.
func New(cfg Config, st store.Store, b bus.Bus, log zerolog.Logger) (*Server, error) {
	cfg = cfg.withDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
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
	m.observeBus(b)
	m.reg.MustRegister(newFleetGauges(st, log))
	s := &Server{
		cfg:        cfg,
		store:      st,
		bus:        b,
		signer:     signer,
		notifyTurn: make(chan struct{}, 1),
		log:        log,
		metrics:    m,
	}
	s.sender = notify.NewSender(st, cfg.Webhooks, log)
	s.stream = notify.NewStream(st, cfg.Stream, s.sender.Wake, log)
	s.feed = event.NewFeed(s.logEvent, s.stream.Appended)
	s.keys = trust.New(trust.Config{Keyring: cfg.Keyring, Refresh: cfg.SigningKeyRefresh},
		trust.Services{Store: st, Bus: b, Signer: signer, Feed: s.feed, Touch: s.touch, RecordFailed: s.recordFailed, Log: log})
	s.sched = scheduler.NewWith(cfg.Fanout, st, b, signer, sealFunc(s.sealFor), log)
	s.releases = release.New(release.Services{Store: st, Fanout: s.sched, Feed: s.feed, Prune: s.prune, FanoutTook: m.fanout, Log: log})
	s.compiles = s.newCompiler()
	s.machines = machines.New(machines.Config{ProvisionTimeout: cfg.ProvisionTimeout, StopGrace: cfg.StopGrace}, machines.Services{
		Store: st, Feed: s.feed, ServerKey: s.PublicKey, Log: log, Seal: s.keys.SealValue, Open: s.keys.OpenValue,
		Send: func(ctx context.Context, kind bus.Kind, env, agent string, body any, expire time.Duration) error {
			e, err := signer.Seal(kind, env, agent, body)
			if err != nil {
				return err
			}
			return b.Send(ctx, e, bus.SendOptions{Expiration: expire})
		},
		ForgetAgent: func(ctx context.Context, env, name string) error {
			_, err := s.ingester.DeleteAgent(ctx, env, name)
			return err
		},
	})
	s.ingester = s.newIngester()
	return s, nil
}

// newCompiler returns the server's compiler, configured by cfg.
func (s *Server) newCompiler() *compile.Compiler {
	return compile.New(compile.Config{Sources: s.cfg.Sources, Settle: s.cfg.CompileSettle, Timeout: s.cfg.CompileTimeout}, compile.Services{
		Store:    s.store,
		Exporter: compileServices{s},
		Releaser: compileServices{s},
		Machines: compileServices{s},
		Feed:     s.feed,
		Counted:  func(o record.CompileOutcome) { s.metrics.compiles.WithLabelValues(string(o)).Inc() },
	}, s.log)
}

// compileServices stores and releases the compiler's versions as the
// server stores and releases any.
type compileServices struct{ s *Server }

func (c compileServices) PrepareExport(ctx context.Context, resources []model.Resource) (model.Hash, error) {
	return c.s.prepareExport(ctx, resources)
}

func (c compileServices) ExportPrepared(ctx context.Context, env string, resources []model.Resource, meta model.VersionMeta, setHash model.Hash) (model.Version, bool, error) {
	return c.s.exportPrepared(ctx, env, resources, meta, setHash)
}

// Declare hands the machines a compiled model declares to the room of
// machines (made after the compiler: the compiles start with Run).
func (c compileServices) Declare(ctx context.Context, env string, d model.DeclaredMachines, by string) ([]record.CompileDiagnostic, error) {
	return c.s.machines.Declare(ctx, env, d, by)
}

func (c compileServices) StartRelease(ctx context.Context, env string, n int64) (record.Release, error) {
	return c.s.releases.StartRelease(ctx, env, n)
}

// newIngester returns the server's ingester, configured by cfg, counting
// into the server's metrics.
func (s *Server) newIngester() *ingest.Ingester {
	m, c := s.metrics, s.cfg
	return ingest.New(ingest.Config{MaxBatch: c.MaxBatch, Writers: c.Writers, AgentCacheTTL: c.AgentCacheTTL, AgentCacheListenTTL: c.AgentCacheListenTTL,
		AgentEventRate: c.AgentEventRate, FloodWindow: c.FloodWindow, Broker: c.Broker, MaxAgentConnections: c.MaxAgentConnections, ConnectionSweep: c.ConnectionSweep},
		ingest.Services{Store: s.store, Bus: s.bus, Sched: s.sched, Signer: s.signer, Feed: s.feed, Keys: s.keys, Machines: s.machines, Trigger: s.compiles.Trigger, Logged: s.stream.Appended, Log: s.log,
			Metrics: ingest.Metrics{
				Event:   func(kind, outcome string) { m.events.WithLabelValues(kind, outcome).Inc() },
				Results: func(n int) { m.results.Add(float64(n)) },
				Committed: func(batches int, took time.Duration) {
					m.batches.Observe(float64(batches))
					m.commit.Observe(took.Seconds())
				},
				Security:     m.security.Inc,
				SecurityHeld: m.securityHeld.Inc,
				BrokerClosed: func(reason string, n int) { m.brokerClosed.WithLabelValues(reason).Add(float64(n)) },
			}})
}

// touch changes an agent's record as the ingest path does
// (trust.Services.Touch; ingest.Ingester.Touch).
func (s *Server) touch(ctx context.Context, env, name string, seq uint64, fn func(*record.Agent) bool) (bool, error) {
	return s.ingester.Touch(ctx, env, name, seq, fn)
}

// sealFunc is a scheduler.Sealer of a function.
type sealFunc func(ctx context.Context, env, agent string, resources []model.Resource) ([]model.Resource, error)

func (f sealFunc) SealFor(ctx context.Context, env, agent string, resources []model.Resource) ([]model.Resource, error) {
	return f(ctx, env, agent, resources)
}

var (
	_ scheduler.Sealer = sealFunc(nil)
	_ trust.Store      = store.Store(nil)
	_ trust.Sender     = bus.Bus(nil)
	_ compile.Machines = compileServices{}
)

// sealFor is the scheduler's Sealer (trust.Keys.SealFor).
func (s *Server) sealFor(ctx context.Context, env, agent string, resources []model.Resource) ([]model.Resource, error) {
	return s.keys.SealFor(ctx, env, agent, resources)
}

// recordFailed records results of an agent's resources, in a batch of
// their own (trust.Services.RecordFailed).
func (s *Server) recordFailed(ctx context.Context, env, agent string, results []model.Result) error {
	_, err := s.store.RecordResults(ctx, []store.ResultBatch{{Env: env, Agent: agent, Results: results}})
	return err
}

// logEvent hands an event to the stored event log.
func (s *Server) logEvent(e Event) {
	le, err := event.ToLog(e)
	if err != nil {
		s.log.Error().Err(err).Str("kind", string(e.Kind)).Msg("an event that is not JSON is not logged")
		return
	}
	s.stream.Append(le)
}
