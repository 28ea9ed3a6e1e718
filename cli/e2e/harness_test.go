package e2e

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tetherhq/tether/bus/amqp/amqptest"
	"github.com/tetherhq/tether/model"
	"github.com/tetherhq/tether/server/api"
	"github.com/tetherhq/tether/server/record"
	"github.com/tetherhq/tether/server/store/postgres"
	"github.com/tetherhq/tether/server/store/postgres/pgtest"
)

// tetherBin is the tether binary built from this tree by TestMain.
var tetherBin string

const env = "prod"

func TestMain(m *testing.M) {
	// The test binary doubles as a tiny TCP listener and dialer, run inside
	// network namespaces by the NAT test.
	if addr := os.Getenv("TETHER_E2E_LISTEN"); addr != "" {
		listenForever(addr)
		return
	}
	if addr := os.Getenv("TETHER_E2E_DIAL"); addr != "" {
		c, err := net.DialTimeout("tcp", addr, 3*time.Second)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		c.Close()
		return
	}
	dir, err := os.MkdirTemp("", "tether-e2e-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	tetherBin = filepath.Join(dir, "tether")
	build := exec.Command("go", "build", "-o", tetherBin, "github.com/tetherhq/tether")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "e2e: cannot build tether:", err)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

func listenForever(addr string) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	for {
		c, err := ln.Accept()
		if err != nil {
			os.Exit(1)
		}
		c.Close()
	}
}

// proc is a running tether process whose output goes to a log file that is
// printed when the test fails.
type proc struct {
	t    testing.TB
	name string
	cmd  *exec.Cmd
	log  string
	done chan struct{}
}

func startProc(t testing.TB, name string, environ []string, argv ...string) *proc {
	t.Helper()
	logPath := filepath.Join(t.TempDir(), name+".log")
	f, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = environ
	cmd.Stdout, cmd.Stderr = f, f
	if err := cmd.Start(); err != nil {
		f.Close()
		t.Fatalf("start %s: %v", name, err)
	}
	p := &proc{t: t, name: name, cmd: cmd, log: logPath, done: make(chan struct{})}
	go func() {
		_ = cmd.Wait()
		f.Close()
		close(p.done)
	}()
	t.Cleanup(func() {
		p.kill()
		if t.Failed() {
			b, _ := os.ReadFile(logPath)
			if len(b) > 6000 {
				b = b[len(b)-6000:]
			}
			t.Logf("--- last output of %s ---\n%s", name, b)
		}
	})
	return p
}

func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// kill stops the process with SIGKILL: no goodbye, no flush.
func (p *proc) kill() {
	if !p.exited() {
		_ = p.cmd.Process.Signal(syscall.SIGKILL)
	}
	<-p.done
}

// stop sends SIGTERM and waits for a clean exit.
func (p *proc) stop() {
	p.t.Helper()
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
		if code := p.cmd.ProcessState.ExitCode(); code != 0 {
			p.t.Errorf("%s exited %d after SIGTERM", p.name, code)
		}
	case <-time.After(30 * time.Second):
		p.t.Errorf("%s did not stop within 30 s of SIGTERM", p.name)
		p.kill()
	}
}

func (p *proc) output() string {
	b, _ := os.ReadFile(p.log)
	return string(b)
}

// cluster is one environment served by a real `tether server` on a fresh
// PostgreSQL schema and a RabbitMQ namespace of its own.
type cluster struct {
	t       testing.TB
	pg      string
	amqpURL string
	bus     *amqptest.Bus
	ns      string
	listen  string
	admin   string
	srv     *proc
	starts  int
	keyFile string // every replica's key file (tether server keygen)
	// agentURL is the broker URL agents get ("": amqpURL); serverArgs
	// are the server's extra flags.
	agentURL   string
	serverArgs []string
	agentArgs  []string // every agent's extra flags
	enroll     string
	store      *postgres.Store
	agentNo    int
}

// authNode starts a private broker node that asks a server about each
// login (rabbitmq_auth_backend_http, answers cached for a second), with
// the management API, and returns it with the address the server is to
// answer on (clusterOpts.authListen). opts say how else it differs (TLS).
func authNode(t testing.TB, opts amqptest.NodeOptions) (*amqptest.Node, string) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	authListen := ln.Addr().String()
	ln.Close()
	opts.AuthHTTP, opts.Management, opts.CacheTTL = "http://"+authListen, true, time.Second
	return amqptest.StartNode(t, opts), authListen
}

func newCluster(t testing.TB) *cluster {
	t.Helper()
	return newClusterWith(t, clusterOpts{})
}

