// Package amqptest gives tests a RabbitMQ namespace of their own on the
// broker named by TETHER_TEST_AMQP (default: the local one), deleted with
// the inboxes the test used when it ends, and RabbitMQ nodes of their own
// (StartNode, Shared) for what the machine's broker must not be changed
// for: TLS, listeners, authentication backends.
package amqptest

import (
	"context"
	"fmt"
	"net"
	"net/url"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/rs/zerolog"

	"github.com/tetherhq/tether/bus"
	"github.com/tetherhq/tether/bus/amqp"
	"github.com/tetherhq/tether/model/testenv"
)

// DefaultURL is the local RabbitMQ of a development machine and CI.
const DefaultURL = "amqp://guest:guest@127.0.0.1:5672/"

// URL returns the broker tests use.
func URL() string {
	if u := os.Getenv("TETHER_TEST_AMQP"); u != "" {
		return u
	}
	return DefaultURL
}

// Config returns a bus configuration with a namespace of its own (classic
// queues, quick reconnects). Its topology is deleted when the test ends,
// with the inboxes of every bus Open made on it.
func Config(t testing.TB) amqp.Config {
	t.Helper()
	cfg := amqp.Default()
	cfg.URL = URL()
	cfg.Namespace = "tethertest." + strings.ReplaceAll(uuid.NewString()[:13], "-", "")
	cfg.QueueType = "classic"
	cfg.ReconnectMin = 50 * time.Millisecond
	cfg.ReconnectMax = 2 * time.Second
	cfg.Heartbeat = 5 * time.Second
	return cfg
}

// Bus is a connected bus that remembers the inboxes it touched.
type Bus struct {
	*amqp.Bus
	mu      sync.Mutex
	inboxes map[string]bool
}

func (b *Bus) note(env, agent string) {
	b.mu.Lock()
	b.inboxes[b.InboxQueue(env, agent)] = true
	b.mu.Unlock()
}

// DeclareInbox implements bus.Bus.
func (b *Bus) DeclareInbox(ctx context.Context, env, agent string) error {
	b.note(env, agent)
	return b.Bus.DeclareInbox(ctx, env, agent)
}

// ConsumeInbox implements bus.Bus.
func (b *Bus) ConsumeInbox(ctx context.Context, env, agent string, h bus.Handler, opts ...bus.InboxOption) error {
	b.note(env, agent)
	return b.Bus.ConsumeInbox(ctx, env, agent, h, opts...)
}

// Open connects a bus on cfg; it is closed, and the namespace's topology
// deleted, when the test ends. When the broker cannot be reached the test
// is skipped with the reason, or fails where tests must run (testenv.Need).
func Open(t testing.TB, cfg amqp.Config) *Bus {
	t.Helper()
	b, err := amqp.New(cfg, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	// Generous: under `go test -race ./...` on two cores a broker that is
	// there can take seconds to answer. One that is not there at all
	// refuses the connection at once (below).
	wait := 20 * time.Second
	if u, err := url.Parse(cfg.URL); err == nil && u.Hostname() != "" {
		port := u.Port()
		if port == "" {
			port = map[bool]string{true: "5671", false: "5672"}[u.Scheme == "amqps"]
		}
		if c, err := net.DialTimeout("tcp", net.JoinHostPort(u.Hostname(), port), 2*time.Second); err != nil {
			wait = time.Second
		} else {
			c.Close()
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	if err := b.Ready(ctx); err != nil {
		b.Close()
		if cfg.URL != URL() {
			// A private node (StartNode) is there: failing to use it is a
			// failure, not a missing service.
			t.Fatal(err)
		}
		testenv.Need(t, false, fmt.Sprintf("RabbitMQ is not reachable (%v): start it with `rabbitmq-server -detached` or set TETHER_TEST_AMQP", err))
	}
	tb := &Bus{Bus: b, inboxes: map[string]bool{}}
	t.Cleanup(func() {
		b.Close()
		tb.mu.Lock()
		var inboxes []string
		for q := range tb.inboxes {
			inboxes = append(inboxes, q)
		}
		tb.mu.Unlock()
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		if err := amqp.DeleteTopology(ctx, cfg, inboxes); err != nil {
			t.Logf("cleanup of namespace %s: %v", cfg.Namespace, err)
		}
	})
	return tb
}
