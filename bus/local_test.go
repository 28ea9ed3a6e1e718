package bus_test

import (
	"testing"

	"github.com/rs/zerolog"

	"github.com/tetherhq/tether/bus"
	"github.com/tetherhq/tether/bus/bustest"
)

func TestLocalContract(t *testing.T) {
	bustest.Run(t, func(t *testing.T) bustest.Subject {
		b := bus.NewLocal(zerolog.Nop())
		t.Cleanup(b.Close)
		return bustest.Subject{Bus: b, SendRaw: b.SendRaw, DeadLetters: b.DeadLetterCount}
	})
}
