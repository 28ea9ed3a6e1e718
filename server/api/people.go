package api

import (
	"errors"
	"fmt"
	"net/http"
	"sort"

	"github.com/tetherhq/tether/model"
	"github.com/tetherhq/tether/server/record"
)

// UserRequest creates a user.
type UserRequest struct {
	Name     string `json:"name"`
	Password string `json:"password"`
	// Role is the user's role in every environment of the organization.
	Role record.Role `json:"role,omitempty"`
	// Roles are roles in single environments.
	Roles map[string]record.Role `json:"roles,omitempty"`
}

// UserUpdate changes a user: what is set changes. A role of "" in Roles
// (or Role set to "none") takes that role away.
type UserUpdate struct {
	Role  *record.Role           `json:"role,omitempty"`
	Roles map[string]record.Role `json:"roles,omitempty"`
	// Password sets a new password, which ends the user's sessions. Users
	// may change their own with CurrentPassword.
	Password        string `json:"password,omitempty"`
	CurrentPassword string `json:"current_password,omitempty"`
}

// OrgRequest creates an organization.
type OrgRequest struct {
	Name string `json:"name"`
}

// peopleRoutes are the routes of users and organizations.
func (a *API) peopleRoutes() []route {
	return []route{
		{method: "GET", path: "/users", role: record.RoleAdmin, global: true, summary: "List the organization's users (a server admin names another organization with org)", query: []param{pOrg}, out: of[[]record.User](), serve: a.listUsers},
		{method: "POST", path: "/users", role: record.RoleAdmin, global: true, action: "user.create", summary: "Create a user with a password and roles (role: in every environment of the organization; roles: per environment)", query: []param{pOrg}, in: of[UserRequest](), out: of[record.User](), ok: []int{http.StatusCreated}, serve: a.createUser},
		{method: "GET", path: "/users/:name", role: record.RoleAdmin, global: true, summary: "Show a user with its roles", query: []param{pOrg}, out: of[record.User](), serve: a.getUser},
		{method: "PATCH", path: "/users/:name", role: record.RoleViewer, anyone: true, action: "user.update", summary: "Change a user's roles or password (a new password ends the user's sessions); users may change their own password with current_password", query: []param{pOrg}, in: of[UserUpdate](), out: of[record.User](), serve: a.updateUser},
		{method: "DELETE", path: "/users/:name", role: record.RoleAdmin, global: true, action: "user.delete", summary: "Delete a user with its sessions and the tokens it owns", query: []param{pOrg}, serve: a.deleteUser},
		{method: "GET", path: "/orgs", role: record.RoleAdmin, global: true, server: true, summary: "List organizations (server admins)", out: of[[]record.Org](), serve: a.listOrgs},
		{method: "POST", path: "/orgs", role: record.RoleAdmin, global: true, server: true, action: "org.create", summary: "Create an organization (server admins); then create its first admin with POST /users?org=", in: of[OrgRequest](), out: of[record.Org](), ok: []int{http.StatusCreated}, serve: a.createOrg},
		{method: "DELETE", path: "/orgs/:org", role: record.RoleAdmin, global: true, server: true, action: "org.delete", summary: "Delete an organization without environments, with its users and tokens (server admins)", serve: a.deleteOrg},
	}
}

// org is the organization a users route acts in (userOrg).
func (in *input) org() string { return take(in, in.r.userOrg) }

// orgBody decodes the body of a users route into v, then reads the
// organization it acts in.
func (in *input) orgBody(v any) string {
	in.body(v)
	return in.org()
}

// user is the :name parameter of a users route.
func (in *input) user() string { return take(in, in.r.userName) }

// userOrg is the organization a users route acts in: the caller's, or,
// for a server admin, the one named by ?org=. An organization the caller
// may not see answers not_found, as a missing one.
func (r *request) userOrg() (string, error) {
	org := r.QueryParam("org")
	if org == "" || org == r.who.Org {
		return r.who.Org, nil
	}
	if err := record.ValidateOrgName(org); err != nil {
		return "", newError("bad_request", "", "org=: %v", err)
	}
	if !r.who.ServerAdmin() {
		return "", newError("not_found", "", "organization %s not found", clip(org))
	}
	orgs, err := r.api.svc.People.ListOrgs(r.ctx())
	if err != nil {
		return "", err
	}
	for _, o := range orgs {
		if o.Name == org {
			return org, nil
		}
	}
	return "", newError("not_found", "tether org list shows them", "organization %s not found", clip(org))
}

