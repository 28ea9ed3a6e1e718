package record

import (
	"errors"

	"github.com/tetherhq/tether/model"
)

// Release is a version just released, and the agents its fan-out did not
// reach at once.
type Release struct {
	model.Version
	Fanout
}

// Fanout says which agents a release did not reach at once. The release
// stands whatever it says: those agents get it later.
type Fanout struct {
	// Pending lists the agents the release did not reach (at most
	// MaxListedPending of them; PendingCount counts them all).
	Pending      []PendingAgent `json:"pending,omitempty"`
	PendingCount int            `json:"pending_count,omitempty"`
	// Note says what happened when the fan-out could not even start (the
	// release is stored; agents get it on their next hello).
	Note string `json:"note,omitempty"`
}

// MaxListedPending bounds the agents a Fanout lists by name.
const MaxListedPending = 1000

// PendingAgent is an agent a release did not reach at once.
type PendingAgent struct {
	Agent  string        `json:"agent"`
	Reason PendingReason `json:"reason"`
	// Later says what brings it the release.
	Later string `json:"later"`
}

// PendingReason says why a release did not reach an agent at once.
type PendingReason string

// Pending reasons.
const (
	// PendingNotConnected: the agent has no inbox yet (it never connected).
	PendingNotConnected PendingReason = "not_connected"
	// PendingInboxFull: the agent's inbox holds its maximum of messages
	// (it is offline or slow).
	PendingInboxFull PendingReason = "inbox_full"
	// PendingSendFailed: the broker did not take the message (the
	// server's log has why).
	PendingSendFailed PendingReason = "send_failed"
	// PendingNoKeyAgreement: the agent's desired state holds sensitive
	// values and the agent has no key-agreement key to seal them to (it
	// is older than sealed values): they are never sent in clear.
	PendingNoKeyAgreement PendingReason = "no_key_agreement"
)

// ErrNoKeyAgreement: an agent's desired state holds sensitive values, and
// the agent has no key-agreement key to seal them to (an agent older than
// sealed values). It is sent none of its desired state until upgraded.
var ErrNoKeyAgreement = errors.New("agent has no key-agreement key for sensitive values")

// Add records an agent the release did not reach.
func (f *Fanout) Add(p PendingAgent) {
	f.PendingCount++
	if len(f.Pending) < MaxListedPending {
		f.Pending = append(f.Pending, p)
	}
}
