package e2e

import (
	"context"
	"crypto/ed25519"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/tetherhq/tether/bus"
	"github.com/tetherhq/tether/model"
	"github.com/tetherhq/tether/model/testenv"
	"github.com/tetherhq/tether/server/record"
)

func fileID(agent, path string) string { return fmt.Sprintf("file[%s,path=%s]", agent, path) }

// TestAgentOfflineCatchesUp stops an agent, releases two versions, and
// starts it again: it goes straight to the latest, touching only what
// differs from what it held, and applies nothing twice.
func TestAgentOfflineCatchesUp(t *testing.T) {
	c := newCluster(t)
	root, state := t.TempDir(), t.TempDir()
	const n = 30
	v1c := func(i int) string { return fmt.Sprintf("v1 %d\n", i) }
	v2c := func(i int) string {
		if i < 10 {
			return fmt.Sprintf("v2 %d\n", i)
		}
		return v1c(i)
	}
	v3c := func(i int) string {
		if i >= 5 && i < 15 || i == n {
			return fmt.Sprintf("v3 %d\n", i)
		}
		return v2c(i)
	}
	v1 := c.release(fileModel(t, n, v1c, nil))
	ag := c.startAgent("web", agentOpts{stateDir: state, root: root})
	c.converged(v1, n+1, 60*time.Second)
	ag.stop()
	waitFor(t, 10*time.Second, "the agent shown offline", func() bool { return !c.agent("web").Online })

	v2 := c.release(fileModel(t, n, v2c, nil))
	v3 := c.release(fileModel(t, n+1, v3c, nil)) // and one more file
	ag = c.startAgent("web", agentOpts{stateDir: state, root: root})
	c.converged(v3, n+2, 60*time.Second)
	checkFiles(t, root, n+1, v3c)

	log := c.actions()
	if got := changesPer(log, v2); len(got) != 0 {
		t.Fatalf("version %d, released while the agent was offline, was applied: %v", v2, got)
	}
	want := map[string]int{fileID("web", fmt.Sprintf("/srv/f%d", n)): 1}
	for i := 0; i < 15; i++ {
		want[fileID("web", fmt.Sprintf("/srv/f%d", i))] = 1
	}
	var touched []string
	for _, a := range log {
		if a.version == v3 {
			touched = append(touched, a.id)
		}
	}
	got := changesPer(log, v3)
	if !sameCounts(got, want) || len(touched) != len(want) {
		t.Fatalf("version %d after the restart: changed %v, touched %d resources; want exactly the %d that differ from version %d, once each",
			v3, got, len(touched), len(want), v1)
	}
	checkOnce(t, log)
	ag.stop()
}

// gatedModel is web's n files plus one that requires gate's file: web's
// deploy cannot finish before agent gate has deployed.
func gatedModel(t *testing.T, n int, content func(int) string) (dir string, total int) {
	return fileModel(t, n, content, map[string]string{
		"web":  "  file \"last\" {\n    path     = \"/srv/last\"\n    content  = \"last\\n\"\n    requires = [\"" + fileID("gate", "/srv/gate") + "\"]\n  }\n",
		"gate": "  file \"gate\" {\n    path    = \"/srv/gate\"\n    content = \"open\\n\"\n  }\n",
	}), n + 4
}

// TestAgentKilledMidDeploy kills an agent with SIGKILL while it writes its
// files and starts it again: the deploy completes, and every resource is in
// the action log exactly once (a change made just before the kill is
// reported after the restart, not lost and not made again).
func TestAgentKilledMidDeploy(t *testing.T) {
	c := newCluster(t)
	root, state := t.TempDir(), t.TempDir()
	const n = 300
	content := func(i int) string { return fmt.Sprintf("killed mid-deploy %d\n", i) }
	dir, total := gatedModel(t, n, content)
	v := c.release(dir)
	web := c.startAgent("web", agentOpts{stateDir: state, root: root})
	// Kill it as soon as it has written a few files; at the latest it waits
	// for gate, which is not running: either way mid-deploy.
	srv := filepath.Join(root, "srv")
	for deadline := time.Now().Add(60 * time.Second); countFiles(srv) < 10; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) || web.exited() {
			t.Fatalf("the agent wrote no files within 60 s")
		}
	}
	web.kill()
	t.Logf("killed the agent with %d of %d files written", countFiles(srv), n+1)
	if _, err := os.Stat(filepath.Join(srv, "last")); err == nil {
		t.Fatal("the gated file was written before its requirement")
	}
	web = c.startAgent("web", agentOpts{stateDir: state, root: root})
	c.startAgent("gate", agentOpts{stateDir: t.TempDir(), root: t.TempDir()})
	c.converged(v, total, 90*time.Second)
	checkFiles(t, root, n, content)
	checkEachOnce(t, c, total)
	web.stop()
}

