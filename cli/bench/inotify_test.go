package bench

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The run raises the limits on inotify where they are short, and puts them
// back after; where it cannot, it warns and goes on.
func TestRaiseInotifyLimits(t *testing.T) {
	dir := t.TempDir()
	oldI, oldW := inotifyInstances, inotifyWatches
	t.Cleanup(func() { inotifyInstances, inotifyWatches = oldI, oldW })
	inotifyInstances, inotifyWatches = filepath.Join(dir, "instances"), filepath.Join(dir, "watches")
	write := func(p, v string) {
		if err := os.WriteFile(p, []byte(v+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	read := func(p string) string {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		return strings.TrimSpace(string(b))
	}

	write(inotifyInstances, "128")
	write(inotifyWatches, "8192")
	n, warning, restore := raiseInotifyLimits(1000)
	if n != 1064 || warning != "" || read(inotifyInstances) != "1064" || read(inotifyWatches) != "16192" {
		t.Fatalf("short limits: %d, %q, files %s and %s; want raised to 1064 and 16192, no warning", n, warning, read(inotifyInstances), read(inotifyWatches))
	}
	restore()
	if read(inotifyInstances) != "128" || read(inotifyWatches) != "8192" {
		t.Fatalf("after the run: %s and %s, want 128 and 8192 back", read(inotifyInstances), read(inotifyWatches))
	}

	// Ample already: left alone.
	write(inotifyInstances, "100000")
	write(inotifyWatches, "1000000")
	if n, warning, restore := raiseInotifyLimits(1000); n != 100000 || warning != "" {
		t.Fatalf("ample limits: %d, %q", n, warning)
	} else {
		restore()
	}
	if read(inotifyInstances) != "100000" {
		t.Fatalf("an ample limit changed to %s", read(inotifyInstances))
	}

	// Not to be read: a warning that says what to do, and the run goes on.
	inotifyInstances = filepath.Join(dir, "missing")
	n, warning, restore = raiseInotifyLimits(1000)
	restore()
	if !strings.Contains(warning, "sysctl -w fs.inotify.max_user_instances=1064") {
		t.Fatalf("limit not readable: %d, warning %q; want one saying what to run", n, warning)
	}
}
