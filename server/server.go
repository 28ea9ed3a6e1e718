// Package server is the orchestrator's core: it stores versions, decides what
// each agent must do (scheduler), ingests what agents report, and publishes
// live events. The embedded mode runs it on the SQLite store and the
// in-process bus; server mode on PostgreSQL and RabbitMQ. Same code.
package server

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"
	"time"

	"github.com/rs/zerolog"

	"github.com/tetherhq/tether/bus"
	"github.com/tetherhq/tether/model"
	"github.com/tetherhq/tether/server/scheduler"
	"github.com/tetherhq/tether/server/store"
)

// Config configures a server.
type Config struct {
	// Key signs everything the server sends (generated when nil).
	Key ed25519.PrivateKey
}

// Server is one server process's core.
type Server struct {
	store  store.Store
	bus    bus.Bus
	sched  *scheduler.Scheduler
	signer *bus.Signer
	feed   *Feed
	dedup  *bus.Dedup
	log    zerolog.Logger
	// metrics is nil until Metrics is called.
	metrics *Metrics
}

// New returns a server over st and b.
func New(cfg Config, st store.Store, b bus.Bus, log zerolog.Logger) (*Server, error) {
	if cfg.Key == nil {
		_, key, err := bus.GenerateKey()
		if err != nil {
			return nil, err
		}
		cfg.Key = key
	}
	log = log.With().Str("component", "server").Logger()
	signer := bus.NewSigner(cfg.Key, uint64(time.Now().UnixNano()))
	return &Server{
		store:  st,
		bus:    b,
		sched:  scheduler.New(st, b, signer, log),
		signer: signer,
		feed:   newFeed(),
		dedup:  bus.NewDedup(1 << 16),
		log:    log,
	}, nil
}

// Metrics returns the server's metrics, created on first call.
func (s *Server) Metrics() *Metrics {
	if s.metrics == nil {
		s.metrics = newMetrics()
	}
	return s.metrics
}

// PublicKey returns the key agents verify the server's messages with.
func (s *Server) PublicKey() ed25519.PublicKey { return s.signer.PublicKey() }

// Subscribe follows the server's live events.
func (s *Server) Subscribe() *Subscription { return s.feed.subscribe() }

