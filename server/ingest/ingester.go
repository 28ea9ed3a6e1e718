// Package ingest is the ingest of what agents send: the consumers'
// handler (Ingester.Handle), which verifies each event against its
// agent's key and writes results and drift reports in group commits;
// heartbeats written together; enrollment carried out on a hello (package
// enroll decides); pending agents and their cap; an agent's own key
// rollover; attributing forgeries to their sender and bounding what one
// sender costs; revocation and the bound on agents' broker connections;
// and operators' decisions about one agent, taken under the same lock.
//
// It owns the agents' records as the ingest path changes them (through
// its cache and locks); it does not schedule (the scheduler does), sign
// keys of its own (package trust), compile, or import the server's root:
// what it needs it declares here, and the root wires it.
package ingest

import (
	"context"
	"crypto/ed25519"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"

	"github.com/tetherhq/tether/bus"
	"github.com/tetherhq/tether/server/event"
	"github.com/tetherhq/tether/server/record"
	"github.com/tetherhq/tether/server/scheduler"
	"github.com/tetherhq/tether/server/store"
)

// Config configures the ingest (the server's Config names each field).
type Config struct {
	// MaxBatch bounds the events written per ingest transaction, and
	// Writers the transactions in flight at once.
	MaxBatch, Writers int
	// AgentCacheTTL and AgentCacheListenTTL are how long a copy of an
	// agent's record is trusted, without and with the store telling of
	// changes.
	AgentCacheTTL, AgentCacheListenTTL time.Duration
	// AgentEventRate bounds the events one accepted agent may send a
	// second; FloodWindow is the period of one sender's alert and
	// dead-letter budgets (flood.go).
	AgentEventRate float64
	FloodWindow    time.Duration
	// Broker closes agents' broker connections (nil: none are closed);
	// MaxAgentConnections bounds one agent's (negative: no bound), counted
	// every ConnectionSweep (brokerconns.go).
	Broker              BrokerAdmin
	MaxAgentConnections int
	ConnectionSweep     time.Duration
}

// BrokerAdmin does to the broker what its clients cannot.
type BrokerAdmin interface {
	// CloseAgentConnections closes the connections of env/name logged in
	// with key, or with any key when key is nil, and returns how many.
	CloseAgentConnections(ctx context.Context, env, name string, key ed25519.PublicKey) (int, error)
	// Connections lists the broker's client connections.
	Connections(ctx context.Context) ([]bus.BrokerConnection, error)
	// CloseConnection closes one connection, telling its client reason;
	// one gone already is no error.
	CloseConnection(ctx context.Context, name, reason string) error
}

// Bus is what the ingest sends agents: answers, refusals, key
// acknowledgements, and their inboxes. Optional capabilities are found by
// type assertion (answerWaiter, teller, inboxDeleter, inboxesDeleter).
type Bus interface {
	Send(ctx context.Context, e *bus.Envelope, opts bus.SendOptions) error
	DeclareInbox(ctx context.Context, env, agent string) error
}

// Keys are the server's signing keys (trust.Keys): what an enrolled agent
// is told of them, and an agent's acknowledgement of their rollover.
type Keys interface {
	AnswerHello(ctx context.Context, a record.Agent, body bus.Enrolled) error
	RolloverAck(ctx context.Context, a record.Agent, e *bus.Envelope, body bus.ServerRolloverAck) error
}

// Metrics are told what the ingest counts (the server's prometheus
// metrics); a nil field counts nothing.
type Metrics struct {
	// Event counts an event handled, by kind and outcome.
	Event func(kind, outcome string)
	// Results counts resource results recorded.
	Results func(n int)
	// Committed is told of each ingest transaction: its batches and how
	// long it took.
	Committed func(batches int, took time.Duration)
	// Security counts a security alert raised, SecurityHeld one counted
	// and summed up instead of stored.
	Security, SecurityHeld func()
	// BrokerClosed counts agents' broker connections closed, by reason.
	BrokerClosed func(reason string, n int)
}

func (m Metrics) orNothing() Metrics {
	if m.Event == nil {
		m.Event = func(string, string) {}
	}
	if m.Results == nil {
		m.Results = func(int) {}
	}
	if m.Committed == nil {
		m.Committed = func(int, time.Duration) {}
	}
	if m.Security == nil {
		m.Security = func() {}
	}
	if m.SecurityHeld == nil {
		m.SecurityHeld = func() {}
	}
	if m.BrokerClosed == nil {
		m.BrokerClosed = func(string, int) {}
	}
	return m
}

// Machines is told what agents say of machines (machines.Room): a
// platform's agent's reports, and a machine's agent enrolling with the
// token bound to its host.
type Machines interface {
	Report(ctx context.Context, a record.Agent, rep bus.MachineReport) error
	Enrolled(ctx context.Context, env, agent string, tok record.EnrollmentToken) error
}

// Services are what the ingest works with, handed over by the server.
type Services struct {
	Store  store.Store
	Bus    Bus
	Sched  *scheduler.Scheduler
	Signer *bus.Signer
	Feed   *event.Feed
	Keys   Keys
	// Machines takes machine reports (nil: they are dropped).
	Machines Machines
	// Trigger asks for a compile of env (compile.Compiler.Trigger).
	Trigger func(ctx context.Context, env string, t record.Trigger)
	// Logged is called after a transaction appended events to the
	// event log (the stream's Appended: it wakes followers and webhooks).
	Logged  func()
	Metrics Metrics
	Log     zerolog.Logger
}

