package e2e

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tetherhq/tether/bus/amqp/amqptest"
	"github.com/tetherhq/tether/model/testenv"
	"github.com/tetherhq/tether/server/api"
	"github.com/tetherhq/tether/server/record"
)

// natNet is a small network behind NAT: namespace lan (the agent's host)
// routes through namespace gw (its router, which masquerades) to this
// host, where the broker's port is forwarded to RabbitMQ on loopback.
//
//	lan 10.232.X.2 ── 10.232.X.1 gw 10.231.X.2 ── 10.231.X.1 host → 127.0.0.1:5672
type natNet struct {
	lan, gw, hostIf        string
	brokerIP, gwOut, lanIP string
}

func run(t *testing.T, argv ...string) string {
	t.Helper()
	out, err := exec.Command(argv[0], argv[1:]...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s: %v\n%s", strings.Join(argv, " "), err, out)
	}
	return string(out)
}

func setupNAT(t *testing.T) *natNet {
	t.Helper()
	id := randHex(6)
	var x int
	fmt.Sscanf(randHex(2), "%x", &x)
	x = 1 + x%250
	n := &natNet{lan: "te2e-lan-" + id, gw: "te2e-gw-" + id, hostIf: "te2eh" + id,
		brokerIP: fmt.Sprintf("10.231.%d.1", x), gwOut: fmt.Sprintf("10.231.%d.2", x), lanIP: fmt.Sprintf("10.232.%d.2", x)}
	gwIn, lanNet := fmt.Sprintf("10.232.%d.1", x), fmt.Sprintf("10.232.%d.0/24", x)
	gwUp, gwDown, lanIf := "te2eg"+id, "te2ed"+id, "te2el"+id
	t.Cleanup(func() {
		_ = exec.Command("ip", "route", "del", lanNet).Run()
		_ = exec.Command("ip", "link", "del", n.hostIf).Run()
		_ = exec.Command("ip", "netns", "del", n.gw).Run()
		_ = exec.Command("ip", "netns", "del", n.lan).Run()
	})
	in := func(ns string, argv ...string) []string { return append([]string{"ip", "netns", "exec", ns}, argv...) }
	steps := [][]string{
		{"ip", "netns", "add", n.gw},
		{"ip", "netns", "add", n.lan},
		{"ip", "link", "add", n.hostIf, "type", "veth", "peer", "name", gwUp},
		{"ip", "link", "set", gwUp, "netns", n.gw},
		{"ip", "link", "add", gwDown, "type", "veth", "peer", "name", lanIf},
		{"ip", "link", "set", gwDown, "netns", n.gw},
		{"ip", "link", "set", lanIf, "netns", n.lan},
		{"ip", "addr", "add", n.brokerIP + "/24", "dev", n.hostIf},
		{"ip", "link", "set", n.hostIf, "up"},
		{"ip", "-n", n.gw, "addr", "add", n.gwOut + "/24", "dev", gwUp},
		{"ip", "-n", n.gw, "addr", "add", gwIn + "/24", "dev", gwDown},
		{"ip", "-n", n.gw, "link", "set", gwUp, "up"},
		{"ip", "-n", n.gw, "link", "set", gwDown, "up"},
		{"ip", "-n", n.gw, "link", "set", "lo", "up"},
		{"ip", "-n", n.gw, "route", "add", "default", "via", n.brokerIP},
		{"ip", "-n", n.lan, "addr", "add", n.lanIP + "/24", "dev", lanIf},
		{"ip", "-n", n.lan, "link", "set", lanIf, "up"},
		{"ip", "-n", n.lan, "link", "set", "lo", "up"},
		{"ip", "-n", n.lan, "route", "add", "default", "via", gwIn},
		// The router: forwards what the LAN opens, and the replies; masquerades.
		in(n.gw, "sh", "-c", "echo 1 > /proc/sys/net/ipv4/ip_forward"),
		in(n.gw, "iptables", "-t", "nat", "-A", "POSTROUTING", "-o", gwUp, "-j", "MASQUERADE"),
		in(n.gw, "iptables", "-P", "FORWARD", "DROP"),
		in(n.gw, "iptables", "-A", "FORWARD", "-i", gwDown, "-o", gwUp, "-j", "ACCEPT"),
		in(n.gw, "iptables", "-A", "FORWARD", "-m", "conntrack", "--ctstate", "ESTABLISHED,RELATED", "-j", "ACCEPT"),
		// The host routes the LAN through the router, as an attacker next
		// to it could: only NAT stands in the way.
		{"ip", "route", "add", lanNet, "via", n.gwOut},
	}
	for _, s := range steps {
		run(t, s...)
	}
	if err := os.WriteFile(filepath.Join("/proc/sys/net/ipv4/conf", n.hostIf, "route_localnet"), []byte("1"), 0o644); err != nil {
		t.Fatal(err)
	}
	return n
}

