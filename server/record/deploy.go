package record

import (
	"fmt"
	"time"

	"github.com/tetherhq/tether/model"
)

// DeployTrigger says what set a deploy, repair or dry run off.
type DeployTrigger string

// Deploy triggers.
const (
	// DeployByRelease: a release's fan-out (the deploy's id is the
	// release's).
	DeployByRelease DeployTrigger = "release"
	// DeployByOperator: an operator asked (tether env deploy|repair|dryrun).
	DeployByOperator DeployTrigger = "operator"
	// DeployByHello: an agent said hello behind the released version.
	DeployByHello DeployTrigger = "hello"
	// DeployByDeployInterval: the deploy-interval retry of what failed or
	// did not finish.
	DeployByDeployInterval DeployTrigger = "deploy_interval"
	// DeployByRepairInterval: the repair-interval verification.
	DeployByRepairInterval DeployTrigger = "repair_interval"
	// DeployByResume: an environment or agent was resumed; what it missed
	// is deployed at once.
	DeployByResume DeployTrigger = "resume"
	// DeployByPlan: a plan of a version not released (tether version
	// plan): a dry run of it on the live agents.
	DeployByPlan DeployTrigger = "plan"
)

// WhoServer is who asked for a deploy the server started by itself.
const WhoServer = "server"

// DeployOutcome is where a deploy stands as a whole.
type DeployOutcome string

// Deploy outcomes.
const (
	// DeployRunning: some agent it was sent to has not answered yet.
	DeployRunning DeployOutcome = "running"
	// DeployOK: every agent answered, none with a failure.
	DeployOK DeployOutcome = "ok"
	// DeployFailed: every agent answered, some with a failed resource or
	// a run that could not complete.
	DeployFailed DeployOutcome = "failed"
)

// Deploy is one deploy, repair or dry run sent to agents, with how far it
// got: the agents it was sent to (Asked), those that said their run is
// done (Answered), and of those, how many had nothing fail (OK) or
// something fail (Failed).
type Deploy struct {
	ID      string        `json:"id"`
	Env     string        `json:"env"`
	Kind    Operation     `json:"kind"`
	Trigger DeployTrigger `json:"trigger"`
	// Who asked: the API token's name (or the user's), WhoServer for
	// what the server started by itself.
	Who      string        `json:"who"`
	Version  int64         `json:"version"`
	Asked    int           `json:"asked"`
	Answered int           `json:"answered"`
	OK       int           `json:"ok"`
	Failed   int           `json:"failed"`
	Outcome  DeployOutcome `json:"outcome"`
	// StartedAt is when it was sent; FinishedAt when the last agent
	// answered (nil while one has not).
	StartedAt  time.Time  `json:"started_at"`
	FinishedAt *time.Time `json:"finished_at,omitempty"`
	// Agents are the agents it was sent to, by name, with their outcome
	// (only in one deploy's report).
	Agents []DeployAgent `json:"agents,omitempty"`
}

// Settle sets d's outcome from its counts.
func (d *Deploy) Settle() {
	switch {
	case d.Answered < d.Asked:
		d.Outcome, d.FinishedAt = DeployRunning, nil
	case d.Failed > 0:
		d.Outcome = DeployFailed
	default:
		d.Outcome = DeployOK
	}
}

// Waiting names the agents of d (as its report lists them) that have not
// answered yet.
func (d Deploy) Waiting() []string {
	var out []string
	for _, a := range d.Agents {
		if a.Outcome == AgentWaiting {
			out = append(out, a.Agent)
		}
	}
	return out
}

// DeployAgent is how one agent's run of a deploy ended.
type DeployAgent struct {
	Agent   string             `json:"agent"`
	Outcome DeployAgentOutcome `json:"outcome"`
	// FailedResources counts the resources it reported failed.
	FailedResources int `json:"failed_resources,omitempty"`
	// Error is why its run could not complete, as it said.
	Error      string     `json:"error,omitempty"`
	FinishedAt *time.Time `json:"finished_at,omitempty"`
}

// DeployAgentOutcome is where one agent's run of a deploy stands.
type DeployAgentOutcome string

// Outcomes of an agent's run.
const (
	// AgentWaiting: it has not said its run is done.
	AgentWaiting DeployAgentOutcome = "waiting"
	// AgentOK: its run is done and nothing failed.
	AgentOK DeployAgentOutcome = "ok"
	// AgentFailed: a resource failed, or the run could not complete.
	AgentFailed DeployAgentOutcome = "failed"
)

// OutcomeOf says where an agent's run stands from what was recorded.
func OutcomeOf(finished bool, failed int, errText string) DeployAgentOutcome {
	switch {
	case !finished:
		return AgentWaiting
	case failed > 0 || errText != "":
		return AgentFailed
	}
	return AgentOK
}

// DeployFilter narrows a listing of deploys. Zero fields match everything.
type DeployFilter struct {
	// Agent: deploys sent to this agent.
	Agent string
	Kind  Operation
	// Limit bounds the answer (0: 100).
	Limit int
}

// Validate checks a filter's kind.
func (f DeployFilter) Validate() error {
	if f.Kind != "" && !f.Kind.Valid() {
		return fmt.Errorf("kind %q: want deploy, repair or dryrun", model.Clip(string(f.Kind), 32))
	}
	return nil
}
