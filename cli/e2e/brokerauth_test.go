package e2e

import (
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/tetherhq/tether/bus"
	"github.com/tetherhq/tether/bus/amqp/amqptest"
)

// TestAgentRightsOnTheBroker runs a fleet on a broker that asks the server
// about each agent (rabbitmq_auth_backend_http), the server and agents
// speaking TLS to it (amqps://, verify_peer), then attacks agent beta
// with agent alpha's real credentials — its key, read from its state
// directory, as a compromised host would — and checks that the broker
// refuses every attempt while beta keeps converging; then revokes alpha:
// its connection is closed and it cannot log in again.
func TestAgentRightsOnTheBroker(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	authListen := ln.Addr().String()
	ln.Close()
	node := amqptest.StartNode(t, amqptest.NodeOptions{AuthHTTP: "http://" + authListen, Management: true, CacheTTL: time.Second, TLS: true})
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
			return ch.QueueBind(ns+".agent."+env+".alpha", bus.CommandKey(env, "beta"), ns+".cmd", false, nil)
		}},
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
	return func(ch *amqp.Channel) error {
		if err := ch.Confirm(false); err != nil {
			return err
		}
		dc, err := ch.PublishWithDeferredConfirmWithContext(context.Background(), exchange, key, false, false, amqp.Publishing{Body: []byte("{}")})
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
