package bus_test

import (
	"context"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/tetherhq/tether/bus"
	"github.com/tetherhq/tether/bus/bustest"
)

func TestLocalContract(t *testing.T) {
	bustest.Run(t, func(t *testing.T) bustest.Subject {
		b := bus.NewLocal(zerolog.Nop())
		t.Cleanup(b.Close)
		return bustest.Subject{Bus: b, SendRaw: b.SendRaw, DeadLetters: b.DeadLetterCount,
			DeleteInbox: func(_ context.Context, env, agent string) error {
				b.DeleteQueue(bus.InboxName(env, agent))
				return nil
			},
			DeleteServerQueue: func(_ context.Context, q bus.Queue) error {
				b.DeleteQueue(string(q))
				return nil
			},
			InboxLength: bus.DefaultInboxLength,
		}
	})
}

// What the server tells an agent without an inbox reaches its inbox
// consumer while it waits for the inbox, as on RabbitMQ (bus/amqp
// TestTellReachesAnAgentWithoutInbox); no inbox is made for it, and only
// a refusal is told.
func TestLocalTell(t *testing.T) {
	b := bus.NewLocal(zerolog.Nop())
	t.Cleanup(b.Close)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	claim, err := b.Claim(ctx, "prod", "web")
	if err != nil {
		t.Fatal(err)
	}
	defer claim.Release()
	got := make(chan *bus.Envelope, 1)
	go func() {
		_ = b.ConsumeInbox(ctx, "prod", "web", func(_ context.Context, d bus.Delivery) error {
			got <- d.Envelope
			return nil
		})
	}()
	_, key, _ := bus.GenerateKey()
	refusal, err := bus.NewSigner(key, 0).Seal(bus.KindRejected, "prod", "web", bus.Rejected{Reason: "no"})
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Tell(ctx, refusal, time.Minute); err != nil {
		t.Fatal(err)
	}
	select {
	case e := <-got:
		if e.ID != refusal.ID {
			t.Fatalf("got %s, want the refusal told", e)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the refusal told never reached the waiting consumer")
	}
	if waiting, err := b.AnswerWaiting(ctx, "prod", "web"); err != nil || waiting {
		t.Fatalf("web's inbox holds messages: %v, %v; want none made", waiting, err)
	}
	pause, err := bus.NewSigner(key, 0).Seal(bus.KindPause, "prod", "web", bus.Empty{})
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Tell(ctx, pause, time.Minute); err == nil {
		t.Fatal("a pause told: want it refused (only a refusal is told)")
	}
}
