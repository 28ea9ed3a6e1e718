package amqp_test

import (
	"context"
	"strings"
	"testing"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"
	"github.com/rs/zerolog"

	"github.com/tetherhq/tether/bus"
	"github.com/tetherhq/tether/bus/amqp"
	"github.com/tetherhq/tether/bus/amqp/amqptest"
)

// consumeInbox consumes env/agent's inbox on b until the test ends, and
// returns the ids of the commands it handles.
func consumeInbox(t *testing.T, b bus.Bus, env, agent string, opts ...bus.InboxOption) <-chan string {
	t.Helper()
	got := make(chan string, 16)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = b.ConsumeInbox(ctx, env, agent, func(_ context.Context, d bus.Delivery) error {
			got <- d.Envelope.ID
			return nil
		}, opts...)
	}()
	t.Cleanup(func() { cancel(); <-done })
	return got
}

func command(t *testing.T, env, agent string) *bus.Envelope {
	t.Helper()
	_, key, _ := bus.GenerateKey()
	e, err := bus.NewSigner(key, 0).Seal(bus.KindPause, env, agent, bus.Empty{})
	if err != nil {
		t.Fatal(err)
	}
	return e
}

func arrives(t *testing.T, got <-chan string, id, what string) {
	t.Helper()
	select {
	case g := <-got:
		if g != id {
			t.Fatalf("%s: got command %s, want %s", what, g, id)
		}
	case <-time.After(20 * time.Second):
		t.Fatalf("%s: the command never arrived", what)
	}
}

// TestNudgeBringsTheAgentToItsInbox: an agent that holds its claim and
// would look for its inbox only in an hour consumes it as soon as the
// server declares it: the server's nudge through the claim queue makes it
// look.
func TestNudgeBringsTheAgentToItsInbox(t *testing.T) {
	n := node.Node(t)
	cfg := amqptest.Config(t)
	cfg.URL = n.URL
	srv := amqptest.Open(t, cfg)
	acfg := cfg
	acfg.Agent = true
	agent := amqptest.Open(t, acfg)
	ctx := context.Background()
	claim, err := agent.Claim(ctx, "prod", "web")
	if err != nil {
		t.Fatal(err)
	}
	defer claim.Release()
	got := consumeInbox(t, agent, "prod", "web", bus.LookAfter(time.Hour))
	if err := srv.DeclareInbox(ctx, "prod", "web"); err != nil {
		t.Fatal(err)
	}
	cmd := command(t, "prod", "web")
	if err := srv.Send(ctx, cmd, bus.SendOptions{}); err != nil {
		t.Fatal(err)
	}
	arrives(t, got, cmd.ID, "after the nudge")
}

// TestNudgesRefused: a server whose broker user may not publish to the
// default exchange (amq.default, where nudges go) declares inboxes all the
// same, says once why its nudges stopped, and agents find their inboxes by
// looking.
func TestNudgesRefused(t *testing.T) {
	n := node.Node(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, args := range [][]string{
		{"add_user", "nudgeless", "nudgeless"},
		{"set_permissions", "-p", "/", "nudgeless", `^tether\..*`, `^tether\..*`, `^tether\..*`},
	} {
		if out, err := n.Ctl(ctx, args...); err != nil && !strings.Contains(string(out), "already exists") {
			t.Fatalf("rabbitmqctl %v: %v: %s", args, err, out)
		}
	}
	cfg := amqptest.Config(t)
	cfg.Namespace = "tether.nudgeless"
	cfg.URL = strings.Replace(n.URL, n.AdminUser+":"+n.AdminPassword, "nudgeless:nudgeless", 1)
	var logs syncBuffer
	srv, err := amqp.New(cfg, zerolog.New(&logs))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Close)
	if err := srv.Ready(ctx); err != nil {
		t.Fatal(err)
	}
	acfg := cfg
	acfg.Agent, acfg.URL = true, n.URL
	agent := amqptest.Open(t, acfg)
	agents := []string{"a", "b", "c"}
	gots := map[string]<-chan string{}
	for _, name := range agents {
		claim, err := agent.Claim(ctx, "prod", name)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(claim.Release)
		gots[name] = consumeInbox(t, agent, "prod", name, bus.LookAfter(100*time.Millisecond))
	}
	for _, name := range agents {
		if err := srv.DeclareInbox(ctx, "prod", name); err != nil {
			t.Fatalf("declare the inbox of %s with nudges refused: %v", name, err)
		}
	}
	for _, name := range agents {
		cmd := command(t, "prod", name)
		if err := srv.Send(ctx, cmd, bus.SendOptions{}); err != nil {
			t.Fatal(err)
		}
		arrives(t, gots[name], cmd.ID, "agent "+name+" without nudges")
	}
	// Declared again: no nudge is sent any more, so the channel stays.
	for _, name := range agents {
		if err := srv.DeclareInbox(ctx, "prod", name+"2"); err != nil {
			t.Fatal(err)
		}
	}
	if c := strings.Count(logs.String(), "refuses this server's nudges"); c != 1 {
		t.Fatalf("the refusal was logged %d times, want once:\n%s", c, logs.String())
	}
}