// TestServerKilledMidDeploy kills the server with SIGKILL while an agent
// reports a deploy, and starts it again: what the agent reported meanwhile
// waits on the broker, and every resource is in the action log once.
func TestServerKilledMidDeploy(t *testing.T) {
	c := newCluster(t)
	const n = 300
	content := func(i int) string { return fmt.Sprintf("server killed %d\n", i) }
	dir, total := gatedModel(t, n, content)
	v := c.release(dir)
	root := t.TempDir()
	c.startAgent("web", agentOpts{stateDir: t.TempDir(), root: root})
	waitFor(t, 60*time.Second, "the first results recorded", func() bool { return c.deployed() > 0 })
	c.srv.kill()
	t.Logf("killed the server with %d resources recorded deployed", c.deployed())
	c.startServer()
	c.startAgent("gate", agentOpts{stateDir: t.TempDir(), root: t.TempDir()})
	c.converged(v, total, 90*time.Second)
	checkFiles(t, root, n, content)
	checkEachOnce(t, c, total)
}

// brokerFaultTest skips a test that stops the local RabbitMQ unless fault
// tests were asked for; then rabbitmqctl must be there.
func brokerFaultTest(t *testing.T) {
	t.Helper()
	testenv.Faults(t, "stop RabbitMQ")
	_, err := exec.LookPath("rabbitmqctl")
	testenv.Need(t, err == nil, "this fault test needs rabbitmqctl to stop the local broker")
}

// stopBroker stops the local RabbitMQ and returns what starts it again;
// the test's cleanup starts it if the test ends first.
func stopBroker(t *testing.T) (start func()) {
	t.Helper()
	run(t, "rabbitmqctl", "-q", "stop_app")
	started := false
	t.Cleanup(func() {
		if !started {
			_ = exec.Command("rabbitmqctl", "-q", "start_app").Run()
		}
	})
	return func() {
		t.Helper()
		run(t, "rabbitmqctl", "-q", "start_app")
		started = true
	}
}

// TestFaultBrokerStoppedMidDeploy stops RabbitMQ for 30 s while an agent
// deploys: the agent keeps its results in its outbox, the server waits,
// and once the broker is back the environment converges with every
// resource in the action log once.
func TestFaultBrokerStoppedMidDeploy(t *testing.T) {
	brokerFaultTest(t)
	c := newCluster(t)
	const n = 300
	content := func(i int) string { return fmt.Sprintf("broker stopped %d\n", i) }
	dir, total := gatedModel(t, n, content)
	v := c.release(dir)
	root := t.TempDir()
	c.startAgent("web", agentOpts{stateDir: t.TempDir(), root: root})
	waitFor(t, 60*time.Second, "the first results recorded", func() bool { return c.deployed() > 0 })
	startBroker := stopBroker(t)
	t.Logf("stopped the broker with %d resources recorded deployed", c.deployed())
	time.Sleep(30 * time.Second)
	startBroker()
	c.startAgent("gate", agentOpts{stateDir: t.TempDir(), root: t.TempDir()})
	c.converged(v, total, 120*time.Second)
	checkFiles(t, root, n, content)
	checkEachOnce(t, c, total)
}

