package amqp

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/rs/zerolog"

	"github.com/tetherhq/tether/bus"
)

// patience bounds every wait: a guard against hangs, not a speed assertion.
const patience = 20 * time.Second

// waitUntil polls cond until it holds, failing the test after patience.
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(patience)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("gave up waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// rawChannel is a channel of a connection of the test's own: a client
// with rights on the broker, beside the buses under test.
func rawChannel(t *testing.T, cfg Config) *amqp.Channel {
	t.Helper()
	conn, err := amqp.Dial(cfg.URL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	return ch
}

// events consumes a server queue of b with n consumers into a channel of
// envelope ids until the test ends.
func events(t *testing.T, b *tracked, q bus.Queue, n int) <-chan string {
	t.Helper()
	got := make(chan string, 1024)
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_ = b.ConsumeEvents(ctx, q, func(_ context.Context, d bus.Delivery) error {
				got <- d.Envelope.ID
				return nil
			})
		}()
	}
	t.Cleanup(func() { cancel(); wg.Wait() })
	waitUntil(t, "the consumers subscribed", func() bool { return b.Consuming(q) == nil })
	return got
}

func heartbeat(t testing.TB) *bus.Envelope {
	t.Helper()
	e, err := bus.NewSigner(mustKey(t), 0).Seal(bus.KindHeartbeat, "e", "a", bus.Empty{})
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// arrives waits for the envelope id on got.
func arrives(t *testing.T, got <-chan string, id string) {
	t.Helper()
	deadline := time.After(patience)
	for {
		select {
		case g := <-got:
			if g == id {
				return
			}
		case <-deadline:
			t.Fatalf("event %s did not arrive", id)
		}
	}
}

// TestServerQueueDeletedUnderManyConsumers: every consumer of a deleted
// server queue comes back, the queue with its bindings; the other server
// queue's consumer goes on.
func TestServerQueueDeletedUnderManyConsumers(t *testing.T) {
	cfg := testConfig(t)
	cfg.QueueType = QueueQuorum
	cfg.TopologyCheck = time.Hour
	b := open(t, cfg)
	const n = 4
	got := events(t, b, bus.QueueEvents, n)
	compliance := events(t, b, bus.QueueCompliance, 1)
	if err := DeleteQueue(context.Background(), cfg, b.ServerQueue(bus.QueueEvents)); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "every subscription lost", func() bool { return b.LostSubscriptions() >= n })
	waitUntil(t, "the consumers back", func() bool { return b.Consuming(bus.QueueEvents) == nil })
	e := heartbeat(t)
	if err := b.Publish(context.Background(), e); err != nil {
		t.Fatalf("publish once the consumers are back: %v", err)
	}
	arrives(t, got, e.ID)
	c, err := bus.NewSigner(mustKey(t), 0).Seal(bus.KindCompliance, "e", "a", bus.Compliance{})
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Publish(context.Background(), c); err != nil {
		t.Fatal(err)
	}
	arrives(t, compliance, c.ID)
}

