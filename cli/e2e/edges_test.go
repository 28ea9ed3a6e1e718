package e2e

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/tetherhq/tether/server/api"
	"github.com/tetherhq/tether/server/record"
)

// hasQueue reports whether the broker has queue name (a passive declare).
func (c *cluster) hasQueue(name string) bool {
	c.t.Helper()
	conn, err := amqp.Dial(c.amqpURL)
	if err != nil {
		c.t.Fatal(err)
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		c.t.Fatal(err)
	}
	_, err = ch.QueueDeclarePassive(name, true, false, false, false, nil)
	return err == nil
}

// TestAgentDeleteComesBackPending: an agent deleted with `tether agent
// delete` is forgotten and its inbox leaves the broker; started again (a
// new state directory, pinned with --server-key by fingerprint, no token)
// in an environment of manual enrollment it is a new, pending agent whose
// note says it waits for an operator; accepted, it deploys again. An
// agent with a bad enrollment token says why at the default log level,
// and agent list shows the reason. Deleting the environment (--yes)
// removes its agents' inboxes from the broker.
func TestAgentDeleteComesBackPending(t *testing.T) {
	c := newCluster(t)
	const n = 2
	content := func(i int) string { return fmt.Sprintf("v %d\n", i) }
	v := c.release(fileModel(t, n, content, nil))
	root := t.TempDir()
	web := c.startAgent("web", agentOpts{stateDir: t.TempDir(), root: root})
	c.converged(v, n+1, 60*time.Second)
	inbox := c.ns + ".agent." + env + ".web"
	if !c.hasQueue(inbox) {
		t.Fatalf("no inbox %s for an enrolled agent", inbox)
	}

	web.stop()
	if code, _, errs := c.run("agent", "delete", "web"); code != 2 || !strings.Contains(errs, "--yes") {
		t.Fatalf("agent delete without --yes in a script: exit %d, want 2\n%s", code, errs)
	}
	if out := c.cli("agent", "delete", "web", "--yes"); !strings.Contains(out, "agent web deleted (it was accepted)") {
		t.Fatalf("agent delete: %q", out)
	}
	if a := c.agent("web"); a.Name != "" {
		t.Fatalf("the deleted agent is still listed: %+v", a)
	}
	if c.hasQueue(inbox) {
		t.Fatal("the deleted agent's inbox is still on the broker")
	}
	for id, st := range c.statuses() {
		if st.State != "available" {
			t.Fatalf("%s is %s after its agent was deleted, want available (what it reported is forgotten)", id, st.State)
		}
	}

	// Back as a new host: pinned by the fingerprint the server shows.
	var info api.ServerInfo
	c.cliJSON(&info, "server", "key")
	c.cli("env", "settings", "set", "enrollment", "manual")
	again := c.startAgent("web", agentOpts{stateDir: t.TempDir(), root: t.TempDir(),
		args: []string{"--token", "", "--server-key", info.Fingerprint}})
	waitFor(t, 60*time.Second, "web to say hello again", func() bool { return c.agent("web").Name != "" })
	if a := c.agent("web"); a.State != record.AgentPending || !strings.Contains(a.Note, "waiting for an operator to accept it") {
		t.Fatalf("the deleted agent came back %s with note %q, want pending and waiting", a.State, a.Note)
	}
	if out := c.cli("agent", "list"); !strings.Contains(out, "NOTE") || !strings.Contains(out, "waiting for an operator") {
		t.Fatalf("agent list does not say why web is pending:\n%s", out)
	}
	c.cli("agent", "accept", "web")
	c.converged(v, n+1, 90*time.Second)
	if again.exited() {
		t.Fatalf("the agent exited: %s", again.output())
	}

	// A bad enrollment token: refused, said at the default log level, and
	// shown by agent list.
	c.cli("env", "settings", "set", "enrollment", "token")
	prefix := c.enroll[:strings.LastIndex(c.enroll, ".")] // the server's fingerprint, not the secret
	bad := c.startAgent("intruder", agentOpts{stateDir: t.TempDir(), root: t.TempDir(),
		args: []string{"--token", prefix + ".not-the-secret", "--log-level", "warn"}})
	waitFor(t, 60*time.Second, "the refused agent to say why", func() bool {
		return logged(bad, "the server does not enroll this agent: unknown or revoked enrollment token")
	})
	if a := c.agent("intruder"); a.State != record.AgentPending || !strings.Contains(a.Note, "unknown or revoked enrollment token") {
		t.Fatalf("the refused agent: %s with note %q, want pending and the token's refusal", a.State, a.Note)
	}

	// Deleting the environment takes its agents' inboxes off the broker.
	if !c.hasQueue(inbox) {
		t.Fatal("no inbox for web, accepted again")
	}
	if code, _, errs := c.run("env", "delete", env); code != 2 || !strings.Contains(errs, "pass --yes") {
		t.Fatalf("env delete without --yes in a script: exit %d, want 2\n%s", code, errs)
	}
	c.cli("env", "delete", env, "--yes")
	for _, name := range []string{"web", "intruder"} {
		if q := c.ns + ".agent." + env + "." + name; c.hasQueue(q) {
			t.Fatalf("inbox %s stays after its environment was deleted", q)
		}
	}
}

