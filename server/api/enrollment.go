package api

import (
	"fmt"
	"net/http"

	"github.com/google/uuid"

	"github.com/tetherhq/tether/model"
	"github.com/tetherhq/tether/server/record"
)

// EnrollmentTokenRequest creates an enrollment token.
type EnrollmentTokenRequest struct {
	Name string `json:"name"`
	// MaxUses bounds how many agents it enrolls; 0: no bound.
	MaxUses int `json:"max_uses,omitempty"`
	// ExpiresIn: "24h"; empty: never.
	ExpiresIn string `json:"expires_in,omitempty"`
}

// enrollmentRoutes are the routes of the tokens agents enroll with.
func (a *API) enrollmentRoutes() []route {
	return []route{
		{method: "GET", path: "/envs/:env/enrollment-tokens", role: record.RoleOperator, summary: "List the environment's enrollment tokens (never their secrets)", out: of[[]record.EnrollmentToken](), serve: a.listEnrollTokens},
		{method: "POST", path: "/envs/:env/enrollment-tokens", role: record.RoleOperator, action: "enrollment_token.create", summary: "Create an enrollment token: agents that say hello with it are accepted (enrollment policy token); its secret is shown once", in: of[EnrollmentTokenRequest](), out: of[NewEnrollmentToken](), ok: []int{http.StatusCreated}, serve: a.createEnrollToken},
		{method: "DELETE", path: "/envs/:env/enrollment-tokens/:id", role: record.RoleOperator, action: "enrollment_token.revoke", summary: "Revoke an enrollment token (agents it enrolled stay enrolled)", pathParams: []param{pUUID}, serve: a.revokeEnrollToken},
	}
}

func (a *API) listEnrollTokens(r *request) (int, any, error) {
	return envListing(r, a.svc.Enrollment, EnrollmentTokens.ListEnrollTokens)
}

// NewEnrollmentToken is a created enrollment token with its secret, shown
// this once: agents pass it as --token.
type NewEnrollmentToken struct {
	record.EnrollmentToken
	Token string `json:"token"`
}

func (a *API) createEnrollToken(r *request) (int, any, error) {
	in := r.input()
	env := in.env()
	var req EnrollmentTokenRequest
	in.body(&req)
	if in.err != nil {
		return 0, nil, in.err
	}
	if req.Name == "" {
		return 0, nil, newError("invalid", "", "name is required: say what the token is for (a rack, a team, an image)")
	}
	if req.MaxUses < 0 {
		return 0, nil, newError("invalid", "", "max_uses %d: want 0 (no bound) or more", req.MaxUses)
	}
	// The token carries the server key's fingerprint: an agent started
	// with it trusts only this server.
	secret, err := model.NewEnrollmentToken(a.serverKey())
	if err != nil {
		return 0, nil, err
	}
	t := record.EnrollmentToken{ID: uuid.NewString(), Env: env, Name: req.Name, Hash: record.HashSecret(secret), MaxUses: req.MaxUses,
		CreatedBy: r.token.Name, CreatedAt: a.now().UTC()}
	if t.ExpiresAt, err = a.expiry(req.ExpiresIn, "24h"); err != nil {
		return 0, nil, err
	}
	if err := t.Validate(); err != nil {
		return 0, nil, newError("invalid", "", "%v", err)
	}
	if err := a.svc.Enrollment.CreateEnrollToken(r.ctx(), t); err != nil {
		return 0, nil, err
	}
	r.naming("env", env, "id", t.ID)
	r.detail = fmt.Sprintf("%s, max uses %d", t.Name, t.MaxUses)
	return http.StatusCreated, NewEnrollmentToken{EnrollmentToken: t, Token: secret}, nil
}

func (a *API) revokeEnrollToken(r *request) (int, any, error) {
	in := r.input()
	env, id := in.env(), in.uuid("enrollment token")
	return removed(in, func() error { return a.svc.Enrollment.DeleteEnrollToken(r.ctx(), env, id) })
}