// TestQueueDeletedAndDeclaredAtOnce deletes a quorum queue and declares it
// again at once, as a client with rights on the broker could: RabbitMQ
// then drops the consumers without a cancel. A server consumer subscribes
// again after a silent SubscriptionCheck, and so does an agent's inbox
// consumer (which may not send a probe): the command sent after the attack
// arrives.
// Events and commands sent after the attack are delivered.
func TestQueueDeletedAndDeclaredAtOnce(t *testing.T) {
	cfg := testConfig(t)
	cfg.QueueType = QueueQuorum
	cfg.TopologyCheck = time.Hour
	cfg.SubscriptionCheck = time.Second
	srv := open(t, cfg)
	got := events(t, srv, bus.QueueCompliance, 1)
	acfg := cfg
	acfg.Agent = true
	agent := open(t, acfg)
	commands, lost := inbox(t, srv, agent, "prod", "web")
	raw := rawChannel(t, cfg)
	redeclare := func(name string, args amqp.Table, key, exchange string) {
		t.Helper()
		if _, err := raw.QueueDelete(name, false, false, false); err != nil {
			t.Fatal(err)
		}
		if _, err := raw.QueueDeclare(name, true, false, false, false, args); err != nil {
			t.Fatal(err)
		}
		if err := raw.QueueBind(name, key, exchange, false, nil); err != nil {
			t.Fatal(err)
		}
	}
	redeclare(srv.ServerQueue(bus.QueueCompliance), amqp.Table{"x-queue-type": QueueQuorum}, "#."+string(bus.KindCompliance), srv.eventsExchange())
	redeclare(agent.InboxQueue("prod", "web"), inboxArgs(cfg), bus.CommandKey("prod", "web"), srv.cmdExchange())

	e, err := bus.NewSigner(mustKey(t), 0).Seal(bus.KindCompliance, "e", "a", bus.Compliance{})
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Publish(context.Background(), e); err != nil {
		t.Fatal(err)
	}
	arrives(t, got, e.ID)
	cmd := pauseCommand(t)
	if err := srv.Send(context.Background(), cmd, bus.SendOptions{}); err != nil {
		t.Fatal(err)
	}
	arrives(t, commands, cmd.ID)
	_ = lost // the inbox was declared again before anything was sent: nothing was lost
}

// TestInboxUnbound deletes the commands exchange, which takes every
// inbox's binding with it, and declares it again: the server's next send
// finds the inbox there but unbound, binds it again and sends; the agent
// (which may not bind) loses nothing.
func TestInboxUnbound(t *testing.T) {
	cfg := testConfig(t)
	cfg.QueueType = QueueClassic
	cfg.TopologyCheck = time.Hour
	cfg.SubscriptionCheck = time.Second
	srv := open(t, cfg)
	acfg := cfg
	acfg.Agent = true
	agent := open(t, acfg)
	commands, lost := inbox(t, srv, agent, "prod", "web")
	raw := rawChannel(t, cfg)
	if err := raw.ExchangeDelete(srv.cmdExchange(), false, false); err != nil {
		t.Fatal(err)
	}
	if err := raw.ExchangeDeclare(srv.cmdExchange(), amqp.ExchangeDirect, true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	cmd := pauseCommand(t)
	if err := srv.Send(context.Background(), cmd, bus.SendOptions{}); err != nil {
		t.Fatalf("send with the inbox unbound: got %v, want it bound again and the command sent", err)
	}
	arrives(t, commands, cmd.ID)
	select {
	case <-lost:
		t.Fatal("OnInboxLost called: the inbox was never lost, only its binding")
	default:
	}
}

// inbox consumes env/agent's inbox on b until the test ends: the ids of
// the commands handled, and a signal per OnInboxLost call. The server srv
// declares and binds the inbox first, and again on each OnInboxMissing (as
// it does on the hello an agent then says). It returns once a command
// sent through srv arrives.
func inbox(t *testing.T, srv, b *tracked, env, agent string) (commands <-chan string, lost <-chan struct{}) {
	t.Helper()
	got := make(chan string, 64)
	lostc := make(chan struct{}, 16)
	ctx, cancel := context.WithCancel(context.Background())
	if err := srv.DeclareInbox(ctx, env, agent); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		done <- b.ConsumeInbox(ctx, env, agent, func(_ context.Context, d bus.Delivery) error {
			got <- d.Envelope.ID
			return nil
		}, bus.OnInboxMissing(func() {
			if err := srv.DeclareInbox(ctx, env, agent); err != nil && ctx.Err() == nil {
				t.Errorf("declare the inbox again: %v", err)
			}
		}), bus.OnInboxLost(func() { lostc <- struct{}{} }))
	}()
	t.Cleanup(func() { cancel(); <-done })
	first := pauseCommand(t)
	waitUntil(t, "the inbox", func() bool { return srv.Send(ctx, first, bus.SendOptions{}) == nil })
	arrives(t, got, first.ID)
	return got, lostc
}