// TestWatchAcrossServerRestart: `tether watch` keeps following when the
// server process restarts: it says it lost the stream and reconnects,
// resumes from the stored event log after the last event it showed (no
// event said missed, none shown twice), and shows the drift the agent
// saw while the server was down (ingested as the new server starts,
// before watch is back) once each, and the events of the new server.
func TestWatchAcrossServerRestart(t *testing.T) {
	c := newCluster(t)
	const n = 3
	v := c.release(fileModel(t, n, func(int) string { return "x\n" }, nil))
	root := t.TempDir()
	c.startAgent("web", agentOpts{stateDir: t.TempDir(), root: root})
	c.converged(v, n+1, 60*time.Second)
	w := startProc(t, "watch", environ("TETHER_SERVER=http://"+c.listen, "TETHER_TOKEN="+c.admin, "TETHER_ENV="+env),
		tetherBin, "watch", "-o", "json")
	shows := func(verb string) func() bool {
		return func() bool {
			c.cli("agent", verb, "web") // an agent.changed event each time
			return strings.Contains(w.output(), `"agent":"web","error":"`+verb+`"`)
		}
	}
	waitFor(t, 60*time.Second, "watch to show a pause", shows("pause"))

	c.srv.stop()
	for i := range n {
		if err := os.WriteFile(filepath.Join(root, "srv", fmt.Sprintf("f%d", i)), []byte("edited while the server was down\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	c.startServer()
	drifts := func() map[string]int {
		m := map[string]int{}
		for _, line := range strings.Split(w.output(), "\n") {
			var e struct {
				Kind  string        `json:"kind"`
				Alert *record.Alert `json:"alert"`
			}
			if json.Unmarshal([]byte(line), &e) == nil && e.Kind == "compliance.drift" && e.Alert != nil && e.Alert.ID != nil {
				m[e.Alert.ID.String()]++
			}
		}
		return m
	}
	waitFor(t, 90*time.Second, "watch to show the drift seen while the server was down", func() bool { return len(drifts()) == n })
	waitFor(t, 90*time.Second, "watch to show a resume from the restarted server", shows("resume"))
	for id, k := range drifts() {
		if k != 1 {
			t.Fatalf("the drift of %s shown %d times, want once:\n%s", id, k, w.output())
		}
	}
	out := w.output()
	for _, want := range []string{"lost the event stream", "reconnecting in", "reconnected; resuming after event"} {
		if !strings.Contains(out, want) {
			t.Fatalf("watch across a server restart does not say %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "may have been missed") {
		t.Fatalf("watch resumed across a server restart says events were missed:\n%s", out)
	}
	ids := map[string]bool{}
	for _, line := range strings.Split(out, "\n") {
		var e struct {
			ID string `json:"id"`
		}
		if json.Unmarshal([]byte(line), &e) != nil || e.ID == "" {
			continue
		}
		if ids[e.ID] {
			t.Fatalf("event %s shown twice across the restart:\n%s", e.ID, out)
		}
		ids[e.ID] = true
	}
	if w.exited() {
		t.Fatalf("watch exited:\n%s", out)
	}
	w.stop()
}
