package api

import (
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/tetherhq/tether/model"
	"github.com/tetherhq/tether/server/record"
)

// OperationRequest asks for a deploy, repair or dry run.
type OperationRequest struct {
	Agents []string `json:"agents,omitempty"`
	Full   bool     `json:"full,omitempty"`
}

// Report is what a deploy, repair or dry run reported.
type Report struct {
	ID string `json:"id"`
	// Deploy is the deploy with each agent's outcome; nil for one that
	// was not listed (sent before deploys were, or pruned).
	Deploy *record.Deploy `json:"deploy,omitempty"`
	// Waiting names the agents it was sent to that have not answered.
	Waiting []string        `json:"waiting"`
	Actions []record.Action `json:"actions"`
}

// deployRoutes are the routes of deploys, repairs and dry runs: asking
// for one, and what they did.
func (a *API) deployRoutes() []route {
	return []route{
		{method: "POST", path: "/envs/:env/deploy", role: record.RoleOperator, action: "env.deploy", summary: "Deploy the released version", in: of[OperationRequest](), inOptional: true, out: of[record.Deployment](), ok: []int{http.StatusAccepted}, serve: a.operation(record.OpDeploy)},
		{method: "POST", path: "/envs/:env/repair", role: record.RoleOperator, action: "env.repair", summary: "Verify everything and repair drift", in: of[OperationRequest](), inOptional: true, out: of[record.Deployment](), ok: []int{http.StatusAccepted}, serve: a.operation(record.OpRepair)},
		{method: "POST", path: "/envs/:env/dryrun", role: record.RoleViewer, action: "env.dryrun", summary: "Ask agents what a deploy would change", in: of[OperationRequest](), inOptional: true, out: of[record.Deployment](), ok: []int{http.StatusAccepted}, serve: a.operation(record.OpDryRun)},
		{method: "GET", path: "/envs/:env/deploys", role: record.RoleViewer, summary: "The environment's deploys, repairs and dry runs, newest first: trigger, who asked, version, agents asked, answered, ok and failed, outcome", query: []param{pAgent, {name: "kind", typ: of[record.Operation](), desc: "deploys of this kind"}, pLimit}, out: of[[]record.Deploy](), serve: a.listDeploys},
		{method: "GET", path: "/envs/:env/deploys/:id", role: record.RoleViewer, summary: "What a deploy, repair or dry run reported: the deploy with each agent's outcome, the agents that have not answered yet (waiting), and the actions (the dry-run report)", pathParams: []param{pUUID}, out: of[Report](), serve: a.deployReport},
	}
}

func (a *API) operation(op record.Operation) func(*request) (int, any, error) {
	return func(r *request) (int, any, error) {
		in := r.input()
		env := in.env()
		var req OperationRequest
		in.optionalBody(&req)
		in.check(validAgentNames(req.Agents))
		if in.err != nil {
			return 0, nil, in.err
		}
		d, err := a.svc.Operations.Deploy(r.ctx(), env, record.DeployRequest{Agents: req.Agents, Operation: op, Full: req.Full})
		if err != nil && len(d.Agents) == 0 {
			return 0, nil, err
		}
		if err != nil {
			// Some agents got it: say which, and log who did not.
			a.log.Warn().Err(err).Str("env", env).Str("operation", string(op)).Msg("operation reached only some agents")
		}
		r.detail = fmt.Sprintf("%s %s to %s", op, d.ID, strings.Join(d.Agents, ","))
		return http.StatusAccepted, d, nil
	}
}

func (a *API) deployReport(r *request) (int, any, error) {
	in := r.input()
	env, id := in.env(), in.uuid("deploy")
	if in.err != nil {
		return 0, nil, in.err
	}
	rep := Report{ID: id, Waiting: []string{}}
	d, err := a.svc.Operations.GetDeploy(r.ctx(), env, id)
	switch {
	case err == nil:
		rep.Deploy = &d
		rep.Waiting = nonNil(d.Waiting())
	case !errors.Is(err, model.ErrNotFound):
		return 0, nil, err
	}
	acts, err := a.svc.Operations.DeployActions(r.ctx(), env, id, 10000)
	if err != nil {
		return 0, nil, err
	}
	if rep.Deploy == nil && len(acts) == 0 {
		return 0, nil, newError("not_found", "list the deploys: tether env deploys", "no deploy %s in %s", id, env)
	}
	rep.Actions = nonNil(acts)
	return http.StatusOK, rep, nil
}

func (a *API) listDeploys(r *request) (int, any, error) {
	in := r.input()
	env, limit := in.existingEnv(), in.limit()
	f := record.DeployFilter{Agent: r.QueryParam("agent"), Kind: record.Operation(r.QueryParam("kind")), Limit: limit}
	in.check(deployFilterError(f))
	return listing(in, func() ([]record.Deploy, error) { return a.svc.Operations.ListDeploys(r.ctx(), env, f) })
}

// deployFilterError checks the filters of a listing of deploys.
func deployFilterError(f record.DeployFilter) error {
	if f.Agent != "" {
		if err := validAgentName(f.Agent); err != nil {
			return newError("invalid", "", "agent: %v", err)
		}
	}
	if err := f.Validate(); err != nil {
		return newError("invalid", "", "%v", err)
	}
	return nil
}
