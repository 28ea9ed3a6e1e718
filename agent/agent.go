// Package agent is the process that enforces intent on a host. It connects
// outward to the bus, introduces itself (hello), keeps its slice of the
// released version up to date from the server's diffs, runs deploys,
// repairs and dry runs with the engine, and streams every result back.
//
// Everything it must not forget lives in its journal (package journal):
// a command is journaled before it is acknowledged, an event before it is
// published, a change before it is applied. So the agent survives a kill -9,
// a broker outage or a server restart without losing or repeating anything,
// and keeps enforcing its cached intent while the broker is away.
//
// Of several processes hosting one agent name, one is primary (it holds the
// bus's claim on the name); the others stand by and take over when it ends.
package agent

import (
	"cmp"
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"

	"github.com/tetherhq/tether/agent/engine"
	"github.com/tetherhq/tether/agent/facts"
	"github.com/tetherhq/tether/agent/handler"
	"github.com/tetherhq/tether/agent/journal"
	"github.com/tetherhq/tether/bus"
	"github.com/tetherhq/tether/model"
)

// Config configures one agent.
type Config struct {
	Env  string
	Name string
	// Version is the version of this agent's build, told to the server
	// in hello and heartbeats ("" says "dev").
	Version string
	// StateDir holds the agent's journal; "" keeps it in memory (the
	// embedded mode, whose agents live as long as one command).
	StateDir string
	// Labels are announced in hello; hostgroups select agents by them.
	Labels map[string]string
	// Token is an enrollment token, sent in hello until enrolled.
	Token string
	// Parallelism bounds concurrent resources in a deploy.
	Parallelism int
	// ServerKey pins the server's public key; ServerFingerprint pins it by
	// its fingerprint ("SHA256:…"), and an enrollment token carries that
	// fingerprint too. An agent that has not enrolled yet needs one of the
	// three: it trusts nothing before it knows the server.
	ServerKey         ed25519.PublicKey
	ServerFingerprint string
	// MaxCommandAge: a command issued longer ago than this by the
	// server's clock is refused, whatever its id (a replay, or old news
	// from a long absence: the answer to the next hello brings what still
	// matters).
	MaxCommandAge time.Duration
	// StatusBatch is the most results one resource.status message carries.
	StatusBatch int
	// StatusLinger is how long a partial batch waits for more results.
	StatusLinger time.Duration
	// Heartbeat is how often an enrolled agent says it is alive: by
	// default a third of the 90 s after which the server shows an agent
	// not heard from offline. A server that takes every event as a sign
	// of life (bus.Enrolled.EventsAlive) is not sent a heartbeat when
	// the agent sent anything else within the last half interval.
	Heartbeat time.Duration
	// HelloRetry is the first pause before saying hello again while not
	// enrolled (jittered: half of it to all of it); it doubles up to
	// HelloRetryMax, which is also the pause after the server rejected the
	// agent. A hello is confirmed by the broker and waits in the server's
	// queue, and accepting an agent answers it at once: saying it again
	// serves only a hello the server dropped, while each one said again
	// is work for a server that enrolls thousands at once.
	HelloRetry, HelloRetryMax time.Duration
	// ClaimRetry is how often a standby tries to become primary.
	ClaimRetry time.Duration
	// ClaimWait is how long the agent waits for the bus before it enforces
	// its journaled intent on its own (the broker is unreachable).
	ClaimWait time.Duration
	// Grace bounds the clean shutdown: flushing the outbox and saying
	// goodbye.
	Grace time.Duration
	// Journal tunes the journal; NoSync is for benchmarks only.
	Journal journal.Config
	// Facts gathers the host's facts (nil: facts.Gather). Agents hosted
	// by one process on one host may share one cached gatherer.
	Facts func(context.Context) map[string]any
	// FactsInterval is how often facts are gathered again; changed facts
	// are reported at once.
	FactsInterval time.Duration
	// PollInterval is how often watched resources whose state shows in no
	// file (services) are verified.
	PollInterval time.Duration
	// Settle is how long the compliance monitor lets a burst of file
	// events settle before it verifies.
	Settle time.Duration
	// A resource that drifts FlapCount times within FlapWindow is
	// flapping: one report says so, and the next waits until it has been
	// stable for a FlapWindow.
	FlapWindow time.Duration
	FlapCount  int
	// NoWatch turns the compliance monitor off: drift is then found only
	// by repairs. For a process that exits right after its deploy (the
	// one-shot `tether deploy`), where watching would be work for nobody.
	NoWatch bool
	// ReleaseMemoryAt: after a job, or a verification, of at least this
	// many resources the agent hands the memory it no longer uses back to
	// the operating system, so that a daemon idles at what it holds
	// rather than at the Go heap's goal, twice that (0: 1000; negative:
	// never, for a process about to exit).
	ReleaseMemoryAt int
	// Relogin, when set, is called once the agent's key rolled over: a
	// transport that logs in to the broker with the agent's key dials
	// again, as the agent's new self (the old login stops holding).
	Relogin func()
	// Platforms are the platforms this agent serves (a libvirt
	// hypervisor it runs on): the server's machine commands act through
	// their drivers, and their inventory is reported every
	// InventoryInterval. The agent closes them when Run returns.
	Platforms         []handler.MachineDriver
	InventoryInterval time.Duration
}

