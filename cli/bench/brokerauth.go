package bench

import (
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime/pprof"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"

	"github.com/tetherhq/tether/bus"
	"github.com/tetherhq/tether/bus/amqp"
	"github.com/tetherhq/tether/server"
	"github.com/tetherhq/tether/server/brokerauth"
	"github.com/tetherhq/tether/server/record"
)

// BrokerAuthOptions configure the broker-auth scenario: Agents enrolled
// agents connecting at once, then FirstContact agents the server does not
// know yet.
type BrokerAuthOptions struct {
	// Postgres is the database URL; the scenario works in a new schema,
	// dropped after.
	Postgres     string
	Agents       int
	FirstContact int // at most brokerauth.StrangerBurst
	Timeout      time.Duration
	// CPUProfile, if set, is where a CPU profile of the connect phase
	// (this process: the agents' side and the server) goes.
	CPUProfile string
	Progress   io.Writer // if not nil, shows how far it got (a terminal)
}

// BrokerAuthPhase is what one phase of the scenario measured.
type BrokerAuthPhase struct {
	Name    string  `json:"name"`
	Agents  int     `json:"agents"`
	Seconds float64 `json:"seconds"`
	// Questions the server answered (RabbitMQ's HTTP authentication
	// backend), in all and by kind (user, vhost, resource, topic), and
	// how many it refused.
	Questions          int64            `json:"questions"`
	ByKind             map[string]int64 `json:"questions_by_kind"`
	Refused            int64            `json:"refused"`
	QuestionsPerSecond float64          `json:"questions_per_second"`
	// Each agent's time from the phase's start to done: median, 95th
	// percentile, slowest.
	P50Seconds float64 `json:"p50_seconds"`
	P95Seconds float64 `json:"p95_seconds"`
	MaxSeconds float64 `json:"max_seconds"`
	// Processor time used meanwhile by the broker node and by this
	// process (the agents' side and the server), in seconds.
	NodeCPUSeconds float64 `json:"node_cpu_seconds"`
	SelfCPUSeconds float64 `json:"self_cpu_seconds"`
	// RecordedSeconds (first contact) is the time until the server had
	// recorded every hello (pending agents).
	RecordedSeconds float64 `json:"recorded_seconds,omitempty"`
}

// BrokerAuthResult is what the broker-auth scenario measured.
type BrokerAuthResult struct {
	Agents           int               `json:"agents"`
	FirstContact     int               `json:"first_contact"`
	Phases           []BrokerAuthPhase `json:"phases"`
	NodeStartSeconds float64           `json:"node_start_seconds"`
	// OpenFiles is this process's open files with every agent connected
	// (FileLimit: its limit).
	OpenFiles int    `json:"open_files"`
	FileLimit uint64 `json:"file_limit"`
	Command   string `json:"command"`
}

