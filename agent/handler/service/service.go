// Package service is the handler for `service` resources: a system service
// running or stopped, started at boot or not, and restarted (or reloaded)
// when a resource it subscribes to changed. The init system is the host's:
// systemd (systemctl), OpenRC (rc-service, rc-update) or SysV init scripts
// (service, update-rc.d), from the host's facts or, without them, from what
// runs (/run/systemd/system, /run/openrc).
//
// A service "exists" when the init system knows it. Purging a service
// stops and disables it: the init script or unit belongs to its package.
package service

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync"

	"github.com/tetherhq/tether/agent/handler"
	"github.com/tetherhq/tether/model"
)

// Kind is the resource type this package handles.
const Kind = "service"

// Handler enforces service resources.
type Handler struct {
	handler.Declared
	rt handler.Runtime
	// Manager names the init system the handler drives: the runtime's,
	// else the one running on this host (DetectManager, looked at once).
	Manager func() string
}

var (
	_ handler.Handler   = (*Handler)(nil)
	_ handler.Refresher = (*Handler)(nil)
)

// New returns the service handler for rt.
func New(rt handler.Runtime) *Handler {
	return &Handler{Declared: handler.Declare(Kind), rt: rt, Manager: sync.OnceValue(func() string {
		if rt.ServiceManager != "" {
			return rt.ServiceManager
		}
		return DetectManager()
	})}
}

// manager is one init system.
type manager interface {
	exists(ctx context.Context, name string) (bool, error)
	running(ctx context.Context, name string) (bool, error)
	enabled(ctx context.Context, name string) (bool, error)
	setEnabled(ctx context.Context, name string, on bool) error
	// do runs an action: start, stop, restart, reload.
	do(ctx context.Context, name, action string) error
}

// DetectManager names the init system running on this host: systemd when
// /run/systemd/system exists (systemd's own test), OpenRC when /run/openrc
// does, SysV init scripts otherwise.
func DetectManager() string {
	if st, err := os.Stat("/run/systemd/system"); err == nil && st.IsDir() {
		return "systemd"
	}
	if st, err := os.Stat("/run/openrc"); err == nil && st.IsDir() {
		return "openrc"
	}
	return "sysv"
}

func (h *Handler) manager() (manager, error) {
	switch m := h.Manager(); m {
	case "systemd":
		return systemd{h.rt}, nil
	case "openrc":
		return openrc{h.rt}, nil
	case "sysv":
		return sysv{h.rt}, nil
	default:
		return nil, fmt.Errorf("%w: service manager %q is not supported (want systemd, openrc or sysv)", handler.ErrNoProvider, m)
	}
}

// unitName is the name the init system knows: systemd takes the name as
// given; init scripts have no ".service" suffix.
func (h *Handler) unitName(res *model.Resource) string {
	if h.Manager() == "systemd" {
		return res.ID.Value
	}
	return strings.TrimSuffix(res.ID.Value, ".service")
}

// Read implements handler.Handler.
func (h *Handler) Read(ctx context.Context, res *model.Resource) (model.Attributes, bool, error) {
	m, err := h.manager()
	if err != nil {
		return nil, false, err
	}
	name := h.unitName(res)
	ok, err := m.exists(ctx, name)
	if err != nil || !ok {
		return nil, false, err
	}
	running, err := m.running(ctx, name)
	if err != nil {
		return nil, false, err
	}
	enabled, err := m.enabled(ctx, name)
	if err != nil {
		return nil, false, err
	}
	cur := model.Attributes{"name": res.ID.Value}
	if res.Purged {
		// Purged: stopped and disabled. Anything else is still there.
		return cur, running || enabled, nil
	}
	if _, ok := res.Attributes["state"]; ok {
		cur["state"] = map[bool]string{true: "running", false: "stopped"}[running]
	}
	if _, ok := res.Attributes["enabled"]; ok {
		cur["enabled"] = enabled
	}
	if v, ok := res.Attributes["reload"]; ok {
		cur["reload"] = v // how to refresh, not a state of the host
	}
	return cur, true, nil
}

// Apply implements handler.Handler.
func (h *Handler) Apply(ctx context.Context, res *model.Resource, _ model.Attributes, changes handler.Changes) error {
	m, err := h.manager()
	if err != nil {
		return err
	}
	name := h.unitName(res)
	if changes.Removed() {
		if running, err := m.running(ctx, name); err != nil {
			return err
		} else if running {
			if err := m.do(ctx, name, "stop"); err != nil {
				return err
			}
		}
		if enabled, err := m.enabled(ctx, name); err != nil {
			return err
		} else if enabled {
			return m.setEnabled(ctx, name, false)
		}
		return nil
	}
	if changes.Created() {
		// Read found no such service; maybe its package came since.
		ok, err := m.exists(ctx, name)
		if err != nil {
			return err
		}
		if !ok {
			return fmt.Errorf("the %s init system has no service %q: install the package that provides it and require that package", h.Manager(), name)
		}
	}
	if ch, ok := changes["enabled"]; ok {
		if err := m.setEnabled(ctx, name, ch.Desired == true); err != nil {
			return err
		}
	}
	if ch, ok := changes["state"]; ok {
		action := "stop"
		if ch.Desired == "running" {
			action = "start"
		}
		// A service found absent and now present reports no state yet.
		if running, err := m.running(ctx, name); err != nil {
			return err
		} else if running == (action == "start") {
			return nil
		}
		return m.do(ctx, name, action)
	}
	return nil
}

// Refresh implements handler.Refresher: a running service restarts (or
// reloads, by its reload attribute) after a subscribed resource changed,
// unless this deploy just started it or it must be stopped.
func (h *Handler) Refresh(ctx context.Context, res *model.Resource, applied handler.Changes) (string, error) {
	if state, _ := res.Attributes.String("state"); state == "stopped" {
		return "", nil
	}
	if ch, ok := applied["state"]; ok && ch.Desired == "running" {
		return "", nil
	}
	m, err := h.manager()
	if err != nil {
		return "", err
	}
	name := h.unitName(res)
	running, err := m.running(ctx, name)
	if err != nil || !running {
		return "", err
	}
	action := "restart"
	if how, _ := res.Attributes.String("reload"); how == "reload" {
		action = "reload"
	}
	if err := m.do(ctx, name, action); err != nil {
		return "", err
	}
	return action + "ed", nil
}

// WatchPaths implements handler.Watcher: a service's state shows in no
// file, so it is polled.
func (h *Handler) WatchPaths(*model.Resource) ([]string, bool) { return nil, true }
