package api

import (
	"context"
	"fmt"

	"github.com/tetherhq/tether/model"
	"github.com/tetherhq/tether/server/record"
)

// authorize checks that who may call rt. An environment of another
// organization is answered as a missing one (not_found), never forbidden:
// organizations do not learn of each other's environments.
func (a *API) authorize(r *request, rt route) error {
	who := r.who
	env := r.Param("env")
	if env != "" && model.ValidateEnvName(clip(env)) == nil {
		if err := a.envVisible(r.ctx(), who, env); err != nil {
			return err
		}
		if who.Scoped() && !r.token.Covers(env) {
			return newError("forbidden", "", "token %q is scoped to environment %s, not %s", r.token.Name, r.token.Env, clip(env))
		}
	}
	if rt.global && who.Scoped() {
		return newError("forbidden", "", "token %q is scoped to environment %s; this needs a token for every environment", r.token.Name, r.token.Env)
	}
	var role record.Role
	switch {
	case env != "":
		role = who.RoleIn(env)
	case rt.global:
		role = who.Role
	default:
		role = who.Role
		for _, r := range who.Roles {
			if r.Allows(role) || role == "" {
				role = r
			}
		}
	}
	if !role.Allows(rt.role) && !rt.anyone {
		if who.Kind == record.PrincipalUser {
			where := "in this environment"
			if env == "" {
				where = "in every environment of the organization"
			}
			return newError("forbidden", "ask an admin of your organization for that role (tether user grant)", "user %s has role %s %s; %s %s needs %s", who.Name, orNone(role), where, rt.method, rt.path, rt.role)
		}
		return newError("forbidden", "ask an admin for a token with that role", "token %q has role %s; %s %s needs %s", who.Name, orNone(role), rt.method, rt.path, rt.role)
	}
	if rt.server && !who.ServerAdmin() {
		return newError("forbidden", "ask a server admin (an admin of the default organization)", "%s %s is for server admins", rt.method, rt.path)
	}
	return nil
}

func orNone(r record.Role) string {
	if r == "" {
		return "none"
	}
	return string(r)
}

// envVisible answers not_found, as for a missing environment, when env is
// not of who's organization.
func (a *API) envVisible(ctx context.Context, who record.Principal, env string) error {
	e, err := a.svc.Envs.GetEnv(ctx, env)
	if err != nil {
		return err
	}
	if record.OrgOr(e.Org) != who.Org {
		return fmt.Errorf("environment %q: %w", env, model.ErrNotFound)
	}
	return nil
}

// sees reports whether who may see environment e at all.
func sees(who record.Principal, e record.Environment) bool {
	return record.OrgOr(e.Org) == who.Org && who.RoleIn(e.Name) != ""
}
