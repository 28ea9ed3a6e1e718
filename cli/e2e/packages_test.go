package e2e

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/tetherhq/tether/model/testenv"
)

// TestDebianPackageLifecycle builds the tether-agent package twice (two
// versions) with `make packages`, installs the first with dpkg -i on this
// machine, runs the installed agent (directly: no systemd here) until it
// deploys, upgrades to the second, checks that the agent's configuration
// edits, identity (key, name) and enrollment survived and that it reports
// its new version, and purges: configuration and state gone.
func TestDebianPackageLifecycle(t *testing.T) {
	needDpkg(t)
	dist := t.TempDir()
	build := func(version string) string { return buildAgentPackage(t, dist, version) }
	first, second := build("1.0.0"), build("1.0.1")
	dpkg := func(args ...string) string { return runDpkg(t, args...) }
	dpkg("-i", first)
	version := func() string {
		out, err := exec.Command("dpkg-query", "-W", "-f", "${Version}", "tether-agent").Output()
		if err != nil {
			t.Fatalf("dpkg-query: %v", err)
		}
		return string(out)
	}
	if v := version(); v != "1.0.0" {
		t.Fatalf("installed version %q, want 1.0.0", v)
	}
	if st, err := os.Stat("/var/lib/tether"); err != nil || st.Mode().Perm() != 0o700 {
		t.Fatalf("/var/lib/tether: %v, %v; want a directory of mode 0700 made by postinst", st, err)
	}

	c := newCluster(t)
	opts := agentOpts{command: []string{"/usr/bin/tether-agent", "run"}, config: "/etc/tether/agent.toml",
		stateDir: "/var/lib/tether", root: t.TempDir()}
	ag := c.startAgent("web", opts) // edits the conffile: the cluster's settings
	v1 := c.release(fileModel(t, 3, func(i int) string { return fmt.Sprintf("one %d\n", i) }, nil))
	c.converged(v1, 4, 60*time.Second)
	before := c.agent("web")
	if before.AgentVersion != "v1.0.0" {
		t.Fatalf("the installed agent reports version %q, want v1.0.0", before.AgentVersion)
	}
	ag.stop()
	edited, err := os.ReadFile("/etc/tether/agent.toml")
	if err != nil {
		t.Fatal(err)
	}

	dpkg("-i", second)
	if v := version(); v != "1.0.1" {
		t.Fatalf("version %q after the upgrade, want 1.0.1", v)
	}
	if got, err := os.ReadFile("/etc/tether/agent.toml"); err != nil || string(got) != string(edited) {
		t.Fatalf("agent.toml after the upgrade: %q (%v), want the edited %q kept (a conffile)", got, err, edited)
	}
	var bi struct{ Version string }
	if out, err := exec.Command("/usr/bin/tether-agent", "version", "-o", "json").Output(); err != nil || json.Unmarshal(out, &bi) != nil || bi.Version != "v1.0.1" {
		t.Fatalf("tether-agent version -o json after the upgrade: %s (%v), want v1.0.1", out, err)
	}
	ag = c.startAgent("web", opts)
	v2 := c.release(fileModel(t, 3, func(i int) string { return fmt.Sprintf("two %d\n", i) }, nil))
	c.converged(v2, 4, 60*time.Second)
	after := c.agent("web")
	ag.stop()
	if after.Key != before.Key || after.Name != before.Name || after.State != before.State {
		t.Fatalf("after the upgrade: agent %s, key %s, %s; want %s, key %s, %s (its identity kept)",
			after.Name, after.Key, after.State, before.Name, before.Key, before.State)
	}
	if after.AgentVersion != "v1.0.1" {
		t.Fatalf("the upgraded agent reports version %q, want v1.0.1", after.AgentVersion)
	}

	dpkg("--purge", "tether-agent")
	for _, p := range []string{"/usr/bin/tether-agent", "/etc/tether/agent.toml", "/var/lib/tether", "/lib/systemd/system/tether-agent.service"} {
		if _, err := os.Stat(p); !os.IsNotExist(err) {
			t.Errorf("%s after purge: %v, want it gone", p, err)
		}
	}
}

