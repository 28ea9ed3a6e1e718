package model

import (
	"errors"
	"time"
)

// Environment is a named deployment target (prod, staging, local) with its
// own versions, agents and settings.
type Environment struct {
	Name      string      `json:"name"`
	Settings  EnvSettings `json:"settings"`
	CreatedAt time.Time   `json:"created_at"`
}

// EnvSettings tune how the server schedules an environment.
type EnvSettings struct {
	// AutoDeploy: a release, or an agent coming online behind, deploys
	// without an operator asking. The embedded mode turns it off and asks.
	AutoDeploy bool `json:"auto_deploy"`
	// PurgeOnDelete removes from hosts what leaves the model.
	PurgeOnDelete bool `json:"purge_on_delete"`
	// VersionsToKeep bounds stored versions (0: keep all).
	VersionsToKeep int `json:"versions_to_keep"`
	// Halted stops all deploys until resumed.
	Halted bool `json:"halted"`
	// Enrollment decides how newly discovered agents are accepted.
	Enrollment Enrollment `json:"enrollment"`
}

// Enrollment is an environment's policy for newly discovered agents.
type Enrollment string

// Enrollment policies (DESIGN.md §6).
const (
	// EnrollManual: an operator accepts or rejects each agent.
	EnrollManual Enrollment = "manual"
	// EnrollToken: a valid enrollment token in the hello accepts the agent.
	EnrollToken Enrollment = "token"
	// EnrollOpen accepts every agent: development and the embedded mode only.
	EnrollOpen Enrollment = "open"
)

// DefaultEnvSettings are the settings of a new environment.
func DefaultEnvSettings() EnvSettings {
	return EnvSettings{AutoDeploy: true, VersionsToKeep: 100, Enrollment: EnrollManual}
}

// AgentState is where an agent stands in enrollment.
type AgentState string

// Agent states.
const (
	AgentPending  AgentState = "pending"
	AgentAccepted AgentState = "accepted"
	AgentRejected AgentState = "rejected"
)

// Agent is what the server knows of one agent.
type Agent struct {
	Env       string            `json:"env"`
	Name      string            `json:"name"`
	State     AgentState        `json:"state"`
	PublicKey []byte            `json:"public_key,omitempty"`
	Labels    map[string]string `json:"labels,omitempty"`
	Facts     map[string]any    `json:"facts,omitempty"`
	Kinds     []string          `json:"kinds,omitempty"`
	// Generation is the version the agent's slice was last taken from, as
	// the agent reported it.
	Generation int64     `json:"generation"`
	FirstSeen  time.Time `json:"first_seen"`
	LastSeen   time.Time `json:"last_seen"`
}

// ResourceStatus is where one resource of an environment stands.
type ResourceStatus struct {
	ID      ID            `json:"id"`
	Version int64         `json:"version"`
	Hash    Hash          `json:"hash"`
	State   ResourceState `json:"state"`
	// Compliance and when it was last verified (nil: never).
	Compliance   Compliance `json:"compliance"`
	LastVerified *time.Time `json:"last_verified,omitempty"`
	Message      string     `json:"message,omitempty"`
	UpdatedAt    time.Time  `json:"updated_at"`
}

// ActionKind says what an action-log entry records.
type ActionKind string

// Action kinds.
const (
	ActionDeploy ActionKind = "deploy"
	ActionDryRun ActionKind = "dryrun"
)

// Action is one entry of a resource's action log: something a deploy or dry
// run did or found.
type Action struct {
	Seq      int64         `json:"seq"`
	ID       ID            `json:"id"`
	Kind     ActionKind    `json:"kind"`
	DeployID string        `json:"deploy_id"`
	Version  int64         `json:"version"`
	State    ResourceState `json:"state"`
	Changes  Changes       `json:"changes,omitempty"`
	Message  string        `json:"message,omitempty"`
	At       time.Time     `json:"at"`
	Duration time.Duration `json:"duration_ns"`
}

// ErrNotFound is returned (wrapped) when a named thing does not exist. It
// lives in model so that every layer can match it without importing the
// store that returned it.
var ErrNotFound = errors.New("not found")
