// Package bustest is the contract every Bus implementation passes: the
// in-process bus of the embedded mode and the RabbitMQ transport run the same
// suite, so the embedded mode cannot drift from production semantics.
package bustest

import (
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/tetherhq/tether/bus"
)

// Subject is one fresh bus under test, isolated from every other test (its
// own vhost or unique names).
type Subject struct {
	Bus bus.Bus
	// SendRaw puts arbitrary bytes in an agent's inbox.
	SendRaw func(ctx context.Context, env, agent string, data []byte) error
	// DeadLetters counts messages dead-lettered so far.
	DeadLetters func(ctx context.Context) (int, error)
	// DeleteInbox and DeleteServerQueue delete a queue with its messages,
	// as a client with rights on the broker could.
	DeleteInbox       func(ctx context.Context, env, agent string) error
	DeleteServerQueue func(ctx context.Context, q bus.Queue) error
	// InboxLength is the bound of an agent's inbox on this bus (0: the
	// contract does not fill an inbox).
	InboxLength int
}

// patience bounds every wait: a liveness guard against hangs, not a speed
// assertion.
const patience = 20 * time.Second

// Run runs the contract against buses made by newSubject.
func Run(t *testing.T, newSubject func(t *testing.T) Subject) {
	tests := []struct {
		name string
		fn   func(t *testing.T, s Subject)
	}{
		{"NoInbox", testNoInbox},
		{"DeclaredInboxKeepsMessages", testDeclared},
		{"PerAgentOrder", testPerAgentOrder},
		{"OfflineAgentGetsMessagesLater", testOffline},
		{"RedeliveryAfterHandlerError", testRedeliveryAfterError},
		{"RedeliveryAfterConsumerDies", testConsumerDies},
		{"SingleActiveConsumer", testSingleActive},
		{"Expiration", testExpiration},
		{"EventRouting", testEventRouting},
		{"MalformedIsDeadLettered", testMalformed},
		{"RejectedIsDeadLettered", testRejected},
		{"DedupOnReceive", testDedup},
		{"Claim", testClaim},
		{"ConsumerWaitsForItsInbox", testWaitsForInbox},
		{"InboxDeletedIsWaitedFor", testInboxDeleted},
		{"ServerQueueDeletedIsDeclaredAgain", testServerQueueDeleted},
		{"SendBatch", testSendBatch},
		{"SendBatchInboxFull", testSendBatchFull},
		{"SendBatchCancelled", testSendBatchCancelled},
		{"AnswerWaiting", testAnswerWaiting},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) { tt.fn(t, newSubject(t)) })
	}
}

var (
	keyOnce sync.Once
	testKey ed25519.PrivateKey
)

func signer() *bus.Signer {
	keyOnce.Do(func() {
		_, k, err := bus.GenerateKey()
		if err != nil {
			panic(err)
		}
		testKey = k
	})
	return bus.NewSigner(testKey, 0)
}

const env = "contract"

