// Package testenv decides what a test does when the machine lacks what it
// needs (a service, a tool, root): it skips, loudly, on a developer's
// machine, and fails where every test must run — under CI=true or
// TETHER_REQUIRE_SERVICES=1, which .ci/run sets. Every test helper that
// probes for a service or a tool goes through Need, so no test passes by
// skipping in CI.
package testenv

import (
	"os"
	"testing"
)

// Required reports whether a missing service or tool fails the test.
func Required() bool {
	return os.Getenv("CI") == "true" || os.Getenv("TETHER_REQUIRE_SERVICES") == "1"
}

// Need returns if ok; otherwise it fails the test with why where tests are
// required to run (Required), and skips it with "SKIPPED: why" elsewhere.
func Need(t testing.TB, ok bool, why string) {
	t.Helper()
	if ok {
		return
	}
	if Required() {
		t.Fatal(why)
	}
	t.Skip("SKIPPED: " + why)
}
