package server_test

import (
	"context"
	"crypto/ed25519"
	"sync"
	"testing"
	"time"

	"github.com/tetherhq/tether/bus"
	"github.com/tetherhq/tether/server"
	"github.com/tetherhq/tether/server/record"
)

// An agent's inbox emptied under it (the agent may consume and purge its
// own inbox; the broker cannot refuse it a purge) after the server sent
// it a release: the desired state is lost, and the agent, which said
// hello before, says no more. The deploy-interval retry goes by the
// generation the agent reported, not by what was sent: it sends the
// desired state again, and the deploy after it.
func TestRetryResendsWhatAnInboxLost(t *testing.T) {
	settings := record.DefaultEnvSettings()
	settings.Enrollment, settings.DeployInterval, settings.RepairInterval = record.EnrollOpen, record.Duration(time.Second), 0
	r := startRig(t, server.Config{LeadEvery: 100 * time.Millisecond}, map[string]record.EnvSettings{"test": settings})
	_, key, _ := bus.GenerateKey()
	if err := r.bus.DeclareInbox(r.ctx, "test", "web"); err != nil {
		t.Fatal(err)
	}
	r.forge(key, 1, bus.KindHello, "web", bus.Hello{PublicKey: key.Public().(ed25519.PublicKey)})
	r.waitOnline("web")
	v1 := r.release(file("web", "/f", "1"))
	waitFor(t, "the release in web's inbox", func() bool {
		waiting, err := r.bus.AnswerWaiting(r.ctx, "test", "web")
		return err == nil && waiting
	})
	// Emptied: what the server sent is gone.
	r.bus.DeleteQueue(bus.InboxName("test", "web"))
	if err := r.bus.DeclareInbox(r.ctx, "test", "web"); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var desired []*bus.Envelope
	ctx, cancel := context.WithCancel(r.ctx)
	defer cancel()
	go func() {
		_ = r.bus.ConsumeInbox(ctx, "test", "web", func(_ context.Context, d bus.Delivery) error {
			if k := d.Envelope.Kind; k == bus.KindDesiredFull || k == bus.KindDesiredDiff {
				mu.Lock()
				desired = append(desired, d.Envelope)
				mu.Unlock()
			}
			return nil
		})
	}()
	waitFor(t, "the desired state of version 1 sent again by the deploy-interval retry", func() bool {
		mu.Lock()
		defer mu.Unlock()
		for _, e := range desired {
			var full bus.DesiredFull
			var diff bus.DesiredDiff
			if e.DecodeBody(&full) == nil && full.Generation == v1.Number || e.DecodeBody(&diff) == nil && diff.To == v1.Number {
				return true
			}
		}
		return false
	})
}