// forward makes port of the broker's public address reach port to on
// loopback, until the test ends.
func (n *natNet) forward(t *testing.T, port, to int) {
	t.Helper()
	dnat := []string{"PREROUTING", "-i", n.hostIf, "-p", "tcp", "-d", n.brokerIP, "--dport", strconv.Itoa(port),
		"-j", "DNAT", "--to-destination", "127.0.0.1:" + strconv.Itoa(to)}
	t.Cleanup(func() { _ = exec.Command("iptables", append([]string{"-t", "nat", "-D"}, dnat...)...).Run() })
	run(t, append([]string{"iptables", "-t", "nat", "-A"}, dnat...)...)
}

// rabbitUser creates a broker user for the agent behind NAT (guest may
// only connect from loopback) and deletes it when the test ends.
func rabbitUser(t *testing.T) (user, pass string) {
	t.Helper()
	user, pass = "tether-e2e-"+randHex(8), randHex(20)
	run(t, "rabbitmqctl", "-q", "add_user", user, pass)
	t.Cleanup(func() { _ = exec.Command("rabbitmqctl", "-q", "delete_user", user).Run() })
	run(t, "rabbitmqctl", "-q", "set_permissions", "-p", "/", user, ".*", ".*", ".*")
	return user, pass
}

// TestAgentBehindNAT runs `tether agent run` in a network namespace behind
// a masquerading router, where it can open a connection to the broker and
// nothing can open one to it. It is discovered with its facts and labels,
// accepted by its enrollment token, deploys its slice and reports it.
func TestAgentBehindNAT(t *testing.T) {
	testenv.Need(t, os.Geteuid() == 0, "the NAT test makes network namespaces: run it as root")
	for _, tool := range []string{"ip", "iptables", "rabbitmqctl"} {
		_, err := exec.LookPath(tool)
		testenv.Need(t, err == nil, tool+" is not installed: apt-get install iproute2 iptables (make setup installs them)")
	}
	c := newCluster(t)
	n := setupNAT(t)
	n.forward(t, 5672, 5672)
	user, pass := rabbitUser(t)
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}

	// Nothing outside can open a connection into the LAN: a listener there
	// answers from inside, and not from this host, which has a route.
	startProc(t, "listener", environ("TETHER_E2E_LISTEN=0.0.0.0:7777"), "ip", "netns", "exec", n.lan, self)
	target := net.JoinHostPort(n.lanIP, "7777")
	waitFor(t, 10*time.Second, "the listener in the namespace", func() bool {
		cmd := exec.Command("ip", "netns", "exec", n.lan, self)
		cmd.Env = environ("TETHER_E2E_DIAL=" + target)
		return cmd.Run() == nil
	})
	for _, addr := range []string{target, net.JoinHostPort(n.gwOut, "7777")} {
		if conn, err := net.DialTimeout("tcp", addr, 2*time.Second); err == nil {
			conn.Close()
			t.Fatalf("a connection from outside into the NAT reached %s", addr)
		}
	}

	const files = 20
	content := func(i int) string { return fmt.Sprintf("behind NAT %d\n", i) }
	v := c.release(fileModel(t, files, content, nil))
	root := t.TempDir()
	agentURL := fmt.Sprintf("amqp://%s:%s@%s:5672/", user, pass, n.brokerIP)
	start := time.Now()
	ag := c.startAgent("web", agentOpts{stateDir: t.TempDir(), root: root, amqpURL: agentURL,
		wrap: []string{"ip", "netns", "exec", n.lan}, labels: []string{"role=web", "site=branch-office"}})

	var seen api.AgentView
	waitFor(t, 30*time.Second, "the agent to be discovered and accepted", func() bool {
		seen = c.agent("web")
		return seen.State == record.AgentAccepted && seen.Online
	})
	t.Logf("discovered and accepted %s after starting it", time.Since(start).Round(time.Millisecond))
	if seen.Labels["role"] != "web" || seen.Labels["site"] != "branch-office" {
		t.Fatalf("labels %v", seen.Labels)
	}
	if seen.Facts["os"] == nil || seen.Facts["arch"] == nil || seen.Facts["hostname"] == nil {
		t.Fatalf("facts %v: want os, arch and hostname", seen.Facts)
	}
	c.converged(v, files+1, 60*time.Second)
	checkFiles(t, root, files, content)

	// The broker saw the agent come from the router's outside address.
	// (rabbitmqctl may list a connection a moment after it opened, or
	// answer nothing while the node is busy: ask again.)
	var conns string
	waitFor(t, 30*time.Second, "the broker to list the agent's connection", func() bool {
		conns = run(t, "rabbitmqctl", "-q", "list_connections", "user", "peer_host")
		for _, line := range strings.Split(conns, "\n") {
			f := strings.Fields(line)
			if len(f) == 2 && f[0] == user {
				if f[1] != n.gwOut {
					t.Fatalf("the agent's connection came from %s, want the NAT's address %s", f[1], n.gwOut)
				}
				return true
			}
		}
		return false
	})

	ag.stop()
	waitFor(t, 10*time.Second, "the agent shown offline after SIGTERM", func() bool { return !c.agent("web").Online })
}