// TestFaultDriftWhileBrokerStopped edits a watched file while the broker
// is down: the agent heals it at once on its own, keeps the drift and heal
// reports in its outbox, and the server records both when the broker is
// back.
func TestFaultDriftWhileBrokerStopped(t *testing.T) {
	brokerFaultTest(t)
	c := newCluster(t)
	c.cli("env", "settings", "set", "drift_policy", "heal")
	const n = 3
	content := func(i int) string { return fmt.Sprintf("watched %d\n", i) }
	v := c.release(fileModel(t, n, content, nil))
	root := t.TempDir()
	c.startAgent("web", agentOpts{stateDir: t.TempDir(), root: root})
	c.converged(v, n+1, 60*time.Second)

	startBroker := stopBroker(t)
	path := filepath.Join(root, "srv", "f1")
	if err := os.WriteFile(path, []byte("edited while the broker was down\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "the agent to heal the file without the broker", func() bool {
		b, err := os.ReadFile(path)
		return err == nil && string(b) == content(1)
	})
	startBroker()

	id := fileID("web", "/srv/f1")
	var drift, healed *record.Alert
	waitFor(t, 120*time.Second, "the drift and the heal recorded by the server", func() bool {
		code, out, _ := c.run("alert", "list", "--kind", "drift", "-o", "json")
		var alerts []record.Alert
		if code != 0 || json.Unmarshal([]byte(out), &alerts) != nil {
			return false
		}
		for i := range alerts {
			a := &alerts[i]
			if a.ID == nil || a.ID.String() != id {
				continue
			}
			switch a.Compliance {
			case model.NonCompliant:
				drift = a
			case model.Compliant:
				healed = a
			}
		}
		return drift != nil && healed != nil
	})
	if got := drift.Changes["content"].Current; got != "edited while the broker was down\n" {
		t.Fatalf("the drift alert says the content was %v", got)
	}
	if !strings.HasPrefix(healed.Message, "healed") || healed.At.Before(drift.At) {
		t.Fatalf("restore alert %+v after drift %+v, want a heal after the drift", healed, drift)
	}
}

// TestStandbyTakesOver starts two processes for one agent name, with the
// same key: one deploys, the other stands by; when the first is killed the
// second takes over and deploys the next version.
func TestStandbyTakesOver(t *testing.T) {
	c := newCluster(t)
	root := t.TempDir()
	stateA, stateB := t.TempDir(), t.TempDir()
	const n = 10
	v1c := func(i int) string { return fmt.Sprintf("v1 %d\n", i) }
	v2c := func(i int) string {
		if i < 5 {
			return fmt.Sprintf("v2 %d\n", i)
		}
		return v1c(i)
	}
	v3c := func(i int) string {
		if i >= 5 {
			return fmt.Sprintf("v3 %d\n", i)
		}
		return v2c(i)
	}
	v1 := c.release(fileModel(t, n, v1c, nil))
	primary := c.startAgent("web", agentOpts{stateDir: stateA, root: root})
	c.converged(v1, n+1, 60*time.Second)
	// The standby gets the agent's keys, as an operator would copy them:
	// the signing key and the key-agreement key its secrets are sealed to.
	if err := os.MkdirAll(filepath.Join(stateB, env, "web"), 0o700); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"key", "kex"} {
		key, err := os.ReadFile(filepath.Join(stateA, env, "web", name))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(stateB, env, "web", name), key, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	standby := c.startAgent("web", agentOpts{stateDir: stateB, root: root})
	waitFor(t, 30*time.Second, "the second process to stand by", func() bool { return logged(standby, "standing by") })

	v2 := c.release(fileModel(t, n, v2c, nil))
	c.converged(v2, n+1, 60*time.Second)
	if logged(standby, "job finished") {
		t.Fatal("the standby ran a job while the primary was alive")
	}

	primary.kill()
	killed := time.Now()
	waitFor(t, 30*time.Second, "the standby to become primary", func() bool { return logged(standby, "now primary") })
	t.Logf("the standby took over %s after the primary was killed", time.Since(killed).Round(time.Millisecond))
	v3 := c.release(fileModel(t, n, v3c, nil))
	c.converged(v3, n+1, 60*time.Second)
	checkFiles(t, root, n, v3c)
	if !logged(standby, "job finished") {
		t.Fatal("the new primary deployed nothing")
	}
	log := c.actions()
	for v, want := range map[int64]int{v1: n + 1, v2: 5, v3: 5} {
		if got := changesPer(log, v); len(got) != want {
			t.Fatalf("version %d changed %d resources, want %d: %v", v, len(got), want, got)
		}
	}
	checkOnce(t, log)
	standby.stop()
}