// clusterOpts say how a cluster differs from the usual one.
type clusterOpts struct {
	// node, when set, is a private broker whose authentication asks the
	// server (listening on authListen) about each agent: the server logs
	// in as the node's administrator, agents as themselves.
	node       *amqptest.Node
	authListen string
	// serverArgs are more flags of the server.
	serverArgs []string
	// enrollment is the environment's enrollment policy (default token).
	enrollment string
}

func newClusterWith(t testing.TB, o clusterOpts) *cluster {
	t.Helper()
	cfg := amqptest.Config(t)
	c := &cluster{t: t, pg: pgtest.Fresh(t), amqpURL: cfg.URL, ns: cfg.Namespace, admin: "e2e-admin-" + randHex(12)}
	if o.node != nil {
		cfg.URL, c.amqpURL = o.node.URL, o.node.URL
		c.agentURL = fmt.Sprintf("amqp://%s:%d/", o.node.Host, o.node.Port)
		c.serverArgs = []string{"--broker-auth-listen", o.authListen, "--broker-admin-url", o.node.ManagementURL}
		if o.node.TLSURL != "" {
			// TLS end to end: the server, the test's bus and the agents
			// all speak amqps:// and trust the node's CA.
			cfg.URL, c.amqpURL, cfg.CAFile = o.node.TLSURL, o.node.TLSURL, o.node.CAFile
			c.agentURL = fmt.Sprintf("amqps://localhost:%d/", o.node.TLSPort)
			c.serverArgs = append(c.serverArgs, "--amqp-tls-ca", o.node.CAFile)
			c.agentArgs = []string{"--tls-ca", o.node.CAFile}
		}
	}
	c.serverArgs = append(c.serverArgs, o.serverArgs...)
	// The test's own bus: it forges messages, and its cleanup deletes the
	// namespace's topology and the agents' inboxes.
	c.bus = amqptest.Open(t, cfg)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	c.listen = ln.Addr().String()
	ln.Close()
	st, err := postgres.Open(context.Background(), postgres.Config{URL: c.pg})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	c.store = st
	c.keyFile = filepath.Join(t.TempDir(), "server.key")
	if out, err := exec.Command(tetherBin, "server", "keygen", c.keyFile).CombinedOutput(); err != nil {
		t.Fatalf("tether server keygen: %v: %s", err, out)
	}
	c.startServer()
	c.cli("env", "create", env, "--set", "enrollment="+cmp.Or(o.enrollment, "token"))
	var tok struct {
		Token string `json:"token"`
	}
	c.cliJSON(&tok, "agent", "token", "create", "e2e")
	c.enroll = tok.Token
	return c
}

// environ is the environment of a child: this one without TETHER_*, plus
// extra.
func environ(extra ...string) []string {
	var out []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "TETHER_") {
			out = append(out, kv)
		}
	}
	return append(out, extra...)
}