func pauseCommand(t *testing.T) *bus.Envelope {
	t.Helper()
	e, err := bus.NewSigner(mustKey(t), 0).Seal(bus.KindPause, "prod", "web", bus.Empty{})
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// inboxArgs are the arguments of an inbox on cfg's broker.
func inboxArgs(cfg Config) amqp.Table {
	return amqp.Table{"x-queue-type": cfg.QueueType, "x-single-active-consumer": true,
		"x-max-length": int64(cfg.InboxMaxLength), "x-overflow": "reject-publish"}
}

// TestImposterQueue: a client deletes the events queue and declares one
// of the same name the server cannot use (not durable). The server is
// not consuming, says why, and events are refused, not swallowed; once
// the imposter is gone the consumers declare the real queue again.
func TestImposterQueue(t *testing.T) {
	cfg := testConfig(t)
	cfg.QueueType = QueueClassic
	cfg.TopologyCheck = time.Hour
	b := open(t, cfg)
	got := events(t, b, bus.QueueEvents, 2)
	name := b.ServerQueue(bus.QueueEvents)
	ctx := context.Background()
	// The consumers declare the queue again at once after the first
	// cancel, then back off: the imposter gets in within a few tries.
	waitUntil(t, "the imposter in place", func() bool {
		if err := DeleteQueue(ctx, cfg, name); err != nil {
			t.Fatal(err)
		}
		ch := rawChannel(t, cfg)
		_, err := ch.QueueDeclare(name, false, false, false, false, amqp.Table{"x-queue-type": QueueClassic})
		return err == nil
	})
	waitUntil(t, "the consumers to give up on the imposter", func() bool {
		err := b.Consuming(bus.QueueEvents)
		return err != nil && strings.Contains(err.Error(), "PRECONDITION_FAILED")
	})
	err := b.Consuming(bus.QueueEvents)
	if !strings.HasPrefix(err.Error(), name+" not consumed since ") {
		t.Fatalf("got %q, want the queue named and since when", err)
	}
	e := heartbeat(t)
	if err := b.Publish(ctx, e); !errors.Is(err, bus.ErrUnroutable) {
		t.Fatalf("publish to the imposter: got %v, want ErrUnroutable", err)
	}
	if err := DeleteQueue(ctx, cfg, name); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "the consumers back", func() bool { return b.Consuming(bus.QueueEvents) == nil })
	if err := b.Publish(ctx, e); err != nil {
		t.Fatalf("publish once the consumers are back: %v", err)
	}
	arrives(t, got, e.ID)
}

// TestDeletedExchange: with the events exchange deleted, an agent's
// publish fails with the broker's reason instead of waiting for a
// reconnect that never comes; a server's periodic check declares the
// exchange and its bindings again, and publishing works again.
func TestDeletedExchange(t *testing.T) {
	cfg := testConfig(t)
	cfg.QueueType = QueueClassic
	cfg.TopologyCheck = time.Hour
	srv := open(t, cfg)
	got := events(t, srv, bus.QueueEvents, 1)
	acfg := cfg
	acfg.Agent = true
	agent := open(t, acfg)
	raw := rawChannel(t, cfg)
	if err := raw.ExchangeDelete(srv.eventsExchange(), false, false); err != nil {
		t.Fatal(err)
	}
	e := heartbeat(t)
	ctx, cancel := context.WithTimeout(context.Background(), patience)
	defer cancel()
	err := agent.Publish(ctx, e)
	if !errors.Is(err, errRefused) || !strings.Contains(err.Error(), "NOT_FOUND") {
		t.Fatalf("publish with the exchange deleted: got %v, want refused with the broker's reason", err)
	}
	t.Logf("publish with the exchange deleted: %v", err)

	// A replica checking every second: its connect declares the topology,
	// then its check does after the exchange is deleted again.
	checking := cfg
	checking.TopologyCheck = time.Second
	open(t, checking)
	waitUntil(t, "the exchange declared on connect", func() bool { return agent.Publish(ctx, e) == nil })
	arrives(t, got, e.ID)
	if err := raw.ExchangeDelete(srv.eventsExchange(), false, false); err != nil {
		t.Fatal(err)
	}
	e = heartbeat(t)
	waitUntil(t, "the exchange declared by the check", func() bool { return agent.Publish(ctx, e) == nil })
	arrives(t, got, e.ID)
}

