package journal

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// DirLock is a lock a process holds on a directory that contains the state
// directories of many journals: journals opened below it with Config.Lock
// take no lock file of their own. A journal costs one open file (its log)
// instead of two, which is what lets one process run ten thousand agents
// (`tether bench converge`) within the usual limit on open files.
//
// The shared lock only excludes processes that take it too: use it for
// directories no process opens but through it, such as a benchmark's own
// temporary directory.
type DirLock struct {
	dir string
	f   *os.File
}

// LockDir takes an exclusive lock on dir (its file "lock", created if
// missing), failing with ErrLocked when another process holds it.
func LockDir(dir string) (*DirLock, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("journal: %w", err)
	}
	if err := os.MkdirAll(abs, 0o700); err != nil {
		return nil, fmt.Errorf("journal: create %s: %w", abs, err)
	}
	f, err := lockDir(abs)
	if err != nil {
		return nil, err
	}
	return &DirLock{dir: abs, f: f}, nil
}

// Close releases the lock. Close the journals opened under it first.
func (l *DirLock) Close() error {
	if l == nil || l.f == nil {
		return nil
	}
	err := l.f.Close()
	l.f = nil
	return err
}

// covers says whether dir is below the locked directory.
func (l *DirLock) covers(dir string) error {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return fmt.Errorf("journal: %w", err)
	}
	rel, err := filepath.Rel(l.dir, abs)
	if err != nil || rel == "." || rel == ".." || strings.HasPrefix(rel, ".."+string(filepath.Separator)) {
		return fmt.Errorf("%w: state directory %s is not below the locked directory %s: open it without Config.Lock", ErrConfig, abs, l.dir)
	}
	return nil
}
