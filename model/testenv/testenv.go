// Package testenv decides what a test does when the machine lacks what it
// needs (a service, a tool, root): it skips, loudly, on a developer's
// machine, and fails where every test must run — under CI=true or
// TETHER_REQUIRE_SERVICES=1, which .ci/run sets. Every test helper that
// probes for a service or a tool goes through Need, so no test passes by
// skipping in CI.
package testenv

import (
	"bytes"
	"os"
	"sync"
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

// Faults skips a fault test, one that stops or restarts a service every
// other test shares (stops says which), unless TETHER_FAULT_TESTS=1: `make
// test` runs them after the rest of the suite, one package at a time.
func Faults(t testing.TB, stops string) {
	t.Helper()
	if os.Getenv("TETHER_FAULT_TESTS") != "1" {
		t.Skip("SKIPPED here: fault tests " + stops + "; `make test` runs them in a serial step with TETHER_FAULT_TESTS=1")
	}
}

// SyncBuffer is a buffer a goroutine under test writes (a logger) while
// the test reads it.
type SyncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *SyncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *SyncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
