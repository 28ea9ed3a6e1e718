package api

import (
	"net/http"

	"github.com/tetherhq/tether/model"
	"github.com/tetherhq/tether/server/record"
)

// Summary counts an environment's agents and resources, for an overview
// of the fleet.
type Summary struct {
	Agents    AgentCounts    `json:"agents"`
	Resources ResourceCounts `json:"resources"`
}

// AgentCounts counts agents: accepted ones online and offline, pending,
// rejected and paused ones.
type AgentCounts struct {
	Online   int `json:"online"`
	Offline  int `json:"offline"`
	Pending  int `json:"pending"`
	Rejected int `json:"rejected"`
	Paused   int `json:"paused"`
}

// ResourceCounts counts the resources of the released version, by state
// and by compliance.
type ResourceCounts struct {
	Total        int                         `json:"total"`
	ByState      map[model.ResourceState]int `json:"by_state"`
	ByCompliance map[model.Compliance]int    `json:"by_compliance"`
}

// summaryRoutes are the routes of an environment's overview.
func (a *API) summaryRoutes() []route {
	return []route{
		{method: "GET", path: "/envs/:env/summary", role: record.RoleViewer, summary: "Count the environment's agents (online, offline, pending, rejected, paused) and resources (by state and by compliance)", out: of[Summary](), serve: a.summary},
	}
}

func (a *API) summary(r *request) (int, any, error) {
	in := r.input()
	env := in.existingEnv()
	if in.err != nil {
		return 0, nil, in.err
	}
	// The store counts: an environment's agents are never read to count
	// them.
	ac, err := a.svc.Agents.CountAgentsByState(r.ctx(), env, a.onlineSince())
	if err != nil {
		return 0, nil, err
	}
	s := Summary{Agents: AgentCounts(ac)}
	counts, err := a.svc.Resources.StatusCounts(r.ctx(), env)
	if err != nil {
		return 0, nil, err
	}
	s.Resources = ResourceCounts{ByState: map[model.ResourceState]int{}, ByCompliance: map[model.Compliance]int{}}
	for _, c := range counts {
		s.Resources.Total += c.N
		s.Resources.ByState[c.State] += c.N
		s.Resources.ByCompliance[c.Compliance] += c.N
	}
	return http.StatusOK, s, nil
}