// needDpkg skips (or fails, where tests must run) a test that installs
// tether-agent on this machine when it cannot, or would replace a real
// installation; it purges the package when the test ends.
func needDpkg(t *testing.T) {
	t.Helper()
	_, err := exec.LookPath("dpkg")
	testenv.Need(t, err == nil, "no dpkg on this machine: the package tests need a Debian system")
	testenv.Need(t, os.Geteuid() == 0, "not root: dpkg -i needs root")
	out, _ := exec.Command("dpkg-query", "-W", "-f", "${Status}", "tether-agent").Output()
	testenv.Need(t, !strings.Contains(string(out), "installed"),
		"tether-agent is installed on this machine: the test would replace and purge it")
	for _, p := range []string{"/etc/tether/agent.toml", "/var/lib/tether"} {
		_, err := os.Stat(p)
		testenv.Need(t, os.IsNotExist(err), p+" exists on this machine: the test would purge it")
	}
	t.Cleanup(func() {
		_ = exec.Command("dpkg", "--purge", "tether-agent").Run()
		// What a test wrote before the package was in (they did not exist).
		os.RemoveAll("/var/lib/tether")
		os.Remove("/etc/tether/agent.toml")
		os.Remove("/etc/tether") // if empty
	})
}

// buildAgentPackage runs make packages for this machine's architecture
// and returns the tether-agent package of version.
func buildAgentPackage(t *testing.T, dist, version string) string {
	t.Helper()
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	make := exec.Command("make", "-C", root, "packages", "VERSION=v"+version, "ARCHES="+runtime.GOARCH, "DIST="+dist)
	if out, err := make.CombinedOutput(); err != nil {
		t.Fatalf("make packages VERSION=v%s: %v\n%s", version, err, out)
	}
	deb := filepath.Join(dist, fmt.Sprintf("tether-agent_%s_%s.deb", version, runtime.GOARCH))
	if _, err := os.Stat(deb); err != nil {
		t.Fatalf("make packages made no %s: %v", deb, err)
	}
	return deb
}