// Default returns the defaults of every setting that has one: what New
// uses for a zero field (a negative one too, but for ReleaseMemoryAt, where
// it means never). Env and Name have none.
func Default() Config {
	return Config{
		Parallelism:       engine.DefaultParallelism,
		MaxCommandAge:     time.Hour,
		StatusBatch:       256,
		StatusLinger:      20 * time.Millisecond,
		Heartbeat:         30 * time.Second,
		HelloRetry:        time.Minute,
		HelloRetryMax:     30 * time.Minute,
		ClaimRetry:        time.Second,
		ClaimWait:         10 * time.Second,
		Grace:             5 * time.Second,
		Journal:           journal.Default(),
		Facts:             facts.Gather,
		FactsInterval:     time.Minute,
		PollInterval:      5 * time.Second,
		Settle:            2 * time.Millisecond,
		FlapWindow:        time.Minute,
		FlapCount:         5,
		ReleaseMemoryAt:   1000,
		InventoryInterval: time.Minute,
	}
}

// withDefaults fills the zero (or negative) fields of c from Default.
func (c Config) withDefaults() Config {
	def := Default()
	orDefault(&c.Parallelism, def.Parallelism)
	orDefault(&c.MaxCommandAge, def.MaxCommandAge)
	orDefault(&c.StatusBatch, def.StatusBatch)
	orDefault(&c.StatusLinger, def.StatusLinger)
	orDefault(&c.Heartbeat, def.Heartbeat)
	orDefault(&c.HelloRetry, def.HelloRetry)
	orDefault(&c.HelloRetryMax, def.HelloRetryMax)
	orDefault(&c.ClaimRetry, def.ClaimRetry)
	orDefault(&c.ClaimWait, def.ClaimWait)
	orDefault(&c.Grace, def.Grace)
	orDefault(&c.FactsInterval, def.FactsInterval)
	orDefault(&c.PollInterval, def.PollInterval)
	orDefault(&c.Settle, def.Settle)
	orDefault(&c.FlapWindow, def.FlapWindow)
	orDefault(&c.FlapCount, def.FlapCount)
	orDefault(&c.InventoryInterval, def.InventoryInterval)
	if c.Journal.CompactAt == 0 {
		c.Journal.CompactAt = def.Journal.CompactAt
	}
	if c.Facts == nil {
		c.Facts = def.Facts
	}
	if c.ReleaseMemoryAt == 0 { // negative: never
		c.ReleaseMemoryAt = def.ReleaseMemoryAt
	}
	return c
}

// orDefault sets *v to def when it is zero or negative.
func orDefault[T int | time.Duration](v *T, def T) {
	if *v <= 0 {
		*v = def
	}
}

// releaseMemory returns unused memory to the operating system after work
// on n resources, if that is much (Config.ReleaseMemoryAt). A full
// collection: a few milliseconds for tens of thousands of resources, once
// per large job.
func (a *Agent) releaseMemory(n int) {
	if a.cfg.ReleaseMemoryAt > 0 && n >= a.cfg.ReleaseMemoryAt {
		debug.FreeOSMemory()
	}
}

// ErrConfig is wrapped by every error Validate returns, and by New's
// errors about the server key it is told to trust.
var ErrConfig = errors.New("invalid agent configuration")

