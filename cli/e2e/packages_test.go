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

	"github.com/tetherhq/tether/model/testenv"
)

// TestDebianPackageLifecycle builds the tether-agent package twice (two
// versions) with `make packages`, installs the first with dpkg -i on this
// machine, runs the installed agent (directly: no systemd here) until it
// deploys, upgrades to the second, checks that the agent's configuration
// edits, identity (key, name) and enrollment survived and that it reports
// its new version, and purges: configuration and state gone.
func TestDebianPackageLifecycle(t *testing.T) {
	_, err := exec.LookPath("dpkg")
	testenv.Need(t, err == nil, "no dpkg on this machine: the package lifecycle test needs a Debian system")
	testenv.Need(t, os.Geteuid() == 0, "not root: dpkg -i needs root")
	installed := exec.Command("dpkg-query", "-W", "-f", "${Status}", "tether-agent")
	out, _ := installed.Output()
	testenv.Need(t, !strings.Contains(string(out), "installed"),
		"tether-agent is installed on this machine: the test would replace and purge it")
	for _, p := range []string{"/etc/tether/agent.toml", "/var/lib/tether"} {
		_, err := os.Stat(p)
		testenv.Need(t, os.IsNotExist(err), p+" exists on this machine: the test would purge it")
	}
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	dist := t.TempDir()
	build := func(version string) string {
		t.Helper()
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
	first, second := build("1.0.0"), build("1.0.1")
	dpkg := func(args ...string) string {
		t.Helper()
		out, err := exec.Command("dpkg", args...).CombinedOutput()
		if err != nil {
			t.Fatalf("dpkg %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	t.Cleanup(func() { _ = exec.Command("dpkg", "--purge", "tether-agent").Run() })
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
