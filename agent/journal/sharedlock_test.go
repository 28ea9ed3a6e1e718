//go:build unix

package journal

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
)

// Journals below a shared lock keep no lock file of their own, the shared
// lock excludes another holder, and a directory outside it is refused.
func TestSharedLock(t *testing.T) {
	base := t.TempDir()
	l, err := LockDir(base)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := LockDir(base); !errors.Is(err, ErrLocked) {
		t.Fatalf("second lock: got %v, want ErrLocked", err)
	}
	var js []*Journal
	for _, name := range []string{"a", "b"} {
		dir := filepath.Join(base, name, "state")
		j, err := Open(dir, name, Config{Lock: l})
		if err != nil {
			t.Fatal(err)
		}
		js = append(js, j)
		if err := j.Begin().Out(1, []byte("x")).Commit(); err != nil {
			t.Fatal(err)
		}
		if _, err := os.Stat(filepath.Join(dir, "lock")); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s: lock file: got %v, want none", name, err)
		}
		if j.lock != nil {
			t.Errorf("%s: the journal holds a lock file of its own", name)
		}
	}
	if _, err := Open(t.TempDir(), "c", Config{Lock: l}); !errors.Is(err, ErrConfig) {
		t.Fatalf("open outside the locked directory: got %v, want ErrConfig", err)
	}
	if _, err := Open(base, "d", Config{Lock: l}); !errors.Is(err, ErrConfig) {
		t.Fatalf("open the locked directory itself: got %v, want ErrConfig", err)
	}
	for _, j := range js {
		if err := j.Close(); err != nil {
			t.Fatal(err)
		}
	}
	// Reopened after the lock is released, a journal has what it committed.
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	j, err := Open(filepath.Join(base, "a", "state"), "a", Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer j.Close()
	if n := j.OutboxLen(); n != 1 {
		t.Fatalf("outbox after reopening: %d events, want 1", n)
	}
}