// Validate checks the configuration, once its zero fields are filled
// from Default.
func (c Config) Validate() error {
	if err := model.ValidateEnvName(c.Env); err != nil {
		return fmt.Errorf("%w: %w", ErrConfig, err)
	}
	if err := model.ValidateAgentName(c.Name); err != nil {
		return fmt.Errorf("%w: %w", ErrConfig, err)
	}
	if c.ServerKey != nil && len(c.ServerKey) != ed25519.PublicKeySize {
		return fmt.Errorf("%w: the server key is not an ed25519 public key", ErrConfig)
	}
	if c.HelloRetryMax < c.HelloRetry {
		return fmt.Errorf("%w: the hello retry cap is below the first retry", ErrConfig)
	}
	if err := c.Journal.Validate(); err != nil {
		return fmt.Errorf("%w: %w", ErrConfig, err)
	}
	return nil
}

// Transport is what an agent needs of the bus. An agent never declares its
// inbox: the server does when it hears the agent's hello.
type Transport interface {
	ConsumeInbox(ctx context.Context, env, agent string, h bus.Handler, opts ...bus.InboxOption) error
	Publish(ctx context.Context, e *bus.Envelope) error
	Claim(ctx context.Context, env, agent string) (bus.Claim, error)
}

// Agent enforces one agent's slice.
type Agent struct {
	// machineOps are the machine commands running, and the platforms'
	// inventory loop; machineQueues the commands waiting, by machine.
	machineOps    sync.WaitGroup
	machineMu     sync.Mutex
	machineQueues map[string][]bus.Machine
	cfg           Config
	bus           Transport
	reg           *handler.Registry
	engine        *engine.Engine
	journal       *journal.Journal
	signer        *bus.Signer
	deps          *dependencies
	log           zerolog.Logger

	// wake pokes the worker: a job, a slice or pause changed.
	wake chan struct{}
	// flush pokes the outbox's publisher.
	flush chan struct{}
	// enrolled is closed once the server's key is known.
	enrolledOnce sync.Once
	enrolled     chan struct{}
	// rejected pokes the hello loop: slow down.
	rejected chan struct{}
	// answered is poked by the server's answer to a hello (enrolled or
	// rejected): the inbox is FIFO, so every command queued before the
	// hello has been journaled by then.
	answered chan struct{}
	// factsAgain is poked when the server took the hello's labels and
	// facts for older news: they are reported again, numbered past.
	factsAgain chan struct{}

	// The agent has two locks. Lock order: enforce, then mu. enforce is
	// held for a whole job or verification, across handler calls; mu only
	// for quick reads and writes of the fields it guards, which a holder
	// of enforce may take (a job recording itself as running, the
	// monitor's arm reading hashes), never the other way round: nothing
	// takes enforce while holding mu. The compliance monitor's own lock
	// (monitor.mu) is taken under enforce or alone, never with mu; the
	// monitor reaches the agent's locks only through enforcing and
	// sliceHashes.

	// enforce is held by whatever changes the host: a job, or the
	// compliance monitor verifying and healing. So the monitor never
	// verifies the agent's own writes half-done.
	enforce sync.Mutex

	// plans waits for the plans running (startPlan), which Run waits for
	// before it returns; planning holds a token while one runs.
	plans    sync.WaitGroup
	planning chan struct{}
	// mu guards hashes, running, facts, mon and asked; see the lock order
	// above.
	mu sync.Mutex
	// hashes are the resource hashes of the journal's slice.
	hashes map[model.ID]model.Hash
	// running is the job in progress, nil between jobs.
	running *runningJob
	// facts are the facts the server was last told.
	facts map[string]any
	// mon is the compliance monitor while the worker runs.
	mon *monitor
	// asked is this process's request for the full desired state while
	// it is under way.
	asked stateAsk

	// pin is the fingerprint of the server key to expect at enrollment.
	pin string
	// clock is the server's clock as measured.
	clock *clock
	// refused counts commands refused since the last report.
	refused refusals
	// eventsAlive is set when the server takes every event as a sign of
	// life (bus.Enrolled.EventsAlive); told is when this process last
	// published an event, on the monotonic clock since epoch (a step of
	// the wall clock must not silence the heartbeats).
	eventsAlive atomic.Bool
	told        atomic.Int64
	epoch       time.Time
	// noExchange is set while publishes fail for want of the server's
	// exchanges (bus.ErrNoExchange), once that was said (publishFailed).
	noExchange atomic.Bool
}

