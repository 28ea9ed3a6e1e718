package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"

	"github.com/tetherhq/tether/bus/amqp"
	"github.com/tetherhq/tether/server"
)

// IngestTLSOptions configure the ingest-tls scenario: Events status events
// of Agents agents, ingested by a server with Consumers consumers, over
// the plain setup and over TLS with per-agent logins, Rounds times each.
type IngestTLSOptions struct {
	// Postgres is the database URL; the scenario works in new schemas,
	// dropped after.
	Postgres                  string
	Events, Agents, Consumers int
	Rounds                    int
	Timeout                   time.Duration
	Progress                  io.Writer // if not nil, shows how far it got (a terminal)
}

// IngestSide is what the ingest-tls scenario measured on one setup, in one
// run or, summed up, in all of them.
type IngestSide struct {
	Setup string `json:"setup"`
	// ConnectSeconds: the agents opening their connections at once.
	ConnectSeconds float64 `json:"connect_seconds"`
	// Publish: the agents publishing their events, each one after the
	// other as an agent does, every one confirmed by the broker.
	PublishSeconds float64 `json:"publish_seconds"`
	PublishRate    float64 `json:"publish_events_per_second"`
	// Ingest: the server taking the backlog into PostgreSQL.
	IngestSeconds  float64 `json:"ingest_seconds"`
	IngestRate     float64 `json:"ingest_events_per_second"`
	PerTransaction float64 `json:"events_per_transaction"`
	// Questions the server answered for the broker (per-agent logins
	// only).
	Questions int64 `json:"questions"`
	// Processor time, in seconds, used while publishing and while
	// ingesting by the broker node and by this process (the agents'
	// side, or the server).
	PublishNodeCPU float64 `json:"publish_node_cpu_seconds"`
	PublishSelfCPU float64 `json:"publish_self_cpu_seconds"`
	IngestNodeCPU  float64 `json:"ingest_node_cpu_seconds"`
	IngestSelfCPU  float64 `json:"ingest_self_cpu_seconds"`
}

// IngestTLSResult is what the ingest-tls scenario measured.
type IngestTLSResult struct {
	Events    int `json:"events"`
	Agents    int `json:"agents"`
	Consumers int `json:"consumers"`
	Rounds    int `json:"rounds"`
	// Plain, TLSShared and TLSAuth sum up each setup's runs: seconds
	// added, rates over the seconds added (Rounds × Events events).
	Plain     IngestSide `json:"plain"`
	TLSShared IngestSide `json:"tls_shared"`
	TLSAuth   IngestSide `json:"tls_auth"`
	// IngestRatio and PublishRatio are the rates of TLS with per-agent
	// logins over plain's; TLSIngestRatio and TLSPublishRatio those of
	// TLS with the shared user (TLS alone) over plain's.
	IngestRatio     float64 `json:"ingest_ratio"`
	PublishRatio    float64 `json:"publish_ratio"`
	TLSIngestRatio  float64 `json:"tls_only_ingest_ratio"`
	TLSPublishRatio float64 `json:"tls_only_publish_ratio"`
	// The same ratios by processor time per event, plain's over TLS with
	// per-agent logins': of the broker node while publishing, of the node
	// and the server while ingesting (PostgreSQL's, the same in every
	// setup, left out). On a machine the broker and server saturate,
	// rates follow these; they vary less than the rates where other
	// work shares the machine.
	PublishCPURatio float64 `json:"publish_cpu_ratio"`
	IngestCPURatio  float64 `json:"ingest_cpu_ratio"`
	// Runs are the runs in the order they ran.
	Runs    []IngestSide `json:"runs"`
	Command string       `json:"command"`
}

