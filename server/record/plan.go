package record

import (
	"time"

	"github.com/tetherhq/tether/model"
)

// PlanRequest asks for a plan: a dry run of a version, not the released
// one necessarily, on the live agents.
type PlanRequest struct {
	// Agents to ask; empty: every accepted agent.
	Agents []string `json:"agents,omitempty"`
	// Timeout is how long to wait for the agents' answers.
	Timeout time.Duration `json:"timeout"`
	// OfflineAfter: an agent not heard from for this long is offline
	// (the API's setting).
	OfflineAfter time.Duration `json:"-"`
}

// Plan agent outcomes.
const (
	// PlanAnswered: the agent dry-ran the version and said what would
	// change.
	PlanAnswered = "answered"
	// PlanNoAnswer: the agent did not answer within the timeout.
	PlanNoAnswer = "no_answer"
	// PlanUnreached: the agent could not be sent the plan (never
	// connected, or its inbox is full).
	PlanUnreached = "unreached"
	// PlanRefused: the plan was not sent (Note says why).
	PlanRefused = "refused"
	// PlanTooOld: the agent answered for the version it holds, not the
	// one planned: it is older than plans.
	PlanTooOld = "too_old"
	// PlanFailed: the agent could not run the plan (Note says why).
	PlanFailed = "failed"
	// PlanOffline: the agent is offline; it was not asked.
	PlanOffline = "offline"
)

// Plan is what a version would change on each agent if it were released:
// the answer of a dry run of it. Nothing was changed on any host, and the
// released version stays released.
type Plan struct {
	ID  string `json:"id"`
	Env string `json:"env"`
	// Version is the version planned; Released the one released (0:
	// none).
	Version  int64 `json:"version"`
	Released int64 `json:"released"`
	// Agents are the agents asked, by name.
	Agents []PlanAgent `json:"agents"`
	// NotAnswered names the agents asked that did not answer in time.
	NotAnswered []string `json:"not_answered"`
	// Timeout is how long the plan waited for answers.
	Timeout time.Duration `json:"timeout_ns"`
}

// PlanAgent is one agent's part of a plan.
type PlanAgent struct {
	Name    string `json:"name"`
	Outcome string `json:"outcome"`
	// Online, Paused: how the agent stood when asked (paused agents and
	// those of a halted environment answer plans: a plan changes
	// nothing).
	Online bool   `json:"online"`
	Paused bool   `json:"paused,omitempty"`
	Note   string `json:"note,omitempty"`
	// Resources are the resources a deploy would change, or that could
	// not be checked; Unchanged counts the others.
	Resources []PlanResource `json:"resources"`
	Unchanged int            `json:"unchanged"`
}

// PlanResource is what a deploy would do to one resource: Would is
// model.DryRunOutcome's word, and Changes each attribute's current and
// desired value (sensitive values redacted).
type PlanResource struct {
	ID      model.ID            `json:"id"`
	Would   string              `json:"would"`
	State   model.ResourceState `json:"state"`
	Changes model.Changes       `json:"changes,omitempty"`
	Message string              `json:"message,omitempty"`
}

// Plan timeouts: the default, and the longest a plan may wait (an answer
// must come within the API's write timeout).
const (
	DefaultPlanTimeout = 30 * time.Second
	MaxPlanTimeout     = 90 * time.Second
)
