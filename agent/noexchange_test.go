package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/tetherhq/tether/agent/handler"
	"github.com/tetherhq/tether/agent/handler/builtin"
	"github.com/tetherhq/tether/bus"
)

// noExchangeBus refuses publishes as a broker without the server's
// exchanges does (bus.ErrNoExchange) while refusing is set, counting the
// hellos refused.
type noExchangeBus struct {
	*bus.Local
	refusing atomic.Bool
	refused  atomic.Int32
}

func (b *noExchangeBus) Publish(ctx context.Context, e *bus.Envelope) error {
	if b.refusing.Load() {
		if e.Kind == bus.KindHello {
			b.refused.Add(1)
		}
		return fmt.Errorf("publish %s: %w tether.events in namespace tether of this broker: is the server running with the same --amqp-namespace?", e, bus.ErrNoExchange)
	}
	return b.Local.Publish(ctx, e)
}

// TestNoExchangeSaidOnce: an agent on a namespace no server declared (a
// server on another --amqp-namespace) says so once at the default level,
// with the bus's explanation, not at every hello it says again; once a
// publish goes through and the exchanges go missing again, it says so
// again, once.
func TestNoExchangeSaidOnce(t *testing.T) {
	s := newFakeServer(t)
	b := &noExchangeBus{Local: s.bus}
	b.refusing.Store(true)
	reg, err := builtin.Registry(handler.Runtime{Root: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	cfg := Config{Env: "test", Name: "web", StateDir: t.TempDir(), Heartbeat: 50 * time.Millisecond, HelloRetry: 20 * time.Millisecond,
		HelloRetryMax: 20 * time.Millisecond, ClaimRetry: 20 * time.Millisecond, ClaimWait: 200 * time.Millisecond, ServerKey: s.signer.PublicKey()}
	var logs logBuffer
	a, err := New(cfg, b, reg, zerolog.New(&logs).Level(zerolog.WarnLevel))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := a.Run(ctx); err != nil && !errors.Is(err, context.Canceled) {
			t.Errorf("agent: %v", err)
		}
	}()
	t.Cleanup(func() { cancel(); <-done; a.Close() })

	// warnings counts the warnings about the missing exchange.
	warnings := func() int {
		n := 0
		for _, l := range strings.Split(strings.TrimSpace(logs.String()), "\n") {
			var e struct{ Level, Message, Error string }
			if json.Unmarshal([]byte(l), &e) == nil && e.Level == "warn" && strings.Contains(e.Error, "--amqp-namespace") {
				n++
			}
		}
		return n
	}
	waitHellos := func(n int32) {
		t.Helper()
		for deadline := time.Now().Add(patience); b.refused.Load() < n; time.Sleep(5 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("%d hellos refused, want %d", b.refused.Load(), n)
			}
		}
	}
	waitHellos(6)
	if got := warnings(); got != 1 {
		t.Fatalf("after %d hellos refused for want of the exchange: %d warnings about it, want 1:\n%s", b.refused.Load(), got, logs.String())
	}
	// A hello goes through: the next refusal starts a new series.
	b.refusing.Store(false)
	var seen int
	if s.next(&seen, "web", bus.KindHello) == nil {
		t.Fatal("no hello once the broker takes them")
	}
	before := b.refused.Load()
	b.refusing.Store(true)
	waitHellos(before + 6)
	if got := warnings(); got != 2 {
		t.Fatalf("after a hello went through and more were refused: %d warnings about the missing exchange, want 2:\n%s", got, logs.String())
	}
}
