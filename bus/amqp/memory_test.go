package amqp_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/tetherhq/tether/bus/amqp"
	"github.com/tetherhq/tether/bus/amqp/amqptest"
)

// BenchmarkInboxMemory declares b.N agents' inboxes, as the server does on
// their hellos, on a RabbitMQ node of its own, and reports what the node's
// Erlang VM holds for them: MiB per 1,000 inboxes, classic against quorum
// (a quorum queue is a Raft group: in a cluster each of its replicas costs
// as much on its node).
//
//	go test ./bus/amqp -run '^$' -bench InboxMemory -benchtime 3000x
func BenchmarkInboxMemory(b *testing.B) {
	for _, qt := range []string{amqp.QueueClassic, amqp.QueueQuorum} {
		b.Run(qt, func(b *testing.B) {
			n := amqptest.StartNode(b, amqptest.NodeOptions{})
			cfg := amqptest.Config(b)
			cfg.URL, cfg.QueueType = n.URL, qt
			// Not amqptest.Open: its cleanup would delete thousands of
			// queues one by one; the node goes with the benchmark.
			srv, err := amqp.New(cfg, zerolog.Nop())
			if err != nil {
				b.Fatal(err)
			}
			defer srv.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
			defer cancel()
			if err := srv.Ready(ctx); err != nil {
				b.Fatal(err)
			}
			before := erlangMemory(ctx, b, n)
			b.ResetTimer()
			var wg sync.WaitGroup
			next := make(chan int)
			errs := make(chan error, 16)
			for range 16 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for i := range next {
						if err := srv.DeclareInbox(ctx, "mem", fmt.Sprintf("agent%06d", i)); err != nil {
							select {
							case errs <- err:
							default:
							}
							return
						}
					}
				}()
			}
			for i := range b.N {
				next <- i
			}
			close(next)
			wg.Wait()
			b.StopTimer()
			select {
			case err := <-errs:
				b.Fatal(err)
			default:
			}
			after := erlangMemory(ctx, b, n)
			b.ReportMetric(float64(after-before)/(1<<20)/float64(b.N)*1000, "MiB/1000inboxes")
		})
	}
}

// erlangMemory asks node n what its Erlang VM has allocated, in bytes,
// after a garbage collection of every process.
func erlangMemory(ctx context.Context, b *testing.B, n *amqptest.Node) int64 {
	b.Helper()
	out, err := n.Ctl(ctx, "eval", "[erlang:garbage_collect(P) || P <- erlang:processes()], erlang:memory(total).")
	if err != nil {
		b.Fatalf("rabbitmqctl eval: %v: %s", err, out)
	}
	v, err := strconv.ParseInt(strings.TrimSpace(string(out)), 10, 64)
	if err != nil {
		b.Fatalf("erlang:memory(total): %q: %v", out, err)
	}
	return v
}
