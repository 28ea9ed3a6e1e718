package e2e

import (
	"crypto/ed25519"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/tetherhq/tether/bus"
	"github.com/tetherhq/tether/bus/amqp/amqptest"
	"github.com/tetherhq/tether/model"
)

// TestAgentKeyRotationWhileRunning rotates the key of an agent that logs
// in to the broker as itself (a broker that asks the server about each
// login) while it runs: the agent switches to its new key, logs in with
// it, and deploys the next version; a connection someone else opened with
// its old key before the switch is closed, and a login with the old key
// is refused, with a security alert.
func TestAgentKeyRotationWhileRunning(t *testing.T) {
	node, authListen := authNode(t, amqptest.NodeOptions{})
	c := newClusterWith(t, clusterOpts{node: node, authListen: authListen})

	state := t.TempDir()
	p := c.startAgent("alpha", agentOpts{stateDir: state, root: t.TempDir()})
	files := func(v string) string {
		return fileModel(t, 0, nil, map[string]string{
			"alpha": fmt.Sprintf("  file \"a\" {\n    path = \"/srv/a\"\n    content = %q\n  }\n", v),
		})
	}
	deployed := func(v int64) func() bool {
		return func() bool {
			st := c.statuses()["file[alpha,path=/srv/a]"]
			return st.Version == v && st.State == "deployed"
		}
	}
	v1 := c.release(files("one"))
	waitFor(t, 90*time.Second, "alpha to deploy version 1", deployed(v1))

	keyFile := filepath.Join(state, env, "alpha", "key")
	oldKey := readKey(t, keyFile)
	oldFP := fingerprint(oldKey)
	if got := c.agent("alpha").Key; got != oldFP {
		t.Fatalf("the server holds key %s for alpha, its key file %s", got, oldFP)
	}

	// Someone else holding the key (a copy of the key file) is connected
	// with it when the rotation starts.
	thief := loginAs(t, node, oldKey, "alpha")

	out := c.cli("agent", "rotate-key", "alpha")
	if !strings.Contains(out, "asked to replace its key "+oldFP) {
		t.Fatalf("tether agent rotate-key: %q", out)
	}
	waitFor(t, 60*time.Second, "alpha to switch to a new key", func() bool {
		a := c.agent("alpha")
		return a.Key != oldFP && a.PreviousUntil != nil
	})
	a := c.agent("alpha")
	if newFP := fingerprint(readKey(t, keyFile)); newFP != a.Key {
		t.Fatalf("alpha's key file holds %s, the server %s", newFP, a.Key)
	}
	if show := c.cli("agent", "show", "alpha"); !strings.Contains(show, "key         "+a.Key) || !strings.Contains(show, "previous    "+oldFP+" (its events taken until") {
		t.Errorf("tether agent show alpha after the rotation:\n%s\nwant the new key, and the old one as previous", show)
	}
	if !logged(p, "logging in to the broker again") {
		t.Errorf("alpha did not log in again after its key changed:\n%s", p.output())
	}

	select {
	case <-thief.closed:
	case <-time.After(90 * time.Second):
		t.Fatal("a connection with alpha's old key still open 90s after alpha switched to its new key")
	}

	// The old login is refused from now on (once the broker's cache of
	// the old answer expired), with a security alert.
	waitFor(t, 30*time.Second, "a login with alpha's old key refused", func() bool {
		user, password := bus.LoginCredentials(oldKey, env, "alpha", time.Now())
		conn, err := amqp.DialConfig(fmt.Sprintf("amqp://%s:%d/", node.Host, node.Port),
			amqp.Config{SASL: []amqp.Authentication{&amqp.PlainAuth{Username: user, Password: password}}})
		if err == nil {
			conn.Close()
			return false
		}
		return refusedForRights(err)
	})
	waitFor(t, 30*time.Second, "a security alert about the old key's login", func() bool {
		for _, al := range c.securityAlerts() {
			if al.Agent == "alpha" && strings.Contains(al.Message, "previous key") {
				return true
			}
		}
		return false
	})

	// It keeps deploying, over its new login.
	v2 := c.release(files("two"))
	waitFor(t, 90*time.Second, "alpha to deploy version 2 with its new key", deployed(v2))
}

// fingerprint names a private key's public half as the server shows it.
func fingerprint(k ed25519.PrivateKey) string {
	return model.Fingerprint(k.Public().(ed25519.PublicKey))
}
