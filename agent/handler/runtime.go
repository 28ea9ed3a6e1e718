package handler

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"

	"github.com/tetherhq/tether/model"
	"github.com/tetherhq/tether/model/durable"
)

// Runtime is what the agent hands to every handler it constructs: the services
// a handler may use, in one struct rather than imported globals.
type Runtime struct {
	// Root is a directory prefixed to every path a path-based handler touches
	// ("" or "/" for the real file system). Sandboxes, tests and the quickstart
	// use it to keep an agent's work below one directory.
	Root string
	// Sync makes file data durable before a rename publishes it. Nil means a
	// plain fsync per file.
	Sync *SyncGroup
	// Files bounds the files replaced at once (shared by the agents of
	// one process). Nil bounds nothing.
	Files *FileLimit
	// Run runs the commands of command-based handlers (packages, services,
	// users, exec). Nil means HostRunner.
	Run Runner
	// PackageManager and ServiceManager are the host's tools from its facts
	// ("apt", "dnf", "apk"; "systemd", "openrc", "sysv"); a resource's
	// provider attribute overrides them. Empty: detected on first use.
	PackageManager, ServiceManager string
}

// HostPath maps a resource path (absolute, clean: model.CheckAbsPath) to the
// path on this host, below Root.
func (rt Runtime) HostPath(p string) (string, error) {
	if err := model.CheckAbsPath(p); err != nil {
		return "", fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	if rt.Root == "" || rt.Root == "/" {
		return p, nil
	}
	// p is clean and absolute, so Join cannot climb out of Root; a symbolic
	// link on the way could.
	host := filepath.Join(rt.Root, p)
	if err := rt.confine(host); err != nil {
		return "", err
	}
	return host, nil
}

// ErrOutsideRoot is returned (wrapped) for a path whose parent directories
// lead, through a symbolic link, out of the agent's root.
var ErrOutsideRoot = errors.New("leads out of the root through a symbolic link")

// confine refuses a host path below Root whose existing parent directories
// include a symbolic link that resolves outside Root: a handler must not
// write, or read, through it. The final component is not checked: handlers
// never follow it (a file replaces a link, a symlink is one). It costs one
// lstat per directory between Root and the path, more only where a link is.
// It guards against a sandbox whose links point away, not against a local
// attacker racing the agent inside the root.
func (rt Runtime) confine(host string) error {
	for dir := filepath.Dir(host); len(dir) > len(rt.Root); dir = filepath.Dir(dir) {
		info, err := os.Lstat(dir)
		if errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ENOTDIR) {
			continue
		}
		if err != nil {
			return err
		}
		if info.Mode()&fs.ModeSymlink == 0 {
			continue
		}
		real, err := filepath.EvalSymlinks(dir)
		if errors.Is(err, fs.ErrNotExist) {
			continue // dangling: nothing can be written through it
		}
		if err != nil {
			return err
		}
		root, err := realRoot(rt.Root)
		if err != nil {
			return err
		}
		if real != root && !strings.HasPrefix(real, root+string(filepath.Separator)) {
			return fmt.Errorf("%s %w %s (%s points to %s): remove the link or point it inside the root", host, ErrOutsideRoot, rt.Root, dir, real)
		}
	}
	return nil
}

// realRoots caches each root's path with its symbolic links resolved.
var realRoots sync.Map

func realRoot(root string) (string, error) {
	if r, ok := realRoots.Load(root); ok {
		return r.(string), nil
	}
	r, err := filepath.EvalSymlinks(root)
	if err != nil {
		return "", fmt.Errorf("the agent's root %s: %w", root, err)
	}
	realRoots.Store(root, r)
	return r, nil
}

// Lstat maps a resource path to this host (HostPath) and describes what is
// there without following a final symbolic link; info is nil when nothing is.
func (rt Runtime) Lstat(p string) (host string, info fs.FileInfo, err error) {
	host, err = rt.HostPath(p)
	if err != nil {
		return "", nil, err
	}
	info, err = os.Lstat(host)
	if errors.Is(err, fs.ErrNotExist) {
		return host, nil, nil
	}
	return host, info, err
}

// SyncFile makes f's data durable, sharing the flush with concurrent callers
// when a SyncGroup is configured.
func (rt Runtime) SyncFile(f *os.File) error {
	if rt.Sync == nil {
		return f.Sync()
	}
	return rt.Sync.Sync(f)
}

// WriteFile replaces the file at host path p with data atomically
// (durable.WriteFile): a temporary file beside it, made durable with
// SyncFile, renamed over it; the directory is not synced, since a rename
// lost in a crash leaves the complete old file, which the next deploy
// repairs. The new file has mode perm and is owned by the agent's user
// (root on a host). Handlers that render a whole configuration file (cron,
// repository) use it.
func (rt Runtime) WriteFile(p string, data []byte, perm fs.FileMode) error {
	release := rt.HoldFile()
	err := durable.WriteFile(p, data, perm, rt.Durability()...)
	release()
	if errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("directory %s does not exist: install what provides it, or create it with a directory resource", filepath.Dir(p))
	}
	return err
}

// Durability is how handlers replace files (durable.WriteFile): synced
// with SyncFile, the directory left unsynced.
func (rt Runtime) Durability() []durable.Option {
	return []durable.Option{durable.SyncWith(rt.SyncFile), durable.NoDirSync()}
}

// ReadFile returns the content of the file at resource path p below the
// root, and whether there is one. A directory or other non-file at p is an
// error naming it.
func (rt Runtime) ReadFile(p string) (host string, data []byte, exists bool, err error) {
	host, info, err := rt.Lstat(p)
	if err != nil || info == nil {
		return host, nil, false, err
	}
	if !info.Mode().IsRegular() {
		return host, nil, false, fmt.Errorf("%s is not a regular file (%s): remove it", host, info.Mode().Type())
	}
	data, err = os.ReadFile(host)
	return host, data, err == nil, err
}
