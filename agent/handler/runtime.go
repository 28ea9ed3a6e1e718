package handler

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

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
	// p is clean and absolute, so Join cannot climb out of Root.
	return filepath.Join(rt.Root, p), nil
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
