package model

import "time"

// Change is one attribute's current and desired value.
type Change struct {
	Current any `json:"current"`
	Desired any `json:"desired"`
}

// Changes maps attribute names to their change. Existence is reported in the
// pseudo-attribute AttrPresent.
type Changes map[string]Change

// Created reports whether the changes create the thing.
func (c Changes) Created() bool {
	ch, ok := c[AttrPresent]
	return ok && ch.Desired == true
}

// Removed reports whether the changes remove the thing.
func (c Changes) Removed() bool {
	ch, ok := c[AttrPresent]
	return ok && ch.Desired == false
}

// Has reports whether attribute name changes.
func (c Changes) Has(name string) bool {
	_, ok := c[name]
	return ok
}

// Redact returns the changes with the values of res's sensitive attributes
// hidden.
func (c Changes) Redact(res *Resource) Changes {
	if len(res.Sensitive) == 0 || len(c) == 0 {
		return c
	}
	out := make(Changes, len(c))
	for k, ch := range c {
		if res.IsSensitive(k) {
			ch = Change{Current: RedactedValue, Desired: RedactedValue}
		}
		out[k] = ch
	}
	return out
}

// Result is the outcome of one resource in one deploy or dry run: what the
// engine reports, the bus carries and the store records.
type Result struct {
	ID    ID            `json:"id"`
	State ResourceState `json:"state"`
	// Hash is the hash of the desired state the result is about (zero:
	// not said). A result of an older version then also stands for a newer
	// version whose desired state of the resource is the same.
	Hash Hash `json:"hash,omitzero"`
	// Changes are the differences found, applied unless DryRun. Sensitive
	// values are redacted.
	Changes  Changes       `json:"changes,omitempty"`
	DryRun   bool          `json:"dry_run,omitempty"`
	Duration time.Duration `json:"duration_ns"`
	Message  string        `json:"message,omitempty"`
	// Refreshed is set when the resource was refreshed (a service
	// restarted, an exec run again) because a resource it subscribes to
	// changed; Message says what was done and why.
	Refreshed bool `json:"refreshed,omitempty"`
}

// Changed reports whether the run changed the host for this resource.
func (r Result) Changed() bool {
	return !r.DryRun && r.State == StateDeployed && len(r.Changes) > 0
}

// Dry-run outcomes: what a deploy would do to a resource a dry run looked
// at.
const (
	WouldCreate = "would create"
	WouldRemove = "would remove"
	WouldChange = "would change"
	Unchanged   = "unchanged"
)

// DryRunOutcome says what a deploy would do, for a dry run's result of
// state with changes: a dry run deploys nothing, so its state "deployed"
// only means the resource was read and compared. Another state (failed,
// skipped, unavailable…) is said as it is.
func DryRunOutcome(state ResourceState, c Changes) string {
	switch {
	case state != StateDeployed:
		return string(state)
	case c.Created():
		return WouldCreate
	case c.Removed():
		return WouldRemove
	case len(c) > 0:
		return WouldChange
	}
	return Unchanged
}
