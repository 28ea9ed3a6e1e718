package amqp_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/tetherhq/tether/bus"
	"github.com/tetherhq/tether/bus/amqp/amqptest"
)

// A server's bus stays within the broker's channel_max however many
// operations its callers run at once on its one connection: a burst of
// hellos (a fleet coming back after a broker restart) declares hundreds
// of inboxes at the same time, and sends to agents without an inbox look
// for it.
func TestOperationsStayWithinChannelMax(t *testing.T) {
	n := node.Node(t)
	cfg := amqptest.Config(t)
	cfg.URL = n.URL
	b := amqptest.Open(t, cfg)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	_, key, _ := bus.GenerateKey()
	signer := bus.NewSigner(key, 0)
	const declares, sends = 300, 100
	var wg sync.WaitGroup
	errs := make(chan error, declares+sends)
	for i := range declares {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := b.DeclareInbox(ctx, "e", fmt.Sprintf("a%03d", i)); err != nil {
				errs <- fmt.Errorf("declare inbox %d: %w", i, err)
			}
		}()
	}
	for i := range sends {
		wg.Add(1)
		go func() {
			defer wg.Done()
			e, err := signer.Seal(bus.KindRepair, "e", fmt.Sprintf("absent%03d", i), bus.Empty{})
			if err == nil {
				err = b.Send(ctx, e, bus.SendOptions{})
			}
			if !errors.Is(err, bus.ErrNoInbox) {
				errs <- fmt.Errorf("send to absent agent %d: got %v, want %v", i, err, bus.ErrNoInbox)
			}
		}()
	}
	wg.Wait()
	close(errs)
	failed := 0
	for err := range errs {
		if failed++; failed <= 5 {
			t.Error(err)
		}
	}
	if failed > 0 {
		t.Fatalf("%d of %d operations failed on a broker with channel_max = %d", failed, declares+sends, amqptest.ChannelMax)
	}
}
