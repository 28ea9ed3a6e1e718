package bus_test

import (
	"context"
	"testing"

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
