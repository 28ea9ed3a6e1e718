package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime/pprof"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/rs/zerolog"

	"github.com/tetherhq/tether/bus"
	"github.com/tetherhq/tether/bus/amqp"
	"github.com/tetherhq/tether/model"
	"github.com/tetherhq/tether/server"
	"github.com/tetherhq/tether/server/store"
	"github.com/tetherhq/tether/server/store/postgres/pgbaseline"
)

// IngestOptions configure the ingest scenario: Events status events of
// Agents agents, ingested by a server with Consumers consumers.
type IngestOptions struct {
	// Postgres is the database URL; the scenario works in new schemas,
	// dropped after.
	Postgres string
	// AMQP is the broker URL; the scenario uses a namespace of its own,
	// deleted after.
	AMQP                      string
	Events, Agents, Consumers int
	// CPUProfile, if set, is where a CPU profile of the timed ingest goes.
	CPUProfile string
	Progress   io.Writer // if not nil, shows how far it got (a terminal)
}

// IngestResult is what the ingest scenario measured.
type IngestResult struct {
	Events          int     `json:"events"`
	Agents          int     `json:"agents"`
	Consumers       int     `json:"consumers"`
	IngestSeconds   float64 `json:"ingest_seconds"`
	IngestRate      float64 `json:"ingest_events_per_second"`
	Transactions    uint64  `json:"transactions"`
	PerTransaction  float64 `json:"events_per_transaction"`
	BaselineSeconds float64 `json:"baseline_seconds"`
	BaselineRate    float64 `json:"baseline_events_per_second"`
	BaselineChunk   int     `json:"baseline_events_per_transaction"`
	BrokerSeconds   float64 `json:"broker_seconds"`
	BrokerRate      float64 `json:"broker_events_per_second"`
	Ratio           float64 `json:"ratio"`
	Command         string  `json:"command"`
}

// RunIngest fills the server's events queue with signed resource.status
// events (one result each), then starts a server on that backlog and times
// it until every event is written (verified, deduplicated, group-committed,
// acknowledged). In the same run it times a baseline writing the same rows
// with bare pgx batches, as many per transaction as the server wrote on
// average, and the broker's ceiling: the same events consumed and
// acknowledged with no work at all.
func RunIngest(ctx context.Context, o IngestOptions) (*IngestResult, error) {
	if o.Events < 1 || o.Agents < 1 || o.Consumers < 1 {
		return nil, errors.New("bench ingest: events, agents and consumers must be at least 1")
	}
	pgURL, n, agents, consumers, cpuprofile := o.Postgres, o.Events, o.Agents, o.Consumers, o.CPUProfile
	st, _, closeStore, err := newStore(ctx, pgURL)
	if err != nil {
		return nil, err
	}
	defer closeStore()
	const env = "bench"
	signers, _, rs, err := storeFleet(ctx, st, env, agents)
	if err != nil {
		return nil, err
	}
	bcfg := amqp.Default()
	bcfg.URL, bcfg.QueueType = o.AMQP, amqp.QueueClassic
	bcfg.Namespace = "tetherbench." + uuid.NewString()[:8]
	b, err := amqp.New(bcfg, zerolog.Nop())
	if err != nil {
		return nil, err
	}
	defer func() {
		b.Close()
		_ = amqp.DeleteTopology(context.WithoutCancel(ctx), bcfg, nil)
	}()
	readyCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	err = b.Ready(readyCtx)
	cancel()
	if err != nil {
		return nil, fmt.Errorf("RabbitMQ at --amqp: %w (start it with `rabbitmq-server -detached`)", err)
	}

	events, batches, err := statusEvents(env, signers, rs, n)
	if err != nil {
		return nil, err
	}
	if err := fillQueue(ctx, o.Progress, b, events); err != nil {
		return nil, err
	}

	srv, err := server.New(server.Config{Consumers: consumers}, st, b, zerolog.Nop())
	if err != nil {
		return nil, err
	}
	if cpuprofile != "" {
		f, err := os.Create(cpuprofile)
		if err != nil {
			return nil, err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return nil, err
		}
	}
	ingest, stats, err := ingestBacklog(ctx, o.Progress, srv, n)
	if cpuprofile != "" {
		pprof.StopCPUProfile()
	}
	if err != nil {
		return nil, err
	}

	// The baseline, on a schema of its own holding the same fleet.
	bst, burl, closeBaseline, err := newStore(ctx, pgURL)
	if err != nil {
		return nil, err
	}
	defer closeBaseline()
	if _, _, _, err := storeFleet(ctx, bst, env, agents); err != nil {
		return nil, err
	}
	per := float64(stats.Written) / float64(max(stats.Transactions, 1))
	chunk := max(int(per+0.5), 1)
	base, err := pgbaseline.WriteBare(ctx, burl, batches, chunk)
	if err != nil {
		return nil, err
	}
	broker, err := brokerCeiling(ctx, o.Progress, b, events, consumers)
	if err != nil {
		return nil, err
	}
	res := &IngestResult{Events: n, Agents: agents, Consumers: consumers,
		BrokerSeconds: broker.Seconds(), BrokerRate: float64(n) / broker.Seconds(),
		IngestSeconds: ingest.Seconds(), IngestRate: float64(n) / ingest.Seconds(),
		Transactions: stats.Transactions, PerTransaction: per,
		BaselineSeconds: base.Seconds(), BaselineRate: float64(n) / base.Seconds(), BaselineChunk: chunk,
		Command: fmt.Sprintf("tether bench ingest --events %d --agents %d --consumers %d", n, agents, consumers)}
	res.Ratio = res.IngestRate / res.BaselineRate
	return res, nil
}

