// Package pkg is the handler for `package` resources: a package installed
// (at a version, at the latest version, or at any) or purged, through the
// host's package manager: apt/dpkg, dnf/rpm or apk. The provider is the
// resource's provider attribute, else the host's (its facts), else the
// first of apt, dnf, apk whose tool is installed. Reads ask the package
// database (dpkg-query, rpm, apk info) and change nothing.
package pkg

import (
	"context"
	"fmt"

	"github.com/tetherhq/tether/agent/handler"
	"github.com/tetherhq/tether/model"
)

// Kind is the resource type this package handles.
const Kind = "package"

// Version values with a meaning of their own.
const (
	// Latest upgrades the package to the candidate on every deploy.
	Latest = "latest"
	// Installed accepts any installed version (as an unset version does).
	Installed = "installed"
)

// Handler enforces package resources.
type Handler struct {
	handler.Declared
	rt   handler.Runtime
	host func() string // the host's package manager
}

var _ handler.Handler = (*Handler)(nil)

// New returns the package handler for rt.
func New(rt handler.Runtime) *Handler {
	return &Handler{Declared: handler.Declare(Kind), rt: rt, host: handler.HostProvider(rt.PackageManager, providers)}
}

// manager is one package manager.
type manager interface {
	// installed returns the installed version of name, if any.
	installed(ctx context.Context, name string) (version string, ok bool, err error)
	// candidate returns the version an upgrade would install ("" if none).
	candidate(ctx context.Context, name string) (string, error)
	// install installs name at version ("" for any, Latest to upgrade).
	install(ctx context.Context, name, version string, present bool) error
	// remove removes name and its configuration.
	remove(ctx context.Context, name string) error
}

var providers = [][2]string{{"apt", "dpkg-query"}, {"dnf", "rpm"}, {"apk", "apk"}}

func (h *Handler) manager(res *model.Resource) (string, manager, error) {
	want, _ := res.Attributes.String("provider")
	p, err := handler.PickProvider(want, h.host(), providers)
	if err != nil {
		return "", nil, err
	}
	switch p {
	case "dnf":
		return p, dnf{h.rt}, nil
	case "apk":
		return p, apk{h.rt}, nil
	default:
		return p, apt{h.rt}, nil
	}
}

// Read implements handler.Handler.
func (h *Handler) Read(ctx context.Context, res *model.Resource) (model.Attributes, bool, error) {
	provider, m, err := h.manager(res)
	if err != nil {
		return nil, false, err
	}
	name := res.ID.Value
	have, ok, err := m.installed(ctx, name)
	if err != nil || !ok {
		return nil, false, err
	}
	cur := model.Attributes{"name": name}
	if _, ok := res.Attributes["provider"]; ok {
		cur["provider"] = provider
	}
	switch want, _ := res.Attributes.String("version"); want {
	case "":
	case Installed:
		cur["version"] = Installed
	case Latest:
		cand, err := m.candidate(ctx, name)
		if err != nil {
			return nil, false, err
		}
		cur["version"] = have
		if cand == "" || cand == have {
			cur["version"] = Latest
		}
	default:
		cur["version"] = have
	}
	return cur, true, nil
}

// Apply implements handler.Handler.
func (h *Handler) Apply(ctx context.Context, res *model.Resource, _ model.Attributes, changes handler.Changes) error {
	_, m, err := h.manager(res)
	if err != nil {
		return err
	}
	name := res.ID.Value
	if changes.Removed() {
		return m.remove(ctx, name)
	}
	version, _ := res.Attributes.String("version")
	if version == Installed {
		version = ""
	}
	if err := m.install(ctx, name, version, !changes.Created()); err != nil {
		return fmt.Errorf("install %s: %w", name, err)
	}
	return nil
}

// WatchPaths implements handler.Watcher: the package database, which every
// install and removal rewrites (dpkg's status file, rpm's database, apk's
// installed list).
func (h *Handler) WatchPaths(res *model.Resource) ([]string, bool) {
	provider, _, err := h.manager(res)
	if err != nil {
		return nil, true
	}
	db := map[string]string{"apt": "/var/lib/dpkg/status", "dnf": "/var/lib/rpm/rpmdb.sqlite", "apk": "/lib/apk/db/installed"}[provider]
	return []string{db}, false
}
