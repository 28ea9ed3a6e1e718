package api

import (
	"errors"
	"net/http"

	"github.com/tetherhq/tether/model"
	"github.com/tetherhq/tether/server/record"
)

// compileRoutes are the routes of the server's compiles of environments'
// models (sources.go says where it reads them).
func (a *API) compileRoutes() []route {
	return []route{
		{method: "POST", path: "/envs/:env/compile", role: record.RoleOperator, action: "env.compile", summary: "Ask the server to compile the environment's model from its source (202 with the compile queue's state; 409 when the environment has no source)", out: of[record.CompileRequest](), ok: []int{http.StatusAccepted}, serve: a.requestCompile},
		{method: "GET", path: "/envs/:env/compiles", role: record.RoleViewer, summary: "The server's compiles of the environment's model, newest first", query: []param{pLimit}, out: of[[]record.Compile](), serve: a.listCompiles},
		{method: "GET", path: "/envs/:env/compiles/:id", role: record.RoleViewer, summary: "One compile's report: triggers, revision, outcome, diagnostics, resources per agent, version", out: of[record.Compile](), serve: a.getCompile},
	}
}

func (a *API) requestCompile(r *request) (int, any, error) {
	in := r.input()
	env := in.existingEnv()
	if in.err != nil {
		return 0, nil, in.err
	}
	if a.svc.Compiles == nil {
		return 0, nil, newError("conflict", "", "this server compiles no models: export versions instead (tether export)")
	}
	q, err := a.svc.Compiles.RequestCompile(r.ctx(), env, r.token.Name)
	if errors.Is(err, model.ErrConflict) {
		return 0, nil, newError("conflict", "give the environment a source first, or export versions (tether export)", "%s", err)
	}
	if err != nil {
		return 0, nil, err
	}
	return http.StatusAccepted, q, nil
}

func (a *API) listCompiles(r *request) (int, any, error) {
	return limitedListing(r, a.svc.Compiles, Compiles.ListCompiles)
}

func (a *API) getCompile(r *request) (int, any, error) {
	return envItem(r, "compile", a.svc.Compiles, Compiles.GetCompile)
}