type runningJob struct {
	job    journal.Job
	cancel context.CancelCauseFunc
}

// errSuperseded ends a repair that a deploy replaced.
var errSuperseded = errors.New("superseded by a deploy")

// errPaused stops the job running when the server pauses the agent: the
// job stays journaled and runs once the agent is resumed.
var errPaused = errors.New("paused by the server")

// New opens the agent's journal and returns an agent for cfg that talks
// over t and enforces with the handlers of reg. Close releases it.
func New(cfg Config, t Transport, reg *handler.Registry, log zerolog.Logger) (*Agent, error) {
	cfg = cfg.withDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	pin, err := pinOf(&cfg)
	if err != nil {
		return nil, fmt.Errorf("agent %s: %w", cfg.Name, err)
	}
	j, err := journal.Open(cfg.StateDir, cfg.Name, cfg.Journal)
	if err != nil {
		return nil, fmt.Errorf("agent %s: %w", cfg.Name, err)
	}
	log = log.With().Str("component", "agent").Str("agent", cfg.Name).Logger()
	for _, r := range j.Repairs() {
		log.Warn().Str("state_dir", j.Dir()).Msg("journal: " + r)
	}
	a := &Agent{
		epoch:   time.Now(),
		cfg:     cfg,
		bus:     t,
		reg:     reg,
		engine:  engine.New(reg, log),
		journal: j,
		// Sequence numbers only grow, across restarts and a journal
		// started over: each is reserved in the identity before use.
		signer:     bus.NewReservingSigner(j.Key(), j.SeqFloor(), j),
		deps:       newDependencies(),
		log:        log,
		wake:       make(chan struct{}, 1),
		planning:   make(chan struct{}, 1),
		flush:      make(chan struct{}, 1),
		enrolled:   make(chan struct{}),
		rejected:   make(chan struct{}, 1),
		answered:   make(chan struct{}, 1),
		factsAgain: make(chan struct{}, 1),
		pin:        pin,
		clock:      newClock(),
	}
	held := j.ServerKey()
	switch {
	case held != nil && pin != "" && bus.Fingerprint(held) != pin && (pin == fingerprintOf(j.PreviousServerKey()) || pin == fingerprintOf(j.NextServerKey())):
		// The server's signing key rolled over: the configuration names
		// the key the agent left, or the next one it takes already.
		log.Info().Str("configured", pin).Str("server_key", bus.Fingerprint(held)).
			Msg("the configured server key (enrollment token or --server-key) is the server's previous or next one: the agent trusts the key its journal holds")
		a.markEnrolled()
	case held != nil && pin != "" && bus.Fingerprint(held) != pin:
		j.Close()
		return nil, fmt.Errorf("agent %s: the journal in %s trusts server key %s, not %s as configured; "+
			"an agent never enrolls again on its own: to enroll it with another server, remove the state directory",
			cfg.Name, cfg.StateDir, bus.Fingerprint(held), pin)
	case held == nil && pin == "":
		j.Close()
		return nil, fmt.Errorf("agent %s: %w: start it with an enrollment token (`tether agent token create` prints one; it carries the server's key fingerprint), "+
			"or pin the server's key with --server-key (`tether server key` prints it) and have an operator accept the agent", cfg.Name, ErrNoServerKey)
	case held != nil:
		a.markEnrolled()
	}
	if err := a.rehash(j.Slice()); err != nil {
		j.Close()
		return nil, err
	}
	return a, nil
}

// fingerprintOf names a key, "" for none.
func fingerprintOf(k ed25519.PublicKey) string {
	if k == nil {
		return ""
	}
	return bus.Fingerprint(k)
}

// enforcing runs f holding the enforce lock: nothing else changes the host
// meanwhile. f may take mu (lock order: enforce, then mu); the caller must
// not hold mu.
func (a *Agent) enforcing(f func()) {
	a.enforce.Lock()
	defer a.enforce.Unlock()
	f()
}

// sliceHashes returns the resource hashes of the journal's slice (a map
// replaced by rehash, never changed in place).
func (a *Agent) sliceHashes() map[model.ID]model.Hash {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.hashes
}

// Close releases the agent's journal. Call it after Run returned.
func (a *Agent) Close() error { return a.journal.Close() }