func (c *cluster) startServer() {
	c.t.Helper()
	c.starts++
	argv := append([]string{tetherBin, "server",
		"--listen", c.listen, "--postgres", c.pg, "--amqp", c.amqpURL, "--amqp-namespace", c.ns, "--key-file", c.keyFile, "--state-dir", filepath.Join(filepath.Dir(c.keyFile), "state"),
		"--queue-type", "classic", "--admin-token", c.admin, "--log-format", "json", "--allow-file-sources"}, c.serverArgs...)
	c.srv = startProc(c.t, fmt.Sprintf("server-%d", c.starts), environ(), argv...)
	waitFor(c.t, 60*time.Second, "the server to be ready", func() bool {
		if c.srv.exited() {
			c.t.Fatalf("the server exited: %s", c.srv.output())
		}
		resp, err := http.Get("http://" + c.listen + "/readyz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
}

// run runs a tether command against the server and returns its exit code
// and output.
func (c *cluster) run(args ...string) (int, string, string) {
	cmd := exec.Command(tetherBin, args...)
	cmd.Env = environ("TETHER_SERVER=http://"+c.listen, "TETHER_TOKEN="+c.admin, "TETHER_ENV="+env)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	code := 0
	if err != nil {
		code = -1
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		}
	}
	return code, out.String(), errb.String()
}

func (c *cluster) cli(args ...string) string {
	c.t.Helper()
	code, out, errb := c.run(args...)
	if code != 0 {
		c.t.Fatalf("tether %s: exit %d: %s%s", strings.Join(args, " "), code, out, errb)
	}
	return out
}

func (c *cluster) cliJSON(v any, args ...string) {
	c.t.Helper()
	out := c.cli(append(args, "-o", "json")...)
	if err := json.Unmarshal([]byte(out), v); err != nil {
		c.t.Fatalf("tether %s -o json: %v: %q", strings.Join(args, " "), err, out)
	}
}

// agentOpts says how an agent process is started.
type agentOpts struct {
	stateDir, root string
	amqpURL        string   // default: the cluster's
	wrap           []string // run under this command (ip netns exec NS)
	labels         []string
	factsDir       string   // custom facts (default: none)
	args           []string // extra flags, after the cluster's own
	// command runs the agent instead of `tether agent run` (the
	// installed tether-agent: /usr/bin/tether-agent run), and config is
	// its config file instead of one of the test's (the cluster's
	// settings are written into it).
	command []string
	config  string
}

// startAgent starts `tether agent run` for name.
func (c *cluster) startAgent(name string, o agentOpts) *proc {
	c.t.Helper()
	if o.amqpURL == "" {
		o.amqpURL = cmp.Or(c.agentURL, c.amqpURL)
	}
	c.agentNo++
	// Part of the configuration comes from an agent.toml, as on a host.
	conf := cmp.Or(o.config, filepath.Join(c.t.TempDir(), "agent.toml"))
	toml := fmt.Sprintf("amqp-namespace = %q\nqueue-type = \"classic\"\nenv = %q\nheartbeat = \"1s\"\n", c.ns, env)
	if err := os.WriteFile(conf, []byte(toml), 0o600); err != nil {
		c.t.Fatal(err)
	}
	command := o.command
	if command == nil {
		command = []string{tetherBin, "agent", "run"}
	}
	argv := append(append(append([]string{}, o.wrap...), command...), "--config", conf,
		"--amqp", o.amqpURL, "--name", name, "--state-dir", o.stateDir, "--root", o.root,
		"--token", c.enroll, "--log-format", "json", "--log-level", "info")
	for _, l := range o.labels {
		argv = append(argv, "--label", l)
	}
	if o.factsDir == "" {
		o.factsDir = filepath.Join(c.t.TempDir(), "no-facts")
	}
	argv = append(append(append(argv, "--facts-dir", o.factsDir), c.agentArgs...), o.args...)
	// Note the inbox, so that the cleanup deletes it (a private node goes
	// with its inboxes: there the server alone makes them).
	if c.agentURL == "" {
		if err := c.bus.DeclareInbox(context.Background(), env, name); err != nil {
			c.t.Fatal(err)
		}
	}
	return startProc(c.t, fmt.Sprintf("agent-%s-%d", name, c.agentNo), environ(), argv...)
}

// release compiles and releases the model in dir; it returns the version.
func (c *cluster) release(dir string) int64 {
	c.t.Helper()
	var out api.ExportResponse
	c.cliJSON(&out, "export", "--release", dir)
	if !out.Released || out.Version.Number == 0 {
		c.t.Fatalf("export --release -o json: %+v, want a released version", out)
	}
	return out.Version.Number
}

// deployed counts the resources the server holds deployed (a cheap probe,
// read from the store).
func (c *cluster) deployed() int {
	c.t.Helper()
	sts, err := c.store.Statuses(context.Background(), env, record.StatusFilter{State: model.StateDeployed})
	if err != nil {
		c.t.Fatal(err)
	}
	return len(sts)
}

// statuses is the resource list of the environment by resource ID.
func (c *cluster) statuses() map[string]record.ResourceStatus {
	c.t.Helper()
	var sts []record.ResourceStatus
	c.cliJSON(&sts, "resource", "list")
	out := map[string]record.ResourceStatus{}
	for _, s := range sts {
		out[s.ID.String()] = s
	}
	return out
}

// converged waits until every resource of version v is deployed.
func (c *cluster) converged(v int64, n int, within time.Duration) {
	c.t.Helper()
	var last map[string]record.ResourceStatus
	ok := poll(within, func() bool {
		last = c.statuses()
		if len(last) != n {
			return false
		}
		for _, s := range last {
			if s.Version != v || s.State != model.StateDeployed {
				return false
			}
		}
		return true
	})
	if !ok {
		var pending []string
		for id, s := range last {
			if s.Version != v || s.State != model.StateDeployed {
				pending = append(pending, fmt.Sprintf("%s v%d %s %s", id, s.Version, s.State, s.Message))
			}
		}
		sort.Strings(pending)
		if len(pending) > 10 {
			pending = append(pending[:10], "…")
		}
		c.t.Fatalf("version %d not converged within %s: %d resources (want %d), not deployed: %s", v, within, len(last), n, strings.Join(pending, "; "))
	}
}

// action is one entry of the action log.
type action struct {
	id, deploy, state string
	version           int64
	changed           bool
}

// actions is the environment's deploy action log (of every resource the
// server knows), oldest first.
func (c *cluster) actions() []action {
	c.t.Helper()
	ctx := context.Background()
	sts, err := c.store.Statuses(ctx, env, record.StatusFilter{})
	if err != nil {
		c.t.Fatal(err)
	}
	var all []record.Action
	for _, s := range sts {
		as, err := c.store.Actions(ctx, env, s.ID, 10000)
		if err != nil {
			c.t.Fatal(err)
		}
		all = append(all, as...)
	}
	sort.Slice(all, func(i, j int) bool { return all[i].Seq < all[j].Seq })
	var out []action
	for _, a := range all {
		if a.Kind == record.ActionDeploy {
			out = append(out, action{id: a.ID.String(), deploy: a.DeployID, state: string(a.State), version: a.Version, changed: len(a.Changes) > 0})
		}
	}
	return out
}

// changesPer counts, per resource, the actions that changed something in
// version v (every version when v is 0).
func changesPer(log []action, v int64) map[string]int {
	out := map[string]int{}
	for _, a := range log {
		if a.changed && (v == 0 || a.version == v) {
			out[a.id]++
		}
	}
	return out
}

// alerts returns the environment's security alerts.
func (c *cluster) securityAlerts() []record.Alert {
	c.t.Helper()
	var as []record.Alert
	c.cliJSON(&as, "alert", "list", "--kind", "security")
	return as
}

// fileModel writes a model: host web with files f0..f(n-1) under /srv whose
// content is content(i), plus extra blocks per host.
func fileModel(t *testing.T, n int, content func(i int) string, extra map[string]string) string {
	t.Helper()
	var b strings.Builder
	hosts := map[string]string{"web": ""}
	for h, body := range extra {
		hosts[h] += body
	}
	names := make([]string, 0, len(hosts))
	for h := range hosts {
		names = append(names, h)
	}
	sort.Strings(names)
	for _, h := range names {
		fmt.Fprintf(&b, "host %q {\n  directory \"srv\" {\n    path = \"/srv\"\n  }\n", h)
		if h == "web" {
			for i := 0; i < n; i++ {
				fmt.Fprintf(&b, "  file \"f%d\" {\n    path    = \"/srv/f%d\"\n    content = %q\n  }\n", i, i, content(i))
			}
		}
		b.WriteString(hosts[h])
		b.WriteString("}\n")
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "main.hcl"), []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

// countFiles counts the regular files directly in dir.
func countFiles(dir string) int {
	es, err := os.ReadDir(dir)
	if err != nil {
		return 0
	}
	n := 0
	for _, e := range es {
		if e.Type().IsRegular() && !strings.HasPrefix(e.Name(), ".") {
			n++
		}
	}
	return n
}

// checkFiles asserts the content of root/srv/f0..f(n-1).
func checkFiles(t *testing.T, root string, n int, content func(i int) string) {
	t.Helper()
	for i := 0; i < n; i++ {
		b, err := os.ReadFile(filepath.Join(root, "srv", fmt.Sprintf("f%d", i)))
		if err != nil || string(b) != content(i) {
			t.Fatalf("%s/srv/f%d: %q, %v; want %q", root, i, b, err, content(i))
		}
	}
}

func poll(within time.Duration, cond func() bool) bool {
	for deadline := time.Now().Add(within); ; {
		if cond() {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func waitFor(t testing.TB, within time.Duration, what string, cond func() bool) {
	t.Helper()
	if !poll(within, cond) {
		t.Fatalf("timed out after %s waiting for %s", within, what)
	}
}

func randHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)[:n]
}

// logged reports whether a JSON log line of p has message msg.
func logged(p *proc, msg string) bool {
	sc := bufio.NewScanner(strings.NewReader(p.output()))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var line struct {
			Message string `json:"message"`
		}
		if json.Unmarshal(sc.Bytes(), &line) == nil && strings.Contains(line.Message, msg) {
			return true
		}
	}
	return false
}

// agent returns the server's view of agent name (zero if not known).
func (c *cluster) agent(name string) api.AgentView {
	c.t.Helper()
	var as []api.AgentView
	c.cliJSON(&as, "agent", "list")
	for _, a := range as {
		if a.Name == name {
			return a
		}
	}
	return api.AgentView{}
}