// runDpkg runs dpkg, waiting while another install on this shared
// machine holds its lock.
func runDpkg(t *testing.T, args ...string) string {
	t.Helper()
	for tries := 0; ; tries++ {
		out, err := exec.Command("dpkg", args...).CombinedOutput()
		if err == nil {
			return string(out)
		}
		if !strings.Contains(string(out), "lock") || tries == 120 {
			t.Fatalf("dpkg %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		time.Sleep(5 * time.Second)
	}
}

// TestInstallScript makes a script with tether agent install-script and
// runs it as root in a host of its own network behind NAT (a namespace:
// the files are this machine's; no systemd, so the script starts the agent
// in the background), and checks that the agent it started reached the
// broker through the NAT and enrolled by the script's token, trusting the
// server by the key the script names.
func TestInstallScript(t *testing.T) {
	needDpkg(t)
	for _, tool := range []string{"ip", "iptables", "rabbitmqctl"} {
		_, err := exec.LookPath(tool)
		testenv.Need(t, err == nil, tool+" is not installed: apt-get install iproute2 iptables (make setup installs them)")
	}
	deb := buildAgentPackage(t, t.TempDir(), "1.0.0")
	c := newCluster(t)
	n := setupNAT(t)
	n.forward(t, 5672, 5672)
	user, pass := rabbitUser(t)
	agentURL := fmt.Sprintf("amqp://%s:%s@%s:5672/", user, pass, n.brokerIP)
	var out struct {
		Script    string    `json:"script"`
		ServerKey string    `json:"server_key"`
		ExpiresAt time.Time `json:"expires_at"`
	}
	c.cliJSON(&out, "agent", "install-script", "--package", deb, "--amqp", agentURL, "--amqp-namespace", c.ns, "--label", "role=installed", "--token-ttl", "10m")
	if out.ExpiresAt.IsZero() || time.Until(out.ExpiresAt) > 11*time.Minute || !strings.Contains(out.Script, out.ServerKey) {
		t.Fatalf("install-script -o json: expires %s, server key %s; want a token for 10 minutes and the key in the script:\n%s", out.ExpiresAt, out.ServerKey, out.Script)
	}
	// The same through cloud-init's user-data: the files and the commands
	// cloud-init reads.
	var ci struct {
		UserData string `json:"user_data"`
	}
	c.cliJSON(&ci, "agent", "cloud-init", "--package", deb, "--amqp", c.amqpURL, "--token-ttl", "10m")
	var ud struct {
		WriteFiles []struct{ Path, Permissions, Content string } `yaml:"write_files"`
		RunCmd     [][]string                                    `yaml:"runcmd"`
	}
	if err := yaml.Unmarshal([]byte(ci.UserData), &ud); err != nil || !strings.HasPrefix(ci.UserData, "#cloud-config\n") {
		t.Fatalf("cloud-init user-data does not parse (%v):\n%s", err, ci.UserData)
	}
	if len(ud.WriteFiles) != 1 || ud.WriteFiles[0].Path != "/etc/tether/agent.toml" || ud.WriteFiles[0].Permissions != "0600" ||
		!strings.Contains(ud.WriteFiles[0].Content, out.ServerKey) || !strings.Contains(ud.WriteFiles[0].Content, `token = "tether`) {
		t.Fatalf("cloud-init write_files %+v, want agent.toml, 0600, with a token and the server key %s", ud.WriteFiles, out.ServerKey)
	}
	if len(ud.RunCmd) != 1 || len(ud.RunCmd[0]) != 3 || ud.RunCmd[0][0] != "sh" || !strings.Contains(ud.RunCmd[0][2], "dpkg --force-confold -i") {
		t.Fatalf("cloud-init runcmd %q, want one sh -c installing the package", ud.RunCmd)
	}
	if err := exec.Command("sh", "-n", "-c", ud.RunCmd[0][2]).Run(); err != nil {
		t.Fatalf("cloud-init's runcmd is not valid sh: %v\n%s", err, ud.RunCmd[0][2])
	}

	script := filepath.Join(t.TempDir(), "install.sh")
	if err := os.WriteFile(script, []byte(out.Script), 0o700); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if b, err := os.ReadFile("/run/tether-agent.pid"); err == nil {
			_ = exec.Command("kill", strings.TrimSpace(string(b))).Run()
			time.Sleep(time.Second) // its goodbye, before the purge takes its state
			os.Remove("/run/tether-agent.pid")
			os.Remove("/var/log/tether-agent.log")
		}
	})
	if b, err := exec.Command("ip", "netns", "exec", n.lan, "sh", script).CombinedOutput(); err != nil {
		t.Fatalf("the install script: %v\n%s", err, b)
	}
	host, err := os.Hostname()
	if err != nil {
		t.Fatal(err)
	}
	name := strings.ToLower(strings.Split(host, ".")[0])
	var a struct {
		State        string            `json:"state"`
		Online       bool              `json:"online"`
		AgentVersion string            `json:"agent_version"`
		Labels       map[string]string `json:"labels"`
		Key          string            `json:"key_fingerprint"`
	}
	if !poll(60*time.Second, func() bool {
		code, stdout, _ := c.run("agent", "show", name, "-o", "json")
		return code == 0 && json.Unmarshal([]byte(stdout), &a) == nil && a.State == "accepted" && a.Online
	}) {
		log, _ := os.ReadFile("/var/log/tether-agent.log")
		t.Fatalf("agent %s: %+v, want it accepted and online; its log:\n%s", name, a, log)
	}
	if a.AgentVersion != "v1.0.0" || a.Labels["role"] != "installed" {
		t.Fatalf("agent %s: version %q, labels %v; want v1.0.0 and role=installed", name, a.AgentVersion, a.Labels)
	}
	// (rabbitmqctl may list a connection a moment after it opened.)
	waitFor(t, 30*time.Second, "the broker to list the agent's connection from the NAT's address", func() bool {
		for _, line := range strings.Split(run(t, "rabbitmqctl", "-q", "list_connections", "user", "peer_host"), "\n") {
			if f := strings.Fields(line); len(f) == 2 && f[0] == user && f[1] == n.gwOut {
				return true
			}
		}
		return false
	})
	conf, err := os.ReadFile("/etc/tether/agent.toml")
	if err != nil || !strings.Contains(string(conf), out.ServerKey) {
		t.Fatalf("/etc/tether/agent.toml: %q (%v), want the server key %s in it", conf, err, out.ServerKey)
	}
	if st, err := os.Stat("/etc/tether/agent.toml"); err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("/etc/tether/agent.toml: %v (%v), want mode 0600 (it holds the token)", st, err)
	}
}