// checkRoles checks roles a request gives: known roles in environments of
// the organization (another organization's answers not_found, as a
// missing one).
func (a *API) checkRoles(r *request, org string, roles map[string]record.Role, allowNone bool) error {
	for env, role := range roles {
		if err := model.ValidateEnvName(clip(env)); err != nil {
			return newError("invalid", "", "roles: %v", err)
		}
		if !(role.Valid() || allowNone && role == "") {
			return newError("invalid", "", "roles: role %q in %s: want admin, operator or viewer", clip(string(role)), env)
		}
		e, err := a.svc.Envs.GetEnv(r.ctx(), env)
		if isNotFound(err) || err == nil && record.OrgOr(e.Org) != org {
			return newError("not_found", "create it first (tether env create)", "environment %s not found", clip(env))
		}
		if err != nil {
			return err
		}
	}
	return nil
}

func (a *API) listUsers(r *request) (int, any, error) {
	in := r.input()
	org := in.org()
	return listing(in, func() ([]record.User, error) { return a.svc.People.ListUsers(r.ctx(), org) })
}

func (a *API) createUser(r *request) (int, any, error) {
	in := r.input()
	var req UserRequest
	org := in.orgBody(&req)
	if in.err != nil {
		return 0, nil, in.err
	}
	if err := record.ValidateUserName(req.Name); err != nil {
		return 0, nil, newError("invalid", "", "%v", err)
	}
	if req.Role != "" && !req.Role.Valid() {
		return 0, nil, newError("invalid", "", "role %q: want admin, operator or viewer (or none)", clip(string(req.Role)))
	}
	if err := a.checkRoles(r, org, req.Roles, false); err != nil {
		return 0, nil, err
	}
	hash, err := a.hashPassword(r.ctx(), req.Password)
	if err != nil {
		return 0, nil, err
	}
	now := a.now().UTC()
	u := record.User{ID: newID(), Org: org, Name: req.Name, Role: req.Role, Roles: req.Roles, Password: hash, CreatedBy: r.who.Name, CreatedAt: now, PasswordChangedAt: now}
	r.naming("name", req.Name)
	if err := a.svc.People.CreateUser(r.ctx(), u); err != nil {
		if errors.Is(err, model.ErrExists) {
			return 0, nil, newError("exists", "choose another name, or change that user (tether user grant, tether user passwd)", "user %s already exists", req.Name)
		}
		return 0, nil, err
	}
	r.auditOrg = org
	r.detail = fmt.Sprintf("org %s, role %q, roles %v", org, u.Role, u.Roles)
	return http.StatusCreated, u, nil
}

// userName returns the :name parameter of a users route, checked.
func (r *request) userName() (string, error) {
	name := r.Param("name")
	if err := record.ValidateUserName(name); err != nil {
		return "", newError("bad_request", "", "%v", err)
	}
	return name, nil
}

func (a *API) getUser(r *request) (int, any, error) {
	in := r.input()
	name, org := in.user(), in.org()
	return answer(in, func() (record.User, error) { return a.svc.People.GetUser(r.ctx(), org, name) })
}