func command(t *testing.T, s *bus.Signer, agent string, n int) *bus.Envelope {
	t.Helper()
	e, err := s.Seal(bus.KindDeploy, env, agent, bus.Deploy{DeployID: fmt.Sprint(n), Mode: bus.DeployFull, Generation: int64(n)})
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// collector records deliveries and lets tests wait for a count.
type collector struct {
	mu    sync.Mutex
	got   []bus.Delivery
	added chan struct{}
}

func newCollector() *collector { return &collector{added: make(chan struct{}, 1<<16)} }

func (c *collector) handle(_ context.Context, d bus.Delivery) error {
	c.mu.Lock()
	c.got = append(c.got, d)
	c.mu.Unlock()
	c.added <- struct{}{}
	return nil
}

func (c *collector) waitFor(t *testing.T, n int) []bus.Delivery {
	t.Helper()
	deadline := time.After(patience)
	for {
		c.mu.Lock()
		if len(c.got) >= n {
			out := append([]bus.Delivery(nil), c.got...)
			c.mu.Unlock()
			return out
		}
		have := len(c.got)
		c.mu.Unlock()
		select {
		case <-c.added:
		case <-deadline:
			t.Fatalf("waited %v for %d deliveries, got %d", patience, n, have)
		}
	}
}

// consume runs ConsumeInbox in the background; the returned stop cancels it
// and waits for it to return. Unless opts say otherwise, the inbox is
// declared when the consumer finds it missing, as the server does on the
// hello an agent then says.
func consume(t *testing.T, b bus.Bus, agent string, h bus.Handler, opts ...bus.InboxOption) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	declare := bus.OnInboxMissing(func() {
		if err := b.DeclareInbox(ctx, env, agent); err != nil && ctx.Err() == nil {
			t.Errorf("declare the inbox of %s: %v", agent, err)
		}
	})
	opts = append([]bus.InboxOption{declare}, opts...)
	go func() { done <- b.ConsumeInbox(ctx, env, agent, h, opts...) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			select {
			case err := <-done:
				if err != nil && !errors.Is(err, context.Canceled) {
					t.Errorf("ConsumeInbox returned %v", err)
				}
			case <-time.After(patience):
				t.Errorf("ConsumeInbox did not return within %v of cancel", patience)
			}
		})
	}
	t.Cleanup(stop)
	return stop
}

