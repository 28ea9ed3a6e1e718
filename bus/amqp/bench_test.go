package amqp

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/rs/zerolog"

	"github.com/tetherhq/tether/bus"
)

// publishers is how many goroutines publish at once in both benchmarks.
const publishers = 8

// BenchmarkBusEvents measures envelopes per second through RabbitMQ with
// this package: publish with confirm (mandatory), consume with ack, from
// 8 concurrent publishers. BenchmarkBareAMQP does the same with bare
// amqp091-go and the same message bytes; compare the two in one run:
//
//	go test ./bus/amqp -run '^$' -bench 'BusEvents|BareAMQP' -benchtime 20000x -count 3
func BenchmarkBusEvents(b *testing.B) {
	cfg := testConfig(b)
	cfg.QueueType = QueueClassic
	bb, err := New(cfg, zerolog.Nop())
	if err != nil {
		b.Fatal(err)
	}
	defer bb.Close()
	defer deleteTopology(b, cfg, nil)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if err := bb.Ready(ctx); err != nil {
		b.Fatal(err)
	}
	envelopes := heartbeats(b, b.N)
	var got atomic.Int64
	all := make(chan struct{})
	n := int64(b.N)
	consumed := make(chan error, 1)
	go func() {
		consumed <- bb.ConsumeEvents(ctx, bus.QueueEvents, func(context.Context, bus.Delivery) error {
			if got.Add(1) == n {
				close(all)
			}
			return nil
		})
	}()
	b.ResetTimer()
	var next atomic.Int64
	var wg sync.WaitGroup
	for p := 0; p < publishers; p++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := next.Add(1) - 1
				if i >= n {
					return
				}
				if err := bb.Publish(ctx, envelopes[i]); err != nil {
					b.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	<-all
	b.StopTimer()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "envelopes/s")
	cancel()
	<-consumed
}

// BenchmarkBareAMQP is the baseline of BenchmarkBusEvents: amqp091-go with
// the same topology shape (a topic exchange bound to a classic queue),
// confirm mode, mandatory, manual acks and prefetch, 8 publishers each on
// its own channel.
func BenchmarkBareAMQP(b *testing.B) {
	cfg := testConfig(b)
	conn, err := amqp.Dial(cfg.URL)
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Close()
	setup, err := conn.Channel()
	if err != nil {
		b.Fatal(err)
	}
	exchange, queue := cfg.Namespace+".bare", cfg.Namespace+".bare"
	if err := setup.ExchangeDeclare(exchange, amqp.ExchangeTopic, true, false, false, false, nil); err != nil {
		b.Fatal(err)
	}
	if _, err := setup.QueueDeclare(queue, true, false, false, false, amqp.Table{"x-queue-type": QueueClassic}); err != nil {
		b.Fatal(err)
	}
	if err := setup.QueueBind(queue, "#.heartbeat", exchange, false, nil); err != nil {
		b.Fatal(err)
	}
	defer func() {
		_, _ = setup.QueueDelete(queue, false, false, false)
		_ = setup.ExchangeDelete(exchange, false, false)
		setup.Close()
	}()
	bodies := make([][]byte, b.N)
	for i, e := range heartbeats(b, b.N) {
		if bodies[i], err = bus.Encode(e); err != nil {
			b.Fatal(err)
		}
	}
	cons, err := conn.Channel()
	if err != nil {
		b.Fatal(err)
	}
	if err := cons.Qos(Default().Prefetch, 0, false); err != nil {
		b.Fatal(err)
	}
	deliveries, err := cons.Consume(queue, "", false, false, false, false, nil)
	if err != nil {
		b.Fatal(err)
	}
	n := int64(b.N)
	all := make(chan struct{})
	go func() {
		var got int64
		for d := range deliveries {
			if _, err := bus.Decode(d.Body); err != nil { // the bus decodes too
				b.Error(err)
			}
			_ = d.Ack(false)
			if got++; got == n {
				close(all)
			}
		}
	}()
	b.ResetTimer()
	var next atomic.Int64
	var wg sync.WaitGroup
	for p := 0; p < publishers; p++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ch, err := conn.Channel()
			if err != nil {
				b.Error(err)
				return
			}
			defer ch.Close()
			if err := ch.Confirm(false); err != nil {
				b.Error(err)
				return
			}
			ch.NotifyReturn(make(chan amqp.Return, 16))
			for {
				i := next.Add(1) - 1
				if i >= n {
					return
				}
				dc, err := ch.PublishWithDeferredConfirmWithContext(context.Background(), exchange, "bench.agent-1.heartbeat", true, false,
					amqp.Publishing{ContentType: "application/json", DeliveryMode: amqp.Persistent, Body: bodies[i]})
				if err != nil {
					b.Error(err)
					return
				}
				if !dc.Wait() {
					b.Error("nacked")
					return
				}
			}
		}()
	}
	wg.Wait()
	select {
	case <-all:
	case <-time.After(time.Minute):
		b.Fatal("not every message was consumed")
	}
	b.StopTimer()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "envelopes/s")
	_ = cons.Close()
}

// heartbeats seals n heartbeat envelopes, the messages of both benchmarks.
func heartbeats(b *testing.B, n int) []*bus.Envelope {
	_, k, err := bus.GenerateKey()
	if err != nil {
		b.Fatal(err)
	}
	sg := bus.NewSigner(k, 0)
	out := make([]*bus.Envelope, n)
	for i := range out {
		if out[i], err = sg.Seal(bus.KindHeartbeat, "bench", "agent-1", bus.Empty{}); err != nil {
			b.Fatal(err)
		}
	}
	return out
}
