package queue

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/tetherhq/tether/server/record"
)

// call is one call of the compile function.
type call struct {
	env string
	b   Batch
}

// rig is a queue whose compile function announces each call on calls,
// then runs body; idle hears each environment running out of work.
type rig struct {
	q     *Queue
	calls chan call
	idle  chan string
	n     atomic.Int64
}

// settleNow makes every settle delay end at once.
func settleNow(time.Duration) <-chan time.Time {
	c := make(chan time.Time, 1)
	c <- time.Time{}
	return c
}

func newRig(t *testing.T, ctx context.Context, cfg Config, body func(ctx context.Context, env string, b Batch) error) *rig {
	t.Helper()
	r := &rig{calls: make(chan call, 10_000), idle: make(chan string, 100)}
	q, err := New(ctx, cfg, func(ctx context.Context, env string, b Batch) error {
		r.n.Add(1)
		r.calls <- call{env, b}
		return body(ctx, env, b)
	}, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	q.idle = func(env string) { r.idle <- env }
	r.q = q
	t.Cleanup(q.Close)
	return r
}

func (r *rig) trigger(t *testing.T, env string, kind record.TriggerKind, by string) {
	t.Helper()
	if err := r.q.Trigger(env, record.Trigger{Kind: kind, By: by}); err != nil {
		t.Fatal(err)
	}
}

// patience bounds a wait for what must happen, so a broken queue fails
// its test instead of hanging it; it measures nothing.
const patience = time.Minute

func (r *rig) nextCall(t *testing.T) call {
	t.Helper()
	select {
	case c := <-r.calls:
		return c
	case <-time.After(patience):
		t.Fatalf("no compile call within %s", patience)
		return call{}
	}
}

func (r *rig) waitIdle(t *testing.T, env string) {
	t.Helper()
	select {
	case got := <-r.idle:
		if got != env {
			t.Fatalf("idle: got %s, want %s", got, env)
		}
	case <-time.After(patience):
		t.Fatalf("%s did not run out of work within %s", env, patience)
	}
}

func noop(context.Context, string, Batch) error { return nil }

func TestConfig(t *testing.T) {
	for _, tt := range []struct {
		name   string
		settle time.Duration
		ok     bool
	}{
		{"default", Default().Settle, true},
		{"negative", -time.Second, false},
		{"too long", 2 * MaxSettle, false},
		{"longest", MaxSettle, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			err := Config{Settle: tt.settle}.Validate()
			if (err == nil) != tt.ok || (err != nil && !errors.Is(err, ErrConfig)) {
				t.Fatalf("Validate(%v): got %v, want ok %v (or ErrConfig)", tt.settle, err, tt.ok)
			}
		})
	}
	q, err := New(t.Context(), Config{}, noop, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	if q.settle != Default().Settle {
		t.Fatalf("zero settle: got %v, want the default %v", q.settle, Default().Settle)
	}
	if err := q.Trigger("prod", record.Trigger{Kind: "cron"}); err == nil {
		t.Fatal("unknown trigger kind: got no error")
	}
}

// A burst over a second, with the default settle delay and a first compile
// that lasts until the burst is over: one compile, or two.
func TestBurstOverASecond(t *testing.T) {
	release := make(chan struct{})
	r := newRig(t, t.Context(), Default(), func(ctx context.Context, _ string, _ Batch) error {
		select {
		case <-release:
		case <-ctx.Done():
		}
		return nil
	})
	for i := range 1000 {
		r.trigger(t, "prod", record.TriggerFacts, "web")
		if i%10 == 9 {
			time.Sleep(10 * time.Millisecond)
		}
	}
	close(release)
	r.waitIdle(t, "prod")
	total := 0
	for range r.n.Load() {
		total += r.nextCall(t).b.Triggers.Count()
	}
	if n := r.n.Load(); n < 1 || n > 2 {
		t.Fatalf("compiles: got %d, want 1 or 2", n)
	}
	if total != 1000 {
		t.Fatalf("triggers folded into the compiles: got %d, want 1000", total)
	}
}

// A burst over a second with compiles that take no time: the gap between
// compile starts bounds them to three.
func TestGapBoundsAStorm(t *testing.T) {
	r := newRig(t, t.Context(), Default(), func(context.Context, string, Batch) error { return nil })
	start := time.Now()
	for i := range 1000 {
		r.trigger(t, "prod", record.TriggerFacts, "web")
		if i%10 == 9 {
			time.Sleep(10 * time.Millisecond)
		}
	}
	burst := time.Since(start)
	// A worker ends whenever its environment runs out of work: count the
	// calls until every trigger is in one.
	total := 0
	for total < 1000 {
		total += r.nextCall(t).b.Triggers.Count()
	}
	// 0.2 s settle, then a start at most every 0.5 s: over a burst of
	// about a second, three; a slow machine stretches the burst.
	want := int64(1 + (burst+Default().Gap-1)/Default().Gap)
	if n := r.n.Load(); n < 1 || n > max(3, want) {
		t.Fatalf("compiles: got %d over a burst of %s, want 1 to %d", n, burst, max(3, want))
	}
	if total != 1000 {
		t.Fatalf("triggers folded into the compiles: got %d, want 1000", total)
	}
}

// Triggers that come within the settle delay fold into one compile, which
// remembers each kind, counted, in the order they came.
func TestSettleFolds(t *testing.T) {
	r := newRig(t, t.Context(), Config{Settle: MaxSettle}, noop)
	settled := make(chan time.Time)
	r.q.after = func(time.Duration) <-chan time.Time { return settled }
	r.trigger(t, "prod", record.TriggerAgent, "web1")
	for range 997 {
		r.trigger(t, "prod", record.TriggerFacts, "")
	}
	r.trigger(t, "prod", record.TriggerOperator, "alice")
	if err := r.q.Trigger("prod", record.Trigger{Kind: record.TriggerFacts, By: "web3", Count: 3}); err != nil {
		t.Fatal(err)
	}
	if running, queued := r.q.Pending("prod"); running || queued.Count() != 1002 {
		t.Fatalf("while settling: running %v, queued %v; want not running, 1002 queued", running, queued)
	}
	settled <- time.Time{}
	c := r.nextCall(t)
	r.waitIdle(t, "prod")
	if got, want := c.b.Triggers.String(), "agent (web1), facts ×1000 (web3), operator (alice)"; c.env != "prod" || got != want {
		t.Fatalf("compile of %s for %q, want prod for %q", c.env, got, want)
	}
	if n := r.n.Load(); n != 1 {
		t.Fatalf("compiles: got %d, want 1", n)
	}
	if running, queued := r.q.Pending("prod"); running || queued != nil {
		t.Fatalf("after: running %v, queued %v; want nothing", running, queued)
	}
}

// A trigger during a running compile causes exactly one more, with every
// trigger that came meanwhile.
func TestTriggerWhileRunning(t *testing.T) {
	release := make(chan struct{})
	r := newRig(t, t.Context(), Default(), func(context.Context, string, Batch) error {
		<-release
		return nil
	})
	r.q.after = settleNow
	r.trigger(t, "prod", record.TriggerPoll, "")
	first := r.nextCall(t)
	r.trigger(t, "prod", record.TriggerAgent, "web1")
	r.trigger(t, "prod", record.TriggerFacts, "web1")
	r.trigger(t, "prod", record.TriggerFacts, "web2")
	if running, queued := r.q.Pending("prod"); !running || queued.String() != "agent (web1), facts ×2 (web1)" {
		t.Fatalf("while running: running %v, queued %q; want running, agent and facts ×2 queued", running, queued)
	}
	release <- struct{}{}
	second := r.nextCall(t)
	release <- struct{}{}
	r.waitIdle(t, "prod")
	if first.b.Triggers.String() != "poll" || second.b.Triggers.String() != "agent (web1), facts ×2 (web1)" {
		t.Fatalf("compiles for %q then %q, want poll then agent, facts ×2", first.b.Triggers, second.b.Triggers)
	}
	if n := r.n.Load(); n != 2 {
		t.Fatalf("compiles: got %d, want 2", n)
	}
}

// One environment's long compile does not hold another's back.
func TestEnvironmentsIndependent(t *testing.T) {
	releaseA := make(chan struct{})
	r := newRig(t, t.Context(), Default(), func(_ context.Context, env string, _ Batch) error {
		if env == "a" {
			<-releaseA
		}
		return nil
	})
	r.q.after = settleNow
	r.trigger(t, "a", record.TriggerPoll, "")
	if c := r.nextCall(t); c.env != "a" {
		t.Fatalf("first compile of %s, want a", c.env)
	}
	r.trigger(t, "b", record.TriggerPoll, "")
	if c := r.nextCall(t); c.env != "b" {
		t.Fatalf("second compile of %s, want b", c.env)
	}
	r.waitIdle(t, "b") // while a's compile still runs
	if running, _ := r.q.Pending("a"); !running {
		t.Fatal("a's compile ended before it was released")
	}
	close(releaseA)
	r.waitIdle(t, "a")
	if n := r.n.Load(); n != 2 {
		t.Fatalf("compiles: got %d, want 2", n)
	}
}

// A failed compile does not stop the next ones: neither the one waiting
// nor those asked for later.
func TestFailureDoesNotStop(t *testing.T) {
	release := make(chan struct{})
	r := newRig(t, t.Context(), Default(), func(context.Context, string, Batch) error {
		<-release
		return errors.New("model does not compile")
	})
	r.q.after = settleNow
	r.trigger(t, "prod", record.TriggerPoll, "")
	r.nextCall(t)
	r.trigger(t, "prod", record.TriggerWebhook, "")
	release <- struct{}{}
	if c := r.nextCall(t); c.b.Triggers.String() != "webhook" {
		t.Fatalf("after a failure: compile for %q, want webhook", c.b.Triggers)
	}
	release <- struct{}{}
	r.waitIdle(t, "prod")
	r.trigger(t, "prod", record.TriggerOperator, "alice")
	if c := r.nextCall(t); c.b.Triggers.String() != "operator (alice)" {
		t.Fatalf("later: compile for %q, want operator (alice)", c.b.Triggers)
	}
	release <- struct{}{}
	r.waitIdle(t, "prod")
	if n := r.n.Load(); n != 3 {
		t.Fatalf("compiles: got %d, want 3", n)
	}
}

// Close waits for the running compile, drops the one waiting and takes no
// more triggers.
func TestCloseWaitsForRunning(t *testing.T) {
	release := make(chan struct{})
	var ended atomic.Bool
	r := newRig(t, t.Context(), Default(), func(ctx context.Context, _ string, _ Batch) error {
		<-release
		ended.Store(true)
		return ctx.Err()
	})
	r.q.after = settleNow
	r.trigger(t, "prod", record.TriggerPoll, "")
	r.nextCall(t)
	r.trigger(t, "prod", record.TriggerOperator, "") // waits; Close drops it
	closed := make(chan struct{})
	go func() {
		r.q.Close()
		close(closed)
	}()
	select {
	case <-closed:
		t.Fatal("Close returned while a compile runs")
	case <-time.After(50 * time.Millisecond):
	}
	close(release)
	<-closed
	if !ended.Load() {
		t.Fatal("Close returned before the running compile ended")
	}
	if err := r.q.Trigger("prod", record.Trigger{Kind: record.TriggerPoll}); !errors.Is(err, ErrClosed) {
		t.Fatalf("trigger after Close: got %v, want ErrClosed", err)
	}
	if n := r.n.Load(); n != 1 {
		t.Fatalf("compiles: got %d, want 1 (the waiting one is dropped)", n)
	}
}

// The end of the queue's context cancels the running compile, drops the
// waiting ones, settling or behind a running one, and stops the queue.
func TestContextEnds(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	r := newRig(t, ctx, Default(), func(ctx context.Context, _ string, _ Batch) error {
		<-ctx.Done()
		return ctx.Err()
	})
	r.q.after = settleNow
	r.trigger(t, "a", record.TriggerPoll, "")
	r.nextCall(t)
	r.trigger(t, "a", record.TriggerFacts, "") // waits behind the running one
	r.q.after = func(time.Duration) <-chan time.Time { return nil }
	r.trigger(t, "b", record.TriggerPoll, "") // settles for ever
	cancel()
	r.q.Close()
	if err := r.q.Trigger("a", record.Trigger{Kind: record.TriggerPoll}); !errors.Is(err, ErrClosed) {
		t.Fatalf("trigger after the context ended: got %v, want ErrClosed", err)
	}
	if n := r.n.Load(); n != 1 {
		t.Fatalf("compiles: got %d, want 1 (the waiting ones are dropped)", n)
	}
}