// TestAgentBehindNATOverTLS runs an agent behind the NAT against a broker
// reached over TLS only (amqps://, verify_peer) that asks the server about
// each agent: the agent logs in as itself, with no password configured on
// its host, enrolls by its token and deploys. An agent given the wrong CA
// says so, naming the flag.
func TestAgentBehindNATOverTLS(t *testing.T) {
	testenv.Need(t, os.Geteuid() == 0, "the NAT test makes network namespaces: run it as root")
	for _, tool := range []string{"ip", "iptables"} {
		_, err := exec.LookPath(tool)
		testenv.Need(t, err == nil, tool+" is not installed: apt-get install iproute2 iptables (make setup installs them)")
	}
	n := setupNAT(t)
	node, authListen := authNode(t, amqptest.NodeOptions{TLS: true, CertIPs: []string{n.brokerIP}})
	n.forward(t, 5671, node.TLSPort)
	c := newClusterWith(t, clusterOpts{node: node, authListen: authListen})

	const files = 5
	content := func(i int) string { return fmt.Sprintf("behind NAT over TLS %d\n", i) }
	v := c.release(fileModel(t, files, content, nil))
	root := t.TempDir()
	wrap := []string{"ip", "netns", "exec", n.lan}
	c.startAgent("web", agentOpts{stateDir: t.TempDir(), root: root, wrap: wrap,
		amqpURL: fmt.Sprintf("amqps://%s:5671/", n.brokerIP)})
	waitFor(t, 60*time.Second, "the agent to be discovered and accepted", func() bool {
		a := c.agent("web")
		return a.State == record.AgentAccepted && a.Online
	})
	c.converged(v, files+1, 60*time.Second)
	checkFiles(t, root, files, content)

	out, err := node.Ctl(context.Background(), "-q", "list_connections", "user", "peer_host", "ssl")
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, line := range strings.Split(string(out), "\n") {
		f := strings.Fields(line)
		if len(f) == 3 && strings.HasPrefix(f[0], "agent:"+env+":web:") {
			found = true
			if f[1] != n.gwOut || f[2] != "true" {
				t.Fatalf("the agent's connection: from %s, TLS %s; want from the NAT's address %s over TLS", f[1], f[2], n.gwOut)
			}
		}
	}
	if !found {
		t.Fatalf("no broker connection of agent web's own login:\n%s", out)
	}

	wrong := c.startAgent("wrong-ca", agentOpts{stateDir: t.TempDir(), root: t.TempDir(), wrap: wrap,
		amqpURL: fmt.Sprintf("amqps://%s:5671/", n.brokerIP), args: []string{"--tls-ca", node.OtherCAFile}})
	waitFor(t, 30*time.Second, "the agent with the wrong CA to say why it cannot connect", func() bool {
		return strings.Contains(wrong.output(), "not signed by a CA we trust") && strings.Contains(wrong.output(), "--tls-ca")
	})
}
