package server_test

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/tetherhq/tether/bus"
	"github.com/tetherhq/tether/bus/amqp/amqptest"
	"github.com/tetherhq/tether/server"
	"github.com/tetherhq/tether/server/store/sqlite"
)

// An agent's inbox is declared on the broker once: a hello said again is
// answered without declaring it anew. When the inbox went from the broker
// behind the server's back (deleted by someone with rights on it), the
// answer to the next hello comes back unroutable, and the server declares
// the inbox again and sends the answer: the agent gets it.
func TestInboxDeclaredOnceAndAgainWhenGone(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cfg := amqptest.Config(t)
	st, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "tether.db"), sqlite.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	srv, err := server.New(server.Config{}, st, amqptest.Open(t, cfg), zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := srv.EnsureEnv(ctx, "prod", quietSettings()); err != nil {
		t.Fatal(err)
	}
	runServer(t, srv)
	web := newFakeAgent(t, st, "prod", "web")

	// The agent's side: its connection reads its inbox and counts the
	// answers to its hellos.
	agentBus := amqptest.Open(t, cfg)
	answers := make(chan struct{}, 16)
	go func() {
		_ = agentBus.ConsumeInbox(ctx, "prod", "web", func(_ context.Context, d bus.Delivery) error {
			if d.Envelope.Kind == bus.KindEnrolled {
				answers <- struct{}{}
			}
			return nil
		})
	}()
	hello := func(what string) {
		t.Helper()
		if err := agentBus.Publish(ctx, web.seal(t, "prod", bus.KindHello, bus.Hello{PublicKey: web.signer.PublicKey()})); err != nil {
			t.Fatal(err)
		}
		select {
		case <-answers:
		case <-time.After(patience):
			t.Fatalf("%s: no answer to the hello", what)
		}
	}
	declares := func(outcome string) float64 {
		return metricWith(t, srv, "tether_inbox_declares_total", `{outcome="`+outcome+`"}`)
	}

	hello("first hello")
	if d, r := declares("declared"), declares("remembered"); d != 1 || r != 0 {
		t.Fatalf("after the first hello: declared %v, remembered %v; want 1 and 0", d, r)
	}
	hello("hello said again")
	hello("hello said a third time")
	if d, r := declares("declared"), declares("remembered"); d != 1 || r != 2 {
		t.Fatalf("after three hellos: declared %v, remembered %v; want 1 and 2", d, r)
	}

	// Someone deletes the inbox on the broker.
	if err := amqptest.Open(t, cfg).DeleteInbox(ctx, "prod", "web"); err != nil {
		t.Fatal(err)
	}
	hello("hello after the inbox was deleted on the broker")
	if d := declares("declared"); d != 2 {
		t.Fatalf("after the inbox was deleted: declared %v times, want 2 (declared again once)", d)
	}
}