// RunBrokerAuth measures agents logging in to the broker as themselves
// (bus.LoginCredentials), over TLS, through the server's answer to
// RabbitMQ's HTTP authentication backend (package brokerauth), as
// docs/operations.md sets it up: a private RabbitMQ node (TLS, the
// authentication cache in front of the HTTP backend), a server in this
// process on a new PostgreSQL schema answering its questions with its own
// HTTP stack, and Agents enrolled agents, each with an ed25519 key of its
// own, in this process (one goroutine and one connection each).
//
// The phases, each timed from its start until every agent is done:
//
//   - connect: every agent opens its connection at once, as after a
//     broker restart (the node is new: its cache is empty; the agents'
//     inboxes are there, declared by the server beforehand, as durable
//     queues outlive a restart);
//   - first event: every agent publishes a heartbeat, confirmed by the
//     broker (the questions about the exchange and the routing key);
//   - first contact: FirstContact agents the server does not know connect
//     and publish their hello; also timed until the server has recorded
//     them all, pending.
func RunBrokerAuth(ctx context.Context, o BrokerAuthOptions) (*BrokerAuthResult, error) {
	if o.Agents < 1 || o.FirstContact < 0 || o.FirstContact > brokerauth.StrangerBurst {
		return nil, fmt.Errorf("bench broker-auth: agents must be at least 1 and first contacts 0 to %d (the logins of unknown keys the server lets in at once from one address)", brokerauth.StrangerBurst)
	}
	if o.Timeout <= 0 {
		o.Timeout = 5 * time.Minute
	}
	ctx, cancel := context.WithTimeout(ctx, o.Timeout)
	defer cancel()
	limit, err := raiseFileLimit(uint64(o.Agents + o.FirstContact + 1024))
	if err != nil {
		return nil, err
	}
	st, _, closeStore, err := newStore(ctx, o.Postgres)
	if err != nil {
		return nil, err
	}
	defer closeStore()
	const env = "bench"
	if err := st.CreateEnv(ctx, record.Environment{Name: env, Settings: quietSettings(), CreatedAt: time.Now().UTC()}); err != nil {
		return nil, err
	}
	showProgress(o.Progress, "storing %d agents", o.Agents)
	keys, err := storeAgents(ctx, st, env, 0, o.Agents)
	if err != nil {
		return nil, err
	}

	showProgress(o.Progress, "starting a RabbitMQ node")
	began := time.Now()
	ab, err := startAuthBroker()
	if err != nil {
		return nil, err
	}
	defer ab.stop()
	res := &BrokerAuthResult{Agents: o.Agents, FirstContact: o.FirstContact, NodeStartSeconds: time.Since(began).Seconds(), FileLimit: limit,
		Command: fmt.Sprintf("tether bench broker-auth --agents %d --first-contact %d", o.Agents, o.FirstContact)}

	// The server: its bus (the broker's own user, over TLS), its ingest
	// running, its answers to the broker served.
	scfg := ab.serverConfig(false)
	sb, err := amqp.New(scfg, zerolog.Nop())
	if err != nil {
		return nil, err
	}
	defer sb.Close()
	if err := sb.Ready(ctx); err != nil {
		return nil, fmt.Errorf("the server's connection to the node: %w", err)
	}
	srv, err := server.New(server.Config{}, st, sb, zerolog.Nop())
	if err != nil {
		return nil, err
	}
	sctx, stopServer := context.WithCancel(ctx)
	defer stopServer()
	auth, waitHTTP, err := ab.serveBrokerAuth(sctx, srv, scfg.Namespace)
	if err != nil {
		return nil, err
	}
	done := make(chan error, 1)
	go func() { done <- srv.Run(sctx) }()
	defer func() {
		stopServer()
		<-done
		_ = waitHTTP()
	}()

	fleet := make([]*loginAgent, o.Agents)
	for i := range fleet {
		fleet[i] = &loginAgent{n: i, name: agentName(i), key: keys[i]}
		if err := sb.DeclareInbox(ctx, env, fleet[i].name); err != nil {
			return nil, fmt.Errorf("declare the inbox of %s: %w", fleet[i].name, err)
		}
		if i%100 == 0 {
			showProgress(o.Progress, "declaring inboxes: %d/%d", i, o.Agents)
		}
	}
	defer closeAgents(fleet)

	// Connect: every enrolled agent at once.
	var cpu *os.File
	if o.CPUProfile != "" {
		if cpu, err = os.Create(o.CPUProfile); err != nil {
			return nil, err
		}
		defer cpu.Close()
		if err := pprof.StartCPUProfile(cpu); err != nil {
			return nil, err
		}
	}
	p, err := runPhase(ctx, o.Progress, "connect", ab, auth, fleet, func(ctx context.Context, a *loginAgent) error {
		return a.connect(ctx, ab, scfg, env)
	})
	if cpu != nil {
		pprof.StopCPUProfile()
	}
	if err != nil {
		return nil, err
	}
	res.Phases = append(res.Phases, p)
	res.OpenFiles = openFiles()

	// A first event each.
	p, err = runPhase(ctx, o.Progress, "first event", ab, auth, fleet, func(ctx context.Context, a *loginAgent) error {
		e, err := bus.NewSigner(a.key, 0).Seal(bus.KindHeartbeat, env, a.name, bus.Heartbeat{})
		if err != nil {
			return err
		}
		return a.bus.Publish(ctx, e)
	})
	if err != nil {
		return nil, err
	}
	res.Phases = append(res.Phases, p)

	// First contact: agents the server does not know, saying hello.
	if o.FirstContact > 0 {
		strangers := make([]*loginAgent, o.FirstContact)
		for i := range strangers {
			_, key, err := bus.GenerateKey()
			if err != nil {
				return nil, err
			}
			strangers[i] = &loginAgent{n: o.Agents + i, name: agentName(o.Agents + i), key: key}
		}
		defer closeAgents(strangers)
		start := time.Now()
		p, err := runPhase(ctx, o.Progress, "first contact", ab, auth, strangers, func(ctx context.Context, a *loginAgent) error {
			if err := a.connect(ctx, ab, scfg, env); err != nil {
				return err
			}
			e, err := bus.NewSigner(a.key, 0).Seal(bus.KindHello, env, a.name, bus.Hello{PublicKey: a.key.Public().(ed25519.PublicKey)})
			if err != nil {
				return err
			}
			return a.bus.Publish(ctx, e)
		})
		if err != nil {
			return nil, err
		}
		for {
			as, err := st.ListAgents(ctx, env)
			if err != nil {
				return nil, err
			}
			n := 0
			for _, a := range as {
				if a.State == record.AgentPending {
					n++
				}
			}
			showProgress(o.Progress, "first contacts recorded: %d/%d", n, o.FirstContact)
			if n == o.FirstContact {
				break
			}
			select {
			case err := <-done:
				done <- err
				return nil, fmt.Errorf("the server stopped during the benchmark: %v", err)
			case <-ctx.Done():
				return nil, fmt.Errorf("benchmark: %w (raise --timeout?)", ctx.Err())
			case <-time.After(20 * time.Millisecond):
			}
		}
		p.RecordedSeconds = time.Since(start).Seconds()
		res.Phases = append(res.Phases, p)
		closeAgents(strangers)
	}

	// For comparison, on the same node: the agents connecting at once
	// with the broker's own user (no question for the server), over TLS,
	// then over plain AMQP.
	closeAgents(fleet)
	for _, tls := range []bool{true, false} {
		name := "connect, broker's user, TLS"
		if !tls {
			name = "connect, broker's user, plain"
		}
		p, err := runPhase(ctx, o.Progress, name, ab, auth, fleet, func(ctx context.Context, a *loginAgent) error {
			return a.open(ctx, ab.agentConfig(scfg, a.name, tls, nil))
		})
		if err != nil {
			return nil, err
		}
		res.Phases = append(res.Phases, p)
		closeAgents(fleet)
	}
	showProgress(o.Progress, "")
	return res, nil
}

