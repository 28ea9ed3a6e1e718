package handler

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"strings"
	"sync"
	"syscall"

	"github.com/tetherhq/tether/model"
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
	// FS is the file system path-based handlers act on (files,
	// directories, symlinks, cron entries, repositories, account files).
	// Nil means the agent's own host: HostFS with Sync and Files.
	FS FS
	// Run runs the commands of command-based handlers (packages, services,
	// users, exec). Nil means HostRunner.
	Run Runner
	// PackageManager and ServiceManager are the host's tools from its facts
	// ("apt", "dnf", "apk"; "systemd", "openrc", "sysv"); a resource's
	// provider attribute overrides them. Empty: detected on first use.
	PackageManager, ServiceManager string
}

// WithFS returns rt with its FS set: the one given, or the agent's own
// host's (HostFS with Sync and Files). A handler that keeps its runtime
// calls it once in New, so that no file operation pays for choosing.
func (rt Runtime) WithFS() Runtime {
	rt.FS = rt.fsys()
	return rt
}

// fsys is the runtime's FS, HostFS when none is set.
func (rt Runtime) fsys() FS {
	switch {
	case rt.FS != nil:
		return rt.FS
	case rt.Sync == nil && rt.Files == nil:
		return bareHost
	}
	return &HostFS{Sync: rt.Sync, Files: rt.Files}
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
// attacker racing the agent inside the root. The links are resolved by the
// FS (Resolver); on a target that cannot, a path through a link is refused.
func (rt Runtime) confine(host string) error {
	fsys := rt.FS
	if fsys == nil {
		fsys = bareHost
	}
	for dir := filepath.Dir(host); len(dir) > len(rt.Root); dir = filepath.Dir(dir) {
		info, err := fsys.Lstat(dir)
		if errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ENOTDIR) {
			continue
		}
		if err != nil {
			return err
		}
		if info.Mode&fs.ModeSymlink == 0 {
			continue
		}
		resolver, ok := fsys.(Resolver)
		if !ok {
			return fmt.Errorf("%s: %s is a symbolic link and %w: point the path elsewhere, or leave the root unset", host, dir, errNoResolver)
		}
		real, err := resolver.RealPath(dir)
		if errors.Is(err, fs.ErrNotExist) {
			continue // dangling: nothing can be written through it
		}
		if err != nil {
			return err
		}
		root, err := realRoot(resolver, rt.Root)
		if err != nil {
			return err
		}
		if real != root && !strings.HasPrefix(real, root+string(filepath.Separator)) {
			return fmt.Errorf("%s %w %s (%s points to %s): remove the link or point it inside the root", host, ErrOutsideRoot, rt.Root, dir, real)
		}
	}
	return nil
}

// realRoots caches each root's path on the agent's host with its symbolic
// links resolved; another target's is resolved each time it is needed
// (only when a parent below the root is a link).
var realRoots sync.Map

func realRoot(resolver Resolver, root string) (string, error) {
	_, host := resolver.(*HostFS)
	if host {
		if r, ok := realRoots.Load(root); ok {
			return r.(string), nil
		}
	}
	r, err := resolver.RealPath(root)
	if err != nil {
		return "", fmt.Errorf("the agent's root %s: %w", root, err)
	}
	if host {
		realRoots.Store(root, r)
	}
	return r, nil
}

// Lstat maps a resource path to its host path (HostPath) and describes what
// is there without following a final symbolic link; exists is false when
// nothing is.
func (rt Runtime) Lstat(p string) (host string, info Info, exists bool, err error) {
	host, err = rt.HostPath(p)
	if err != nil {
		return "", Info{}, false, err
	}
	info, err = rt.fsys().Lstat(host)
	if errors.Is(err, fs.ErrNotExist) {
		return host, Info{}, false, nil
	}
	return host, info, err == nil, err
}

// WriteFile replaces the file at host path p with data atomically
// (FileWriter.WriteFile): on the agent's host, a temporary file beside it,
// made durable (Sync), renamed over it. The new file has mode perm and is
// owned by the target's user (root on a host). Handlers that render a
// whole configuration file (cron, repository) use it.
func (rt Runtime) WriteFile(p string, data []byte, perm fs.FileMode) error {
	err := rt.fsys().WriteFile(p, bytes.NewReader(data), perm, -1, -1)
	if errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("directory %s does not exist: install what provides it, or create it with a directory resource", filepath.Dir(p))
	}
	return err
}

// ReadFile returns the content of the file at resource path p below the
// root, and whether there is one. A directory or other non-file at p is an
// error naming it.
func (rt Runtime) ReadFile(p string) (host string, data []byte, exists bool, err error) {
	host, info, exists, err := rt.Lstat(p)
	if err != nil || !exists {
		return host, nil, false, err
	}
	if !info.Mode.IsRegular() {
		return host, nil, false, fmt.Errorf("%s is not a regular file (%s): remove it", host, info.Mode.Type())
	}
	data, err = rt.fsys().ReadFile(host)
	return host, data, err == nil, err
}