// PublicKey returns the agent's public key.
func (a *Agent) PublicKey() ed25519.PublicKey { return a.signer.PublicKey() }

// BrokerLogin returns a fresh user name and password with which this
// agent logs in to a broker that asks the server about each agent (see
// bus.LoginCredentials): its own identity, no shared password.
func (a *Agent) BrokerLogin() (user, password string, err error) {
	user, password = bus.LoginCredentials(a.journal.Key(), a.cfg.Env, a.cfg.Name, time.Now())
	return user, password, nil
}

// Journal returns the agent's journal, for inspection.
func (a *Agent) Journal() *journal.Journal { return a.journal }

func (a *Agent) markEnrolled() { a.enrolledOnce.Do(func() { close(a.enrolled) }) }

func (a *Agent) isEnrolled() bool {
	select {
	case <-a.enrolled:
		return true
	default:
		return false
	}
}

// Run serves until ctx ends, then shuts down cleanly: the running handler
// is cancelled, the outbox flushed and goodbye said (within Grace). It
// returns ctx's error on a clean stop, or the first error that stops it.
//
// Run becomes primary when it can claim the agent's name on the bus and
// stands by while another process holds it. While the bus cannot be
// reached it still runs the jobs it journaled.
func (a *Agent) Run(ctx context.Context) error {
	var wg sync.WaitGroup
	defer wg.Wait()
	defer a.plans.Wait()
	// The outbox publisher runs for the whole Run, primary or not: events
	// journaled are delivered whatever happens to the claim.
	outCtx, stopOut := context.WithCancel(context.WithoutCancel(ctx))
	defer stopOut()
	wg.Add(1)
	go func() {
		defer wg.Done()
		a.publishOutbox(outCtx)
	}()
	if len(a.cfg.Platforms) > 0 {
		defer a.closePlatforms()
		defer a.machineOps.Wait()
		a.machineOps.Add(1)
		go func() {
			defer a.machineOps.Done()
			a.reportPlatforms(ctx)
		}()
	}

	var work *worker
	stopWork := func() {
		if work != nil {
			work.stop()
			work = nil
		}
	}
	startWork := func() {
		if work == nil {
			work = a.startWorker(ctx)
		}
	}
	defer stopWork()

	standingBy, unknown, lost := false, false, false
	waitingSince := time.Now()
	retry := a.cfg.ClaimRetry
	for ctx.Err() == nil {
		cctx, cancel := context.WithTimeout(ctx, a.cfg.ClaimWait)
		claim, err := a.bus.Claim(cctx, a.cfg.Env, a.cfg.Name)
		cancel()
		switch {
		case err == nil:
			if standingBy {
				a.log.Info().Msg("now primary for this agent name")
			}
			standingBy, unknown, retry = false, false, a.cfg.ClaimRetry
			err := a.catchUpAndServe(ctx, claim, work == nil, startWork)
			claim.Release()
			if err != nil {
				stopWork()
				a.finish(ctx, &wg, stopOut)
				return err
			}
			if ctx.Err() == nil {
				a.log.Warn().Msg("lost the bus; claiming the agent name again (work goes on meanwhile)")
			}
			waitingSince, lost = time.Now(), true
			continue
		case errors.Is(err, bus.ErrClaimed):
			switch {
			case standingBy:
			case lost && time.Since(waitingSince) < 2*time.Minute:
				// The broker drops the claim of a connection it has
				// not seen close yet only once it does.
				a.log.Warn().Msg("the agent name is still claimed on the broker: by this process's lost connection, until the broker sees it closed, or by another process; standing by")
			default:
				a.log.Warn().Msg("another process is primary for this agent name; standing by")
			}
			standingBy, retry = true, a.cfg.ClaimRetry
			stopWork()
		case errors.Is(err, bus.ErrForbidden):
			// A broker that checks each agent's rights lets an agent the
			// server does not know yet say hello, and nothing else: the
			// hello makes the server record it (pending, or enrolled by
			// its token) and make its inbox.
			if !unknown {
				a.log.Info().Err(err).Msg("the broker lets this agent in only once the server knows its key; saying hello")
			}
			unknown = true
			if err := a.hello(ctx); err != nil && ctx.Err() == nil {
				a.publishFailed(err, "cannot say hello")
			}
			retry = min(2*retry, 30*time.Second)
		case ctx.Err() != nil:
		default:
			// The bus is away. Work goes on from the journal once it has
			// been away a while, unless another process was primary.
			if !standingBy && work == nil && time.Since(waitingSince) >= a.cfg.ClaimWait {
				a.log.Warn().Err(err).Msg("cannot reach the bus; enforcing the journaled intent until it is back")
				startWork()
			}
			retry = min(2*retry, 30*time.Second)
		}
		sleep(ctx, jitter(retry))
	}
	stopWork()
	a.finish(ctx, &wg, stopOut)
	return ctx.Err()
}