// TestAgentInboxDeleted: an agent's inbox deleted under its consumer is
// found missing (OnInboxMissing: the agent says hello, and the server
// declares it again with its arguments and binding), OnInboxLost runs
// once it is consumed again, and a command sent then is handled.
func TestAgentInboxDeleted(t *testing.T) {
	cfg := testConfig(t)
	cfg.QueueType = QueueQuorum
	srv := open(t, cfg)
	acfg := cfg
	acfg.Agent = true
	agent := open(t, acfg)
	commands, lost := inbox(t, srv, agent, "prod", "web")
	name := agent.InboxQueue("prod", "web")
	if err := DeleteQueue(context.Background(), cfg, name); err != nil {
		t.Fatal(err)
	}
	select {
	case <-lost:
	case <-time.After(patience):
		t.Fatal("OnInboxLost not called after the inbox was deleted")
	}
	// Declaring it with the arguments an inbox has succeeds only if it has
	// exactly those.
	if _, err := rawChannel(t, cfg).QueueDeclare(name, true, false, false, false, inboxArgs(cfg)); err != nil {
		t.Fatalf("the inbox declared again lacks its arguments: %v", err)
	}
	cmd := pauseCommand(t)
	if err := srv.Send(context.Background(), cmd, bus.SendOptions{}); err != nil {
		t.Fatalf("send after OnInboxLost: %v", err)
	}
	arrives(t, commands, cmd.ID)
}

// BenchmarkDeletedQueueRecovery measures how long a server is deaf after
// its events queue is deleted under its 8 consumers: from the delete to an
// event published afterwards being delivered (the consumers wait for the
// cancel to settle, declare the queue and its bindings again and
// subscribe again).
//
//	go test ./bus/amqp -run '^$' -bench DeletedQueueRecovery -benchtime 50x -count 3
func BenchmarkDeletedQueueRecovery(b *testing.B) {
	for _, qt := range []string{QueueQuorum, QueueClassic} {
		b.Run(qt, func(b *testing.B) { benchmarkRecovery(b, qt) })
	}
}

func benchmarkRecovery(b *testing.B, queueType string) {
	cfg := testConfig(b)
	cfg.QueueType = queueType
	cfg.TopologyCheck = time.Hour
	// Each delete follows a steady subscription: measure the first
	// recovery, not the back-off of a queue deleted again and again.
	cfg.ReconnectMin, cfg.ReconnectMax = time.Millisecond, time.Millisecond
	bb, err := New(cfg, zerolog.Nop())
	if err != nil {
		b.Fatal(err)
	}
	defer bb.Close()
	defer deleteTopology(b, cfg, nil)
	ctx, cancel := context.WithCancel(context.Background())
	got := make(chan string, 1024)
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_ = bb.ConsumeEvents(ctx, bus.QueueEvents, func(_ context.Context, d bus.Delivery) error {
				got <- d.Envelope.ID
				return nil
			})
		}()
	}
	conn, err := amqp.Dial(cfg.URL)
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Close()
	raw, err := conn.Channel()
	if err != nil {
		b.Fatal(err)
	}
	name := bb.ServerQueue(bus.QueueEvents)
	steady := func() {
		for bb.Consuming(bus.QueueEvents) != nil {
			time.Sleep(time.Millisecond)
		}
		time.Sleep(5 * time.Millisecond)
	}
	steady()
	b.ResetTimer()
	for range b.N {
		e := heartbeat(b)
		if _, err := raw.QueueDelete(name, false, false, false); err != nil {
			b.Fatal(err)
		}
		for {
			// Unroutable until the queue is back.
			err := bb.Publish(ctx, e)
			if err == nil {
				break
			}
			if !errors.Is(err, bus.ErrUnroutable) {
				b.Fatal(err)
			}
			time.Sleep(time.Millisecond)
		}
		select {
		case id := <-got:
			if id != e.ID {
				b.Fatalf("got %s, want %s", id, e.ID)
			}
		case <-time.After(patience):
			b.Fatalf("the event published after the recovery did not arrive (consuming: %v)", bb.Consuming(bus.QueueEvents))
		}
		b.StopTimer()
		steady()
		b.StartTimer()
	}
	b.StopTimer()
	b.ReportMetric(float64(bb.LostSubscriptions())/float64(b.N), "lost-subs/op")
}

