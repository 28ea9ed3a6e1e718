package record

import (
	"context"
	"time"

	"github.com/tetherhq/tether/model"
)

// Query and command types shared by the store, the scheduler and the API:
// they live here so that each of those declares its interfaces without
// importing the others.

// StatusFilter narrows a listing of resource statuses. Zero fields match
// everything.
type StatusFilter struct {
	Agent      string              `json:"agent,omitempty"`
	Type       string              `json:"type,omitempty"`
	State      model.ResourceState `json:"state,omitempty"`
	Compliance model.Compliance    `json:"compliance,omitempty"`
	// Search keeps the statuses whose ID holds it (ASCII letters in any
	// case).
	Search string `json:"q,omitempty"`
	// Limit, when above 0, keeps a page of at most Limit statuses from
	// Offset, in the store's order of their IDs as text (its primary key's;
	// without Limit they come in ID order, model.ID.Compare). Counts
	// ignore both.
	Limit  int `json:"limit,omitempty"`
	Offset int `json:"offset,omitempty"`
}

// StatusCount counts the resource statuses of one state and compliance.
type StatusCount struct {
	State      model.ResourceState `json:"state"`
	Compliance model.Compliance    `json:"compliance"`
	N          int                 `json:"n"`
}

// AgentFilter narrows a listing of agents. Zero fields match everything.
type AgentFilter struct {
	State AgentState
	// LabelKey keeps the agents with that label; with LabelValue set, of
	// that value.
	LabelKey   string
	LabelValue *string
	// Search keeps the agents whose name, or a label as key=value, holds
	// it (ASCII letters in any case).
	Search string
	// Online, when set, keeps the accepted agents online (true) or
	// offline (false): online is connected and seen after OnlineSince.
	Online      *bool
	OnlineSince time.Time
	// Offset skips the first agents, by name, and Limit, when above 0,
	// keeps at most Limit of the rest: a page. Counts ignore both.
	Limit  int
	Offset int
}

// AgentCounts counts an environment's agents: the accepted ones online
// (connected and seen after the time the count was asked for) and
// offline, the pending and rejected ones, and the accepted ones paused.
type AgentCounts struct {
	Online, Offline, Pending, Rejected, Paused int
}

// ResourceHash is a resource's intent hash in one version.
type ResourceHash struct {
	ID      model.ID   `json:"id"`
	Version int64      `json:"version"`
	Hash    model.Hash `json:"hash"`
}

// AlertFilter narrows a listing of alerts. Zero fields match everything.
type AlertFilter struct {
	Env   string
	Agent string
	Kind  AlertKind
	// Kinds: only alerts of one of these kinds (with Kind, of both).
	Kinds []AlertKind
	// Limit bounds the answer (0: 100).
	Limit int
}

// AuditFilter narrows a listing of the audit log. Zero fields match
// everything.
type AuditFilter struct {
	Env string
	// Org: only the entries of this organization.
	Org string
	// Limit bounds the answer (0: 100).
	Limit int
}

// Operation is what an operator asks agents to do.
type Operation string

// Operations.
const (
	// OpDeploy applies the released version.
	OpDeploy Operation = "deploy"
	// OpRepair verifies every resource and re-applies what drifted.
	OpRepair Operation = "repair"
	// OpDryRun reports what a deploy would change, changing nothing.
	OpDryRun Operation = "dryrun"
)

// Valid reports whether o is a known operation.
func (o Operation) Valid() bool { return o == OpDeploy || o == OpRepair || o == OpDryRun }

// DeployRequest is an operator's deploy, repair or dry run.
type DeployRequest struct {
	// Agents to act on; empty: every accepted agent that is not paused.
	Agents    []string  `json:"agents,omitempty"`
	Operation Operation `json:"operation"`
	// Full deploys every resource instead of what changed or has not
	// succeeded yet (repairs and dry runs are always full).
	Full bool `json:"full,omitempty"`
	// Trigger says what set it off and Who asked (recorded with it; the
	// server sets them, callers of the API do not).
	Trigger DeployTrigger `json:"-"`
	Who     string        `json:"-"`
}

// Deployment is a deploy, repair or dry run that was sent.
type Deployment struct {
	ID         string    `json:"id"`
	Operation  Operation `json:"operation"`
	Generation int64     `json:"generation"`
	Agents     []string  `json:"agents"`
	// Unreached agents could not be given the operation now: they never
	// connected, or their inbox is full (offline for long). They get the
	// released version when they next say hello.
	Unreached []string `json:"unreached,omitempty"`
	// Refused agents were not sent the operation, with why: their
	// desired state holds sensitive values and they have no key-agreement
	// key to seal them to (agents older than sealed values).
	Refused map[string]string `json:"refused,omitempty"`
}

type whoKey struct{}

// WithWho returns ctx carrying who asked for what is done under it (an API
// token's or user's name), for the records it leaves (a release's deploy).
func WithWho(ctx context.Context, who string) context.Context {
	return context.WithValue(ctx, whoKey{}, who)
}

// WhoOf says who asked for what is done under ctx: WhoServer when no one
// did (the server on its own).
func WhoOf(ctx context.Context) string {
	if who, _ := ctx.Value(whoKey{}).(string); who != "" {
		return who
	}
	return WhoServer
}