// loginAgent is an agent of the scenario: its number, name and key, and
// its bus once connected.
type loginAgent struct {
	n    int
	name string
	key  ed25519.PrivateKey
	bus  *amqp.Bus
}

// connect opens the agent's bus, logging in as itself over TLS, and waits
// until it is connected.
func (a *loginAgent) connect(ctx context.Context, ab *authBroker, scfg amqp.Config, env string) error {
	return a.open(ctx, ab.agentConfig(scfg, a.name, true, func() (string, string, error) {
		u, p := bus.LoginCredentials(a.key, env, a.name, time.Now())
		return u, p, nil
	}))
}

// open opens the agent's bus on cfg and waits until it is connected.
func (a *loginAgent) open(ctx context.Context, cfg amqp.Config) error {
	b, err := amqp.New(cfg, zerolog.Nop())
	if err != nil {
		return err
	}
	a.bus = b
	return b.Ready(ctx)
}

// closeAgents closes the agents' buses, all at once.
func closeAgents(fleet []*loginAgent) {
	var wg sync.WaitGroup
	for _, a := range fleet {
		if b := a.bus; b != nil {
			a.bus = nil
			wg.Go(b.Close)
		}
	}
	wg.Wait()
}

// runPhase runs do for every agent at once, each in a goroutine of its
// own, and times them, counting the questions auth (nil: none) answered
// meanwhile.
// Any agent's failure fails the phase.
func runPhase(ctx context.Context, progress io.Writer, name string, ab *authBroker, auth *questions, fleet []*loginAgent,
	do func(context.Context, *loginAgent) error) (BrokerAuthPhase, error) {
	before, refusedBefore := auth.count()
	nodeBefore, selfBefore := ab.cpu()
	took := make([]time.Duration, len(fleet))
	errs := make([]error, len(fleet))
	var finished atomic.Int64
	var wg sync.WaitGroup
	start := time.Now()
	for i, a := range fleet {
		wg.Go(func() {
			errs[i] = do(ctx, a)
			took[i] = time.Since(start)
			finished.Add(1)
		})
	}
	all := make(chan struct{})
	go func() { wg.Wait(); close(all) }()
	for waiting := true; waiting; {
		select {
		case <-all:
			waiting = false
		case <-time.After(50 * time.Millisecond):
			showProgress(progress, "%s: %d/%d", name, finished.Load(), len(fleet))
		}
	}
	elapsed := time.Since(start)
	after, refusedAfter := auth.count()
	nodeAfter, selfAfter := ab.cpu()
	for i, err := range errs {
		if err != nil {
			if errors.Is(err, context.DeadlineExceeded) {
				err = fmt.Errorf("%w (raise --timeout?)", err)
			}
			return BrokerAuthPhase{}, fmt.Errorf("%s: agent %s: %w", name, fleet[i].name, err)
		}
	}
	slices.Sort(took)
	var q int64
	byKind := map[string]int64{}
	for k, n := range after {
		if d := n - before[k]; d > 0 {
			byKind[k] = d
			q += d
		}
	}
	return BrokerAuthPhase{Name: name, Agents: len(fleet), Seconds: elapsed.Seconds(),
		Questions: q, ByKind: byKind, Refused: refusedAfter - refusedBefore, QuestionsPerSecond: float64(q) / elapsed.Seconds(),
		NodeCPUSeconds: (nodeAfter - nodeBefore).Seconds(), SelfCPUSeconds: (selfAfter - selfBefore).Seconds(),
		P50Seconds: took[len(took)/2].Seconds(), P95Seconds: took[len(took)*95/100].Seconds(), MaxSeconds: took[len(took)-1].Seconds()}, nil
}