// updateUser changes a user's roles or password: an organization admin
// changes anyone's; a user may change their own password, giving the
// current one.
func (a *API) updateUser(r *request) (int, any, error) {
	in := r.input()
	name := in.user()
	var req UserUpdate
	org := in.orgBody(&req)
	if in.err != nil {
		return 0, nil, in.err
	}
	admin := r.who.Role == record.RoleAdmin && !r.who.Scoped()
	self := r.who.UserID != "" && org == r.who.Org && name == r.who.Name && r.who.Kind == record.PrincipalUser
	if !admin {
		if !self || req.Role != nil || len(req.Roles) > 0 {
			return 0, nil, newError("forbidden", "ask an admin of the organization", "changing user %s needs an admin of the organization; users may change their own password only", name)
		}
	}
	if req.Role != nil && *req.Role != "" && *req.Role != "none" && !req.Role.Valid() {
		return 0, nil, newError("invalid", "", "role %q: want admin, operator, viewer or none", clip(string(*req.Role)))
	}
	if err := a.checkRoles(r, org, req.Roles, true); err != nil {
		return 0, nil, err
	}
	if req.Role == nil && len(req.Roles) == 0 && req.Password == "" {
		return 0, nil, newError("invalid", "", "nothing to change: give role, roles or password")
	}
	var hash string
	var err error
	if req.Password != "" {
		if hash, err = a.hashPassword(r.ctx(), req.Password); err != nil {
			return 0, nil, err
		}
	}
	if !admin {
		cur, err := a.svc.People.GetUser(r.ctx(), org, name)
		if err != nil {
			return 0, nil, err
		}
		ok, err := a.checkPassword(r.ctx(), cur.Password, req.CurrentPassword)
		if err != nil {
			return 0, nil, err
		}
		if !ok {
			return 0, nil, newError("forbidden", "give your current password as current_password", "current password is wrong")
		}
	}
	u, err := a.svc.People.UpdateUser(r.ctx(), org, name, func(u *record.User) error {
		if req.Role != nil {
			u.Role = *req.Role
			if u.Role == "none" {
				u.Role = ""
			}
		}
		for env, role := range req.Roles {
			if u.Roles == nil {
				u.Roles = map[string]record.Role{}
			}
			if role == "" {
				delete(u.Roles, env)
			} else {
				u.Roles[env] = role
			}
		}
		if hash != "" {
			u.Password = hash
			u.PasswordChangedAt = a.now().UTC()
		}
		return nil
	})
	if err != nil {
		return 0, nil, err
	}
	r.auditOrg = org
	envs := make([]string, 0, len(req.Roles))
	for env := range req.Roles {
		envs = append(envs, env+"="+string(req.Roles[env]))
	}
	sort.Strings(envs)
	r.detail = fmt.Sprintf("role %q, roles %v, password changed %t", u.Role, envs, hash != "")
	return http.StatusOK, u, nil
}

func (a *API) deleteUser(r *request) (int, any, error) {
	in := r.input()
	name, org := in.user(), in.org()
	return removed(in, func() error {
		if r.who.Kind == record.PrincipalUser && org == r.who.Org && name == r.who.Name {
			return newError("conflict", "ask another admin to delete you", "you cannot delete yourself")
		}
		r.auditOrg = org
		return a.svc.People.DeleteUser(r.ctx(), org, name)
	})
}

func (a *API) listOrgs(r *request) (int, any, error) {
	return listing(r.input(), func() ([]record.Org, error) { return a.svc.People.ListOrgs(r.ctx()) })
}

func (a *API) createOrg(r *request) (int, any, error) {
	var req OrgRequest
	if err := a.decode(r, &req); err != nil {
		return 0, nil, err
	}
	if err := record.ValidateOrgName(req.Name); err != nil {
		return 0, nil, newError("invalid", "", "%v", err)
	}
	o := record.Org{Name: req.Name, CreatedAt: a.now().UTC()}
	r.naming("org", req.Name)
	if err := a.svc.People.CreateOrg(r.ctx(), o); err != nil {
		if errors.Is(err, model.ErrExists) {
			return 0, nil, newError("exists", "choose another name", "organization %s already exists", req.Name)
		}
		return 0, nil, err
	}
	return http.StatusCreated, o, nil
}

func (a *API) deleteOrg(r *request) (int, any, error) {
	org := r.Param("org")
	if err := record.ValidateOrgName(org); err != nil {
		return 0, nil, newError("bad_request", "", "%v", err)
	}
	err := a.svc.People.DeleteOrg(r.ctx(), org)
	if errors.Is(err, model.ErrConflict) {
		return 0, nil, newError("conflict", "delete its environments first (the default organization always stays)", "organization %s has environments, or is the default one: it cannot be deleted", org)
	}
	return http.StatusNoContent, nil, err
}
