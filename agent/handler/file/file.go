// Package file is the handler for `file` resources: a regular file with a
// given content, mode, owner and group. Content is replaced atomically: the
// new file is written next to the old one, made durable, and renamed over it,
// so a reader or a crash sees the old content or the new, never a mix.
package file

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"strings"

	"github.com/tetherhq/tether/agent/handler"
	"github.com/tetherhq/tether/model"
)

// Kind is the resource type this package handles.
const Kind = "file"

// inlineLimit bounds how much of a differing file Read returns as its
// current content (shown in dry runs); larger files are summarised.
const inlineLimit = 64 << 10

// defaultMode is the mode of a new file whose mode is unmanaged.
const defaultMode = 0o644

// Handler enforces file resources.
type Handler struct {
	handler.Declared
	rt handler.Runtime
}

var _ handler.Handler = (*Handler)(nil)

// New returns a file handler working below rt.Root.
func New(rt handler.Runtime) *Handler {
	return &Handler{Declared: handler.Declare(Kind), rt: rt.WithFS()}
}

// Read implements handler.Handler.
func (h *Handler) Read(_ context.Context, res *model.Resource) (model.Attributes, bool, error) {
	p, info, exists, err := h.rt.Lstat(res.ID.Value)
	if err != nil || !exists {
		return nil, false, err
	}
	current := model.Attributes{"path": res.ID.Value}
	if info.IsDir() {
		return nil, false, fmt.Errorf("%s is a directory, not a file: remove it or manage it as a directory resource", p)
	}
	if !info.Mode.IsRegular() {
		// A symlink, fifo or device in the way: report every managed
		// attribute as different so Apply replaces it with a regular file.
		current["content"] = fmt.Sprintf("(%s, not a regular file)", info.Mode.Type())
		return current, true, nil
	}
	if want, ok := res.Attributes.String("content"); ok {
		if current["content"], err = readContent(h.rt.FS, p, info.Size, want); err != nil {
			return nil, false, err
		}
	}
	handler.ReadMeta(info, res.Attributes, current)
	return current, true, nil
}

// readContent returns want itself when the file holds exactly want (no copy),
// the file's content when it differs and is small, a summary otherwise.
func readContent(fsys handler.FileReader, p string, size int64, want string) (string, error) {
	if size == int64(len(want)) {
		same, err := fsys.SameContent(p, want)
		if err != nil || same {
			return want, err
		}
	}
	if size > inlineLimit {
		return fmt.Sprintf("(%d bytes, differs)", size), nil
	}
	b, err := fsys.ReadFile(p)
	if err != nil {
		return "", err
	}
	return string(b), nil
}

// Apply implements handler.Handler.
func (h *Handler) Apply(_ context.Context, res *model.Resource, _ model.Attributes, changes handler.Changes) error {
	p, info, exists, err := h.rt.Lstat(res.ID.Value)
	if err != nil {
		return err
	}
	if changes.Removed() {
		if err := h.rt.FS.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
		return nil
	}
	if exists && info.IsDir() {
		return fmt.Errorf("%s is a directory, not a file: remove it or manage it as a directory resource", p)
	}
	old := exists && info.Mode.IsRegular()
	if !old || changes.Has("content") {
		return h.replace(p, res, info, old)
	}
	// Only metadata differs: change it in place.
	return h.rt.ApplyMeta(p, res.Attributes, changes)
}

// replace writes the desired file next to p and renames it over p
// (FileWriter.WriteFile). Metadata that the model does not manage is kept from
// the regular file it replaces (old: there is one, described by info).
func (h *Handler) replace(p string, res *model.Resource, info handler.Info, old bool) error {
	uid, gid, mode, err := meta(res, info, old)
	if err != nil {
		return err
	}
	content, _ := res.Attributes.String("content")
	err = h.rt.FS.WriteFile(p, strings.NewReader(content), mode, uid, gid)
	if errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("parent directory %s does not exist: create it with a directory resource", filepath.Dir(p))
	}
	return err
}

// meta is the new file's desired metadata, or the replaced file's where
// unmanaged (old: there is a regular file, described by info), or the
// defaults for a new file (-1: the agent's user or group).
func meta(res *model.Resource, info handler.Info, old bool) (uid, gid int, mode fs.FileMode, err error) {
	uid, gid, err = handler.Ownership(res.Attributes)
	if err != nil {
		return 0, 0, 0, err
	}
	mode = handler.ModeOrDefault(res.Attributes, defaultMode)
	if old {
		if _, managed := res.Attributes["owner"]; !managed {
			uid = int(info.UID)
		}
		if _, managed := res.Attributes["group"]; !managed {
			gid = int(info.GID)
		}
		if _, managed := res.Attributes["mode"]; !managed {
			mode = info.Mode & (fs.ModePerm | fs.ModeSetuid | fs.ModeSetgid | fs.ModeSticky)
		}
	}
	return uid, gid, mode, nil
}

// WatchPaths implements handler.Watcher.
func (h *Handler) WatchPaths(res *model.Resource) ([]string, bool) {
	return h.rt.WatchPath(res.ID.Value), false
}
