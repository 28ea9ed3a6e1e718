package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tetherhq/tether/bus"
	"github.com/tetherhq/tether/bus/amqp"
	"github.com/tetherhq/tether/bus/amqp/amqptest"
	"github.com/tetherhq/tether/server/api"
	"github.com/tetherhq/tether/server/record"
)

// ownModel writes a model giving host name one file, path, holding
// content: an agent with root / writes it where the test looks.
func ownModel(t *testing.T, name, path, content string) string {
	t.Helper()
	dir := t.TempDir()
	hcl := fmt.Sprintf("host %q {\n  file \"mark\" {\n    path    = %q\n    content = %q\n  }\n}\n", name, path, content)
	if err := os.WriteFile(filepath.Join(dir, "main.hcl"), []byte(hcl), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

// holds waits until path holds want.
func holds(t *testing.T, path, want, what string) {
	t.Helper()
	waitFor(t, 90*time.Second, what, func() bool {
		b, err := os.ReadFile(path)
		return err == nil && string(b) == want
	})
}

// ownTokens are the tokens the server made for its own agent name in
// environment e.
func (c *cluster) ownTokens(e, name string) []record.EnrollmentToken {
	c.t.Helper()
	var ts []record.EnrollmentToken
	c.cliJSON(&ts, "agent", "token", "list", "--env", e)
	var out []record.EnrollmentToken
	for _, tok := range ts {
		if tok.OwnAgent == name {
			out = append(out, tok)
		}
	}
	return out
}

// agentIn is the server's view of agent name of environment e.
func (c *cluster) agentIn(e, name string) api.AgentView {
	c.t.Helper()
	var as []api.AgentView
	c.cliJSON(&as, "agent", "list", "--env", e)
	for _, a := range as {
		if a.Name == name {
			return a
		}
	}
	return api.AgentView{}
}

// A server started with --own-agent runs that agent itself, on a broker
// that asks the server about each agent: the agent logs in as itself,
// enrolls in an environment whose policy is manual with the one token the
// server made for it, shows in agent list with its label, and deploys its
// part of the model to the server's host. Its broker connection closed,
// it comes back; the server restarted, the same agent resumes (same key,
// no token made or spent, no second agent), having said goodbye when the
// server stopped. An own agent of an environment that does not exist yet
// says so once and starts when it is created; one whose journal cannot
// be opened is started again, each failure logged, until it can.
func TestServersOwnAgents(t *testing.T) {
	node, authListen := authNode(t, amqptest.NodeOptions{})
	c := newClusterWith(t, clusterOpts{node: node, authListen: authListen, enrollment: "manual",
		serverArgs: []string{"--own-agent", "prod/hv1", "--own-agent", "staging/hv2", "--log-level", "info"}})
	stateDir := filepath.Join(filepath.Dir(c.keyFile), "state")

	waitFor(t, 60*time.Second, "own agent hv1 to enroll and be online", func() bool {
		a := c.agent("hv1")
		return a.State == record.AgentAccepted && a.Online
	})
	hv1 := c.agent("hv1")
	if hv1.Labels["tether-served-by"] != "server" {
		t.Fatalf("own agent hv1's labels: %v, want tether-served-by=server", hv1.Labels)
	}
	if out := c.cli("agent", "list"); !strings.Contains(out, "tether-served-by=server") {
		t.Fatalf("agent list does not show the own agent's label:\n%s", out)
	}
	if toks := c.ownTokens(env, "hv1"); len(toks) != 1 || toks[0].Uses != 1 || toks[0].MaxUses != 1 {
		t.Fatalf("tokens made for hv1: %+v, want one, used once", toks)
	}
	if _, err := os.Stat(filepath.Join(stateDir, "agents", env, "hv1", "key")); err != nil {
		t.Fatalf("own agent hv1's journal is not under the server's state directory: %v", err)
	}
	admin, err := amqp.NewAdmin(node.ManagementURL)
	if err != nil {
		t.Fatal(err)
	}
	var loggedIn bool
	waitFor(t, 30*time.Second, "the broker to list hv1's connection", func() bool {
		conns, err := admin.Connections(context.Background())
		if err != nil {
			return false
		}
		for _, cn := range conns {
			if cn.User == (bus.BrokerLogin{Env: env, Agent: "hv1", Key: hv1.PublicKey}).User() {
				loggedIn = true
			}
		}
		return loggedIn
	})

	// Its part of the model, on the server's host.
	mark := filepath.Join(t.TempDir(), "mark")
	c.release(ownModel(t, "hv1", mark, "one\n"))
	holds(t, mark, "one\n", "hv1 to write version 1's file")

	// Its broker connection closed: it connects again and deploys on.
	if n, err := admin.CloseAgentConnections(context.Background(), env, "hv1", nil); err != nil || n == 0 {
		t.Fatalf("close hv1's broker connections: %d closed, %v", n, err)
	}
	c.release(ownModel(t, "hv1", mark, "two\n"))
	holds(t, mark, "two\n", "hv1, its connection closed, to write version 2's file")

	// Environment staging does not exist: said once. Its agent's journal
	// directory is taken by a file: the agent fails to start, is started
	// again, each failure logged, and starts once the file is gone.
	waitFor(t, 30*time.Second, "the server to say staging does not exist", func() bool {
		return logged(c.srv, "environment staging does not exist: the server's own agent hv2 starts once it does; create it with: tether env create staging")
	})
	blocked := filepath.Join(stateDir, "agents", "staging", "hv2")
	if err := os.MkdirAll(filepath.Dir(blocked), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(blocked, []byte("not a journal"), 0o600); err != nil {
		t.Fatal(err)
	}
	c.cli("env", "create", "staging", "--set", "enrollment=manual")
	waitFor(t, 60*time.Second, "hv2's failed start to be logged", func() bool {
		return logged(c.srv, "the server's own agent stopped; starting it again")
	})
	if err := os.Remove(blocked); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 120*time.Second, "own agent hv2 to start, enroll and be online", func() bool {
		a := c.agentIn("staging", "hv2")
		return a.State == record.AgentAccepted && a.Online
	})
	if n := loggedTimes(c.srv, "environment staging does not exist"); n != 1 {
		t.Fatalf("the missing environment was said %d times, want once", n)
	}
	if n := loggedTimes(c.srv, "the server's own agent stopped; starting it again"); n < 1 {
		t.Fatalf("hv2's failed starts were logged %d times, want each", n)
	}

	// The server restarted: the same agent resumes, without a token.
	c.srv.stop()
	if !logged(c.srv, "the server's own agent stopped with the server") || logged(c.srv, "could not say goodbye") {
		t.Fatalf("the own agents did not stop cleanly with the server:\n%s", c.srv.output())
	}
	c.startServer()
	waitFor(t, 60*time.Second, "own agent hv1 to be back online", func() bool {
		a := c.agent("hv1")
		return a.State == record.AgentAccepted && a.Online
	})
	if again := c.agent("hv1"); again.Key != hv1.Key {
		t.Fatalf("own agent hv1 came back with key %s, want %s (its journal kept)", again.Key, hv1.Key)
	}
	if toks := c.ownTokens(env, "hv1"); len(toks) != 1 || toks[0].Uses != 1 {
		t.Fatalf("tokens made for hv1 after a restart: %+v, want the one, used once", toks)
	}
	var all []api.AgentView
	c.cliJSON(&all, "agent", "list")
	if len(all) != 1 || all[0].Name != "hv1" {
		t.Fatalf("agents of %s after a restart: %+v, want hv1 alone", env, all)
	}
	c.release(ownModel(t, "hv1", mark, "three\n"))
	holds(t, mark, "three\n", "hv1, the server restarted, to write version 3's file")
	if c.srv.exited() {
		t.Fatalf("the server exited: %s", c.srv.output())
	}
}

// A platform whose agent is the server's own: the server runs agent hv1
// serving this machine's libvirt (--own-agent-platform), which reports
// the hypervisor and its domains, so that the platform is registered and
// its inventory shows a domain the test defined.
func TestPlatformServedByTheServer(t *testing.T) {
	needVMs(t)
	dom := "tether-e2e-own-" + randHex(6)
	xml := filepath.Join(t.TempDir(), "domain.xml")
	if err := os.WriteFile(xml, []byte("<domain type='qemu'><name>"+dom+"</name><memory unit='MiB'>32</memory><vcpu>1</vcpu>"+
		"<os><type arch='x86_64'>hvm</type></os></domain>"), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := virsh("define", xml); err != nil {
		t.Fatalf("virsh define: %v: %s", err, out)
	}
	t.Cleanup(func() { _, _ = virsh("undefine", dom) })
	out, err := virsh("domuuid", dom)
	if err != nil {
		t.Fatalf("virsh domuuid: %v: %s", err, out)
	}
	id := strings.TrimSpace(out)

	c := newClusterWith(t, clusterOpts{serverArgs: []string{"--own-agent", "prod/hv1", "--own-agent-platform", "prod/hv1=libvirt"}})
	// The test's bus deletes the inbox when the test ends.
	if err := c.bus.DeclareInbox(context.Background(), env, "hv1"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 60*time.Second, "own agent hv1's hypervisor to be discovered", func() bool {
		code, _, _ := c.run("platform", "show", "hv1-libvirt")
		return code == 0
	})
	var p record.Platform
	c.cliJSON(&p, "platform", "show", "hv1-libvirt")
	if p.Agent != "hv1" || p.Driver != "libvirt" || !p.Discovered {
		t.Fatalf("platform hv1-libvirt: %+v, want the libvirt platform hv1 discovered", p)
	}
	c.cli("platform", "inventory", "hv1-libvirt")
	waitFor(t, 60*time.Second, "the inventory to hold the test's domain", func() bool {
		var all []record.Instance
		c.cliJSON(&all, "instance", "list")
		for _, i := range all {
			if i.ID == id && i.Platform == "hv1-libvirt" {
				return true
			}
		}
		return false
	})
}
