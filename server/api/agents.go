package api

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/tetherhq/tether/model"
	"github.com/tetherhq/tether/server/record"
)

// AgentView is an agent as the API shows it.
type AgentView struct {
	record.Agent
	Online bool `json:"online"`
	// Halted is set while the agent's environment is halted: the agent
	// changes nothing on its host (no deploy, repair or heal), as if
	// paused, until the environment is resumed.
	Halted bool   `json:"halted"`
	Key    string `json:"key_fingerprint,omitempty"`
	// PreviousKey is the fingerprint of the key before the agent's last
	// key rollover, while it still holds.
	PreviousKey string `json:"previous_key_fingerprint,omitempty"`
}

// agentRoutes are the routes of agents: listing and showing them, the
// live inventory they make, and what operators do to them.
func (a *API) agentRoutes() []route {
	agentQuery := []param{
		{name: "state", typ: of[record.AgentState](), desc: "agents in this state"},
		{name: "online", typ: of[bool](), desc: "agents online (true) or not (false)"},
		{name: "label", typ: of[string](), desc: "agents with this label: key=value, or key for any value"},
		pQ, pPage, pOffset,
	}
	return []route{
		{method: "GET", path: "/envs/:env/agents", role: record.RoleViewer, summary: "List agents, online or not; state (pending, accepted, rejected), online (true, false), label (key=value or key) and q (text in the name or a label) filter them; with limit, a page of them (offset; the header X-Total-Count says how many match)", query: agentQuery, out: of[[]AgentView](), total: true, serve: a.listAgents},
		{method: "GET", path: "/envs/:env/agents/:name", role: record.RoleViewer, summary: "Show an agent with its facts", out: of[AgentView](), serve: a.getAgent},
		{method: "GET", path: "/envs/:env/inventory", role: record.RoleViewer, summary: "The environment's live inventory: accepted agents with their labels and facts, in the inventory format the compiler reads", out: of[model.Inventory](), serve: a.inventory},
		{method: "DELETE", path: "/envs/:env/agents/:name", role: record.RoleOperator, action: "agent.delete", summary: "Delete an agent: its record and what it reported are forgotten (its resources are available again) and its inbox removed from the broker; if it says hello again it is a new agent (pending, or accepted as the enrollment policy says). Answers with the agent as it was", out: of[AgentView](), serve: a.deleteAgent},
		{method: "POST", path: "/envs/:env/agents/:name/accept", role: record.RoleOperator, action: "agent.accept", summary: "Accept a discovered agent", out: of[AgentView](), serve: a.agentAction(record.AgentAccept)},
		{method: "POST", path: "/envs/:env/agents/:name/reject", role: record.RoleOperator, action: "agent.reject", summary: "Reject an agent", out: of[AgentView](), serve: a.agentAction(record.AgentReject)},
		{method: "POST", path: "/envs/:env/agents/:name/pause", role: record.RoleOperator, action: "agent.pause", summary: "Pause an agent: it changes nothing on its host (no deploy, repair or heal) until resumed", out: of[AgentView](), serve: a.agentAction(record.AgentPause)},
		{method: "POST", path: "/envs/:env/agents/:name/resume", role: record.RoleOperator, action: "agent.resume", summary: "Resume a paused agent: what it missed is deployed at once", out: of[AgentView](), serve: a.agentAction(record.AgentResume)},
		{method: "POST", path: "/envs/:env/agents/:name/facts-refresh", role: record.RoleOperator, action: "agent.facts-refresh", summary: "Ask an agent to report its facts again; its record is updated when the report arrives (202, the agent as recorded now)", out: of[AgentView](), ok: []int{http.StatusAccepted}, serve: a.factsRefresh},
		{method: "POST", path: "/envs/:env/agents/:name/rotate-key", role: record.RoleOperator, action: "agent.rotate-key", summary: "Ask an agent to replace its key by a signed rollover; its key changes when the rollover arrives (202, the agent as recorded now)", out: of[AgentView](), ok: []int{http.StatusAccepted}, serve: a.rotateKey},
	}
}

// agent is the :name parameter, an agent's name.
func (in *input) agent() string { return take(in, in.r.agentName) }

func (r *request) agentName() (string, error) {
	name := r.Param("name")
	if err := validAgentName(name); err != nil {
		return "", newError("bad_request", "", "%v", err)
	}
	return name, nil
}

// validAgentName checks an agent name a client sent; the error repeats
// at most the start of a long one.
func validAgentName(name string) error { return model.ValidateAgentName(model.Clip(name, 254)) }

// validAgentNames checks the agent names a request lists: at most
// model.MaxAgentsPerRequest, each a valid name.
func validAgentNames(names []string) error {
	if len(names) > model.MaxAgentsPerRequest {
		return newError("invalid", "", "agents: %d names: at most %d", len(names), model.MaxAgentsPerRequest)
	}
	for i, name := range names {
		if err := validAgentName(name); err != nil {
			return newError("invalid", "", "agents[%d]: %v", i, err)
		}
	}
	return nil
}

func (a *API) view(r *request, ag record.Agent) AgentView {
	return a.viewIn(ag, a.halted(r, ag.Env))
}