// TestServerPackage installs the tether package built by make packages:
// the tether system user is made, the configuration is the user's to
// read and no one else's, the binary runs; purge removes the
// configuration and state and leaves the user (made by the test, it is
// removed after).
func TestServerPackage(t *testing.T) {
	_, err := exec.LookPath("dpkg")
	testenv.Need(t, err == nil, "no dpkg on this machine: the package tests need a Debian system")
	testenv.Need(t, os.Geteuid() == 0, "not root: dpkg -i needs root")
	out, _ := exec.Command("dpkg-query", "-W", "-f", "${Status}", "tether").Output()
	testenv.Need(t, !strings.Contains(string(out), "installed"), "the tether package is installed on this machine: the test would purge it")
	for _, p := range []string{"/usr/bin/tether", "/etc/tether/server.toml", "/var/lib/tether-server"} {
		_, err := os.Stat(p)
		testenv.Need(t, os.IsNotExist(err), p+" exists on this machine: the test would replace or purge it")
	}
	hadUser := exec.Command("getent", "passwd", "tether").Run() == nil
	t.Cleanup(func() {
		_ = exec.Command("dpkg", "--purge", "tether").Run()
		if !hadUser {
			_ = exec.Command("userdel", "tether").Run()
		}
	})
	dist := t.TempDir()
	buildAgentPackage(t, dist, "1.0.0") // make packages builds both
	runDpkg(t, "-i", filepath.Join(dist, fmt.Sprintf("tether_1.0.0_%s.deb", runtime.GOARCH)))
	passwd, err := exec.Command("getent", "passwd", "tether").Output()
	if err != nil || !strings.Contains(string(passwd), ":/var/lib/tether-server:") {
		t.Fatalf("getent passwd tether: %q (%v), want the system user with home /var/lib/tether-server", passwd, err)
	}
	st, err := os.Stat("/etc/tether/server.toml")
	if err != nil || st.Mode().Perm() != 0o640 {
		t.Fatalf("/etc/tether/server.toml: %v (%v), want mode 0640", st, err)
	}
	group, err := exec.Command("stat", "-c", "%G", "/etc/tether/server.toml").Output()
	if err != nil || strings.TrimSpace(string(group)) != "tether" {
		t.Fatalf("/etc/tether/server.toml belongs to group %q (%v), want tether", group, err)
	}
	if v, err := exec.Command("/usr/bin/tether", "version").Output(); err != nil || !strings.HasPrefix(string(v), "tether v1.0.0 ") {
		t.Fatalf("tether version: %q (%v), want v1.0.0", v, err)
	}
	runDpkg(t, "-i", filepath.Join(dist, fmt.Sprintf("tether_1.0.0_%s.deb", runtime.GOARCH))) // again: the user exists
	runDpkg(t, "--purge", "tether")
	for _, p := range []string{"/usr/bin/tether", "/etc/tether/server.toml", "/var/lib/tether-server", "/lib/systemd/system/tether-server.service"} {
		if _, err := os.Stat(p); !os.IsNotExist(err) {
			t.Errorf("%s after purge: %v, want it gone", p, err)
		}
	}
	if exec.Command("getent", "passwd", "tether").Run() != nil {
		t.Error("the tether user is gone after purge: Debian keeps system users")
	}
}
