// Package directory is the handler for `directory` resources: a directory with
// a given mode, owner and group. Its parent must exist (manage it too, the
// compiler orders parents first). Purging removes an empty directory only,
// unless the resource asks for everything in it to go too (recurse).
package directory

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"syscall"

	"github.com/tetherhq/tether/agent/handler"
	"github.com/tetherhq/tether/model"
)

// Kind is the resource type this package handles.
const Kind = "directory"

// defaultMode is the mode of a new directory whose mode is unmanaged.
const defaultMode = 0o755

// Handler enforces directory resources.
type Handler struct {
	handler.Declared
	rt handler.Runtime
}

var _ handler.Handler = (*Handler)(nil)

// New returns a directory handler working below rt.Root.
func New(rt handler.Runtime) *Handler {
	return &Handler{Declared: handler.Declare(Kind), rt: rt.WithFS()}
}

// Read implements handler.Handler.
func (h *Handler) Read(_ context.Context, res *model.Resource) (model.Attributes, bool, error) {
	p, info, exists, err := h.rt.Lstat(res.ID.Value)
	if err != nil || !exists {
		return nil, false, err
	}
	if !info.IsDir() {
		return nil, false, notDir(p, info)
	}
	current := model.Attributes{"path": res.ID.Value}
	if v, ok := res.Attributes["recurse"]; ok {
		current["recurse"] = v // how to purge, not a state of the host
	}
	handler.ReadMeta(info, res.Attributes, current)
	return current, true, nil
}

// Apply implements handler.Handler.
func (h *Handler) Apply(_ context.Context, res *model.Resource, _ model.Attributes, changes handler.Changes) error {
	p, err := h.rt.HostPath(res.ID.Value)
	if err != nil {
		return err
	}
	if changes.Removed() {
		if recurse, _ := res.Attributes.Bool("recurse"); recurse {
			// The path is never / (model.CheckAbsPath), so never the root.
			// RemoveAll removes links inside, never what they point to.
			return h.rt.FS.RemoveAll(p)
		}
		err := h.rt.FS.Remove(p)
		if errors.Is(err, syscall.ENOTEMPTY) || errors.Is(err, syscall.EEXIST) {
			return fmt.Errorf("remove %s: the directory is not empty: purge what it holds first, or set recurse = true to remove it with everything in it", p)
		}
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
		return nil
	}
	if changes.Created() {
		if err := h.rt.FS.Mkdir(p, handler.ModeOrDefault(res.Attributes, defaultMode)); err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return fmt.Errorf("parent directory %s does not exist: create it with a directory resource", filepath.Dir(p))
			}
			return err
		}
		// Mkdir's mode is filtered by the umask; a managed mode is in
		// changes and ApplyMeta sets it exactly below.
	}
	return h.rt.ApplyMeta(p, res.Attributes, changes)
}

func notDir(p string, info handler.Info) error {
	return fmt.Errorf("%s exists and is not a directory (%s): remove it or manage it as a file", p, info.Mode.Type())
}

// WatchPaths implements handler.Watcher.
func (h *Handler) WatchPaths(res *model.Resource) ([]string, bool) {
	return h.rt.WatchPath(res.ID.Value), false
}
