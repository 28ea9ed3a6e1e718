package api

import (
	"errors"
	"fmt"
	"net/http"

	"github.com/tetherhq/tether/model"
	"github.com/tetherhq/tether/server/record"
)

// EnvRequest creates an environment.
type EnvRequest struct {
	Name     string            `json:"name"`
	Settings map[string]string `json:"settings,omitempty"`
}

// envRoutes are the routes of environments themselves.
func (a *API) envRoutes() []route {
	return []route{
		{method: "GET", path: "/envs", role: record.RoleViewer, summary: "List environments (those the token may see)", out: of[[]record.Environment](), serve: a.listEnvs},
		{method: "POST", path: "/envs", role: record.RoleAdmin, global: true, action: "env.create", summary: "Create an environment", in: of[EnvRequest](), out: of[record.Environment](), ok: []int{http.StatusCreated}, serve: a.createEnv},
		{method: "GET", path: "/envs/:env", role: record.RoleViewer, summary: "Show an environment", out: of[record.Environment](), serve: a.getEnv},
		{method: "DELETE", path: "/envs/:env", role: record.RoleAdmin, global: true, action: "env.delete", summary: "Delete an environment and everything in it", serve: a.deleteEnv},
	}
}

func (a *API) listEnvs(r *request) (int, any, error) {
	return listing(r.input(), func() ([]record.Environment, error) {
		envs, err := a.svc.Envs.ListEnvs(r.ctx())
		return only(envs, func(e record.Environment) bool { return sees(r.who, e) }), err
	})
}

func (a *API) createEnv(r *request) (int, any, error) {
	var req EnvRequest
	if err := a.decode(r, &req); err != nil {
		return 0, nil, err
	}
	if err := model.ValidateEnvName(clip(req.Name)); err != nil {
		return 0, nil, newError("invalid", "", "%v", err)
	}
	env := record.Environment{Name: req.Name, Org: r.who.Org, Settings: record.DefaultEnvSettings(), CreatedAt: a.now().UTC()}
	if err := setAll(&env.Settings, req.Settings); err != nil {
		return 0, nil, err
	}
	// The environment is the target from here on: in the audit log, and
	// in errors (exists: environment prod).
	r.naming("env", req.Name)
	if err := a.svc.Envs.CreateEnv(r.ctx(), env); err != nil {
		if errors.Is(err, model.ErrExists) {
			return 0, nil, newError("env_exists", fmt.Sprintf("choose another name; tether env show %s shows the one there is", clip(req.Name)),
				"environment %s already exists", clip(req.Name))
		}
		return 0, nil, err
	}
	got, err := a.svc.Envs.GetEnv(r.ctx(), req.Name)
	return http.StatusCreated, got, err
}

func (a *API) getEnv(r *request) (int, any, error) {
	in := r.input()
	env := in.env()
	return answer(in, func() (record.Environment, error) { return a.svc.Envs.GetEnv(r.ctx(), env) })
}

func (a *API) deleteEnv(r *request) (int, any, error) {
	in := r.input()
	env := in.env()
	return removed(in, func() error { return a.svc.Envs.DeleteEnv(r.ctx(), env) })
}
