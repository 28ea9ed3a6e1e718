package e2e

import (
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/tetherhq/tether/bus"
	"github.com/tetherhq/tether/bus/amqp/amqptest"
	"github.com/tetherhq/tether/server/record"
)

// TestAgentRightsOnTheBroker runs a fleet on a broker that asks the server
// about each agent (rabbitmq_auth_backend_http), the server and agents
// speaking TLS to it (amqps://, verify_peer), then attacks agent beta, and
// alpha's own inbox, with agent alpha's real credentials — its key, read
// from its state directory, as a compromised host would — and checks that
// the broker refuses every attempt while beta keeps converging. The agents
// started with no inbox (the server declares it on their hello); beta's
// inbox is then deleted on the broker, and beta, which may not declare it,
// has the server declare it again and deploys on. Last, alpha is revoked:
// its connection is closed and it cannot log in again.
func TestAgentRightsOnTheBroker(t *testing.T) {
	node, authListen := authNode(t, amqptest.NodeOptions{TLS: true})
	c := newClusterWith(t, clusterOpts{node: node, authListen: authListen})

	states := map[string]string{}
	for _, name := range []string{"alpha", "beta"} {
		states[name] = t.TempDir()
		c.startAgent(name, agentOpts{stateDir: states[name], root: t.TempDir()})
	}
	model := func(v string) string {
		return fileModel(t, 0, nil, map[string]string{
			"alpha": fmt.Sprintf("  file \"a\" {\n    path = \"/srv/a\"\n    content = %q\n  }\n", v),
			"beta":  fmt.Sprintf("  file \"b\" {\n    path = \"/srv/b\"\n    content = %q\n  }\n", v),
		})
	}
	// web (fileModel's own host) has a directory and no agent: 3 resources
	// per version are the two agents'.
	v1 := c.release(model("one"))
	waitFor(t, 90*time.Second, "alpha and beta to deploy version 1", func() bool {
		st := c.statuses()
		return st["file[alpha,path=/srv/a]"].Version == v1 && st["file[alpha,path=/srv/a]"].State == "deployed" &&
			st["file[beta,path=/srv/b]"].Version == v1 && st["file[beta,path=/srv/b]"].State == "deployed"
	})

	key := readKey(t, filepath.Join(states["alpha"], env, "alpha", "key"))
	h := loginAs(t, node, key, "alpha")
	ns := c.ns
	betaInbox, betaClaim := ns+".agent."+env+".beta", ns+".primary."+env+".beta"
	alphaInbox := ns + ".agent." + env + ".alpha"
	declare := func(name string, args amqp.Table) func(ch *amqp.Channel) error {
		return func(ch *amqp.Channel) error {
			_, err := ch.QueueDeclare(name, true, false, false, false, args)
			return err
		}
	}
	attacks := []struct {
		name string
		do   func(ch *amqp.Channel) error
	}{
		{"consume beta's inbox", func(ch *amqp.Channel) error {
			_, err := ch.Consume(betaInbox, "", false, false, false, false, nil)
			return err
		}},
		{"take a message of beta's inbox", func(ch *amqp.Channel) error {
			_, _, err := ch.Get(betaInbox, false)
			return err
		}},
		{"purge beta's inbox", func(ch *amqp.Channel) error { _, err := ch.QueuePurge(betaInbox, false); return err }},
		{"delete beta's inbox", func(ch *amqp.Channel) error { _, err := ch.QueueDelete(betaInbox, false, false, false); return err }},
		{"squat beta's primary claim", func(ch *amqp.Channel) error {
			_, err := ch.QueueDeclare(betaClaim, false, true, true, false, nil)
			return err
		}},
		{"declare a tap queue", func(ch *amqp.Channel) error { _, err := ch.QueueDeclare("", false, true, true, false, nil); return err }},
		{"declare a named queue", func(ch *amqp.Channel) error {
			_, err := ch.QueueDeclare(ns+".tap", false, true, false, false, nil)
			return err
		}},
		{"bind its own inbox to beta's commands", func(ch *amqp.Channel) error {
			return ch.QueueBind(alphaInbox, bus.CommandKey(env, "beta"), ns+".cmd", false, nil)
		}},
		// Its own inbox is the server's to declare, with its arguments.
		{"declare its own inbox as the server did", declare(alphaInbox, inboxArgs())},
		{"declare its own inbox again without a bound", declare(alphaInbox, amqp.Table{"x-queue-type": "classic"})},
		{"declare its own inbox dead-lettering into the events exchange", declare(alphaInbox, amqp.Table{"x-queue-type": "classic",
			"x-dead-letter-exchange": ns + ".events", "x-dead-letter-routing-key": bus.EventKey(env, "beta", bus.KindResourceStatus)})},
		{"delete its own inbox", func(ch *amqp.Channel) error { _, err := ch.QueueDelete(alphaInbox, false, false, false); return err }},
		{"publish into beta's inbox", publishing(ns+".cmd", bus.CommandKey(env, "beta"))},
		{"publish into beta's inbox by its name", publishing("", betaInbox)},
		{"publish events with beta's routing key", publishing(ns+".events", bus.EventKey(env, "beta", bus.KindResourceStatus))},
		{"publish a hello for beta", publishing(ns+".events", bus.EventKey(env, "beta", bus.KindHello))},
		{"publish dead letters", publishing(ns+".dead", "")},
		{"declare the commands exchange", func(ch *amqp.Channel) error {
			return ch.ExchangeDeclare(ns+".cmd", amqp.ExchangeDirect, true, false, false, false, nil)
		}},
		{"declare an exchange of the namespace", func(ch *amqp.Channel) error {
			return ch.ExchangeDeclare(ns+".evil", amqp.ExchangeFanout, true, false, false, false, nil)
		}},
		{"delete the events exchange", func(ch *amqp.Channel) error { return ch.ExchangeDelete(ns+".events", false, false) }},
		{"consume the server's events", func(ch *amqp.Channel) error {
			_, err := ch.Consume(ns+".server.events", "", false, false, false, false, nil)
			return err
		}},
		{"purge the server's events", func(ch *amqp.Channel) error { _, err := ch.QueuePurge(ns+".server.events", false); return err }},
		{"delete the compliance queue", func(ch *amqp.Channel) error {
			_, err := ch.QueueDelete(ns+".server.compliance", false, false, false)
			return err
		}},
		{"purge the dead-letter queue", func(ch *amqp.Channel) error { _, err := ch.QueuePurge(ns+".dead", false); return err }},
	}
	for _, a := range attacks {
		if err := h.attempt(a.do); !refusedForRights(err) {
			t.Errorf("%s: got %v, want the broker's ACCESS_REFUSED", a.name, err)
		} else {
			t.Logf("%s: refused (%v)", a.name, err)
		}
	}
	// The same connection may do what alpha may: publish its own events.
	if err := h.attempt(publishing(ns+".events", bus.EventKey(env, "alpha", bus.KindHeartbeat))); err != nil {
		t.Fatalf("publish alpha's own event: %v", err)
	}

	// Beta is unharmed: it deploys the next version.
	v2 := c.release(model("two"))
	waitFor(t, 90*time.Second, "beta to deploy version 2", func() bool {
		st := c.statuses()["file[beta,path=/srv/b]"]
		return st.Version == v2 && st.State == "deployed"
	})

	// Beta's inbox deleted on the broker, as a client with rights on it
	// could: beta finds it missing and says hello, the server declares it
	// again with its arguments (declaring it with exactly those succeeds),
	// and beta deploys the next version.
	ctx := context.Background()
	if err := c.bus.DeleteInbox(ctx, env, "beta"); err != nil {
		t.Fatal(err)
	}
	admin := adminChannel(t, node)
	waitFor(t, 60*time.Second, "beta's inbox declared again", func() bool {
		if _, err := admin.QueueDeclarePassive(betaInbox, true, false, false, false, nil); err != nil {
			admin = adminChannel(t, node) // a failed passive declare closes the channel
			return false
		}
		return true
	})
	if _, err := admin.QueueDeclare(betaInbox, true, false, false, false, inboxArgs()); err != nil {
		t.Fatalf("beta's inbox declared again lacks its arguments: %v", err)
	}
	v3 := c.release(model("three"))
	waitFor(t, 90*time.Second, "beta to deploy version 3 after its inbox was deleted", func() bool {
		st := c.statuses()["file[beta,path=/srv/b]"]
		return st.Version == v3 && st.State == "deployed"
	})

	// Revoked, alpha is cut off and cannot come back.
	c.cli("agent", "revoke", "alpha")
	select {
	case <-h.closed:
	case <-time.After(90 * time.Second):
		t.Fatal("alpha's connection still open 90s after its revocation")
	}
	waitFor(t, 30*time.Second, "alpha's logins refused", func() bool {
		user, password := bus.LoginCredentials(key, env, "alpha", time.Now())
		conn, err := amqp.DialConfig(fmt.Sprintf("amqp://%s:%d/", node.Host, node.Port), amqp.Config{SASL: []amqp.Authentication{&amqp.PlainAuth{Username: user, Password: password}}})
		if err == nil {
			conn.Close()
			return false
		}
		return refusedForRights(err)
	})
	out, err := node.Ctl(context.Background(), "list_queues", "name")
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(out), ns+".agent."+env+".alpha\n") {
		t.Errorf("alpha's inbox is still on the broker after its revocation:\n%s", out)
	}
}

