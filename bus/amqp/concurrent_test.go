package amqp

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/tetherhq/tether/bus"
)

// TestConcurrentEventsSettleEveryDelivery hands events to a handler many
// at once, with rejects and failed first attempts mixed in: every event is
// handled to the end exactly once, rejects are dead-lettered, failures come
// back, and when the consumer stops nothing is left unacknowledged.
func TestConcurrentEventsSettleEveryDelivery(t *testing.T) {
	cfg := testConfig(t)
	cfg.QueueType = QueueClassic
	cfg.EventConcurrency = 16
	b := open(t, cfg)
	ctx := context.Background()
	_, key, _ := bus.GenerateKey()
	s := bus.NewSigner(key, 0)
	const n = 200
	for i := range n {
		e, err := s.Seal(bus.KindHeartbeat, "e", fmt.Sprintf("a%03d", i), bus.Empty{})
		if err != nil {
			t.Fatal(err)
		}
		if err := b.Publish(ctx, e); err != nil {
			t.Fatal(err)
		}
	}
	var mu sync.Mutex
	attempts := map[string]int{}
	done := map[string]bool{}
	cctx, cancel := context.WithCancel(ctx)
	stopped := make(chan error, 1)
	go func() {
		stopped <- b.ConsumeEvents(cctx, bus.QueueEvents, func(_ context.Context, d bus.Delivery) error {
			var i int
			fmt.Sscanf(d.Envelope.Agent, "a%03d", &i)
			time.Sleep(time.Duration(i%5) * time.Millisecond) // finish out of order
			mu.Lock()
			defer mu.Unlock()
			attempts[d.Envelope.Agent]++
			switch {
			case i%10 == 0:
				done[d.Envelope.Agent] = true
				return fmt.Errorf("%w: test", bus.ErrReject)
			case i%7 == 0 && attempts[d.Envelope.Agent] == 1:
				return errors.New("try again")
			}
			done[d.Envelope.Agent] = true
			return nil
		})
	}()
	deadline := time.Now().Add(30 * time.Second)
	for {
		mu.Lock()
		m := len(done)
		mu.Unlock()
		if m == n {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d events handled", m, n)
		}
		time.Sleep(10 * time.Millisecond)
	}
	// A rejected event counts as handled when its handler returns; its
	// confirmed dead-letter publish follows.
	for b.DeadLettered() < n/10 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	cancel()
	<-stopped
	if got := b.DeadLettered(); got != n/10 {
		t.Fatalf("%d dead-lettered, want %d", got, n/10)
	}
	for agent, k := range attempts {
		var i int
		fmt.Sscanf(agent, "a%03d", &i)
		want := 1
		if i%7 == 0 && i%10 != 0 {
			want = 2
		}
		if k != want {
			t.Fatalf("%s handled %d times, want %d", agent, k, want)
		}
	}
	left, err := b.Backlog(ctx, bus.QueueEvents)
	if err != nil || left != 0 {
		t.Fatalf("%d events back on the queue after the consumer stopped (%v): some were never acknowledged", left, err)
	}
}