// RunIngestTLS runs the ingest path on one private RabbitMQ node (see
// authBroker), each time on a new PostgreSQL schema and a namespace of its
// own, in three setups: as agents and servers are set up on a trusted
// network (plain AMQP, one user of the broker's own for everyone); the
// same over TLS (TLS alone); and as docs/operations.md sets them up on an
// untrusted network (TLS; each agent logs in as itself, and the broker
// asks the server, through its cache, what the agent may do; the server
// logs in as the broker's own user, over TLS too). Each time Agents agents connect, publish their share of
// Events signed resource.status events (one result each), and disconnect;
// then a server with Consumers consumers takes the backlog into
// PostgreSQL and is timed until every event is written, as in RunIngest.
//
// Each round runs every setup, the first round in the order above, the
// next in the reverse order, and so on: a node or database warming up, or
// a machine whose load drifts, weighs on all alike.
func RunIngestTLS(ctx context.Context, o IngestTLSOptions) (*IngestTLSResult, error) {
	if o.Events < 1 || o.Agents < 1 || o.Consumers < 1 || o.Rounds < 1 {
		return nil, errors.New("bench ingest-tls: events, agents, consumers and rounds must be at least 1")
	}
	if o.Timeout <= 0 {
		o.Timeout = 10 * time.Minute
	}
	ctx, cancel := context.WithTimeout(ctx, o.Timeout)
	defer cancel()
	if _, err := raiseFileLimit(uint64(o.Agents + 1024)); err != nil {
		return nil, err
	}
	showProgress(o.Progress, "starting a RabbitMQ node")
	ab, err := startAuthBroker()
	if err != nil {
		return nil, err
	}
	defer ab.stop()
	res := &IngestTLSResult{Events: o.Events, Agents: o.Agents, Consumers: o.Consumers, Rounds: o.Rounds,
		Command: fmt.Sprintf("tether bench ingest-tls --events %d --agents %d --consumers %d --rounds %d", o.Events, o.Agents, o.Consumers, o.Rounds)}
	for r := range o.Rounds {
		order := []ingestSetup{plainShared, tlsShared, tlsOwn}
		if r%2 == 1 {
			slices.Reverse(order)
		}
		for _, setup := range order {
			side, err := ingestSide(ctx, o, ab, setup)
			if err != nil {
				if ctx.Err() != nil {
					err = fmt.Errorf("%w (raise --timeout?)", err)
				}
				return nil, err
			}
			res.Runs = append(res.Runs, side)
		}
	}
	showProgress(o.Progress, "")
	var sums [3]IngestSide
	for _, x := range res.Runs {
		s := &sums[slices.Index(setupNames[:], x.Setup)]
		s.Setup = x.Setup
		s.ConnectSeconds += x.ConnectSeconds
		s.PublishSeconds += x.PublishSeconds
		s.IngestSeconds += x.IngestSeconds
		s.PerTransaction += x.PerTransaction / float64(o.Rounds)
		s.Questions += x.Questions
		s.PublishNodeCPU += x.PublishNodeCPU
		s.PublishSelfCPU += x.PublishSelfCPU
		s.IngestNodeCPU += x.IngestNodeCPU
		s.IngestSelfCPU += x.IngestSelfCPU
	}
	for i := range sums {
		events := float64(o.Rounds * o.Events)
		sums[i].PublishRate = events / sums[i].PublishSeconds
		sums[i].IngestRate = events / sums[i].IngestSeconds
	}
	res.Plain, res.TLSShared, res.TLSAuth = sums[plainShared], sums[tlsShared], sums[tlsOwn]
	res.IngestRatio = res.TLSAuth.IngestRate / res.Plain.IngestRate
	res.PublishRatio = res.TLSAuth.PublishRate / res.Plain.PublishRate
	res.TLSIngestRatio = res.TLSShared.IngestRate / res.Plain.IngestRate
	res.TLSPublishRatio = res.TLSShared.PublishRate / res.Plain.PublishRate
	res.PublishCPURatio = res.Plain.PublishNodeCPU / res.TLSAuth.PublishNodeCPU
	res.IngestCPURatio = (res.Plain.IngestNodeCPU + res.Plain.IngestSelfCPU) / (res.TLSAuth.IngestNodeCPU + res.TLSAuth.IngestSelfCPU)
	return res, nil
}

// ingestSetup is a setup of RunIngestTLS.
type ingestSetup int

const (
	plainShared ingestSetup = iota // plain AMQP, the broker's own user for all
	tlsShared                      // the same over TLS
	tlsOwn                         // TLS, each agent logging in as itself
)

