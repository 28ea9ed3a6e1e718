// Package symlink is the handler for `symlink` resources: a symbolic link
// at path pointing at target, with an optional owner and group (of the link
// itself). A link is replaced atomically (a new link renamed over the old
// one); anything at path that is not a symbolic link is left alone and
// reported. Purging removes the link, never what it points at.
package symlink

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"

	"github.com/tetherhq/tether/agent/handler"
	"github.com/tetherhq/tether/model"
)

// Kind is the resource type this package handles.
const Kind = "symlink"

// Handler enforces symlink resources.
type Handler struct {
	handler.Declared
	rt handler.Runtime
}

var _ handler.Handler = (*Handler)(nil)

// New returns a symlink handler working below rt.Root.
func New(rt handler.Runtime) *Handler {
	return &Handler{Declared: handler.Declare(Kind), rt: rt.WithFS()}
}

// Read implements handler.Handler.
func (h *Handler) Read(_ context.Context, res *model.Resource) (model.Attributes, bool, error) {
	p, info, exists, err := h.rt.Lstat(res.ID.Value)
	if err != nil || !exists {
		return nil, false, err
	}
	if info.Mode.Type() != fs.ModeSymlink {
		return nil, false, notLink(p, info)
	}
	target, err := h.rt.FS.Readlink(p)
	if err != nil {
		return nil, false, err
	}
	current := model.Attributes{"path": res.ID.Value, "target": target}
	handler.ReadMeta(info, res.Attributes, current)
	return current, true, nil
}

// Apply implements handler.Handler.
func (h *Handler) Apply(_ context.Context, res *model.Resource, _ model.Attributes, changes handler.Changes) error {
	p, info, exists, err := h.rt.Lstat(res.ID.Value)
	if err != nil {
		return err
	}
	if exists && info.Mode.Type() != fs.ModeSymlink {
		return notLink(p, info)
	}
	if changes.Removed() {
		if err := h.rt.FS.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
		return nil
	}
	if changes.Created() || changes.Has("target") {
		target, _ := res.Attributes.String("target")
		// Replaced atomically (FileWriter.Symlink): readers see the old
		// target or the new one, never no link.
		if err := h.rt.FS.Symlink(target, p); err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return fmt.Errorf("parent directory %s does not exist: create it with a directory resource", filepath.Dir(p))
			}
			return err
		}
	}
	if changes.Has("owner") || changes.Has("group") {
		uid, gid, err := handler.Ownership(res.Attributes)
		if err != nil {
			return err
		}
		if err := h.rt.FS.Lchown(p, uid, gid); err != nil {
			return err
		}
	}
	return nil
}

func notLink(p string, info handler.Info) error {
	return fmt.Errorf("%s exists and is not a symbolic link (%s): remove it, or manage it as what it is", p, info.Mode.Type())
}

// WatchPaths implements handler.Watcher.
func (h *Handler) WatchPaths(res *model.Resource) ([]string, bool) {
	return h.rt.WatchPath(res.ID.Value), false
}