// finish flushes the outbox and says goodbye, both bounded by Grace, then
// stops the publisher.
func (a *Agent) finish(ctx context.Context, wg *sync.WaitGroup, stopOut context.CancelFunc) {
	grace, cancel := context.WithTimeout(context.WithoutCancel(ctx), a.cfg.Grace)
	defer cancel()
	for a.journal.OutboxLen() > 0 && grace.Err() == nil {
		a.poke(a.flush)
		sleep(grace, 10*time.Millisecond)
	}
	if n := a.journal.OutboxLen(); n > 0 {
		a.log.Warn().Int("events", n).Msg("events left in the outbox; they are sent on the next start")
	}
	stopOut()
	wg.Wait()
	if a.isEnrolled() {
		if err := a.publishNow(grace, bus.KindGoodbye, bus.Empty{}); err != nil {
			a.log.Info().Err(err).Msg("could not say goodbye")
		}
	}
}

// catchUpAndServe serves the inbox while the claim holds (connected). When
// the worker is not running yet (a start, a takeover) it is started once
// the commands queued while this process was away are journaled — known
// by the server's answer to the hello, which queues behind them — or after
// ClaimWait when no answer comes: an agent back from a long absence goes
// straight to the latest desired state instead of replaying each version
// it missed.
func (a *Agent) catchUpAndServe(ctx context.Context, claim bus.Claim, catchUp bool, startWork func()) error {
	if !catchUp {
		startWork()
		return a.connected(ctx, claim)
	}
	select {
	case <-a.answered: // an answer to an earlier connection's hello
	default:
	}
	done := make(chan error, 1)
	go func() { done <- a.connected(ctx, claim) }()
	t := time.NewTimer(a.cfg.ClaimWait)
	defer t.Stop()
	select {
	case <-a.answered:
	case <-t.C:
		a.log.Info().Dur("waited", a.cfg.ClaimWait).Msg("no answer to hello yet; enforcing the journaled intent meanwhile")
	case err := <-done:
		return err
	case <-ctx.Done():
	}
	startWork()
	return <-done
}

// connected serves while the claim holds: the inbox, hello until enrolled,
// heartbeats after. It returns nil when the claim is lost or ctx ends.
func (a *Agent) connected(ctx context.Context, claim bus.Claim) error {
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		select {
		case <-claim.Lost():
			cancel()
		case <-cctx.Done():
		}
	}()
	// The server declares the inbox when it hears a hello: until then
	// the consumer waits for it. An agent not enrolled yet says hello on
	// its own schedule (introduce), slower once rejected; an enrolled
	// agent whose inbox went missing says hello now, so the server
	// declares it again.
	missing := bus.OnInboxMissing(func() {
		if !a.isEnrolled() {
			return
		}
		if err := a.hello(cctx); err != nil && cctx.Err() == nil {
			a.publishFailed(err, "cannot say hello to have the missing inbox declared again")
		}
	})
	// An inbox deleted on the broker took its commands with it, and sends
	// failed while it was missing: once it is consumed again, hello makes
	// the server send what the agent lacks (again, if a hello said while
	// it was missing did already: the inbox may have been deleted and
	// declared again unseen).
	rehello := bus.OnInboxLost(func() {
		if err := a.hello(cctx); err != nil && cctx.Err() == nil {
			a.publishFailed(err, "cannot say hello after the inbox was declared again")
		}
	})
	opts := []bus.InboxOption{missing, rehello}
	if !a.isEnrolled() {
		// Never enrolled: the inbox comes with the server's answer to
		// the hello said now; look for it once the server had time to.
		opts = append(opts, bus.LookAfter(jitter(firstInboxLook)))
	}
	var wg sync.WaitGroup
	errs := make(chan error, 1)
	wg.Add(2)
	go func() {
		defer wg.Done()
		if err := a.bus.ConsumeInbox(cctx, a.cfg.Env, a.cfg.Name, a.handle, opts...); err != nil && cctx.Err() == nil {
			errs <- fmt.Errorf("agent %s: inbox: %w", a.cfg.Name, err)
		}
		cancel()
	}()
	go func() {
		defer wg.Done()
		a.introduce(cctx)
	}()
	wg.Wait()
	select {
	case err := <-errs:
		if errors.Is(err, bus.ErrClosed) {
			return err
		}
		a.log.Warn().Err(err).Msg("inbox consumer stopped")
	default:
	}
	return nil
}

