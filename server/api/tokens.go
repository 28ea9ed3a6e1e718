package api

import (
	"fmt"
	"net/http"
	"time"

	"github.com/google/uuid"

	"github.com/tetherhq/tether/server/record"
)

// TokenRequest creates an API token.
type TokenRequest struct {
	Name string      `json:"name"`
	Role record.Role `json:"role"`
	Env  string      `json:"env,omitempty"`
	// ExpiresIn: "720h"; empty: never.
	ExpiresIn string `json:"expires_in,omitempty"`
	// User names the user of the organization who owns the token (whose
	// rights bound it); by default the calling user, or the user owning
	// the calling token. OrgOwned makes the organization its owner.
	User     string `json:"user,omitempty"`
	OrgOwned bool   `json:"org_owned,omitempty"`
}

// tokenRoutes are the routes of the organization's API tokens.
func (a *API) tokenRoutes() []route {
	return []route{
		{method: "GET", path: "/tokens", role: record.RoleAdmin, global: true, summary: "List the organization's API tokens", out: of[[]record.Token](), serve: a.listTokens},
		{method: "POST", path: "/tokens", role: record.RoleAdmin, global: true, action: "token.create", summary: "Create an API token; its secret is shown once. It is owned by the calling user (whose rights bound it), by the user named, or by the organization (org_owned)", in: of[TokenRequest](), out: of[NewToken](), ok: []int{http.StatusCreated}, serve: a.createToken},
		{method: "DELETE", path: "/tokens/:id", role: record.RoleAdmin, global: true, action: "token.revoke", summary: "Revoke an API token", pathParams: []param{pUUID}, serve: a.revokeToken},
	}
}

func (a *API) listTokens(r *request) (int, any, error) {
	return listing(r.input(), func() ([]record.Token, error) {
		ts, err := a.svc.Tokens.ListTokens(r.ctx())
		return only(ts, func(t record.Token) bool { return record.OrgOr(t.Org) == r.who.Org }), err
	})
}

// NewToken is a created token with its secret, shown this once.
type NewToken struct {
	record.Token
	Secret string `json:"secret"`
}

func (a *API) createToken(r *request) (int, any, error) {
	var req TokenRequest
	if err := a.decode(r, &req); err != nil {
		return 0, nil, err
	}
	t, secret, err := IssueToken(req.Name, req.Role, req.Env, r.token.Name, a.now())
	if err != nil {
		return 0, nil, err
	}
	if t.ExpiresAt, err = a.expiry(req.ExpiresIn, "720h"); err != nil {
		return 0, nil, err
	}
	if t.Env != "" {
		if e, err := a.svc.Envs.GetEnv(r.ctx(), t.Env); isNotFound(err) || err == nil && record.OrgOr(e.Org) != r.who.Org {
			return 0, nil, newError("not_found", "create it first, or leave env out for a token of every environment", "environment %s does not exist", t.Env)
		} else if err != nil {
			return 0, nil, err
		}
	}
	t.Org = r.who.Org
	switch {
	case req.OrgOwned && req.User != "":
		return 0, nil, newError("invalid", "give user or org_owned, not both", "a token is owned by a user or by the organization")
	case req.OrgOwned:
	case req.User != "":
		if a.svc.People == nil {
			return 0, nil, newError("conflict", "leave user out", "this server keeps no users")
		}
		u, err := a.svc.People.GetUser(r.ctx(), r.who.Org, req.User)
		if isNotFound(err) {
			return 0, nil, newError("not_found", "tether user list shows the organization's users", "user %s not found", clip(req.User))
		} else if err != nil {
			return 0, nil, err
		}
		t.Owner = u.ID
	default:
		t.Owner = r.who.UserID
	}
	if err := a.svc.Tokens.CreateToken(r.ctx(), t); err != nil {
		return 0, nil, err
	}
	r.naming("id", t.ID)
	r.detail = fmt.Sprintf("%s, role %s, env %q", t.Name, t.Role, t.Env)
	return http.StatusCreated, NewToken{Token: t, Secret: secret}, nil
}

// expiry turns a request's expires_in into an expiry time (nil: never);
// example is the duration the error suggests.
func (a *API) expiry(expiresIn, example string) (*time.Time, error) {
	if expiresIn == "" {
		return nil, nil
	}
	d, err := time.ParseDuration(expiresIn)
	if err != nil || d <= 0 {
		return nil, newError("invalid", "", "expires_in %q: want a duration such as %s", clip(expiresIn), example)
	}
	exp := a.now().Add(d).UTC()
	return &exp, nil
}

// IssueToken makes a token and its secret (not stored).
func IssueToken(name string, role record.Role, env, by string, now time.Time) (record.Token, string, error) {
	secret, err := record.NewSecret()
	if err != nil {
		return record.Token{}, "", err
	}
	t := record.Token{ID: uuid.NewString(), Name: name, Role: role, Env: env, Hash: record.HashSecret(secret), CreatedBy: by, CreatedAt: now.UTC()}
	if err := t.Validate(); err != nil {
		return record.Token{}, "", newError("invalid", "", "%v", err)
	}
	return t, secret, nil
}

func (a *API) revokeToken(r *request) (int, any, error) {
	in := r.input()
	id := in.uuid("token")
	return removed(in, func() error {
		// Another organization's token is answered as a missing one.
		ts, err := a.svc.Tokens.ListTokens(r.ctx())
		if err != nil {
			return err
		}
		for _, t := range ts {
			if t.ID == id && record.OrgOr(t.Org) != r.who.Org {
				return newError("not_found", "", "token %s not found", id)
			}
		}
		return a.svc.Tokens.DeleteToken(r.ctx(), id)
	})
}