// TestSquatterOfAPendingNameIsCutOff: someone who reaches the broker
// says hello first under the name of a host not installed yet, with a key
// of their own: a pending agent, which has no inbox to read. The host
// then starts with an enrollment token, and its key takes the name. The
// squatter's connection is closed, and the host deploys.
func TestSquatterOfAPendingNameIsCutOff(t *testing.T) {
	node, authListen := authNode(t, amqptest.NodeOptions{})
	c := newClusterWith(t, clusterOpts{node: node, authListen: authListen})

	_, key, err := bus.GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	h := loginAs(t, node, key, "gamma")
	hello, err := bus.NewSigner(key, 0).Seal(bus.KindHello, env, "gamma", bus.Hello{PublicKey: key.Public().(ed25519.PublicKey)})
	if err != nil {
		t.Fatal(err)
	}
	body, err := bus.Encode(hello)
	if err != nil {
		t.Fatal(err)
	}
	if err := h.attempt(publishingBody(c.ns+".events", bus.EventKey(env, "gamma", bus.KindHello), body)); err != nil {
		t.Fatalf("the squatter's hello: %v", err)
	}
	waitFor(t, 30*time.Second, "gamma recorded pending", func() bool { return c.agent("gamma").State == record.AgentPending })
	// Pending, the squatter finds no inbox to read: none is declared
	// until the name is accepted.
	inbox := c.ns + ".agent." + env + ".gamma"
	ch, err := h.conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ch.Consume(inbox, "", false, false, false, false, nil); err == nil || !strings.Contains(err.Error(), "NOT_FOUND") {
		t.Fatalf("the squatter consuming gamma's inbox while pending: %v, want NOT_FOUND (a pending agent has no inbox)", err)
	}

	c.startAgent("gamma", agentOpts{stateDir: t.TempDir(), root: t.TempDir()})
	select {
	case <-h.closed:
	case <-time.After(90 * time.Second):
		t.Fatal("the squatter's connection still open 90s after gamma's host took the name")
	}
	v1 := c.release(fileModel(t, 0, nil, map[string]string{"gamma": "  file \"g\" {\n    path = \"/srv/g\"\n    content = \"one\"\n  }\n"}))
	waitFor(t, 90*time.Second, "gamma to deploy version 1", func() bool {
		st := c.statuses()["file[gamma,path=/srv/g]"]
		return st.Version == v1 && st.State == "deployed"
	})
}

