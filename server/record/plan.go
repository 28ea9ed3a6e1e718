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
	// Note says what the environment's purge_on_delete means for the
	// resources a release would take away, when it is on.
	Note string `json:"note,omitempty"`
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
	// not be checked; Unchanged counts the others. They are the agent's
	// answer about its part of the version: what the version does not
	// have for it is not among them, but in Leaving.
	Resources []PlanResource `json:"resources"`
	Unchanged int            `json:"unchanged"`
	// Leaving is what a release of the version takes away from the
	// agent: the resources it holds that the version does not have (nil:
	// none). Found from the store, for agents offline too.
	Leaving *Leaving `json:"leaving,omitempty"`
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

// Leaving is what releasing a version takes away from one agent: the
// resources of the version it holds (From) that the version released
// does not have. The agent drops them from its desired state, and each
// Fate says what becomes of the thing on the host.
type Leaving struct {
	Agent string `json:"agent"`
	// From is the version the agent holds (its generation; the released
	// version when the agent's is no longer kept).
	From int64 `json:"from"`
	// LeavesModel: the version has nothing for the agent at all: it
	// leaves the model, with everything it holds.
	LeavesModel bool `json:"leaves_model"`
	// Orphaned and Absent count the resources by fate (FateOrphaned,
	// FateAbsent).
	Orphaned int `json:"orphaned"`
	Absent   int `json:"absent"`
	// Resources are the resources taken away with their fate, in ID
	// order: all of them, unless a whole answer lists more than
	// MaxLeavingListed (the counts count them all).
	Resources []LeavingResource `json:"resources"`
}

// Count is the number of resources taken away.
func (l Leaving) Count() int { return l.Orphaned + l.Absent }

// Unlisted is the number of resources taken away not listed in Resources.
func (l Leaving) Unlisted() int { return l.Count() - len(l.Resources) }

// LeavingResource is one resource a release takes away from its agent.
type LeavingResource struct {
	ID   model.ID `json:"id"`
	Fate string   `json:"fate"`
}

// Fates of a resource that leaves an agent's desired state.
const (
	// FateOrphaned: the thing stays on the host as it is, no longer
	// managed (its state becomes orphaned). Agents leave on their hosts
	// what leaves the model, whatever purge_on_delete says.
	FateOrphaned = "orphaned"
	// FateAbsent: the resource is purged (purged = true) in the version
	// the agent holds: the thing is absent, and stays so, no longer kept
	// absent.
	FateAbsent = "absent"
)

// MaxLeavingListed bounds the resources a plan or a release preview
// lists by ID, over all its agents.
const MaxLeavingListed = 1000

// ReleasePreview is what releasing version Version of Env would take
// away, per agent, as things stand when asked: the resources the accepted
// agents hold that the version does not have, and the agents that would
// leave the model. Nothing is released.
type ReleasePreview struct {
	Env     string `json:"env"`
	Version int64  `json:"version"`
	// Released is the version released now (0: none). Rollback: the
	// version is older than it (or retired), so a release copies it into
	// a new version; AlreadyReleased: it is the released one, and a
	// release changes nothing.
	Released        int64 `json:"released"`
	Rollback        bool  `json:"rollback,omitempty"`
	AlreadyReleased bool  `json:"already_released,omitempty"`
	// Staged: the environment releases in waves (release_strategy): each
	// agent below loses its resources when its wave comes.
	Staged bool `json:"staged,omitempty"`
	// Leaving lists, by agent name, the agents the release takes
	// resources away from.
	Leaving []Leaving `json:"leaving"`
	// Agents counts them, LeaveModel those that leave the model,
	// Resources the resources taken away.
	Agents     int `json:"agents"`
	LeaveModel int `json:"leave_model"`
	Resources  int `json:"resources"`
	// Note says what the environment's purge_on_delete means here, when
	// it is on.
	Note string `json:"note,omitempty"`
}

// TakesAway reports whether a release would take anything away.
func (p ReleasePreview) TakesAway() bool { return len(p.Leaving) > 0 }
