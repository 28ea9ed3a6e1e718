package amqp

import (
	"context"
	"os"
	"os/exec"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tetherhq/tether/bus"
	"github.com/tetherhq/tether/model/testenv"
)

// Fault tests restart the shared broker: they run apart from the rest of
// the suite, one package at a time (`make test` runs them after it, with
// TETHER_FAULT_TESTS=1), never alongside tests that use RabbitMQ.
func faultTest(t *testing.T) {
	t.Helper()
	testenv.Faults(t, "restart the broker")
	if os.Getenv("TETHER_TEST_AMQP") != "" {
		t.Skip("SKIPPED: TETHER_TEST_AMQP names a broker this test cannot restart")
	}
	if _, err := exec.LookPath("rabbitmqctl"); err != nil {
		t.Fatalf("fault tests need rabbitmqctl to restart the local broker: %v", err)
	}
}

func rabbitmqctl(t *testing.T, args ...string) {
	t.Helper()
	out, err := exec.Command("rabbitmqctl", args...).CombinedOutput()
	if err != nil {
		t.Fatalf("rabbitmqctl %v: %v\n%s", args, err, out)
	}
}

// streamEvents publishes n events from one bus while another consumes them,
// calls fault in the middle, and returns what arrived: distinct envelopes
// and total deliveries.
func streamEvents(t *testing.T, n int, fault func(pub, sub *Bus)) (distinct, total int) {
	cfg := testConfig(t)
	cfg.QueueType = QueueQuorum
	pub := open(t, cfg)
	sub := open(t, cfg)
	var mu sync.Mutex
	seen := map[string]bool{}
	var deliveries atomic.Int64
	all := make(chan struct{})
	ctx, cancel := context.WithCancel(context.Background())
	consumed := make(chan error, 1)
	go func() {
		consumed <- sub.ConsumeEvents(ctx, bus.QueueEvents, func(_ context.Context, d bus.Delivery) error {
			deliveries.Add(1)
			mu.Lock()
			seen[d.Envelope.ID] = true
			if len(seen) == n {
				close(all)
			}
			mu.Unlock()
			return nil
		})
	}()
	t.Cleanup(func() {
		cancel()
		<-consumed
	})
	sg := bus.NewSigner(mustKey(t), 0)
	published := make(chan error, 1)
	go func() {
		pctx, pcancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer pcancel()
		for i := 0; i < n; i++ {
			if i == n/2 {
				fault(pub.Bus, sub.Bus)
			}
			e, err := sg.Seal(bus.KindHeartbeat, "faults", "streamer", bus.Empty{})
			if err != nil {
				published <- err
				return
			}
			if err := pub.Publish(pctx, e); err != nil {
				published <- err
				return
			}
		}
		published <- nil
	}()
	if err := <-published; err != nil {
		t.Fatalf("publishing: %v", err)
	}
	select {
	case <-all:
	case <-time.After(3 * time.Minute):
	}
	// Give redeliveries of the last moments a chance to show up as
	// duplicates before counting.
	time.Sleep(200 * time.Millisecond)
	mu.Lock()
	defer mu.Unlock()
	return len(seen), int(deliveries.Load())
}

func mustKey(t testing.TB) []byte {
	t.Helper()
	_, k, err := bus.GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// TestFaultBrokerRestart restarts the broker while 10,000 events stream:
// every event arrives, both sides reconnect by themselves, and duplicates
// (confirms lost in the restart) are only ever redeliveries of the same
// envelopes, which dedup removes.
func TestFaultBrokerRestart(t *testing.T) {
	faultTest(t)
	restarted := false
	t.Cleanup(func() {
		if restarted {
			return
		}
		_ = exec.Command("rabbitmqctl", "start_app").Run()
	})
	const n = 10_000
	var sides []*Bus
	distinct, total := streamEvents(t, n, func(pub, sub *Bus) {
		sides = []*Bus{pub, sub}
		rabbitmqctl(t, "stop_app")
		time.Sleep(time.Second)
		rabbitmqctl(t, "start_app")
		restarted = true
	})
	if distinct != n {
		t.Fatalf("%d distinct events arrived, want %d (events were lost)", distinct, n)
	}
	for i, b := range sides {
		b.mu.Lock()
		g := b.generation
		b.mu.Unlock()
		if g < 2 {
			t.Errorf("side %d connected %d time(s): it did not reconnect by itself", i, g)
		}
	}
	t.Logf("%d events, %d deliveries (%d duplicates removed by dedup)", n, total, total-distinct)
}

// TestFaultConsumerKilled closes the consumer's connection mid-stream (as a
// crashed process would): nothing is lost.
func TestFaultConsumerKilled(t *testing.T) {
	faultTest(t)
	const n = 10_000
	distinct, total := streamEvents(t, n, func(_, sub *Bus) {
		sub.mu.Lock()
		s := sub.current
		sub.mu.Unlock()
		if s != nil {
			_ = s.conn.Close()
		}
	})
	if distinct != n {
		t.Fatalf("%d distinct events arrived, want %d (events were lost)", distinct, n)
	}
	t.Logf("%d events, %d deliveries (%d redelivered after the kill)", n, total, total-distinct)
}