// statusEvents makes n resource.status events (one result each) of the
// fleet storeFleet stored, signed by its agents in turn, and the same rows
// as the store's batches for the baseline.
func statusEvents(env string, signers []*bus.Signer, rs []model.Resource, n int) ([]*bus.Envelope, []store.ResultBatch, error) {
	agents := len(signers)
	events := make([]*bus.Envelope, n)
	batches := make([]store.ResultBatch, n)
	for i := range n {
		a := i % agents
		r := rs[a*resourcesPerAgent+(i/agents)%resourcesPerAgent]
		body := bus.ResourceStatus{DeployID: "bench", Generation: 1,
			Results: []model.Result{{ID: r.ID, State: model.StateDeployed, Message: "bench " + strconv.Itoa(i)}}}
		e, err := signers[a].Seal(bus.KindResourceStatus, env, r.ID.Agent, body)
		if err != nil {
			return nil, nil, err
		}
		events[i] = e
		batches[i] = store.ResultBatch{Env: env, Agent: r.ID.Agent, Seq: e.Seq, Version: 1, DeployID: "bench", Results: body.Results}
	}
	return events, batches, nil
}

// ingestBacklog runs srv on a backlog of n events and times it until it
// has handled every one, then stops it. Every event must have been
// written.
func ingestBacklog(ctx context.Context, progress io.Writer, srv *server.Server, n int) (time.Duration, server.IngestStats, error) {
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	done := make(chan error, 1)
	start := time.Now()
	go func() { done <- srv.Run(runCtx) }()
	for srv.IngestStats().Events < uint64(n) {
		select {
		case err := <-done:
			return 0, server.IngestStats{}, fmt.Errorf("the server stopped during the benchmark: %w", err)
		case <-ctx.Done():
			stop()
			<-done
			return 0, server.IngestStats{}, ctx.Err()
		case <-time.After(2 * time.Millisecond):
		}
		showProgress(progress, "ingesting: %d/%d", srv.IngestStats().Events, n)
	}
	took := time.Since(start)
	stats := srv.IngestStats()
	stop()
	<-done
	showProgress(progress, "")
	if stats.Written != uint64(n) {
		return 0, stats, fmt.Errorf("the server wrote %d of %d events", stats.Written, n)
	}
	return took, stats, nil
}

// brokerCeiling fills the queue with events again and times consumers that
// acknowledge them without any work: what the broker and the bus can
// deliver on this machine.
func brokerCeiling(ctx context.Context, progress io.Writer, b bus.Bus, events []*bus.Envelope, consumers int) (time.Duration, error) {
	if err := fillQueue(ctx, progress, b, events); err != nil {
		return 0, err
	}
	var got atomic.Int64
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	start := time.Now()
	for range consumers {
		go func() {
			_ = b.ConsumeEvents(cctx, bus.QueueEvents, func(context.Context, bus.Delivery) error { got.Add(1); return nil })
		}()
	}
	for got.Load() < int64(len(events)) {
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-time.After(2 * time.Millisecond):
		}
	}
	return time.Since(start), nil
}

// fillQueue publishes events with 32 publishers, showing progress.
func fillQueue(ctx context.Context, progress io.Writer, b bus.Bus, events []*bus.Envelope) error {
	work := make(chan *bus.Envelope)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var firstErr error
	sent := 0
	for range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for e := range work {
				err := b.Publish(ctx, e)
				mu.Lock()
				if err != nil && firstErr == nil {
					firstErr = err
				}
				sent++
				if sent%500 == 0 {
					showProgress(progress, "filling the queue: %d/%d", sent, len(events))
				}
				mu.Unlock()
			}
		}()
	}
	for _, e := range events {
		work <- e
	}
	close(work)
	wg.Wait()
	return firstErr
}
