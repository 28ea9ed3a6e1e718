package model

import "fmt"

// ResourceState is where a resource of the latest released version stands.
type ResourceState string

// Resource states.
const (
	// StateAvailable: new intent, not deployed yet.
	StateAvailable ResourceState = "available"
	// StateDeploying: an agent is working on it.
	StateDeploying ResourceState = "deploying"
	// StateDeployed: the host matches the intent.
	StateDeployed ResourceState = "deployed"
	// StateFailed: the handler returned an error.
	StateFailed ResourceState = "failed"
	// StateSkipped: a requirement failed or was skipped.
	StateSkipped ResourceState = "skipped"
	// StateUndefined: the resource depends on a value not known yet.
	StateUndefined ResourceState = "undefined"
	// StateSkippedForUndefined: a requirement is undefined.
	StateSkippedForUndefined ResourceState = "skipped_for_undefined"
	// StateUnavailable: no handler for the resource's type on that agent.
	StateUnavailable ResourceState = "unavailable"
	// StateCancelled: the deploy was cancelled before the resource ran.
	StateCancelled ResourceState = "cancelled"
	// StateOrphaned: the resource left the model.
	StateOrphaned ResourceState = "orphaned"
)

var resourceStates = []ResourceState{
	StateAvailable, StateDeploying, StateDeployed, StateFailed, StateSkipped,
	StateUndefined, StateSkippedForUndefined, StateUnavailable, StateCancelled, StateOrphaned,
}

// ResourceStates lists every resource state.
func ResourceStates() []ResourceState {
	return append([]ResourceState(nil), resourceStates...)
}

// Valid reports whether s is a known state.
func (s ResourceState) Valid() bool {
	for _, k := range resourceStates {
		if s == k {
			return true
		}
	}
	return false
}

// Done reports whether the state ends a deploy of the resource: nothing more
// will happen to it until the next deploy.
func (s ResourceState) Done() bool {
	switch s {
	case StateDeployed, StateFailed, StateSkipped, StateUndefined,
		StateSkippedForUndefined, StateUnavailable, StateCancelled:
		return true
	}
	return false
}

// UnmarshalText rejects unknown states.
func (s *ResourceState) UnmarshalText(b []byte) error {
	v := ResourceState(b)
	if !v.Valid() {
		return fmt.Errorf("unknown resource state %q", b)
	}
	*s = v
	return nil
}

// Compliance is the second axis of a resource's status: does the host still
// match the intent since it was last verified.
type Compliance string

// Compliance states.
const (
	Compliant    Compliance = "compliant"
	NonCompliant Compliance = "non_compliant"
	// ComplianceUnknown: never verified.
	ComplianceUnknown Compliance = "unknown"
)

// Valid reports whether c is a known compliance state.
func (c Compliance) Valid() bool {
	return c == Compliant || c == NonCompliant || c == ComplianceUnknown
}

// UnmarshalText rejects unknown compliance states.
func (c *Compliance) UnmarshalText(b []byte) error {
	v := Compliance(b)
	if !v.Valid() {
		return fmt.Errorf("unknown compliance state %q", b)
	}
	*c = v
	return nil
}