// firstInboxLook is about when an agent never enrolled first looks for
// its inbox after saying hello (jittered), unless the server's nudge (the
// inbox is there) comes first.
const firstInboxLook = 30 * time.Second

// introduce says hello, again with back-off until enrolled (slowest after
// a rejection), then heartbeats.
func (a *Agent) introduce(ctx context.Context) {
	pause := a.cfg.HelloRetry
	// series is the sequence number of the first hello no answer came to
	// yet: the hellos said again repeat it (bus.Hello.Repeats).
	var series uint64
	for first := true; ; first = false {
		if !first {
			// The last hello was handled by now: the server takes a
			// report of this agent's.
			a.reportRefusals(ctx)
		}
		seq, err := a.sayHello(ctx, series)
		if err != nil && ctx.Err() == nil {
			a.publishFailed(err, "cannot say hello")
		}
		if series == 0 {
			series = seq
		}
		if a.isEnrolled() {
			// A rollover under way (one a restart or a lost
			// acknowledgement interrupted) is proposed again.
			a.proposeKey(ctx)
			break
		}
		select {
		case <-a.enrolled:
			a.proposeKey(ctx)
		case <-a.rejected:
			pause, series = a.cfg.HelloRetryMax, 0
			if !sleep(ctx, jitter(pause)) {
				return
			}
			continue
		case <-ctx.Done():
			return
		case <-time.After(jitter(pause)):
			if pause == a.cfg.HelloRetry || pause == a.cfg.HelloRetryMax {
				// Said at the default level: silence is what an
				// operator with a mistyped --env would otherwise get.
				a.log.Warn().Str("env", a.cfg.Env).Str("agent", a.cfg.Name).
					Msgf("no answer from the server to this agent's hello: it may wait for an operator to accept it "+
						"(tether agent list --env %s shows it with why; tether agent accept %s), environment %s may not exist on the server (check --env), "+
						"or no server uses this broker (check --amqp and --amqp-namespace); saying hello again", a.cfg.Env, a.cfg.Name, a.cfg.Env)
			}
			pause = min(2*pause, a.cfg.HelloRetryMax)
			continue
		}
		break
	}
	t := time.NewTicker(a.cfg.Heartbeat)
	defer t.Stop()
	ft := time.NewTicker(a.cfg.FactsInterval)
	defer ft.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-ft.C:
			if err := a.reportFacts(ctx, false); err != nil && ctx.Err() == nil {
				a.publishFailed(err, "changed facts not sent; trying again on the next check")
			}
		case <-a.factsAgain:
			if err := a.reportFacts(ctx, true); err != nil && ctx.Err() == nil {
				a.publishFailed(err, "facts not sent again; they are on the next check")
				a.mu.Lock()
				a.facts = nil
				a.mu.Unlock()
			}
		case <-t.C:
			a.reportRefusals(ctx)
			// An agent that sent anything within half an interval
			// said it lives: at most one and a half intervals pass
			// between two signs of life, and one heartbeat lost on
			// top still leaves it within the server's offline window
			// (three intervals at the default).
			if !a.eventsAlive.Load() || a.sinceTold() > a.cfg.Heartbeat/2 {
				body := bus.Heartbeat{Generation: a.journal.Slice().Generation, Outbox: a.journal.OutboxLen(),
					Version: a.version(), Protocol: bus.Protocol}
				if err := a.publishNow(ctx, bus.KindHeartbeat, body); err != nil && ctx.Err() == nil {
					a.log.Debug().Err(err).Msg("heartbeat not sent")
				}
			}
		}
	}
}

func (a *Agent) hello(ctx context.Context) error {
	_, err := a.sayHello(ctx, 0)
	return err
}

