package amqp

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/tetherhq/tether/bus"
)

// TestWrongNamespace: an agent on a namespace no server declared (a
// server started with another --amqp-namespace) gets an error that says
// so and what to check, matched by bus.ErrNoExchange, beside the
// broker's own NOT_FOUND.
func TestWrongNamespace(t *testing.T) {
	cfg := testConfig(t)
	cfg.Agent = true
	agent := open(t, cfg)
	ctx, cancel := context.WithTimeout(context.Background(), patience)
	defer cancel()
	err := agent.Publish(ctx, heartbeat(t))
	if !errors.Is(err, bus.ErrNoExchange) {
		t.Fatalf("publish on a namespace no server declared: got %v, want bus.ErrNoExchange", err)
	}
	for _, want := range []string{"no exchange " + cfg.Namespace + ".events in namespace " + cfg.Namespace, "--amqp-namespace", "NOT_FOUND"} {
		if !strings.Contains(err.Error(), want) {
			t.Fatalf("publish on a namespace no server declared: %v\nwant it to say %q", err, want)
		}
	}
	t.Logf("publish on a namespace no server declared: %v", err)
}
