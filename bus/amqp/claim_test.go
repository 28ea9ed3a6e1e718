package amqp

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/tetherhq/tether/bus"
)

// TestClaimPassesWhenTheHolderDies: the primary's connection ends (the
// process died); its claim is lost and a standby's next try takes it.
func TestClaimPassesWhenTheHolderDies(t *testing.T) {
	cfg := testConfig(t)
	primary, standby := open(t, cfg), open(t, cfg)
	ctx := context.Background()
	c, err := primary.Claim(ctx, "prod", "web-1")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := standby.Claim(ctx, "prod", "web-1"); !errors.Is(err, bus.ErrClaimed) {
		t.Fatalf("standby's claim while the primary holds it: got %v, want ErrClaimed", err)
	}
	primary.Close() // the connection ends, as when the process is killed
	select {
	case <-c.Lost():
	case <-time.After(20 * time.Second):
		t.Fatal("the primary's claim was not lost with its connection")
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		c2, err := standby.Claim(ctx, "prod", "web-1")
		if err == nil {
			c2.Release()
			return
		}
		if !errors.Is(err, bus.ErrClaimed) || time.Now().After(deadline) {
			t.Fatalf("standby's claim after the primary died: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