// Run ingests agents' events until ctx ends.
func (s *Server) Run(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	errs := make(chan error, 2)
	for _, q := range []bus.Queue{bus.QueueEvents, bus.QueueCompliance} {
		go func() { errs <- s.bus.ConsumeEvents(ctx, q, s.handle) }()
	}
	err := <-errs
	cancel()
	<-errs
	if errors.Is(err, context.Canceled) {
		return ctx.Err()
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
	return v, s.sched.Released(ctx, env, n)
}

// Deploy asks agents of env for a deploy or a dry run of the released version.
func (s *Server) Deploy(ctx context.Context, env string, req scheduler.DeployRequest) (scheduler.Deployment, error) {
	return s.sched.Deploy(ctx, env, req)
}

// handle ingests one event. A nil return acknowledges it; ErrReject
// dead-letters it; any other error returns it to the queue for a retry.
func (s *Server) handle(ctx context.Context, d bus.Delivery) error {
	e := d.Envelope
	if s.dedup.Has(e.ID) {
		return nil
	}
	err := s.ingest(ctx, e)
	if err == nil || errors.Is(err, bus.ErrReject) {
		s.dedup.Add(e.ID) // final: a redelivery changes nothing
	}
	return err
}

func (s *Server) ingest(ctx context.Context, e *bus.Envelope) error {
	if e.Kind == bus.KindHello {
		return s.hello(ctx, e)
	}
	a, err := s.store.GetAgent(ctx, e.Env, e.Agent)
	if errors.Is(err, store.ErrNotFound) {
		s.security(e, "event from an unknown agent")
		return fmt.Errorf("%w: %s: unknown agent", bus.ErrReject, e)
	}
	if err != nil {
		return err
	}
	if err := bus.Verify(e, a.PublicKey); err != nil {
		s.security(e, "event signed by another key than the agent's")
		return fmt.Errorf("%w: %w", bus.ErrReject, err)
	}
	if a.State != model.AgentAccepted {
		return fmt.Errorf("%w: %s: agent %s is %s", bus.ErrReject, e, a.Name, a.State)
	}
	switch e.Kind {
	case bus.KindResourceStatus, bus.KindDryRunResult:
		var body bus.ResourceStatus
		if err := e.DecodeBody(&body); err != nil {
			return fmt.Errorf("%w: %w", bus.ErrReject, err)
		}
		return s.results(ctx, a, e.Kind == bus.KindDryRunResult, body)
	case bus.KindStateRequest:
		return s.sched.StateRequest(ctx, a.Env, a.Name)
	case bus.KindHeartbeat, bus.KindGoodbye:
		a.LastSeen = time.Now().UTC()
		return s.store.UpsertAgent(ctx, a)
	default:
		s.log.Info().Str("kind", string(e.Kind)).Str("agent", a.Name).Msg("event kind not handled by this server version; ignored")
		return nil
	}
}

// hello records a discovered agent and, when the environment's enrollment
// policy accepts it, enrolls it and hands it to the scheduler.
func (s *Server) hello(ctx context.Context, e *bus.Envelope) error {
	var body bus.Hello
	if err := e.DecodeBody(&body); err != nil {
		return fmt.Errorf("%w: %w", bus.ErrReject, err)
	}
	if err := bus.Verify(e, body.PublicKey); err != nil {
		return fmt.Errorf("%w: hello not signed by the key it presents: %w", bus.ErrReject, err)
	}
	env, err := s.store.GetEnv(ctx, e.Env)
	if errors.Is(err, store.ErrNotFound) {
		s.log.Warn().Str("env", e.Env).Str("agent", e.Agent).Msg("hello for an environment that does not exist")
		return fmt.Errorf("%w: %s: no environment %q", bus.ErrReject, e, e.Env)
	}
	if err != nil {
		return err
	}
	now := time.Now().UTC()
	a, err := s.store.GetAgent(ctx, e.Env, e.Agent)
	switch {
	case errors.Is(err, store.ErrNotFound):
		a = model.Agent{Env: e.Env, Name: e.Agent, State: model.AgentPending, PublicKey: body.PublicKey, FirstSeen: now}
	case err != nil:
		return err
	case !bytes.Equal(a.PublicKey, body.PublicKey) && a.State == model.AgentAccepted && env.Settings.Enrollment != model.EnrollOpen:
		s.security(e, "hello from an accepted agent's name with another key")
		return fmt.Errorf("%w: %s presents a key other than the accepted one", bus.ErrReject, e)
	}
	a.PublicKey, a.Labels, a.Facts, a.Kinds = body.PublicKey, body.Labels, body.Facts, body.Kinds
	a.Generation, a.LastSeen = body.Generation, now
	if env.Settings.Enrollment == model.EnrollOpen {
		a.State = model.AgentAccepted
	}
	if err := s.store.UpsertAgent(ctx, a); err != nil {
		return err
	}
	if a.State != model.AgentAccepted {
		s.log.Info().Str("env", a.Env).Str("agent", a.Name).Str("key", bus.Fingerprint(a.PublicKey)).
			Msg("agent discovered; waiting for an operator to accept it")
		s.feed.publish(Event{Kind: EventAgentDiscovered, Env: a.Env, Agent: a.Name})
		return nil
	}
	return s.enroll(ctx, a)
}

// enroll tells an accepted agent so, with the server's key, then hands it
// to the scheduler, which sends what it misses.
func (s *Server) enroll(ctx context.Context, a model.Agent) error {
	enrolled, err := s.signer.Seal(bus.KindEnrolled, a.Env, a.Name, bus.Enrolled{ServerKey: s.PublicKey()})
	if err != nil {
		return err
	}
	if err := s.bus.Send(ctx, enrolled, bus.SendOptions{}); err != nil {
		return err
	}
	if a.Paused {
		if err := s.sched.Pause(ctx, a.Env, a.Name, true); err != nil {
			return err
		}
	}
	if err := s.sched.Online(ctx, a); err != nil {
		return err
	}
	s.feed.publish(Event{Kind: EventAgentOnline, Env: a.Env, Agent: a.Name, Generation: a.Generation})
	return nil
}

// results records a batch of results, tells agents waiting on them, and
// publishes them live.
func (s *Server) results(ctx context.Context, a model.Agent, dryRun bool, body bus.ResourceStatus) error {
	for i := range body.Results {
		body.Results[i].DryRun = dryRun
	}
	if _, err := s.store.RecordResults(ctx, []store.ResultBatch{{Env: a.Env, Agent: a.Name, Version: body.Generation, DeployID: body.DeployID, Results: body.Results}}); err != nil {
		if errors.Is(err, store.ErrInvalid) {
			return fmt.Errorf("%w: %w", bus.ErrReject, err)
		}
		return err
	}
	if body.Generation != a.Generation {
		a.Generation = body.Generation
		if err := s.store.UpsertAgent(ctx, a); err != nil {
			return err
		}
	}
	if err := s.sched.ResultsRecorded(ctx, a.Env, body.Results); err != nil {
		s.log.Warn().Err(err).Msg("cannot tell waiting agents about results")
	}
	for i := range body.Results {
		s.feed.publish(Event{Kind: EventResult, Env: a.Env, Agent: a.Name, DeployID: body.DeployID,
			Generation: body.Generation, Result: &body.Results[i]})
	}
	if body.Done {
		s.feed.publish(Event{Kind: EventDeployDone, Env: a.Env, Agent: a.Name, DeployID: body.DeployID,
			Generation: body.Generation, Error: body.Error})
	}
	return nil
}

// security logs and publishes a security alert about an event.
func (s *Server) security(e *bus.Envelope, what string) {
	s.log.Warn().Str("env", e.Env).Str("agent", e.Agent).Str("kind", string(e.Kind)).Msg("security: " + what)
	s.feed.publish(Event{Kind: EventSecurity, Env: e.Env, Agent: e.Agent, Error: what})
}