// halted reports whether env is halted (false when it cannot be read: the
// agent is then shown as its own record says).
func (a *API) halted(r *request, env string) bool {
	e, err := a.svc.Envs.GetEnv(r.ctx(), env)
	return err == nil && e.Settings.Halted
}

// online reports whether an agent is online: connected and heard from
// within OfflineAfter.
func (a *API) online(ag record.Agent) bool {
	return ag.Connected && ag.LastSeen.After(a.onlineSince())
}

// onlineSince is when a connected agent was last heard from at the
// earliest to be online now.
func (a *API) onlineSince() time.Time {
	return a.now().Add(-a.cfg.OfflineAfter)
}

func (a *API) viewIn(ag record.Agent, halted bool) AgentView {
	v := AgentView{Agent: ag, Online: a.online(ag), Halted: halted}
	if len(ag.PublicKey) > 0 {
		v.Key = model.Fingerprint(ag.PublicKey)
	}
	if ag.PreviousHolds(ag.PreviousKey, a.now()) {
		v.PreviousKey = model.Fingerprint(ag.PreviousKey)
	}
	return v
}

func (a *API) listAgents(r *request) (int, any, error) {
	in := r.input()
	p := in.page()
	f := take(in, func() (record.AgentFilter, error) { return a.agentFilter(r, p) })
	env := in.existingEnv()
	if in.err != nil {
		return 0, nil, in.err
	}
	// The store finds, counts and cuts the page: 10,000 agents are never
	// read whole for a page of them.
	ags, total, err := a.svc.Agents.FindAgents(r.ctx(), env, f)
	if err != nil {
		return 0, nil, err
	}
	r.Response().Header().Set(TotalHeader, strconv.Itoa(total))
	out := make([]AgentView, 0, len(ags))
	halted := a.halted(r, env)
	for _, ag := range ags {
		out = append(out, a.viewIn(ag, halted))
	}
	return http.StatusOK, out, nil
}

// inventory answers the environment's live inventory: every accepted
// agent, by name, with its labels and the facts it reported, as
// model.Inventory (what tether compile --inventory reads), built by
// record.Inventory as the server's own compiles build it.
func (a *API) inventory(r *request) (int, any, error) {
	in := r.input()
	env := in.existingEnv()
	return answer(in, func() (model.Inventory, error) {
		ags, err := a.svc.Agents.ListAgents(r.ctx(), env)
		return record.Inventory(ags), err
	})
}

// agentAnswer answers status with the agent that do returns, given the
// :env and :name of the route, as the API shows it.
func (a *API) agentAnswer(r *request, status int, do func(ctx context.Context, env, name string) (record.Agent, error)) (int, any, error) {
	in := r.input()
	env, name := in.env(), in.agent()
	if in.err != nil {
		return 0, nil, in.err
	}
	ag, err := do(r.ctx(), env, name)
	if err != nil {
		return 0, nil, err
	}
	return status, a.view(r, ag), nil
}

func (a *API) getAgent(r *request) (int, any, error) {
	return a.agentAnswer(r, http.StatusOK, a.svc.Agents.GetAgent)
}

// deleteAgent forgets an agent; the answer is the agent as it was.
func (a *API) deleteAgent(r *request) (int, any, error) {
	return a.agentAnswer(r, http.StatusOK, a.svc.Control.DeleteAgent)
}

func (a *API) agentAction(action record.AgentAction) func(*request) (int, any, error) {
	return func(r *request) (int, any, error) {
		return a.agentAnswer(r, http.StatusOK, func(ctx context.Context, env, name string) (record.Agent, error) {
			ag, err := a.svc.Control.AgentAction(ctx, env, name, action)
			if errors.Is(err, model.ErrConflict) {
				if ag, gerr := a.svc.Agents.GetAgent(ctx, env, name); gerr == nil && ag.State != record.AgentAccepted {
					return ag, newError("conflict", fmt.Sprintf("accept it first (tether agent accept %s)", name), "agent %s is %s: only an accepted agent can be paused or resumed", name, ag.State)
				}
			}
			return ag, err
		})
	}
}

// factsRefresh asks an agent to report its facts again. The answer, 202,
// is the agent as recorded now: the report comes later, as an agent
// event on the event stream.
func (a *API) factsRefresh(r *request) (int, any, error) {
	return a.askAgent(r, "be asked for its facts", AgentControl.RefreshFacts)
}

// rotateKey asks an agent to replace its key. The answer, 202, is the
// agent as recorded now: its key changes when its rollover arrives, as an
// agent event on the event stream.
func (a *API) rotateKey(r *request) (int, any, error) {
	return a.askAgent(r, "rotate its key", AgentControl.RotateKey)
}

// askAgent asks an accepted agent for something; one that is not
// accepted cannot (what it cannot do), and is answered conflict.
func (a *API) askAgent(r *request, what string, ask func(AgentControl, context.Context, string, string) (record.Agent, error)) (int, any, error) {
	return a.agentAnswer(r, http.StatusAccepted, func(ctx context.Context, env, name string) (record.Agent, error) {
		ag, err := ask(a.svc.Control, ctx, env, name)
		if errors.Is(err, model.ErrConflict) {
			return ag, newError("conflict", fmt.Sprintf("accept it first (tether agent accept %s)", name), "agent %s is %s: only an accepted agent can %s", name, ag.State, what)
		}
		return ag, err
	})
}