// adminChannel is a channel of the node's administrator, beside the
// server: a client with every right on the broker.
func adminChannel(t *testing.T, node *amqptest.Node) *amqp.Channel {
	t.Helper()
	conn, err := amqp.Dial(node.URL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	return ch
}

// inboxArgs are the arguments the server declares an inbox with, on the
// clusters here (classic queues, the default bound).
func inboxArgs() amqp.Table {
	return amqp.Table{"x-queue-type": "classic", "x-single-active-consumer": true,
		"x-max-length": int64(bus.DefaultInboxLength), "x-overflow": "reject-publish"}
}

// intruder is a broker connection with an agent's own login.
type intruder struct {
	t      *testing.T
	conn   *amqp.Connection
	closed chan *amqp.Error
}

func loginAs(t *testing.T, node *amqptest.Node, key ed25519.PrivateKey, name string) *intruder {
	t.Helper()
	user, password := bus.LoginCredentials(key, env, name, time.Now())
	conn, err := amqp.DialConfig(fmt.Sprintf("amqp://%s:%d/", node.Host, node.Port), amqp.Config{SASL: []amqp.Authentication{&amqp.PlainAuth{Username: user, Password: password}}})
	if err != nil {
		t.Fatalf("log in as %s: %v", name, err)
	}
	t.Cleanup(func() { conn.Close() })
	return &intruder{t: t, conn: conn, closed: conn.NotifyClose(make(chan *amqp.Error, 1))}
}

// attempt runs do on a channel of its own and returns the broker's
// answer: the error of the call, or the reason the broker closed the
// channel just after (a publish is refused that way).
func (h *intruder) attempt(do func(ch *amqp.Channel) error) error {
	h.t.Helper()
	ch, err := h.conn.Channel()
	if err != nil {
		h.t.Fatal(err)
	}
	defer ch.Close()
	closed := ch.NotifyClose(make(chan *amqp.Error, 1))
	err = do(ch)
	if err == nil {
		// A round trip: what the broker refused asynchronously (a
		// publish) has closed the channel by its answer.
		if _, rerr := ch.QueueDeclarePassive(h.t.Name()+"-none", false, false, false, false, nil); rerr == nil {
			return nil
		}
	}
	select {
	case e := <-closed:
		switch {
		case e != nil && e.Code == amqp.NotFound && err == nil:
			return nil // the round trip's own answer: nothing was refused
		case e != nil && e.Code != amqp.NotFound:
			return e
		}
	case <-time.After(2 * time.Second):
	}
	return err
}

// publishing publishes to exchange with key, waiting for the broker's
// confirm.
func publishing(exchange, key string) func(ch *amqp.Channel) error {
	return publishingBody(exchange, key, []byte("{}"))
}

// publishingBody is publishing with a body.
func publishingBody(exchange, key string, body []byte) func(ch *amqp.Channel) error {
	return func(ch *amqp.Channel) error {
		if err := ch.Confirm(false); err != nil {
			return err
		}
		dc, err := ch.PublishWithDeferredConfirmWithContext(context.Background(), exchange, key, false, false, amqp.Publishing{Body: body})
		if err != nil {
			return err
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if ok, err := dc.WaitContext(ctx); err != nil || !ok {
			return fmt.Errorf("publish not confirmed (ack %v): %w", ok, err)
		}
		return nil
	}
}

// refusedForRights reports whether err is the broker's ACCESS_REFUSED.
func refusedForRights(err error) bool {
	var ae *amqp.Error
	return errors.As(err, &ae) && ae.Code == amqp.AccessRefused
}

// TestAnAgentsLoginEmptiesItsInboxHarmlessly: RabbitMQ lets whoever may
// consume a queue purge it (both take `read`), so an agent's own login —
// a stolen key's — can empty its inbox. Here it does so while the agent
// is away and after it said hello again: the release, and the server's
// answer to the hello, are gone, and the agent, which says hello only
// when it starts or finds its inbox missing, waits for nothing. The
// deploy-interval retry goes by the generation the agent reported, sends
// its desired state again, and the agent converges.
func TestAnAgentsLoginEmptiesItsInboxHarmlessly(t *testing.T) {
	node, authListen := authNode(t, amqptest.NodeOptions{})
	c := newClusterWith(t, clusterOpts{node: node, authListen: authListen})
	c.cli("env", "settings", "set", "deploy_interval", "2s")
	model := func(v string) string {
		return fileModel(t, 0, nil, map[string]string{"delta": fmt.Sprintf("  file \"d\" {\n    path = \"/srv/d\"\n    content = %q\n  }\n", v)})
	}
	deployed := func(v int64) func() bool {
		return func() bool {
			st := c.statuses()["file[delta,path=/srv/d]"]
			return st.Version == v && st.State == "deployed"
		}
	}
	state, root := t.TempDir(), t.TempDir()
	delta := c.startAgent("delta", agentOpts{stateDir: state, root: root})
	v1 := c.release(model("one"))
	waitFor(t, 90*time.Second, "delta to deploy version 1", deployed(v1))
	delta.stop()

	// The key's holder logs in as delta and takes its place as the
	// inbox's one active consumer, taking one message at a time.
	key := readKey(t, filepath.Join(state, env, "delta", "key"))
	h := loginAs(t, node, key, "delta")
	inbox := c.ns + ".agent." + env + ".delta"
	ch, err := h.conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	if err := ch.Qos(1, 0, false); err != nil {
		t.Fatal(err)
	}
	taken, err := ch.Consume(inbox, "", false, false, false, false, nil)
	if err != nil {
		t.Fatalf("delta's login consuming its inbox: %v", err)
	}
	v2 := c.release(model("two"))
	delta = c.startAgent("delta", agentOpts{stateDir: state, root: root})
	look, err := h.conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, 60*time.Second, "the server's answer to delta's hello waiting in its inbox", func() bool {
		q, err := look.QueueDeclarePassive(inbox, true, false, false, false, nil)
		return err == nil && q.Messages > 0 && c.agent("delta").Online
	})
	purged, err := ch.QueuePurge(inbox, false)
	if err != nil {
		t.Fatalf("delta's login purging its inbox: %v, want it allowed (the broker cannot refuse it)", err)
	}
	t.Logf("delta's own login purged %d messages from its inbox", purged)
	for {
		select {
		case d := <-taken:
			if err := d.Ack(false); err != nil {
				t.Fatal(err)
			}
			continue
		case <-time.After(time.Second):
		}
		break
	}
	if err := ch.Close(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 90*time.Second, "delta to deploy version 2 after its inbox was emptied", deployed(v2))
	if delta.exited() {
		t.Fatalf("delta exited: %s", delta.output())
	}
}
