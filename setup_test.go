package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestSetupSaysWhatIsMissing: on a machine without the tools some tests
// use, .ci/setup --check (make test prints it) names them and `make
// setup`, and .ci/setup, run by someone who may not install, prints the
// apt-get line that would; make test, .ci/run, the README and
// DEVELOPERS.md name it.
func TestSetupSaysWhatIsMissing(t *testing.T) {
	// A PATH holding only what the script itself runs.
	bin := t.TempDir()
	for _, tool := range []string{"id", "sed", "ls"} {
		p, err := exec.LookPath(tool)
		if err != nil {
			t.Fatalf("no %s here: %v", tool, err)
		}
		if err := os.Symlink(p, filepath.Join(bin, tool)); err != nil {
			t.Fatal(err)
		}
	}
	bash, err := exec.LookPath("bash")
	if err != nil {
		t.Fatalf("no bash here: %v", err)
	}
	run := func(args ...string) (string, error) {
		cmd := exec.Command(bash, append([]string{".ci/setup"}, args...)...)
		cmd.Env = []string{"PATH=" + bin}
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	out, err := run("--check")
	if err != nil || strings.Count(strings.TrimSpace(out), "\n") != 0 {
		t.Fatalf(".ci/setup --check: %v, %q; want one line and success", err, out)
	}
	// (sshd is found at its own path, /usr/sbin/sshd: listed only where
	// it is not installed.)
	for _, want := range []string{"no ip, iptables, git, ", "ssh-keygen", "chromium here", "'make setup' installs them",
		"apt-get install -y --no-install-recommends iproute2 iptables git ", "openssh-client", "chromium fonts-dejavu-core"} {
		if !strings.Contains(out, want) {
			t.Fatalf(".ci/setup --check without the tools: %q, want it to say %q", out, want)
		}
	}
	// Root without apt-get cannot install either: the line is printed.
	out, err = run()
	if err == nil || !strings.Contains(out, "apt-get install -y --no-install-recommends iproute2 iptables git ") || !strings.Contains(out, "chromium fonts-dejavu-core") {
		t.Fatalf(".ci/setup without apt-get: %v, %q; want a failure printing the apt-get line", err, out)
	}

	for file, want := range map[string]string{
		"Makefile":      "@.ci/setup --check",
		".ci/run":       "\n.ci/setup\n",
		"README.md":     "make setup",
		"DEVELOPERS.md": "make setup",
	} {
		b, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(b), want) {
			t.Errorf("%s does not hold %q", file, want)
		}
	}
}