var setupNames = [...]string{
	plainShared: "plain AMQP, one shared user",
	tlsShared:   "TLS, one shared user",
	tlsOwn:      "TLS, each agent logs in as itself",
}

// ingestSide measures one setup of RunIngestTLS.
func ingestSide(ctx context.Context, o IngestTLSOptions, ab *authBroker, setup ingestSetup) (IngestSide, error) {
	side := IngestSide{Setup: setupNames[setup]}
	st, _, closeStore, err := newStore(ctx, o.Postgres)
	if err != nil {
		return side, err
	}
	defer closeStore()
	const env = "bench"
	showProgress(o.Progress, "%s: storing %d agents", side.Setup, o.Agents)
	signers, keys, rs, err := storeFleet(ctx, st, env, o.Agents)
	if err != nil {
		return side, err
	}
	events, _, err := statusEvents(env, signers, rs, o.Events)
	if err != nil {
		return side, err
	}

	scfg := ab.serverConfig(setup == plainShared)
	sb, err := amqp.New(scfg, zerolog.Nop())
	if err != nil {
		return side, err
	}
	defer func() {
		sb.Close()
		_ = amqp.DeleteTopology(context.WithoutCancel(ctx), scfg, nil)
	}()
	if err := sb.Ready(ctx); err != nil {
		return side, fmt.Errorf("the server's connection to the node: %w", err)
	}
	srv, err := server.New(server.Config{Consumers: o.Consumers}, st, sb, zerolog.Nop())
	if err != nil {
		return side, err
	}
	var asked *questions
	if setup == tlsOwn {
		hctx, stopHTTP := context.WithCancel(ctx)
		var wait func() error
		if asked, wait, err = ab.serveBrokerAuth(hctx, srv, scfg.Namespace); err != nil {
			stopHTTP()
			return side, err
		}
		defer func() {
			stopHTTP()
			_ = wait()
		}()
	}

	// The agents: connect, publish, disconnect.
	fleet := make([]*loginAgent, o.Agents)
	for i := range fleet {
		fleet[i] = &loginAgent{n: i, name: agentName(i), key: keys[i]}
	}
	defer closeAgents(fleet)
	connect := func(ctx context.Context, a *loginAgent) error {
		if setup == tlsOwn {
			return a.connect(ctx, ab, scfg, env)
		}
		return a.open(ctx, ab.agentConfig(scfg, a.name, setup == tlsShared, nil))
	}
	p, err := runPhase(ctx, o.Progress, side.Setup+": connect", ab, asked, fleet, connect)
	if err != nil {
		return side, err
	}
	side.ConnectSeconds, side.Questions = p.Seconds, p.Questions
	var sent atomic.Int64
	start := time.Now()
	p, err = runPhase(ctx, nil, side.Setup+": publish", ab, asked, fleet, func(ctx context.Context, a *loginAgent) error {
		// Agent i's events are i, i+agents, …: statusEvents deals them so.
		for i := a.n; i < len(events); i += o.Agents {
			if err := a.bus.Publish(ctx, events[i]); err != nil {
				return err
			}
			if n := sent.Add(1); n%500 == 0 {
				showProgress(o.Progress, "%s: published %d/%d", side.Setup, n, len(events))
			}
		}
		return nil
	})
	if err != nil {
		return side, err
	}
	side.PublishSeconds = time.Since(start).Seconds()
	side.PublishRate = float64(len(events)) / side.PublishSeconds
	side.Questions += p.Questions
	side.PublishNodeCPU, side.PublishSelfCPU = p.NodeCPUSeconds, p.SelfCPUSeconds
	closeAgents(fleet)

	nodeBefore, selfBefore := ab.cpu()
	took, stats, err := ingestBacklog(ctx, o.Progress, srv, len(events))
	if err != nil {
		return side, err
	}
	nodeAfter, selfAfter := ab.cpu()
	side.IngestNodeCPU, side.IngestSelfCPU = (nodeAfter - nodeBefore).Seconds(), (selfAfter - selfBefore).Seconds()
	side.IngestSeconds = took.Seconds()
	side.IngestRate = float64(len(events)) / side.IngestSeconds
	side.PerTransaction = float64(stats.Written) / float64(max(stats.Transactions, 1))
	return side, nil
}