// TestForgedEventsChangeNothing publishes, next to real agents, a report
// signed by an unknown key, one by agent gate's key claiming to come from
// web, and one from gate about web's resource: each raises a security alert
// and changes nothing.
func TestForgedEventsChangeNothing(t *testing.T) {
	c := newCluster(t)
	const n = 5
	content := func(i int) string { return fmt.Sprintf("forgery %d\n", i) }
	dir := fileModel(t, n, content, map[string]string{
		"gate": "  file \"gate\" {\n    path    = \"/srv/gate\"\n    content = \"open\\n\"\n  }\n",
	})
	v := c.release(dir)
	gateState := t.TempDir()
	c.startAgent("web", agentOpts{stateDir: t.TempDir(), root: t.TempDir()})
	c.startAgent("gate", agentOpts{stateDir: gateState, root: t.TempDir()})
	total := n + 3
	c.converged(v, total, 60*time.Second)
	before := len(c.actions())

	_, stranger, err := bus.GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	gateKey := readKey(t, filepath.Join(gateState, env, "gate", "key"))
	target := model.MustParseID(fileID("web", "/srv/f0"))
	failed := bus.ResourceStatus{DeployID: "forged", Generation: v, Done: true,
		Results: []model.Result{{ID: target, State: model.StateFailed, Message: "forged"}}}
	forgeries := []struct {
		key   ed25519.PrivateKey
		agent string
	}{{stranger, "web"}, {gateKey, "web"}, {gateKey, "gate"}}
	ctx := context.Background()
	for _, f := range forgeries {
		e, err := bus.NewSigner(f.key, 1000).Seal(bus.KindResourceStatus, env, f.agent, failed)
		if err != nil {
			t.Fatal(err)
		}
		if err := c.bus.Publish(ctx, e); err != nil {
			t.Fatal(err)
		}
	}
	var alerts []record.Alert
	waitFor(t, 30*time.Second, "three security alerts", func() bool {
		alerts = c.securityAlerts()
		return len(alerts) >= len(forgeries)
	})
	var msgs []string
	for _, a := range alerts {
		msgs = append(msgs, a.Agent+": "+a.Message)
	}
	sort.Strings(msgs)
	joined := strings.Join(msgs, "\n")
	for _, want := range []string{"another key", "another agent's resource"} {
		if !strings.Contains(joined, want) {
			t.Fatalf("security alerts:\n%s\nwant one saying %q", joined, want)
		}
	}
	st := c.statuses()[target.String()]
	if st.State != model.StateDeployed || st.Version != v {
		t.Fatalf("%s after the forgeries: %s v%d %q", target, st.State, st.Version, st.Message)
	}
	if after := len(c.actions()); after != before {
		t.Fatalf("the forgeries added %d actions", after-before)
	}
}

func readKey(t *testing.T, path string) ed25519.PrivateKey {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	blk, _ := pem.Decode(b)
	if blk == nil {
		t.Fatalf("%s: no PEM block", path)
	}
	k, err := x509.ParsePKCS8PrivateKey(blk.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	key, ok := k.(ed25519.PrivateKey)
	if !ok {
		t.Fatalf("%s: %T, want an ed25519 key", path, k)
	}
	return key
}

// checkEachOnce asserts that each of the total resources was changed
// exactly once: created by one action, none missing, none repeated.
func checkEachOnce(t *testing.T, c *cluster, total int) {
	t.Helper()
	log := c.actions()
	per := changesPer(log, 0)
	var twice []string
	for id, k := range per {
		if k != 1 {
			twice = append(twice, fmt.Sprintf("%s ×%d", id, k))
		}
	}
	if len(per) != total || len(twice) > 0 {
		t.Fatalf("action log: %d of %d resources changed (gaps: %d); changed more than once: %v", len(per), total, total-len(per), twice)
	}
	checkOnce(t, log)
}

// checkOnce asserts that no deploy logged a resource twice.
func checkOnce(t *testing.T, log []action) {
	t.Helper()
	seen := map[string]bool{}
	for _, a := range log {
		k := a.deploy + " " + a.id
		if seen[k] {
			t.Fatalf("deploy %s logged %s twice", a.deploy, a.id)
		}
		seen[k] = true
	}
}

func sameCounts(a, b map[string]int) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}
