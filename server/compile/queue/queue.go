// Package queue decides when the server compiles an environment's
// model. Many things ask for a compile (an operator, a webhook, a poll, an
// agent accepted or deleted, facts that changed), often in bursts: a
// thousand agents reporting new facts within a second. The queue folds them
// so that each environment has at most one compile running and one waiting,
// and the waiting one carries every trigger that asked for it, counted.
//
// A compile waits a short settle delay after the first trigger that asked
// for it, so a burst folds into it. Triggers that come while a compile runs
// fold into the next one, which starts when the running one ends, and no
// sooner than a gap after it started. Each
// environment with work has one worker goroutine, owned by the Queue; a
// trigger never starts one of its own.
//
// The queue only decides when: what a compile does (its source, its
// report, its release) is the Func it is given, and it knows nothing of
// the store or the server.
package queue

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/rs/zerolog"

	"github.com/tetherhq/tether/server/record"
)

// Config is the queue's configuration.
type Config struct {
	// Settle is how long a compile waits after the first trigger that
	// asked for it, for more to fold in.
	Settle time.Duration
	// Gap is the least time between the starts of two compiles of one
	// environment (0: 2.5 settles): a storm of triggers lasting a second
	// makes at most three compiles, however fast each one is.
	Gap time.Duration
}

// Default returns the default configuration.
func Default() Config {
	return Config{Settle: 200 * time.Millisecond, Gap: 500 * time.Millisecond}
}

// ErrConfig is wrapped by every error Validate returns.
var ErrConfig = errors.New("invalid compile queue configuration")

// MaxSettle bounds Config.Settle: a compile should follow what asked for it
// within seconds.
const MaxSettle = time.Minute

// Validate checks the configuration.
func (c Config) Validate() error {
	if c.Settle <= 0 || c.Settle > MaxSettle {
		return fmt.Errorf("%w: compile-settle %v: want above 0, at most %v", ErrConfig, c.Settle, MaxSettle)
	}
	if c.Gap < 0 || c.Gap > MaxSettle {
		return fmt.Errorf("%w: compile gap %v: want 0 (2.5 settles) to %v", ErrConfig, c.Gap, MaxSettle)
	}
	return nil
}

// ErrClosed: the queue was closed, or its context ended; it takes no more
// triggers.
var ErrClosed = errors.New("compile queue is closed")

// Batch is what one compile was asked for by.
type Batch struct {
	// Triggers are the triggers folded into the compile, one per kind.
	Triggers record.Triggers
	// Since is when the first of them came.
	Since time.Time
}

// Func compiles env. Its error is logged; the queue goes on with the
// environment's next compile either way. It returns soon after ctx ends.
type Func func(ctx context.Context, env string, b Batch) error

// Queue runs compiles as triggers ask for them.
type Queue struct {
	// ctx is the process-lifetime context the compiles run under: when it
	// ends, the queue stops.
	ctx     context.Context
	settle  time.Duration
	gap     time.Duration
	compile Func
	log     zerolog.Logger
	stop    chan struct{} // closed by Close
	workers sync.WaitGroup

	// after and idle are for tests: after starts the settle delay, idle
	// hears that an environment's worker ran out of work.
	after func(time.Duration) <-chan time.Time
	idle  func(env string)

	mu     sync.Mutex
	closed bool
	envs   map[string]*envQueue // environments with work
	// started is when each environment's last compile started: the gap
	// holds across workers (one ends when its environment runs out of
	// work).
	started map[string]time.Time
}

// envQueue is one environment's work.
type envQueue struct {
	running bool
	queued  *Batch
}

// New returns a queue that calls compile, under ctx, as triggers ask.
// Zero fields of cfg take their defaults.
func New(ctx context.Context, cfg Config, compile Func, log zerolog.Logger) (*Queue, error) {
	if cfg.Settle == 0 {
		cfg.Settle = Default().Settle
	}
	if cfg.Gap == 0 {
		cfg.Gap = min(cfg.Settle*5/2, MaxSettle)
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if compile == nil {
		return nil, fmt.Errorf("compile queue: no compile function")
	}
	return &Queue{
		ctx:     ctx,
		settle:  cfg.Settle,
		gap:     cfg.Gap,
		compile: compile,
		log:     log.With().Str("component", "compilequeue").Logger(),
		stop:    make(chan struct{}),
		after:   time.After,
		idle:    func(string) {},
		envs:    map[string]*envQueue{},
		started: map[string]time.Time{},
	}, nil
}

// Trigger asks for a compile of env: t folds into the compile waiting, or
// starts one waiting. A count below 1 counts as 1. ErrClosed once the queue
// is closed or its context ended.
func (q *Queue) Trigger(env string, t record.Trigger) error {
	if !t.Kind.Valid() {
		return fmt.Errorf("compile trigger for %q: unknown kind %q", env, t.Kind)
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.closed || q.ctx.Err() != nil {
		return ErrClosed
	}
	e := q.envs[env]
	if e == nil {
		e = &envQueue{}
		q.envs[env] = e
		q.workers.Add(1)
		go q.work(env, e)
	}
	if e.queued == nil {
		e.queued = &Batch{Since: time.Now()}
	}
	e.queued.Triggers = e.queued.Triggers.Add(t)
	return nil
}

// Pending says whether a compile of env runs, and what the one waiting
// was asked for by (nil: none waits).
func (q *Queue) Pending(env string) (running bool, queued record.Triggers) {
	q.mu.Lock()
	defer q.mu.Unlock()
	e := q.envs[env]
	if e == nil {
		return false, nil
	}
	if e.queued != nil {
		queued = append(record.Triggers(nil), e.queued.Triggers...)
	}
	return e.running, queued
}

// Close stops taking triggers, drops the compiles waiting and waits for
// the running ones to end (it does not cancel them: the context does).
func (q *Queue) Close() {
	q.mu.Lock()
	if !q.closed {
		q.closed = true
		close(q.stop)
	}
	q.mu.Unlock()
	q.workers.Wait()
}

// work runs env's compiles while it has some waiting: it waits for the
// settle delay of the one waiting, then runs it.
func (q *Queue) work(env string, e *envQueue) {
	defer q.workers.Done()
	for {
		q.mu.Lock()
		since, started := e.queued.Since, q.started[env]
		q.mu.Unlock()
		wait := time.Until(since.Add(q.settle))
		if !started.IsZero() {
			wait = max(wait, time.Until(started.Add(q.gap)))
		}
		if wait > 0 {
			select {
			case <-q.after(wait):
			case <-q.stop:
			case <-q.ctx.Done():
			}
		}
		q.mu.Lock()
		if q.closed || q.ctx.Err() != nil {
			q.log.Info().Str("env", env).Stringer("triggers", e.queued.Triggers).Msg("compile dropped: the server is stopping")
			delete(q.envs, env)
			q.mu.Unlock()
			return
		}
		b := *e.queued
		e.queued, e.running = nil, true
		q.started[env] = time.Now()
		q.mu.Unlock()

		if err := q.compile(q.ctx, env, b); err != nil {
			q.log.Warn().Err(err).Str("env", env).Stringer("triggers", b.Triggers).Msg("compile failed")
		}

		q.mu.Lock()
		e.running = false
		if e.queued == nil || q.closed || q.ctx.Err() != nil {
			if e.queued != nil {
				q.log.Info().Str("env", env).Stringer("triggers", e.queued.Triggers).Msg("compile dropped: the server is stopping")
			}
			delete(q.envs, env)
			q.mu.Unlock()
			q.idle(env)
			return
		}
		q.mu.Unlock()
	}
}