// TestForgedNudgesAreBounded: a client that may publish to the default
// exchange floods an agent's claim queue with nudges while its inbox is
// missing; each nudge could make it look (a channel opened and closed on
// the broker), but it looks at most about once a second.
func TestForgedNudgesAreBounded(t *testing.T) {
	n := node.Node(t)
	cfg := amqptest.Config(t)
	cfg.URL = n.URL
	acfg := cfg
	acfg.Agent = true
	agent := amqptest.Open(t, acfg)
	ctx := context.Background()
	claim, err := agent.Claim(ctx, "prod", "flooded")
	if err != nil {
		t.Fatal(err)
	}
	defer claim.Release()
	consumeInbox(t, agent, "prod", "flooded", bus.LookAfter(time.Hour))
	conn, err := amqp091.Dial(n.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	before, start := amqp.ChannelsOpened(), time.Now()
	for range 500 {
		if err := ch.PublishWithContext(ctx, "", agent.ClaimQueue("prod", "flooded"), false, false, amqp091.Publishing{Type: "tether.nudge"}); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(3 * time.Second)
	looks := amqp.ChannelsOpened() - before
	if most := int64(time.Since(start)/time.Second) + 2; looks > most {
		t.Fatalf("500 forged nudges made the agent open %d channels in %v, want at most %d (a look a second)", looks, time.Since(start).Round(time.Millisecond), most)
	}
	if looks == 0 {
		t.Fatal("no nudge made the agent look: the flood did not reach it")
	}
}

// TestTellReachesAnAgentWithoutInbox: what the server tells an agent that
// has no inbox (a pending one refused) reaches the handler of its inbox
// consumer, which waits for the inbox, through its claim queue; nothing
// is declared for it on the broker. Only a refusal is told, and nothing
// reaches an agent not connected: it is not queued.
func TestTellReachesAnAgentWithoutInbox(t *testing.T) {
	n := node.Node(t)
	cfg := amqptest.Config(t)
	cfg.URL = n.URL
	srv := amqptest.Open(t, cfg)
	acfg := cfg
	acfg.Agent = true
	agent := amqptest.Open(t, acfg)
	ctx := context.Background()
	_, key, _ := bus.GenerateKey()
	refusal, err := bus.NewSigner(key, 0).Seal(bus.KindRejected, "prod", "web", bus.Rejected{Reason: "unknown or revoked enrollment token"})
	if err != nil {
		t.Fatal(err)
	}
	// Not connected yet: told to nobody, kept nowhere.
	if err := srv.Tell(ctx, refusal, time.Minute); err != nil {
		t.Fatal(err)
	}
	claim, err := agent.Claim(ctx, "prod", "web")
	if err != nil {
		t.Fatal(err)
	}
	defer claim.Release()
	got := consumeInbox(t, agent, "prod", "web", bus.LookAfter(time.Hour))
	select {
	case id := <-got:
		t.Fatalf("the agent got %s, told before it was connected: want nothing kept for it", id)
	case <-time.After(time.Second):
	}
	if err := srv.Tell(ctx, refusal, time.Minute); err != nil {
		t.Fatal(err)
	}
	arrives(t, got, refusal.ID, "a refusal told to the agent without an inbox")
	conn, err := amqp091.Dial(n.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ch.QueueDeclarePassive(srv.InboxQueue("prod", "web"), true, false, false, false, nil); err == nil || !strings.Contains(err.Error(), "NOT_FOUND") {
		t.Fatalf("look for web's inbox: %v, want NOT_FOUND (nothing declared for an agent told)", err)
	}
	if err := srv.Tell(ctx, command(t, "prod", "web"), time.Minute); err == nil {
		t.Fatal("a pause told to an agent without an inbox: want it refused (only a refusal is told)")
	}
}
