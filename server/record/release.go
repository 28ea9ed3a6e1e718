package record

import (
	"errors"
	"fmt"
	"time"

	"github.com/tetherhq/tether/model"
)

// Released is a version just released, and its release as it started: the
// fan-out to agents runs in the background, its progress in the Release
// named by ReleaseID.
type Released struct {
	model.Version
	ReleaseID string `json:"release_id,omitempty"`
	// Release is the release as it stood when answered (running).
	Release *Release `json:"release,omitempty"`
	// AlreadyReleased: the version asked for was the released one
	// already; nothing changed and no release was started.
	AlreadyReleased bool `json:"already_released,omitempty"`
}

// Release is one release of a version of an environment: the version is
// released (the store says so) the moment the Release is recorded, and its
// fan-out to the environment's agents runs in the background. Its counts
// say how far the fan-out got. The version stands whatever they say: an
// agent not reached gets it when it next says hello.
type Release struct {
	ID      string       `json:"id"`
	Env     string       `json:"env"`
	Version int64        `json:"version"`
	State   ReleaseState `json:"state"`
	// Agents is how many accepted agents the fan-out has to reach (known
	// once it listed them; 0 before).
	Agents int `json:"agents"`
	// Sent counts the agents sent what they miss of the version; UpToDate
	// those that held it already. Sent + UpToDate + PendingCount reach
	// Agents when the fan-out is done.
	Sent     int `json:"sent"`
	UpToDate int `json:"up_to_date"`
	// Fanout lists the agents the fan-out did not reach at once.
	Fanout
	StartedAt  time.Time  `json:"started_at"`
	FinishedAt *time.Time `json:"finished_at,omitempty"`
	// Rollout is a staged release's waves and where they stand; nil for a
	// release to every agent at once.
	Rollout *Rollout `json:"rollout,omitempty"`
}

// Done counts the agents the fan-out has dealt with: reached, up to date
// or pending.
func (r Release) Done() int { return r.Sent + r.UpToDate + r.PendingCount }

// ReleaseState is where a release's fan-out stands.
type ReleaseState string

// Release states.
const (
	// ReleaseRunning: the fan-out has not ended (or the server running it
	// stopped before it did: another takes it over).
	ReleaseRunning ReleaseState = "running"
	// ReleaseDone: every accepted agent was sent the version, held it
	// already, or is listed as pending with what brings it the version.
	// A release superseded by a newer one is done too (Note says so).
	ReleaseDone ReleaseState = "done"
	// ReleaseFailed: the fan-out could not go on (the store could not be
	// read; Note says why). The version is released all the same: each
	// agent gets it when it next says hello.
	ReleaseFailed ReleaseState = "failed"
)

// Valid reports whether s is a known state.
func (s ReleaseState) Valid() bool {
	switch s {
	case ReleaseRunning, ReleaseDone, ReleaseFailed:
		return true
	}
	return false
}

// MaxReleaseNote bounds a release's note.
const MaxReleaseNote = 1024

// ValidateUpdate checks a release's progress as recorded: a known state,
// counts that are not negative.
func (r Release) ValidateUpdate() error {
	if !r.State.Valid() {
		return fmt.Errorf("state %q: want running, done or failed", model.Clip(string(r.State), 32))
	}
	if r.Agents < 0 || r.Sent < 0 || r.UpToDate < 0 || r.PendingCount < 0 {
		return fmt.Errorf("negative counts (agents %d, sent %d, up to date %d, pending %d)", r.Agents, r.Sent, r.UpToDate, r.PendingCount)
	}
	return nil
}

// Fanout says which agents a release did not reach at once. The release
// stands whatever it says: those agents get it later.
type Fanout struct {
	// Pending lists the agents the release did not reach (at most
	// MaxListedPending of them; PendingCount counts them all).
	Pending      []PendingAgent `json:"pending,omitempty"`
	PendingCount int            `json:"pending_count,omitempty"`
	// Note says what happened when the fan-out could not go on (the
	// release is stored; agents get it on their next hello), or that a
	// newer release superseded it.
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
