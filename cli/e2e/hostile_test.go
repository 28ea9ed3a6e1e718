package e2e

import (
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/tetherhq/tether/bus"
	"github.com/tetherhq/tether/model"
	"github.com/tetherhq/tether/server/record"
)

// hostile is a broker client with the credentials the documentation gives
// agents, run by someone who means harm: a neighbour host, or anyone who
// got hold of an agent's broker login.
type hostile struct {
	t  *testing.T
	c  *cluster
	ch *amqp.Channel

	mu       sync.Mutex
	captured []amqp.Delivery
}

func newHostile(t *testing.T, c *cluster) *hostile {
	t.Helper()
	conn, err := amqp.Dial(c.amqpURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	return &hostile{t: t, c: c, ch: ch}
}

// tap copies every command sent to agent into h.captured: a queue of its
// own bound to the command exchange.
func (h *hostile) tap(agent string) {
	h.t.Helper()
	q, err := h.ch.QueueDeclare("", false, true, true, false, nil)
	if err != nil {
		h.t.Fatal(err)
	}
	if err := h.ch.QueueBind(q.Name, bus.CommandKey(env, agent), h.c.ns+".cmd", false, nil); err != nil {
		h.t.Fatal(err)
	}
	msgs, err := h.ch.Consume(q.Name, "", true, true, false, false, nil)
	if err != nil {
		h.t.Fatal(err)
	}
	go func() {
		for d := range msgs {
			h.mu.Lock()
			h.captured = append(h.captured, d)
			h.mu.Unlock()
		}
	}()
}

// taken returns the captured commands of kinds.
func (h *hostile) taken(kinds ...bus.Kind) []amqp.Delivery {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []amqp.Delivery
	for _, d := range h.captured {
		e, err := bus.Decode(d.Body)
		if err == nil && (len(kinds) == 0 || contains(kinds, e.Kind)) {
			out = append(out, d)
		}
	}
	return out
}

// deploys says whether the commands ds hold a deploy: a command of its
// own, or riding with a desired state.
func deploys(ds []amqp.Delivery) bool {
	for _, d := range ds {
		e, err := bus.Decode(d.Body)
		if err != nil {
			continue
		}
		var carried struct{ Deploy *bus.Deploy }
		if e.Kind == bus.KindDeploy || e.DecodeBody(&carried) == nil && carried.Deploy != nil {
			return true
		}
	}
	return false
}

func contains[T comparable](s []T, v T) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

// command puts raw bytes in agent's inbox through the command exchange.
func (h *hostile) command(agent string, body []byte) {
	h.t.Helper()
	err := h.ch.PublishWithContext(context.Background(), h.c.ns+".cmd", bus.CommandKey(env, agent), false, false,
		amqp.Publishing{ContentType: "application/json", DeliveryMode: amqp.Persistent, Body: body})
	if err != nil {
		h.t.Fatal(err)
	}
}

// event puts raw bytes on the event exchange as agent's.
func (h *hostile) event(agent string, kind bus.Kind, body []byte) {
	h.t.Helper()
	err := h.ch.PublishWithContext(context.Background(), h.c.ns+".events", bus.EventKey(env, agent, kind), false, false,
		amqp.Publishing{ContentType: "application/json", DeliveryMode: amqp.Persistent, Body: body})
	if err != nil {
		h.t.Fatal(err)
	}
}

// seal signs a message with key, numbered seq, stamped at ts.
func seal(t *testing.T, key ed25519.PrivateKey, seq uint64, ts time.Time, kind bus.Kind, agent string, body any) []byte {
	t.Helper()
	e, err := bus.NewSigner(key, 0).Seal(kind, env, agent, body)
	if err != nil {
		t.Fatal(err)
	}
	e.Seq, e.TS = seq, ts.UTC()
	bus.Sign(e, key)
	b, err := bus.Encode(e)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// alertSaying waits for a security alert of agent whose message holds
// each of words.
func (c *cluster) alertSaying(agent string, words ...string) record.Alert {
	c.t.Helper()
	var found record.Alert
	waitFor(c.t, 30*time.Second, fmt.Sprintf("a security alert of %s saying %q", agent, words), func() bool {
		for _, a := range c.securityAlerts() {
			ok := a.Agent == agent
			for _, w := range words {
				ok = ok && strings.Contains(a.Message, w)
			}
			if ok {
				found = a
				return true
			}
		}
		return false
	})
	return found
}

// TestHostileBrokerClient: what a hostile broker client meets, each attack
// against real server and agent processes on RabbitMQ.
func TestHostileBrokerClient(t *testing.T) {
	c := newCluster(t)
	h := newHostile(t, c)
	_, stranger, err := bus.GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	strangerPub := stranger.Public().(ed25519.PublicKey)
	content := func(v int) func(int) string {
		return func(i int) string { return fmt.Sprintf("v%d secret %d\n", v, i) }
	}
	const n = 3
	newbie := "  file \"motd\" {\n    path    = \"/srv/motd\"\n    content = \"hello\\n\"\n  }\n"
	h.tap("web")
	v1 := c.release(fileModel(t, n, content(1), map[string]string{"newbie": newbie}))
	// Agents outlive the subtests: their directories are the test's.
	webRoot, webState, newbieRoot, newbieState := t.TempDir(), t.TempDir(), t.TempDir(), t.TempDir()
	web := c.startAgent("web", agentOpts{stateDir: webState, root: webRoot})
	total := n + 1 + 2 // web's files and directory, newbie's file and directory
	waitFor(t, 60*time.Second, "web to deploy version 1", func() bool { return c.agent("web").Generation == v1 })

	t.Run("hijack a new agent", func(t *testing.T) {
		// Before newbie ever runs: its inbox, an enrollment with the
		// stranger's key, desired state with a command, a deploy.
		if err := c.bus.DeclareInbox(context.Background(), env, "newbie"); err != nil {
			t.Fatal(err)
		}
		pwn := model.Resource{ID: model.ID{Type: "exec", Agent: "newbie", Key: "name", Value: "pwn"},
			Attributes: model.Attributes{"name": "pwn", "command": "echo pwned > /srv/pwned", "cwd": "/", "creates": "/srv/pwned"}}
		sl := model.SliceOf("newbie", 99, []model.Resource{pwn})
		hash, err := sl.Hash()
		if err != nil {
			t.Fatal(err)
		}
		now := time.Now()
		h.command("newbie", seal(t, stranger, 1, now, bus.KindEnrolled, "newbie", bus.Enrolled{ServerKey: strangerPub}))
		h.command("newbie", seal(t, stranger, 2, now, bus.KindDesiredFull, "newbie", bus.DesiredFull{Generation: 99, Resources: sl.Resources, SliceHash: hash}))
		h.command("newbie", seal(t, stranger, 3, now, bus.KindDeploy, "newbie", bus.Deploy{DeployID: "pwn", Mode: bus.DeployFull, Generation: 99}))
		root := newbieRoot
		c.startAgent("newbie", agentOpts{stateDir: newbieState, root: root})
		c.converged(v1, total, 60*time.Second)
		if _, err := os.Stat(filepath.Join(root, "srv", "pwned")); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("the stranger's command ran on newbie: %v", err)
		}
		if b, err := os.ReadFile(filepath.Join(root, "srv", "motd")); err != nil || string(b) != "hello\n" {
			t.Fatalf("newbie's own desired state: %q %v", b, err)
		}
		a := c.alertSaying("newbie", "refused", "enrollment offers server key "+model.Fingerprint(strangerPub))
		t.Logf("alert: %s", a.Message)
	})

	t.Run("replay captured desired state", func(t *testing.T) {
		old := h.taken(bus.KindDesiredFull, bus.KindDesiredDiff, bus.KindDeploy)
		if len(old) == 0 || !deploys(old) {
			t.Fatalf("captured %d commands of web's first deploy, want its desired state and a deploy (riding with it, or its own)", len(old))
		}
		v2 := c.release(fileModel(t, n, content(2), map[string]string{"newbie": newbie}))
		c.converged(v2, total, 60*time.Second)
		replay := func() {
			for _, d := range old {
				h.command("web", d.Body)
			}
			// A deploy through the server: once done, the replay before
			// it was handled.
			c.cli("env", "deploy", "--full")
			c.converged(v2, total, 60*time.Second)
			checkFiles(t, webRoot, n, content(2))
			if g := c.agent("web").Generation; g != v2 {
				t.Fatalf("after the replay the server says web holds generation %d, want %d", g, v2)
			}
		}
		// The very envelopes web handled: known by their ids.
		replay()
		// Its journal started over (ids forgotten, nothing held): the
		// server's answer to its hello says where the environment stands,
		// and older desired state is refused all the same.
		web.stop()
		if code, out, errb := c.run("agent", "reset-journal", filepath.Join(webState, env, "web")); code != 0 {
			t.Fatalf("reset-journal: exit %d: %s%s", code, out, errb)
		}
		web = c.startAgent("web", agentOpts{stateDir: webState, root: webRoot})
		// The server still holds what web said before it started over:
		// wait for the new process to be sent its whole state (a deploy
		// done) and for the server to record what it holds now.
		waitFor(t, 60*time.Second, "web to deploy its whole state again and the server to know", func() bool {
			return strings.Contains(web.output(), "job finished") && c.agent("web").Generation == v2
		})
		c.converged(v2, total, 60*time.Second)
		replay()
		c.alertSaying("web", "refused", fmt.Sprintf("older than the %d held", v2))
	})

	t.Run("delete the server's event queue and an agent's inbox", func(t *testing.T) {
		for i, q := range []string{c.ns + ".server.events", c.ns + ".server.compliance", c.ns + ".agent." + env + ".web"} {
			if _, err := h.ch.QueueDelete(q, false, false, false); err != nil {
				t.Fatalf("delete %s: %v", q, err)
			}
			// Neither side goes deaf: the next release reaches every host
			// and every result is recorded.
			v := c.release(fileModel(t, n, content(10+i), map[string]string{"newbie": newbie}))
			c.converged(v, total, 90*time.Second)
			checkFiles(t, webRoot, n, content(10+i))
		}
	})

	t.Run("poison a resource's status with the host's own key", func(t *testing.T) {
		key := readKey(t, filepath.Join(webState, env, "web", "key"))
		target := model.MustParseID(fileID("web", "/srv/f0"))
		v := c.agent("web").Generation
		failed := bus.ResourceStatus{DeployID: "poison", Generation: v, Done: true,
			Results: []model.Result{{ID: target, State: model.StateFailed, Message: "poisoned"}}}
		h.event("web", bus.KindResourceStatus, seal(t, key, 9e18, time.Now(), bus.KindResourceStatus, "web", failed))
		c.alertSaying("web", "past the protocol's limit")
		// Later releases still converge: nothing is frozen.
		v3 := c.release(fileModel(t, n, content(3), map[string]string{"newbie": newbie}))
		c.converged(v3, total, 60*time.Second)
		checkFiles(t, webRoot, n, content(3))
	})
}