// sendSoon retries Send until the inbox exists (declared when its consumer
// finds it missing, asynchronously).
func sendSoon(t *testing.T, b bus.Bus, e *bus.Envelope, opts bus.SendOptions) {
	t.Helper()
	deadline := time.Now().Add(patience)
	for {
		err := b.Send(context.Background(), e, opts)
		if err == nil {
			return
		}
		if !errors.Is(err, bus.ErrNoInbox) || time.Now().After(deadline) {
			t.Fatalf("send %s: %v", e, err)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func deployID(t *testing.T, d bus.Delivery) string {
	t.Helper()
	var body bus.Deploy
	if err := d.Envelope.DecodeBody(&body); err != nil {
		t.Fatal(err)
	}
	return body.DeployID
}

func testNoInbox(t *testing.T, s Subject) {
	err := s.Bus.Send(context.Background(), command(t, signer(), "never-connected", 1), bus.SendOptions{})
	if !errors.Is(err, bus.ErrNoInbox) {
		t.Fatalf("got %v, want ErrNoInbox", err)
	}
}

func testDeclared(t *testing.T, s Subject) {
	sg := signer()
	if err := s.Bus.DeclareInbox(context.Background(), env, "early"); err != nil {
		t.Fatal(err)
	}
	if err := s.Bus.DeclareInbox(context.Background(), env, "early"); err != nil {
		t.Fatalf("declaring twice: %v", err)
	}
	if err := s.Bus.Send(context.Background(), command(t, sg, "early", 1), bus.SendOptions{}); err != nil {
		t.Fatalf("send to a declared inbox without a consumer: %v", err)
	}
	c := newCollector()
	consume(t, s.Bus, "early", c.handle)
	if got := c.waitFor(t, 1); deployID(t, got[0]) != "1" {
		t.Fatalf("got %s, want 1", deployID(t, got[0]))
	}
}

// answerWaiter is what the server asks of a bus before it skips a hello an
// agent said again while the answer to an earlier one waits in its inbox.
type answerWaiter interface {
	AnswerWaiting(ctx context.Context, env, agent string) (bool, error)
}

func testAnswerWaiting(t *testing.T, s Subject) {
	w, ok := s.Bus.(answerWaiter)
	if !ok {
		t.Fatalf("%T does not tell whether messages wait in an inbox (AnswerWaiting)", s.Bus)
	}
	ctx := context.Background()
	check := func(want bool, when string) {
		t.Helper()
		got, err := w.AnswerWaiting(ctx, env, "waiter")
		if err != nil {
			t.Fatalf("%s: %v", when, err)
		}
		if got != want {
			t.Fatalf("%s: AnswerWaiting = %t, want %t", when, got, want)
		}
	}
	check(false, "before the inbox is declared")
	if err := s.Bus.DeclareInbox(ctx, env, "waiter"); err != nil {
		t.Fatal(err)
	}
	check(false, "declared, empty")
	if err := s.Bus.Send(ctx, command(t, signer(), "waiter", 1), bus.SendOptions{}); err != nil {
		t.Fatal(err)
	}
	check(true, "holding a command")
	check(true, "holding a command, asked again")
	c := newCollector()
	stop := consume(t, s.Bus, "waiter", c.handle)
	c.waitFor(t, 1)
	stop()
	check(false, "its command taken")
}

func testPerAgentOrder(t *testing.T, s Subject) {
	sg := signer()
	a, b := newCollector(), newCollector()
	consume(t, s.Bus, "agent-a", a.handle)
	consume(t, s.Bus, "agent-b", b.handle)
	const n = 200
	for i := 0; i < n; i++ {
		sendSoon(t, s.Bus, command(t, sg, "agent-a", i), bus.SendOptions{})
		sendSoon(t, s.Bus, command(t, sg, "agent-b", i), bus.SendOptions{})
	}
	for name, c := range map[string]*collector{"agent-a": a, "agent-b": b} {
		got := c.waitFor(t, n)
		for i, d := range got {
			if d.Envelope.Agent != name {
				t.Fatalf("%s received a message for %s", name, d.Envelope.Agent)
			}
			if id := deployID(t, d); id != fmt.Sprint(i) {
				t.Fatalf("%s: delivery %d is message %s, want %d (order lost)", name, i, id, i)
			}
		}
	}
}

func testOffline(t *testing.T, s Subject) {
	sg := signer()
	first := newCollector()
	stop := consume(t, s.Bus, "sleeper", first.handle)
	sendSoon(t, s.Bus, command(t, sg, "sleeper", 0), bus.SendOptions{})
	first.waitFor(t, 1)
	stop()
	for i := 1; i <= 3; i++ {
		if err := s.Bus.Send(context.Background(), command(t, sg, "sleeper", i), bus.SendOptions{}); err != nil {
			t.Fatalf("send to an offline agent: %v", err)
		}
	}
	later := newCollector()
	consume(t, s.Bus, "sleeper", later.handle)
	got := later.waitFor(t, 3)
	for i, d := range got {
		if id := deployID(t, d); id != fmt.Sprint(i+1) {
			t.Fatalf("delivery %d is %s, want %d", i, id, i+1)
		}
	}
}

func testRedeliveryAfterError(t *testing.T, s Subject) {
	sg := signer()
	var mu sync.Mutex
	var seen []bus.Delivery
	got := make(chan struct{}, 10)
	h := func(_ context.Context, d bus.Delivery) error {
		mu.Lock()
		seen = append(seen, d)
		first := len(seen) == 1
		mu.Unlock()
		got <- struct{}{}
		if first {
			return errors.New("transient failure")
		}
		return nil
	}
	consume(t, s.Bus, "flaky", h)
	sendSoon(t, s.Bus, command(t, sg, "flaky", 7), bus.SendOptions{})
	for i := 0; i < 2; i++ {
		select {
		case <-got:
		case <-time.After(patience):
			t.Fatalf("got %d deliveries, want 2 (the failure and the redelivery)", i)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if seen[0].Envelope.ID != seen[1].Envelope.ID || !seen[1].Redelivered || seen[0].Redelivered {
		t.Fatalf("deliveries %v / %v: want the same message, the second marked redelivered", seen[0], seen[1])
	}
}

func testConsumerDies(t *testing.T, s Subject) {
	sg := signer()
	inside := make(chan struct{})
	dying := func(ctx context.Context, d bus.Delivery) error {
		close(inside)
		<-ctx.Done() // dies before acknowledging
		return ctx.Err()
	}
	stop := consume(t, s.Bus, "mortal", dying)
	sendSoon(t, s.Bus, command(t, sg, "mortal", 1), bus.SendOptions{})
	select {
	case <-inside:
	case <-time.After(patience):
		t.Fatal("message never delivered")
	}
	stop()
	next := newCollector()
	consume(t, s.Bus, "mortal", next.handle)
	got := next.waitFor(t, 1)
	if deployID(t, got[0]) != "1" || !got[0].Redelivered {
		t.Fatalf("got %v, want message 1 redelivered", got[0])
	}
}

func testSingleActive(t *testing.T, s Subject) {
	sg := signer()
	first, second := newCollector(), newCollector()
	stopFirst := consume(t, s.Bus, "twin", first.handle)
	sendSoon(t, s.Bus, command(t, sg, "twin", 0), bus.SendOptions{})
	first.waitFor(t, 1) // the first consumer is the active one
	consume(t, s.Bus, "twin", second.handle)
	for i := 1; i <= 5; i++ {
		sendSoon(t, s.Bus, command(t, sg, "twin", i), bus.SendOptions{})
	}
	first.waitFor(t, 6)
	second.mu.Lock()
	n := len(second.got)
	second.mu.Unlock()
	if n != 0 {
		t.Fatalf("the standby consumer received %d messages while the first was active", n)
	}
	stopFirst()
	sendSoon(t, s.Bus, command(t, sg, "twin", 6), bus.SendOptions{})
	got := second.waitFor(t, 1)
	if deployID(t, got[0]) != "6" {
		t.Fatalf("standby got %s, want 6", deployID(t, got[0]))
	}
}

func testExpiration(t *testing.T, s Subject) {
	sg := signer()
	c := newCollector()
	stop := consume(t, s.Bus, "late", c.handle)
	sendSoon(t, s.Bus, command(t, sg, "late", 0), bus.SendOptions{})
	c.waitFor(t, 1)
	stop()
	if err := s.Bus.Send(context.Background(), command(t, sg, "late", 1), bus.SendOptions{Expiration: time.Millisecond}); err != nil {
		t.Fatal(err)
	}
	if err := s.Bus.Send(context.Background(), command(t, sg, "late", 2), bus.SendOptions{}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(50 * time.Millisecond) // let the 1 ms expiration pass
	again := newCollector()
	consume(t, s.Bus, "late", again.handle)
	got := again.waitFor(t, 1)
	if id := deployID(t, got[0]); id != "2" {
		t.Fatalf("first delivery after the pause is %s, want 2 (1 expired)", id)
	}
	// Nothing else arrives: send a marker and check it comes right after.
	sendSoon(t, s.Bus, command(t, sg, "late", 3), bus.SendOptions{})
	got = again.waitFor(t, 2)
	if len(got) != 2 || deployID(t, got[1]) != "3" {
		t.Fatalf("deliveries %d, want exactly 2 and 3", len(got))
	}
}

func testEventRouting(t *testing.T, s Subject) {
	sg := signer()
	events, compliance := newCollector(), newCollector()
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for q, c := range map[bus.Queue]*collector{bus.QueueEvents: events, bus.QueueCompliance: compliance} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_ = s.Bus.ConsumeEvents(ctx, q, c.handle)
		}()
	}
	t.Cleanup(func() { cancel(); wg.Wait() })
	for _, k := range []bus.Kind{bus.KindResourceStatus, bus.KindCompliance, bus.KindHeartbeat} {
		e, err := sg.Seal(k, env, "router", bus.Empty{})
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Bus.Publish(context.Background(), e); err != nil {
			t.Fatal(err)
		}
	}
	ev := events.waitFor(t, 2)
	co := compliance.waitFor(t, 1)
	// Events are handled several at once, in no promised order.
	kinds := []string{string(ev[0].Envelope.Kind), string(ev[1].Envelope.Kind)}
	slices.Sort(kinds)
	if want := []string{string(bus.KindHeartbeat), string(bus.KindResourceStatus)}; !slices.Equal(kinds, want) || len(ev) != 2 {
		t.Fatalf("events queue got %d events, %v first, want %v", len(ev), kinds, want)
	}
	if co[0].Envelope.Kind != bus.KindCompliance {
		t.Fatalf("compliance queue got %s", co[0].Envelope.Kind)
	}
	if err := s.Bus.Publish(context.Background(), command(t, sg, "router", 1)); err == nil {
		t.Fatal("publishing a command kind as an event succeeded")
	}
}

func testMalformed(t *testing.T, s Subject) {
	if s.SendRaw == nil || s.DeadLetters == nil {
		t.Fatal("the subject must provide SendRaw and DeadLetters for this contract")
	}
	sg := signer()
	c := newCollector()
	consume(t, s.Bus, "target", c.handle)
	sendSoon(t, s.Bus, command(t, sg, "target", 0), bus.SendOptions{})
	c.waitFor(t, 1)
	before, err := s.DeadLetters(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, raw := range []string{"not json", `{"v":1}`, `{"v":99,"id":"x"}`, ""} {
		if err := s.SendRaw(context.Background(), env, "target", []byte(raw)); err != nil {
			t.Fatal(err)
		}
	}
	sendSoon(t, s.Bus, command(t, sg, "target", 1), bus.SendOptions{})
	got := c.waitFor(t, 2)
	if len(got) != 2 || deployID(t, got[1]) != "1" {
		t.Fatalf("valid message after malformed ones: got %d deliveries", len(got))
	}
	waitDeadLetters(t, s, before+4)
}

func testRejected(t *testing.T, s Subject) {
	sg := signer()
	_, otherKey, _ := bus.GenerateKey()
	trusted := sg.PublicKey()
	c := newCollector()
	verify := func(ctx context.Context, d bus.Delivery) error {
		if err := bus.Verify(d.Envelope, trusted); err != nil {
			return fmt.Errorf("%w: %w", bus.ErrReject, err)
		}
		return c.handle(ctx, d)
	}
	if s.DeadLetters == nil {
		t.Fatal("the subject must provide DeadLetters for this contract")
	}
	before, err := s.DeadLetters(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	consume(t, s.Bus, "verifier", verify)
	forged := command(t, bus.NewSigner(otherKey, 0), "verifier", 666)
	sendSoon(t, s.Bus, forged, bus.SendOptions{})
	sendSoon(t, s.Bus, command(t, sg, "verifier", 1), bus.SendOptions{})
	got := c.waitFor(t, 1)
	if deployID(t, got[0]) != "1" {
		t.Fatalf("the forged message got through: %s", deployID(t, got[0]))
	}
	waitDeadLetters(t, s, before+1)
}

func testDedup(t *testing.T, s Subject) {
	sg := signer()
	seen := bus.NewDedup(100)
	var mu sync.Mutex
	handled := 0
	c := newCollector()
	h := func(ctx context.Context, d bus.Delivery) error {
		if !seen.Has(d.Envelope.ID) {
			seen.Add(d.Envelope.ID)
			mu.Lock()
			handled++
			mu.Unlock()
		}
		return c.handle(ctx, d)
	}
	consume(t, s.Bus, "deduper", h)
	e := command(t, sg, "deduper", 1)
	sendSoon(t, s.Bus, e, bus.SendOptions{})
	if err := s.Bus.Send(context.Background(), e, bus.SendOptions{}); err != nil { // a duplicate
		t.Fatal(err)
	}
	sendSoon(t, s.Bus, command(t, sg, "deduper", 2), bus.SendOptions{})
	c.waitFor(t, 3)
	mu.Lock()
	defer mu.Unlock()
	if handled != 2 {
		t.Fatalf("handled %d distinct messages, want 2", handled)
	}
}

func waitDeadLetters(t *testing.T, s Subject, want int) {
	t.Helper()
	deadline := time.Now().Add(patience)
	for {
		n, err := s.DeadLetters(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if n >= want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("dead letters: %d, want %d", n, want)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func testClaim(t *testing.T, s Subject) {
	ctx := context.Background()
	c1, err := s.Bus.Claim(ctx, "test", "a1")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Bus.Claim(ctx, "test", "a1"); !errors.Is(err, bus.ErrClaimed) {
		t.Fatalf("second claim of a1: got %v, want ErrClaimed", err)
	}
	c2, err := s.Bus.Claim(ctx, "test", "a2")
	if err != nil {
		t.Fatalf("claim of another agent: %v", err)
	}
	defer c2.Release()
	select {
	case <-c1.Lost():
		t.Fatal("a held claim says it is lost")
	default:
	}
	c1.Release()
	select {
	case <-c1.Lost():
	case <-time.After(patience):
		t.Fatal("a released claim is not lost")
	}
	// The broker may take a moment to drop the released claim.
	deadline := time.Now().Add(patience)
	for {
		c3, err := s.Bus.Claim(ctx, "test", "a1")
		if err == nil {
			c3.Release()
			return
		}
		if !errors.Is(err, bus.ErrClaimed) || time.Now().After(deadline) {
			t.Fatalf("claim after release: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// testWaitsForInbox consumes an inbox no one declared: the consumer does
// not declare it, calls OnInboxMissing, and looks again (calling it again)
// until the inbox is declared; then it consumes, and OnInboxLost is not
// called (nothing was lost).
func testWaitsForInbox(t *testing.T, s Subject) {
	sg := signer()
	c := newCollector()
	missing := make(chan struct{}, 1024)
	lost := make(chan struct{}, 16)
	consume(t, s.Bus, "unborn", c.handle,
		bus.OnInboxMissing(func() { missing <- struct{}{} }),
		bus.OnInboxLost(func() { lost <- struct{}{} }))
	for i := range 2 {
		select {
		case <-missing:
		case <-time.After(patience):
			t.Fatalf("OnInboxMissing called %d times within %v, want the consumer to look again", i, patience)
		}
		if err := s.Bus.Send(context.Background(), command(t, sg, "unborn", i), bus.SendOptions{}); !errors.Is(err, bus.ErrNoInbox) {
			t.Fatalf("send while only a consumer waits for the inbox: got %v, want ErrNoInbox (the consumer must not declare it)", err)
		}
	}
	if err := s.Bus.DeclareInbox(context.Background(), env, "unborn"); err != nil {
		t.Fatal(err)
	}
	sendSoon(t, s.Bus, command(t, sg, "unborn", 7), bus.SendOptions{})
	if got := c.waitFor(t, 1); deployID(t, got[0]) != "7" {
		t.Fatalf("got %s, want 7", deployID(t, got[0]))
	}
	select {
	case <-lost:
		t.Fatal("OnInboxLost called for an inbox that was never lost")
	default:
	}
}

// testInboxDeleted deletes an inbox under its consumer: the consumer does
// not declare it again but calls OnInboxMissing (an agent says hello, and
// the server declares it); once it consumes the inbox declared again it
// calls OnInboxLost (so an agent can ask for what it lost), and a command
// sent after that is handled.
func testInboxDeleted(t *testing.T, s Subject) {
	if s.DeleteInbox == nil {
		t.Fatal("the subject must provide DeleteInbox for this contract")
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	sg := signer()
	c := newCollector()
	lost := make(chan struct{}, 16)
	deleted := make(chan struct{})
	missing := make(chan error, 16)
	if err := s.Bus.DeclareInbox(ctx, env, "deleted"); err != nil {
		t.Fatal(err)
	}
	consume(t, s.Bus, "deleted", c.handle,
		bus.OnInboxMissing(func() {
			select {
			case <-deleted:
			default:
				missing <- errors.New("OnInboxMissing called before the inbox was deleted")
				return
			}
			// What the consumer left: no inbox, until the server
			// declares it.
			err := s.Bus.Send(ctx, command(t, sg, "deleted", 99), bus.SendOptions{})
			if !errors.Is(err, bus.ErrNoInbox) {
				missing <- fmt.Errorf("send while the inbox is missing: got %v, want ErrNoInbox (the consumer must not declare it)", err)
				return
			}
			missing <- s.Bus.DeclareInbox(ctx, env, "deleted")
		}),
		bus.OnInboxLost(func() { lost <- struct{}{} }))
	sendSoon(t, s.Bus, command(t, sg, "deleted", 1), bus.SendOptions{})
	c.waitFor(t, 1)
	select {
	case <-lost:
		t.Fatal("OnInboxLost was called while the inbox was there")
	default:
	}
	close(deleted)
	if err := s.DeleteInbox(ctx, env, "deleted"); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-missing:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(patience):
		t.Fatalf("OnInboxMissing not called within %v of the inbox's deletion", patience)
	}
	select {
	case <-lost:
	case <-time.After(patience):
		t.Fatalf("OnInboxLost not called within %v of the inbox's declaration", patience)
	}
	// Called once the inbox is consumed again: no retry.
	if err := s.Bus.Send(ctx, command(t, sg, "deleted", 2), bus.SendOptions{}); err != nil {
		t.Fatalf("send after OnInboxLost: got %v, want the inbox back", err)
	}
	got := c.waitFor(t, 2)
	if id := deployID(t, got[len(got)-1]); id != "2" {
		t.Fatalf("last delivery is %s, want 2", id)
	}
}

// testServerQueueDeleted deletes a server queue: an event published while
// it is missing fails with ErrUnroutable (the publisher keeps it), a
// consumer declares the queue again with its routing, and a queue deleted
// under a running consumer is declared again by it.
func testServerQueueDeleted(t *testing.T, s Subject) {
	if s.DeleteServerQueue == nil {
		t.Fatal("the subject must provide DeleteServerQueue for this contract")
	}
	ctx := context.Background()
	sg := signer()
	heartbeat := func() *bus.Envelope {
		e, err := sg.Seal(bus.KindHeartbeat, env, "lonely", bus.Empty{})
		if err != nil {
			t.Fatal(err)
		}
		return e
	}
	if err := s.DeleteServerQueue(ctx, bus.QueueEvents); err != nil {
		t.Fatal(err)
	}
	first := heartbeat()
	if err := s.Bus.Publish(ctx, first); !errors.Is(err, bus.ErrUnroutable) {
		t.Fatalf("publish with the events queue deleted: got %v, want ErrUnroutable", err)
	}
	c := newCollector()
	cctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- s.Bus.ConsumeEvents(cctx, bus.QueueEvents, c.handle) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
			t.Errorf("ConsumeEvents returned %v", err)
		}
	})
	publishSoon(t, s.Bus, first)
	if got := c.waitFor(t, 1); got[0].Envelope.ID != first.ID {
		t.Fatalf("got %s, want %s", got[0].Envelope, first)
	}
	if err := s.DeleteServerQueue(ctx, bus.QueueEvents); err != nil {
		t.Fatal(err)
	}
	second := heartbeat()
	publishSoon(t, s.Bus, second)
	got := c.waitFor(t, 2)
	if last := got[len(got)-1].Envelope; last.ID != second.ID {
		t.Fatalf("last delivery is %s, want %s", last, second)
	}
}

// publishSoon retries Publish while no server queue takes the event (a
// consumer declares it asynchronously).
func publishSoon(t *testing.T, b bus.Bus, e *bus.Envelope) {
	t.Helper()
	deadline := time.Now().Add(patience)
	for {
		err := b.Publish(context.Background(), e)
		if err == nil {
			return
		}
		if !errors.Is(err, bus.ErrUnroutable) || time.Now().After(deadline) {
			t.Fatalf("publish %s: %v", e, err)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// testSendBatch sends one batch to many agents, with a command for an agent
// that never connected and an event among them: each command reaches its
// inbox, and each refusal is said at its place.
func testSendBatch(t *testing.T, s Subject) {
	sg := signer()
	ctx := context.Background()
	const agents, each = 20, 3
	collectors := make([]*collector, agents)
	var batch []bus.Outgoing
	for a := range agents {
		name := fmt.Sprintf("batch-%d", a)
		if err := s.Bus.DeclareInbox(ctx, env, name); err != nil {
			t.Fatal(err)
		}
		collectors[a] = newCollector()
	}
	for i := range each {
		for a := range agents {
			batch = append(batch, bus.Outgoing{Envelope: command(t, sg, fmt.Sprintf("batch-%d", a), i)})
		}
	}
	missing := len(batch)
	batch = append(batch, bus.Outgoing{Envelope: command(t, sg, "batch-never-connected", 0)})
	event, err := sg.Seal(bus.KindHeartbeat, env, "batch-0", bus.Empty{})
	if err != nil {
		t.Fatal(err)
	}
	notCommand := len(batch)
	batch = append(batch, bus.Outgoing{Envelope: event})
	errs := s.Bus.SendBatch(ctx, batch)
	if len(errs) != len(batch) {
		t.Fatalf("%d errors for %d commands, want one each", len(errs), len(batch))
	}
	for i, err := range errs {
		switch i {
		case missing:
			if !errors.Is(err, bus.ErrNoInbox) {
				t.Fatalf("command for an agent that never connected: got %v, want ErrNoInbox", err)
			}
		case notCommand:
			if err == nil {
				t.Fatal("an event sent as a command was taken, want refused")
			}
		default:
			if err != nil {
				t.Fatalf("command %d (%s): %v", i, batch[i].Envelope, err)
			}
		}
	}
	for a, c := range collectors {
		consume(t, s.Bus, fmt.Sprintf("batch-%d", a), c.handle)
	}
	for a, c := range collectors {
		got := c.waitFor(t, each)
		seen := map[string]bool{}
		for _, d := range got {
			if d.Envelope.Agent != fmt.Sprintf("batch-%d", a) {
				t.Fatalf("batch-%d received a message for %s", a, d.Envelope.Agent)
			}
			seen[deployID(t, d)] = true
		}
		if len(got) != each || len(seen) != each {
			t.Fatalf("batch-%d received %d messages (%d distinct), want %d", a, len(got), len(seen), each)
		}
	}
}

// testSendBatchFull sends a batch twice as large as an inbox holds: at
// least as many as it holds are taken, the rest refused as full, and a
// command to another inbox in the same batch is taken. (A replicated
// queue may take a few commands beyond its bound while they are in flight
// together: the bound is what stops a flood, not an exact count.)
func testSendBatchFull(t *testing.T, s Subject) {
	if s.InboxLength == 0 {
		t.Skip("this subject does not say how long an inbox is")
	}
	sg := signer()
	ctx := context.Background()
	for _, name := range []string{"batch-full", "batch-roomy"} {
		if err := s.Bus.DeclareInbox(ctx, env, name); err != nil {
			t.Fatal(err)
		}
	}
	var batch []bus.Outgoing
	for i := range 2 * s.InboxLength {
		batch = append(batch, bus.Outgoing{Envelope: command(t, sg, "batch-full", i)})
	}
	batch = append(batch, bus.Outgoing{Envelope: command(t, sg, "batch-roomy", 0)})
	errs := s.Bus.SendBatch(ctx, batch)
	taken, full := 0, 0
	for i, err := range errs[:len(errs)-1] {
		switch {
		case err == nil:
			taken++
		case errors.Is(err, bus.ErrInboxFull):
			full++
		default:
			t.Fatalf("command %d: got %v, want taken or ErrInboxFull", i, err)
		}
	}
	if taken < s.InboxLength || full == 0 {
		t.Fatalf("%d taken and %d refused as full, want at least %d taken and the rest refused", taken, full, s.InboxLength)
	}
	if err := errs[len(errs)-1]; err != nil {
		t.Fatalf("command to another inbox in the same batch: %v", err)
	}
}

// testSendBatchCancelled: a batch whose context ended sends nothing and
// says so for each command.
func testSendBatchCancelled(t *testing.T, s Subject) {
	sg := signer()
	if err := s.Bus.DeclareInbox(context.Background(), env, "batch-cancelled"); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	errs := s.Bus.SendBatch(ctx, []bus.Outgoing{{Envelope: command(t, sg, "batch-cancelled", 0)}, {Envelope: command(t, sg, "batch-cancelled", 1)}})
	for i, err := range errs {
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("command %d: got %v, want context.Canceled", i, err)
		}
	}
	c := newCollector()
	consume(t, s.Bus, "batch-cancelled", c.handle)
	if err := s.Bus.Send(context.Background(), command(t, sg, "batch-cancelled", 2), bus.SendOptions{}); err != nil {
		t.Fatal(err)
	}
	if got := c.waitFor(t, 1); len(got) != 1 || deployID(t, got[0]) != "2" {
		t.Fatalf("after a cancelled batch the inbox held %d messages, first %s; want only the one sent after", len(got), deployID(t, got[0]))
	}
}