// Ingester ingests agents' events. Its zero value is not usable: New.
type Ingester struct {
	cfg        Config
	store      store.Store
	bus        Bus
	sched      *scheduler.Scheduler
	signer     *bus.Signer
	feed       *event.Feed
	keys       Keys
	machines   Machines
	trigger    func(ctx context.Context, env string, t record.Trigger)
	dedup      *bus.Dedup
	agents     *agentCache
	agentLocks *agentLocks
	committer  *committer
	seen       *seenWriter
	log        zerolog.Logger
	metrics    Metrics
	handled    atomic.Uint64
	// flood bounds what one sender costs (see flood.go).
	flood *floodGuard
	// agentLogins says the server answers the broker's authentication
	// backend (AgentLogins): agents log in as themselves, and the broker
	// lets each publish under its own name only (origin.go).
	agentLogins atomic.Bool
	// resynced bounds how often an agent is told to number past (seqsync.go).
	resynced resyncs
	// pending remembers the environments found at their max_pending,
	// and refusals gates the alerts of refused discoveries (pending.go).
	pending  pendingFull
	refusals refusalAlerts
	// revoked takes rejected agents whose connections closeRevoked
	// closes again.
	revoked chan revocation
}

// New returns an ingester over svc, configured by cfg (the server's
// defaults filled in).
func New(cfg Config, svc Services) *Ingester {
	m := svc.Metrics.orNothing()
	s := &Ingester{
		cfg:        cfg,
		store:      svc.Store,
		bus:        svc.Bus,
		sched:      svc.Sched,
		signer:     svc.Signer,
		feed:       svc.Feed,
		keys:       svc.Keys,
		machines:   svc.Machines,
		trigger:    svc.Trigger,
		dedup:      bus.NewDedup(1 << 16),
		agents:     newAgentCache(svc.Store, cfg.AgentCacheTTL, cfg.AgentCacheListenTTL),
		agentLocks: new(agentLocks),
		committer:  newCommitter(svc.Store, cfg.MaxBatch, cfg.Writers, m.Committed),
		seen:       newSeenWriter(svc.Store, svc.Log),
		log:        svc.Log,
		metrics:    m,
		revoked:    make(chan revocation, 256),
		flood:      newFloodGuard(cfg.FloodWindow, cfg.AgentEventRate),
	}
	if svc.Logged != nil {
		s.committer.logged = svc.Logged
	}
	return s
}

// agentListener is a store that tells of changes of agents' records made
// by any process (found by type assertion; PostgreSQL's does): the ingest
// path's copies of agents are then trusted longer (AgentCacheListenTTL).
type agentListener interface {
	ListenAgents(ctx context.Context, listening func(bool), changed func(env, name string)) error
}

// Run runs what the ingest does in the background until ctx ends: the
// group commits, the heartbeats' writes, the revoked agents' connections
// closed again, the held-back alerts summed up, the store's notices of
// agents changed, and the bound on agents' broker connections. The
// consumers calling Handle are the caller's.
func (in *Ingester) Run(ctx context.Context) {
	var wg sync.WaitGroup
	wg.Add(4)
	go func() { defer wg.Done(); in.committer.run(ctx) }()
	go func() { defer wg.Done(); in.seen.run(ctx) }()
	go func() { defer wg.Done(); in.closeRevoked(ctx) }()
	go func() { defer wg.Done(); in.sumUpAlerts(ctx) }()
	if l, ok := in.store.(agentListener); ok {
		wg.Add(1)
		go func() { defer wg.Done(); _ = l.ListenAgents(ctx, in.agents.setListening, in.agents.forget) }()
	}
	if in.cfg.Broker != nil && in.cfg.MaxAgentConnections > 0 {
		wg.Add(1)
		go func() { defer wg.Done(); in.boundConnections(ctx) }()
	}
	wg.Wait()
}

// Stats counts what the ingest path did since the server started.
type Stats struct {
	// Events handled for good: written, duplicates dropped, rejected.
	Events uint64 `json:"events"`
	// Transactions that wrote events, and the events they wrote.
	Transactions uint64 `json:"transactions"`
	Written      uint64 `json:"written"`
}

// Stats returns the ingest counters.
func (in *Ingester) Stats() Stats {
	return Stats{Events: in.handled.Load(), Transactions: in.committer.commits.Load(), Written: in.committer.written.Load()}
}

// AgentLogins says the server answers the broker's authentication
// backend: agents log in as themselves, so the routing key of what they
// publish names its sender (origin.go).
func (in *Ingester) AgentLogins() { in.agentLogins.Store(true) }

// ForgetEnv drops the copies of env's agents (env was deleted).
func (in *Ingester) ForgetEnv(env string) { in.agents.forgetEnv(env) }

// inboxDeleter is a bus that can delete an agent's inbox (found by type
// assertion).
type inboxDeleter interface {
	DeleteInbox(ctx context.Context, env, agent string) error
}

// deleteInbox deletes env/name's inbox with what it holds, where the bus
// can; a bus that cannot has nothing kept per agent.
func (in *Ingester) deleteInbox(ctx context.Context, env, name string) error {
	if d, ok := in.bus.(inboxDeleter); ok {
		return d.DeleteInbox(ctx, env, name)
	}
	return nil
}