// sayHello says hello, repeating the series begun by hello number
// repeats (0: a first hello), and returns its sequence number.
func (a *Agent) sayHello(ctx context.Context, repeats uint64) (uint64, error) {
	s := a.journal.Slice()
	hash, err := s.Hash()
	if err != nil {
		return 0, err
	}
	h := bus.Hello{
		PublicKey:       a.PublicKey(),
		KeyAgreementKey: a.journal.Kex().PublicKey().Bytes(),
		Labels:          a.cfg.Labels,
		Facts:           a.gatherFacts(ctx),
		Kinds:           a.reg.Kinds(),
		Generation:      s.Generation,
		SliceHash:       hash,
		ServerKeys:      a.serverKeys(),
		Version:         a.version(),
		Protocol:        bus.Protocol,
		Repeats:         repeats,
	}
	if !a.isEnrolled() {
		h.Token = a.cfg.Token
	}
	e, err := a.signer.Seal(bus.KindHello, a.cfg.Env, a.cfg.Name, h)
	if err != nil {
		return 0, err
	}
	a.clock.sent(e.ID)
	if err := a.bus.Publish(ctx, e); err != nil {
		return 0, fmt.Errorf("publish %s: %w", bus.KindHello, err)
	}
	a.noExchange.Store(false)
	return e.Seq, nil
}

// version is the version of this agent's build, as told to the server.
func (a *Agent) version() string { return cmp.Or(a.cfg.Version, "dev") }

// gatherFacts gathers the host's facts and remembers them as told.
func (a *Agent) gatherFacts(ctx context.Context) map[string]any {
	f := a.cfg.Facts(ctx)
	a.mu.Lock()
	a.facts = f
	a.mu.Unlock()
	return f
}

// reportFacts sends the host's facts: always when asked (facts.refresh),
// else only when they changed since they were last told.
func (a *Agent) reportFacts(ctx context.Context, always bool) error {
	if always {
		// Asked for: facts as they are now, not a shared cache's copy.
		ctx = facts.Fresh(ctx)
	}
	f := a.cfg.Facts(ctx)
	a.mu.Lock()
	same := model.Equal(f, a.facts)
	a.mu.Unlock()
	if same && !always {
		return nil
	}
	if err := a.publishNow(ctx, bus.KindFacts, bus.Facts{Facts: f, Labels: a.cfg.Labels}); err != nil {
		return err
	}
	a.mu.Lock()
	a.facts = f
	a.mu.Unlock()
	if !same {
		a.log.Info().Msg("host facts changed; reported")
	}
	return nil
}

// publishNow seals and publishes an event that is not worth journaling:
// hello, heartbeat, goodbye are said again when it matters.
func (a *Agent) publishNow(ctx context.Context, kind bus.Kind, body any) error {
	e, err := a.signer.Seal(kind, a.cfg.Env, a.cfg.Name, body)
	if err != nil {
		return err
	}
	if err := a.bus.Publish(ctx, e); err != nil {
		return fmt.Errorf("publish %s: %w", kind, err)
	}
	a.toldNow()
	return nil
}

// toldNow notes that an event was just published.
func (a *Agent) toldNow() {
	a.told.Store(int64(time.Since(a.epoch)))
	a.noExchange.Store(false)
}

// publishFailed logs a failed publish (msg says what failed) as a
// warning. The broker missing the server's exchanges (bus.ErrNoExchange:
// a server on another --amqp-namespace, or none running) fails every
// publish the same way until a server declares them: that is said once,
// with what to check, and again only after a publish went through; the
// failures in between go to the debug log.
func (a *Agent) publishFailed(err error, msg string) {
	if errors.Is(err, bus.ErrNoExchange) && a.noExchange.Swap(true) {
		a.log.Debug().Err(err).Msg(msg)
		return
	}
	a.log.Warn().Err(err).Msg(msg)
}

// sinceTold is how long ago this process last published an event.
func (a *Agent) sinceTold() time.Duration {
	return time.Since(a.epoch) - time.Duration(a.told.Load())
}

func (a *Agent) poke(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

// sleep waits d or until ctx ends; it reports whether d passed.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// jitter spreads a pause over [d/2, d], so a fleet does not act in step.
func jitter(d time.Duration) time.Duration {
	if d <= 1 {
		return d
	}
	return d/2 + time.Duration(rand.Int64N(int64(d/2)+1))
}
