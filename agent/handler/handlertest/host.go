package handlertest

import (
	"os"
	"os/exec"
	"testing"

	"github.com/tetherhq/tether/model/testenv"
)

// NeedRoot is testenv.Need for tests that change the real host as root.
func NeedRoot(t testing.TB) {
	t.Helper()
	testenv.Need(t, os.Geteuid() == 0, "this test changes the real host and must run as root")
}

// NeedCommands is testenv.Need for tests that run the host's tools.
func NeedCommands(t testing.TB, names ...string) {
	t.Helper()
	for _, n := range names {
		_, err := exec.LookPath(n)
		testenv.Need(t, err == nil, n+" is not installed on this machine")
	}
}
