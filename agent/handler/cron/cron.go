// Package cron is the handler for `cron` resources: one scheduled command
// in its own file under /etc/cron.d (below the agent's root), which the
// cron daemon reads by itself. The file is rendered whole from the
// resource and replaced atomically; reading parses it back, so a dry run
// and a drift report name the attribute that differs.
package cron

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"slices"
	"strings"

	"github.com/tetherhq/tether/agent/handler"
	"github.com/tetherhq/tether/model"
)

// Kind is the resource type this package handles.
const Kind = "cron"

// Dir is where entries are written (below the runtime's root).
const Dir = "/etc/cron.d"

// Handler enforces cron resources.
type Handler struct {
	handler.Declared
	rt handler.Runtime
}

var _ handler.Handler = (*Handler)(nil)

// New returns the cron handler for rt.
func New(rt handler.Runtime) *Handler {
	return &Handler{Declared: handler.Declare(Kind), rt: rt.WithFS()}
}

// Path is the resource path of an entry's file.
func Path(name string) string { return Dir + "/" + name }

// Render is the content of an entry's file.
func Render(res *model.Resource) []byte {
	a := res.Attributes
	var b strings.Builder
	fmt.Fprintf(&b, "# Managed by Tether (%s): changes made here are undone.\n", res.ID)
	env, _ := a.StringMap("env")
	for _, k := range slices.Sorted(maps.Keys(env)) {
		fmt.Fprintf(&b, "%s=%s\n", k, env[k])
	}
	user, _ := a.String("user")
	if user == "" {
		user = "root"
	}
	schedule, _ := a.String("schedule")
	command, _ := a.String("command")
	fmt.Fprintf(&b, "%s %s %s\n", strings.Join(strings.Fields(schedule), " "), user, command)
	return []byte(b.String())
}

// Read implements handler.Handler.
func (h *Handler) Read(_ context.Context, res *model.Resource) (model.Attributes, bool, error) {
	_, data, exists, err := h.rt.ReadFile(Path(res.ID.Value))
	if err != nil || !exists {
		return nil, false, err
	}
	if res.Purged {
		return model.Attributes{"name": res.ID.Value}, true, nil
	}
	if string(data) == string(Render(res)) {
		return maps.Clone(res.Attributes), true, nil
	}
	return parse(data, res), true, nil
}

// parse reads an entry file back into attributes, for the ones the
// resource sets. A file that differs from the rendered one in what the
// attributes do not describe (comments, a second entry) reports its command
// as differing, so the next apply rewrites it.
func parse(data []byte, res *model.Resource) model.Attributes {
	cur := model.Attributes{"name": res.ID.Value}
	env := map[string]any{}
	entries := 0
	for _, line := range strings.Split(string(data), "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		f := strings.Fields(line)
		if k, v, ok := strings.Cut(line, "="); ok && !strings.ContainsAny(k, " \t") {
			env[k] = v
			continue
		}
		n := 5
		if strings.HasPrefix(f[0], "@") {
			n = 1
		}
		if len(f) < n+2 {
			continue
		}
		entries++
		if entries > 1 {
			continue
		}
		cur["schedule"] = strings.Join(f[:n], " ")
		cur["user"] = f[n]
		cur["command"] = strings.Join(f[n+1:], " ")
	}
	if _, ok := res.Attributes["env"]; ok {
		cur["env"] = env
	}
	if _, ok := res.Attributes["user"]; !ok && cur["user"] == "root" {
		delete(cur, "user")
	}
	if entries != 1 || handler.ComputeChanges(res, cur, true) == nil {
		// parse is only called on a file that differs from Render's.
		cur["command"] = fmt.Sprintf("(%s has %d entries, other lines or comments)", Path(res.ID.Value), entries)
	}
	return cur
}

// Apply implements handler.Handler.
func (h *Handler) Apply(_ context.Context, res *model.Resource, _ model.Attributes, changes handler.Changes) error {
	p, err := h.rt.HostPath(Path(res.ID.Value))
	if err != nil {
		return err
	}
	if changes.Removed() {
		if err := h.rt.FS.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
		return nil
	}
	// cron ignores files that are group- or world-writable.
	return h.rt.WriteFile(p, Render(res), 0o644)
}

// WatchPaths implements handler.Watcher.
func (h *Handler) WatchPaths(res *model.Resource) ([]string, bool) {
	return h.rt.WatchPath(Path(res.ID.Value)), false
}
