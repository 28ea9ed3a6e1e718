package amqp_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"
	"github.com/rs/zerolog"

	"github.com/tetherhq/tether/bus/amqp"
	"github.com/tetherhq/tether/bus/amqp/amqptest"
)

// BenchmarkBrokerCost measures what each of the operations an agent's
// enrollment asks of the broker costs it in CPU, on a RabbitMQ node of
// its own (broker-ms/op, from the node's process): opening and closing a
// channel; looking for an inbox not declared yet (a passive declare the
// broker answers by closing the channel); an agent's claim (an exclusive
// queue, held open with its nudge consumer); the server's declaration of
// an inbox and its binding; a consumer started and cancelled.
//
//	go test ./bus/amqp -run '^$' -bench BrokerCost -benchtime 2000x
func BenchmarkBrokerCost(b *testing.B) {
	n := amqptest.StartNode(b, amqptest.NodeOptions{ChannelMax: 1 << 14})
	cfg := amqptest.Config(b)
	cfg.URL = n.URL
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
	const workers = 16
	conns := make([]*amqp091.Connection, workers)
	for i := range conns {
		c, err := amqp091.Dial(n.URL)
		if err != nil {
			b.Fatal(err)
		}
		defer c.Close()
		conns[i] = c
	}
	// each runs op b.N times over the workers' connections and reports
	// the node's CPU per op.
	each := func(b *testing.B, op func(c *amqp091.Connection, i int) error) {
		before, err := n.CPUTime()
		if err != nil {
			b.Fatal(err)
		}
		b.ResetTimer()
		var wg sync.WaitGroup
		next := make(chan int)
		errs := make(chan error, workers)
		for w := range workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range next {
					if err := op(conns[w], i); err != nil {
						select {
						case errs <- err:
						default:
						}
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
		after, err := n.CPUTime()
		if err != nil {
			b.Fatal(err)
		}
		b.ReportMetric(float64((after-before).Microseconds())/1000/float64(b.N), "broker-ms/op")
	}
	run := 0
	b.Run("channel", func(b *testing.B) {
		each(b, func(c *amqp091.Connection, _ int) error {
			ch, err := c.Channel()
			if err != nil {
				return err
			}
			return ch.Close()
		})
	})
	b.Run("look-missing-inbox", func(b *testing.B) {
		each(b, func(c *amqp091.Connection, i int) error {
			ch, err := c.Channel()
			if err != nil {
				return err
			}
			if _, err := ch.QueueDeclarePassive(fmt.Sprintf("missing.%d", i), true, false, false, false, nil); err == nil {
				return fmt.Errorf("missing.%d exists", i)
			}
			return nil
		})
	})
	var held []*amqp091.Channel
	var mu sync.Mutex
	b.Run("claim", func(b *testing.B) {
		run++
		each(b, func(c *amqp091.Connection, i int) error {
			ch, err := c.Channel()
			if err != nil {
				return err
			}
			name := fmt.Sprintf("claim.%d.%d", run, i)
			if _, err := ch.QueueDeclare(name, false, true, true, false, nil); err != nil {
				return err
			}
			if _, err := ch.Consume(name, "", false, false, false, false, nil); err != nil {
				return err
			}
			mu.Lock()
			held = append(held, ch)
			mu.Unlock()
			return nil
		})
	})
	for _, ch := range held {
		_ = ch.Close()
	}
	b.Run("declare-inbox", func(b *testing.B) {
		run++
		each(b, func(_ *amqp091.Connection, i int) error {
			return srv.DeclareInbox(ctx, "cost", fmt.Sprintf("r%d-agent%06d", run, i))
		})
	})
	b.Run("durable-queue", func(b *testing.B) {
		run++
		each(b, func(c *amqp091.Connection, i int) error {
			ch, err := c.Channel()
			if err != nil {
				return err
			}
			defer ch.Close()
			_, err = ch.QueueDeclare(fmt.Sprintf("dq.%d.%d", run, i), true, false, false, false, amqp091.Table{"x-queue-type": "classic"})
			return err
		})
	})
	b.Run("bind", func(b *testing.B) {
		before := run
		each(b, func(c *amqp091.Connection, i int) error {
			ch, err := c.Channel()
			if err != nil {
				return err
			}
			defer ch.Close()
			return ch.QueueBind(fmt.Sprintf("dq.%d.%d", before, i), fmt.Sprintf("k%d", i), "amq.direct", false, nil)
		})
	})
	b.Run("consume-cancel", func(b *testing.B) {
		run++
		each(b, func(c *amqp091.Connection, i int) error {
			ch, err := c.Channel()
			if err != nil {
				return err
			}
			defer ch.Close()
			name := fmt.Sprintf("cc.%d.%d", run, i)
			if _, err := ch.QueueDeclare(name, false, true, true, false, nil); err != nil {
				return err
			}
			if _, err := ch.Consume(name, "c", false, false, false, false, nil); err != nil {
				return err
			}
			return ch.Cancel("c", false)
		})
	})
}
