// Package handler is the contract between the agent's engine and the code that
// enforces one kind of resource (files, directories, packages, …).
//
// A handler reads the current state of a resource, the engine computes the
// changes between current and desired attributes, and the handler applies
// them. A dry run is therefore a read and a diff, and a second apply reports
// no change by construction. Handlers are registered in an explicit Registry;
// optional capabilities are small interfaces found by type assertion.
//
// A handler acts on its target (the agent's own host, or a host reached
// otherwise) only through its Runtime: files through the Runtime's FS,
// commands through its Runner.
package handler

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"

	"github.com/tetherhq/tether/model"
)

// Handler enforces one kind of resource.
type Handler interface {
	// Kind is the resource type this handler enforces ("file").
	Kind() string
	// Validate rejects a resource the handler cannot enforce, with an error
	// wrapping ErrInvalid that names the attribute at fault.
	Validate(res *model.Resource) error
	// Read returns the current attributes of the thing res describes, in the
	// same vocabulary as res.Attributes (a mode "0644", an owner name when the
	// desired owner is a name), and whether it exists. It changes nothing.
	Read(ctx context.Context, res *model.Resource) (current model.Attributes, exists bool, err error)
	// Apply makes the thing match res. current is what Read returned and
	// changes is never empty; changes[model.AttrPresent] says whether the
	// thing must be created (false → true) or removed (true → false).
	Apply(ctx context.Context, res *model.Resource, current model.Attributes, changes Changes) error
}

// ErrInvalid is wrapped by every Validate error.
var ErrInvalid = errors.New("invalid resource")

// Change and Changes are the model's: the engine computes them, the bus
// carries them in results, the store records them.
type (
	Change  = model.Change
	Changes = model.Changes
)

// ComputeChanges compares the desired resource with what Read returned:
// existence first, then every desired attribute but the identity one.
func ComputeChanges(res *model.Resource, current model.Attributes, exists bool) Changes {
	if res.Purged {
		if exists {
			return Changes{model.AttrPresent: {Current: true, Desired: false}}
		}
		return nil
	}
	var out Changes
	if !exists {
		out = Changes{model.AttrPresent: {Current: false, Desired: true}}
		current = nil
	}
	for k, want := range res.Attributes {
		if k == res.ID.Key {
			continue
		}
		have, ok := current[k]
		if ok && model.Equal(have, want) {
			continue
		}
		if out == nil {
			out = Changes{}
		}
		out[k] = Change{Current: have, Desired: want}
	}
	return out
}

// ValidateWith is the common part of Validate: the resource is well formed,
// of the handler's kind, and passes the catalogue's check of that kind
// (model.KindSpec.CheckResource: its attributes, what is required, and that
// a purged resource carries only its identity), the same check the compiler
// and the server apply.
func ValidateWith(spec *model.KindSpec, res *model.Resource) error {
	if res.ID.Type != spec.Kind {
		return fmt.Errorf("%w %s: handler for %q got type %q", ErrInvalid, res.ID, spec.Kind, res.ID.Type)
	}
	if err := res.Validate(); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	if err := spec.CheckResource(res); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	return nil
}

// Registry maps resource kinds to their handler. It is filled explicitly (see
// package builtin), never by init side effects.
type Registry struct {
	mu       sync.RWMutex
	handlers map[string]Handler
}

// NewRegistry returns an empty registry.
func NewRegistry() *Registry {
	return &Registry{handlers: map[string]Handler{}}
}

// ErrDuplicateKind is returned when two handlers claim one kind.
var ErrDuplicateKind = errors.New("kind already has a handler")

// Register adds h for h.Kind().
func (r *Registry) Register(h Handler) error {
	if err := model.ValidateType(h.Kind()); err != nil {
		return fmt.Errorf("register handler: %w", err)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, dup := r.handlers[h.Kind()]; dup {
		return fmt.Errorf("register handler %q: %w", h.Kind(), ErrDuplicateKind)
	}
	r.handlers[h.Kind()] = h
	return nil
}

// Lookup returns the handler for kind.
func (r *Registry) Lookup(kind string) (Handler, bool) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	h, ok := r.handlers[kind]
	return h, ok
}

// Kinds lists the registered kinds, sorted; agents announce them in hello.
func (r *Registry) Kinds() []string {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return slices.Sorted(maps.Keys(r.handlers))
}

// Declared gives a handler Kind and Validate from its kind's declaration in
// the model catalogue (model.Kinds). Embed it; a handler with checks of its
// own overrides Validate and calls Declared.Validate first.
type Declared struct {
	spec model.KindSpec
}

// Declare returns the Declared of a built-in kind. It panics for a kind the
// catalogue does not declare: that is a programming error, caught by the
// handler's first test.
func Declare(kind string) Declared {
	spec, ok := model.LookupKind(kind)
	if !ok {
		panic(fmt.Sprintf("handler.Declare: kind %q is not in the model catalogue", kind))
	}
	return Declared{spec: spec}
}

// Kind implements Handler.
func (d Declared) Kind() string { return d.spec.Kind }

// Validate implements Handler: ValidateWith the declaration.
func (d Declared) Validate(res *model.Resource) error { return ValidateWith(&d.spec, res) }

// Refresher is implemented by handlers whose resources react when a
// resource they subscribe to changed: a service restarts or reloads, an
// exec runs again. The engine calls Refresh at most once per deploy, after
// the resource's own apply, when at least one subscribed resource changed in
// that deploy. applied is what that apply changed (nil: nothing), so a
// handler can tell that the refresh is moot (a service just started). It
// returns what it did ("restarted"), or "" when it did nothing.
type Refresher interface {
	Refresh(ctx context.Context, res *model.Resource, applied Changes) (did string, err error)
}

// Watcher is implemented by handlers whose resources can be watched for
// drift between deploys. WatchPaths returns the host paths whose change may
// mean the resource drifted (the agent watches their directories with
// inotify and verifies the resource on every event there), and poll when
// the resource's state shows in no file (a running service) and must be
// verified on a timer instead. Resources of handlers without it are
// verified on the repair interval only.
type Watcher interface {
	WatchPaths(res *model.Resource) (paths []string, poll bool)
}

// WatchPath is WatchPaths for the path-based kinds: the resource's own path
// below the root. A target whose paths are not the agent host's own (OnHost)
// cannot be watched: nothing, and its resources are verified on the repair
// interval.
func (rt Runtime) WatchPath(p string) []string {
	if !rt.onHost() {
		return nil
	}
	host, err := rt.HostPath(p)
	if err != nil {
		return nil
	}
	return []string{host}
}

// onHost reports whether the runtime's FS is the agent host's own.
func (rt Runtime) onHost() bool {
	if rt.FS == nil {
		return true // HostFS
	}
	h, ok := rt.FS.(OnHost)
	return ok && h.OnHost()
}
