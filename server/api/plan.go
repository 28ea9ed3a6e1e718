package api

import (
	"fmt"
	"net/http"
	"time"

	"github.com/tetherhq/tether/server/record"
)

// PlanRequest is the body of a plan: the agents to ask (none: every
// accepted one) and how long to wait for their answers ("30s"; at most
// record.MaxPlanTimeout).
type PlanRequest struct {
	Agents  []string `json:"agents,omitempty"`
	Timeout string   `json:"timeout,omitempty"`
}

// planRoutes are the routes that say what a version would do before it
// is released.
func (a *API) planRoutes() []route {
	return []route{
		{method: "GET", path: "/envs/:env/versions/:n/release-preview", role: record.RoleViewer, summary: "What releasing a version would take away, before it is released: per accepted agent, the resources it holds (of the version it holds) that the version does not have, each orphaned (left on the host as it is) or absent (purged already), and the agents that would leave the model (the version has nothing for them); nothing is released. Clients ask their user to confirm a release that takes anything away", out: of[record.ReleasePreview](), serve: a.releasePreview},
		{method: "POST", path: "/envs/:env/versions/:n/plan", role: record.RoleViewer, action: "version.plan", summary: "Plan a version before releasing it: each live agent dry-runs its part of the version (not released, nothing changed on any host) and the answer says, per agent and per attribute, what a deploy would change (current → desired, sensitive values redacted), naming the agents that did not answer within timeout (default 30s, at most 90s)", in: of[PlanRequest](), inOptional: true, out: of[record.Plan](), wait: true, serve: a.plan},
	}
}

func (a *API) plan(r *request) (int, any, error) {
	in := r.input()
	env, n := in.existingEnv(), in.version()
	var req PlanRequest
	in.optionalBody(&req)
	in.check(validAgentNames(req.Agents))
	timeout := take(in, func() (time.Duration, error) { return planTimeout(req.Timeout) })
	plans := take(in, func() (Plans, error) { return a.plans(r, env, n, "this server answers no plans") })
	if in.err != nil {
		return 0, nil, in.err
	}
	p, err := plans.Plan(r.ctx(), env, n, record.PlanRequest{Agents: req.Agents, Timeout: timeout, OfflineAfter: a.cfg.OfflineAfter})
	if err != nil {
		return 0, nil, err
	}
	r.detail = fmt.Sprintf("plan %s of version %d", p.ID, n)
	return http.StatusOK, p, nil
}

// planTimeout reads a plan's timeout (default record.DefaultPlanTimeout).
func planTimeout(s string) (time.Duration, error) {
	if s == "" {
		return record.DefaultPlanTimeout, nil
	}
	timeout, err := time.ParseDuration(s)
	if err != nil || timeout <= 0 || timeout > record.MaxPlanTimeout {
		return 0, newError("invalid", "give a duration such as 30s", "timeout %q: want a duration above 0 and at most %s", clip(s), record.MaxPlanTimeout)
	}
	return timeout, nil
}

// plans returns the server's plans to plan or preview version n of env,
// once the version is found there; a server without them answers
// conflict (none says so).
func (a *API) plans(r *request, env string, n int64, none string) (Plans, error) {
	if a.svc.Plans == nil {
		return nil, newError("conflict", "", "%s", none)
	}
	return a.svc.Plans, a.versionThere(r, env, n)
}

// releasePreview says what releasing a version would take away from each
// accepted agent, before it is released: what a client asks its user to
// confirm.
func (a *API) releasePreview(r *request) (int, any, error) {
	in := r.input()
	env, n := in.existingEnv(), in.version()
	plans := take(in, func() (Plans, error) { return a.plans(r, env, n, "this server previews no releases") })
	return answer(in, func() (record.ReleasePreview, error) { return plans.ReleasePreview(r.ctx(), env, n) })
}
