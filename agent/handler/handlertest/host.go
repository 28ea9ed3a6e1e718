package handlertest

import (
	"os"
	"os/exec"
	"testing"
)

// NeedHost skips a test that needs something of the real host (root, a
// tool, a package manager) when the machine lacks it, loudly, and fails it
// instead under CI=true or TETHER_REQUIRE_SERVICES=1: CI must run it.
func NeedHost(t testing.TB, ok bool, why string) {
	t.Helper()
	if ok {
		return
	}
	if os.Getenv("CI") == "true" || os.Getenv("TETHER_REQUIRE_SERVICES") == "1" {
		t.Fatal(why)
	}
	t.Skip("SKIPPED: " + why)
}

// NeedRoot is NeedHost for tests that change the real host as root.
func NeedRoot(t testing.TB) {
	t.Helper()
	NeedHost(t, os.Geteuid() == 0, "this test changes the real host and must run as root")
}

// NeedCommands is NeedHost for tests that run the host's tools.
func NeedCommands(t testing.TB, names ...string) {
	t.Helper()
	for _, n := range names {
		_, err := exec.LookPath(n)
		NeedHost(t, err == nil, n+" is not installed on this machine")
	}
}