// TestDeclareInboxFallsBack: DeclareInbox keeps a channel open and
// declares with this bus's arguments; when that fails it takes the full
// path. An inbox made with other arguments is used as it is and bound; a
// deleted commands exchange is declared again; declarations from more
// callers than operation slots all succeed, over one connection.
func TestDeclareInboxFallsBack(t *testing.T) {
	cfg := testConfig(t)
	cfg.QueueType = QueueClassic
	cfg.TopologyCheck = time.Hour
	srv := open(t, cfg)
	ctx := context.Background()
	raw := rawChannel(t, cfg)
	send := func(agent string) error {
		e, err := bus.NewSigner(mustKey(t), 0).Seal(bus.KindPause, "prod", agent, bus.Empty{})
		if err != nil {
			t.Fatal(err)
		}
		return srv.Send(ctx, e, bus.SendOptions{})
	}
	// Warm the kept channels.
	if err := srv.DeclareInbox(ctx, "prod", "first"); err != nil {
		t.Fatal(err)
	}
	// Made by hand with another bound and no single active consumer.
	other := amqp.Table{"x-queue-type": QueueClassic, "x-max-length": int64(7)}
	if _, err := raw.QueueDeclare(srv.InboxQueue("prod", "old"), true, false, false, false, other); err != nil {
		t.Fatal(err)
	}
	if err := srv.DeclareInbox(ctx, "prod", "old"); err != nil {
		t.Fatalf("an inbox with other arguments: got %v, want it used as it is", err)
	}
	if _, err := raw.QueueDeclarePassive(srv.InboxQueue("prod", "old"), true, false, false, false, other); err != nil {
		t.Fatalf("the inbox with other arguments changed: %v", err)
	}
	if err := send("old"); err != nil {
		t.Fatalf("send to the inbox with other arguments: %v (not bound?)", err)
	}
	// The commands exchange deleted: the kept channel's bind fails, the
	// full path declares the exchange again.
	if err := raw.ExchangeDelete(srv.cmdExchange(), false, false); err != nil {
		t.Fatal(err)
	}
	if err := srv.DeclareInbox(ctx, "prod", "after"); err != nil {
		t.Fatalf("with the commands exchange deleted: %v", err)
	}
	if err := send("after"); err != nil {
		t.Fatalf("send after the exchange was declared again: %v", err)
	}
	// Four times as many callers as slots.
	var wg sync.WaitGroup
	errs := make(chan error, 4*maxOperations)
	for i := range 4 * maxOperations {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs <- srv.DeclareInbox(ctx, "prod", fmt.Sprintf("many%02d", i))
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatalf("concurrent declarations: %v", err)
		}
	}
	for i := range 4 * maxOperations {
		if err := send(fmt.Sprintf("many%02d", i)); err != nil {
			t.Fatalf("send to many%02d: %v", i, err)
		}
	}
}
