package api

import (
	"context"
	"crypto/subtle"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"

	"github.com/tetherhq/tether/model"
	"github.com/tetherhq/tether/server/clientlimit"
	"github.com/tetherhq/tether/server/record"
)

// SessionCookie is the name of the cookie a logged-in browser sends.
const SessionCookie = "tether_session"

// People keeps organizations, users and their sessions (the store).
type People interface {
	CreateOrg(ctx context.Context, o record.Org) error
	ListOrgs(ctx context.Context) ([]record.Org, error)
	DeleteOrg(ctx context.Context, name string) error
	CreateUser(ctx context.Context, u record.User) error
	GetUser(ctx context.Context, org, name string) (record.User, error)
	UserByID(ctx context.Context, id string) (record.User, error)
	ListUsers(ctx context.Context, org string) ([]record.User, error)
	UpdateUser(ctx context.Context, org, name string, fn func(*record.User) error) (record.User, error)
	DeleteUser(ctx context.Context, org, name string) error
	CreateSession(ctx context.Context, s record.Session) error
	SessionByHash(ctx context.Context, hash []byte) (record.Session, error)
	TouchSession(ctx context.Context, hash []byte, at time.Time) error
	DeleteSession(ctx context.Context, hash []byte) error
}

// session is the session a request was authenticated by.
type session struct {
	record.Session
	secret string
}

// sessionRoutes are the routes of logins, and of who calls.
func (a *API) sessionRoutes() []route {
	return []route{
		{method: "POST", path: "/session", action: "session.login", summary: "Log in with a user name and password: sets the session cookie tether_session and answers the session with its CSRF token (throttled per user name and address: 429 with Retry-After)", in: of[SessionRequest](), out: of[SessionView](), serve: a.login},
		{method: "GET", path: "/session", role: record.RoleViewer, summary: "The session of the cookie sent: its user and CSRF token (changes made with the cookie send it as X-CSRF-Token)", out: of[SessionView](), serve: a.getSession},
		{method: "DELETE", path: "/session", role: record.RoleViewer, action: "session.logout", summary: "Log out: end the session of the cookie sent", serve: a.logout},
		{method: "GET", path: "/whoami", role: record.RoleViewer, summary: "The calling token", out: of[Whoami](), serve: a.whoami},
	}
}

// sessionSecret returns the request's session cookie, if any.
func sessionSecret(req *http.Request) string {
	c, err := req.Cookie(SessionCookie)
	if err != nil || len(c.Value) > 256 {
		return ""
	}
	return c.Value
}

// credentialed reports whether the request carries a credential: a bearer
// token or a session cookie.
func credentialed(req *http.Request) bool { return bearer(req) != "" || sessionSecret(req) != "" }

// authenticate finds who calls: the bearer token, else the session
// cookie. A valid credential always authenticates, wherever it comes
// from; a bad one is counted against its client's bucket of failures
// (AuthFailureRate), and once that is empty it is answered 429 with
// Retry-After instead of 401.
func (a *API) authenticate(r *request) (record.Principal, error) {
	secret, cookie := bearer(r.Request()), false
	if secret == "" {
		secret, cookie = sessionSecret(r.Request()), true
	}
	if secret == "" {
		return record.Principal{}, newError("unauthorized", "send Authorization: Bearer <token> (tether reads it from TETHER_TOKEN or .tether.toml), or log in (POST /api/v1/session)", "no bearer token")
	}
	failed := func(e *Error) (record.Principal, error) {
		if ok, wait := a.authFailures.Take(a.client(r.Request()), a.now()); !ok {
			return record.Principal{}, rateLimited(wait, "too many failed authentications from this address",
				"wait the Retry-After seconds, and check the tokens sent from here: too many were unknown, revoked or expired ("+e.Message+")")
		}
		return record.Principal{}, e
	}
	if cookie {
		return a.authenticateSession(r, secret, failed)
	}
	if len(secret) > 256 {
		return failed(newError("unauthorized", "check the token, or ask an admin for a new one", "unknown or revoked token"))
	}
	tok, err := a.svc.Tokens.TokenByHash(r.ctx(), record.HashSecret(secret))
	if errors.Is(err, model.ErrNotFound) {
		return failed(newError("unauthorized", "check the token, or ask an admin for a new one", "unknown or revoked token"))
	}
	if err != nil {
		return record.Principal{}, err
	}
	if tok.Expired(a.now()) {
		return failed(newError("unauthorized", "ask an admin for a new token", "token %q expired at %s", tok.Name, tok.ExpiresAt.Format(time.RFC3339)))
	}
	var owner *record.User
	if tok.Owner != "" && a.svc.People != nil {
		u, err := a.svc.People.UserByID(r.ctx(), tok.Owner)
		if errors.Is(err, model.ErrNotFound) {
			return failed(newError("unauthorized", "ask an admin for a new token", "token %q: its user was deleted", tok.Name))
		}
		if err != nil {
			return record.Principal{}, err
		}
		owner = &u
	}
	r.token = tok
	clientlimit.Vouch(r.ctx())
	return record.TokenPrincipal(tok, owner), nil
}

func (a *API) authenticateSession(r *request, secret string, failed func(*Error) (record.Principal, error)) (record.Principal, error) {
	again := "log in again (POST /api/v1/session)"
	if a.svc.People == nil {
		return failed(newError("unauthorized", "use a bearer token", "this server has no users"))
	}
	hash := record.HashSecret(secret)
	se, err := a.svc.People.SessionByHash(r.ctx(), hash)
	if errors.Is(err, model.ErrNotFound) {
		return failed(newError("unauthorized", again, "unknown or ended session"))
	}
	if err != nil {
		return record.Principal{}, err
	}
	now := a.now()
	if se.Expired(now, a.cfg.SessionIdle) {
		if err := a.svc.People.DeleteSession(r.ctx(), hash); err != nil {
			return record.Principal{}, err
		}
		return failed(newError("unauthorized", again, "session expired"))
	}
	u, err := a.svc.People.UserByID(r.ctx(), se.UserID)
	if errors.Is(err, model.ErrNotFound) {
		return failed(newError("unauthorized", again, "unknown or ended session"))
	}
	if err != nil {
		return record.Principal{}, err
	}
	// The last use is written at most once a minute: not a write per
	// request, and the idle window is far longer.
	if now.Sub(se.LastSeen) > time.Minute {
		if err := a.svc.People.TouchSession(r.ctx(), hash, now.UTC()); err != nil {
			return record.Principal{}, err
		}
		se.LastSeen = now.UTC()
	}
	r.session = &session{Session: se, secret: secret}
	clientlimit.Vouch(r.ctx())
	r.token = record.Token{ID: u.ID, Name: u.Name, Role: u.Role, Org: u.Org, CreatedBy: u.CreatedBy, CreatedAt: u.CreatedAt}
	return record.UserPrincipal(u), nil
}

// unsafe reports whether a method changes something (and so needs the
// CSRF token with a session).
func unsafe(method string) bool {
	switch method {
	case http.MethodGet, http.MethodHead, http.MethodOptions:
		return false
	}
	return true
}

// checkCSRF refuses a change made with a session cookie that does not
// carry the session's CSRF token (header X-CSRF-Token, or form field csrf).
func (a *API) checkCSRF(r *request) error {
	if r.session == nil || !unsafe(r.Request().Method) {
		return nil
	}
	got := r.Request().Header.Get("X-CSRF-Token")
	if got == "" && strings.HasPrefix(r.Request().Header.Get("Content-Type"), "application/x-www-form-urlencoded") {
		req := r.Request()
		req.Body = http.MaxBytesReader(r.Response().Writer, req.Body, a.cfg.MaxBody)
		got = req.PostFormValue("csrf")
	}
	want := record.CSRFToken(r.session.secret)
	if got == "" || subtle.ConstantTimeCompare([]byte(got), []byte(want)) != 1 {
		return newError("csrf_failed", "send the session's CSRF token (GET /api/v1/session) in the X-CSRF-Token header, or the form field csrf",
			"%s with a session cookie needs the session's CSRF token", r.Request().Method)
	}
	return nil
}

// SessionRequest logs in.
type SessionRequest struct {
	// Org is the user's organization (default: the default one).
	Org      string `json:"org,omitempty"`
	Name     string `json:"name"`
	Password string `json:"password"`
}

// SessionView is a session as its user sees it.
type SessionView struct {
	User      record.User `json:"user"`
	Org       string      `json:"org"`
	CSRF      string      `json:"csrf"`
	ExpiresAt time.Time   `json:"expires_at"`
}

func (a *API) people() (People, error) {
	return present(a.svc.People, newError("conflict", "use a bearer token", "this server has no users"))
}

// login checks a user name and password and starts a session. Failures
// are throttled per user name and per client address, and written to the
// audit log; a run of them raises a security entry there and a warning in
// the server's log.
func (a *API) login(r *request) (int, any, error) {
	people, err := a.people()
	if err != nil {
		return 0, nil, err
	}
	var req SessionRequest
	if err := a.decode(r, &req); err != nil {
		return 0, nil, err
	}
	org := record.OrgOr(req.Org)
	if err := record.ValidateOrgName(org); err != nil {
		return 0, nil, newError("invalid", "", "%v", err)
	}
	if err := record.ValidateUserName(req.Name); err != nil {
		return 0, nil, newError("invalid", "", "%v", err)
	}
	if len(req.Password) > record.MaxPasswordLen {
		return 0, nil, newError("invalid", "", "password: want at most %d characters", record.MaxPasswordLen)
	}
	client := a.client(r.Request()).String()
	userKey := org + "/" + req.Name
	now := a.now()
	if wait, why := a.logins.admit(now, userKey, client); wait > 0 {
		return 0, nil, loginHeldBack(wait, why)
	}
	u, err := people.GetUser(r.ctx(), org, req.Name)
	if err != nil && !errors.Is(err, model.ErrNotFound) {
		return 0, nil, err
	}
	ok, err := a.checkPassword(r.ctx(), u.Password, req.Password)
	if err != nil {
		return 0, nil, err
	}
	if !ok {
		a.loginFailed(r, org, req.Name, client, now)
		return 0, nil, newError("unauthorized", "check the organization, user name and password", "wrong user name or password")
	}
	a.logins.succeeded(userKey, client)
	clientlimit.Vouch(r.ctx())
	secret, err := record.NewSessionSecret()
	if err != nil {
		return 0, nil, err
	}
	se := record.Session{Hash: record.HashSecret(secret), UserID: u.ID, CreatedAt: now.UTC(), LastSeen: now.UTC(), ExpiresAt: now.Add(a.cfg.SessionMaxAge).UTC()}
	if err := people.CreateSession(r.ctx(), se); err != nil {
		return 0, nil, err
	}
	r.SetCookie(&http.Cookie{Name: SessionCookie, Value: secret, Path: "/", HttpOnly: true, SameSite: http.SameSiteStrictMode,
		Secure: r.Request().TLS != nil || a.cfg.SecureCookies, Expires: se.ExpiresAt, MaxAge: int(a.cfg.SessionMaxAge / time.Second)})
	r.who = record.UserPrincipal(u)
	r.token = record.Token{ID: u.ID, Name: u.Name}
	return http.StatusOK, SessionView{User: u, Org: u.Org, CSRF: record.CSRFToken(secret), ExpiresAt: se.ExpiresAt}, nil
}

// dummyHash is checked against when the user does not exist, so that a
// wrong name costs as long as a wrong password.
var dummyHash = sync.OnceValue(func() string {
	h, _ := record.HashPassword("no such user", record.DefaultPasswordParams)
	return h
})

// checkPassword checks pw against the encoded hash (a made-up one when
// encoded is empty), at most a few at once: each takes tens of MiB.
func (a *API) checkPassword(ctx context.Context, encoded, pw string) (bool, error) {
	select {
	case a.hashing <- struct{}{}:
		defer func() { <-a.hashing }()
	case <-ctx.Done():
		return false, ctx.Err()
	}
	if encoded == "" {
		_, _ = record.CheckPassword(dummyHash(), pw)
		return false, nil
	}
	ok, err := record.CheckPassword(encoded, pw)
	if err != nil {
		return false, fmt.Errorf("check password: %w", err)
	}
	return ok, nil
}

// hashPassword hashes a new password, at most a few at once.
func (a *API) hashPassword(ctx context.Context, pw string) (string, error) {
	if err := record.ValidatePassword(pw); err != nil {
		return "", newError("invalid", "choose a longer password (a passphrase of a few words is good)", "%v", err)
	}
	select {
	case a.hashing <- struct{}{}:
		defer func() { <-a.hashing }()
	case <-ctx.Done():
		return "", ctx.Err()
	}
	return record.HashPassword(pw, a.cfg.Password)
}

// loginHeldBack is the answer to a login the guard holds back, saying
// which count holds it.
func loginHeldBack(wait time.Duration, why holdBack) *Error {
	hint := "wait the Retry-After seconds; an admin can set a new password (tether user passwd)"
	switch why {
	case heldByAddr:
		return rateLimited(wait, "too many failed logins from this address", hint)
	case heldByName:
		return rateLimited(wait, "too many failed logins for this user, from this address among others",
			"wait the Retry-After seconds; its password is being guessed from several addresses, and an address that has not failed for this user is not held back")
	}
	return rateLimited(wait, "too many failed logins for this user from this address", hint)
}

// loginFailed counts a failed login, writes it to the audit log and, at
// the alert thresholds, raises a security entry and a warning: for
// failures in a row from one address, and for a name failed from many
// addresses (a distributed attack, also a security alert on the event
// stream).
func (a *API) loginFailed(r *request, org, name, client string, now time.Time) {
	f := a.logins.failed(now, org+"/"+name, client)
	e := record.AuditEntry{Org: org, Actor: model.Clip("login "+name+" from "+client, model.MaxAuditLen), Action: "session.login-failed",
		Target: name, Detail: fmt.Sprintf("failure %d in a row from this address, %d of this user from %d addresses", max(f.pair, f.addr), f.name, f.addrs)}
	a.recordAudit(r, e)
	if max(f.pair, f.addr) == a.cfg.LoginAlertAfter {
		a.log.Warn().Str("org", org).Str("user", name).Str("client", client).Int("failures", max(f.pair, f.addr)).Msg("security: repeated failed logins")
		e.Action, e.Detail = "security.login-failures", fmt.Sprintf("%d failed logins in a row: the address is held back", max(f.pair, f.addr))
		a.recordAudit(r, e)
	}
	if f.attack {
		what := fmt.Sprintf("user %s of organization %s: %d failed logins from %d addresses within %s, a distributed password guess; the addresses that failed are held back, others are not",
			name, org, f.name, f.addrs, loginWindow)
		e.Actor, e.Action, e.Detail = "login "+name, "security.login-attack", model.Clip(what, model.MaxAuditLen)
		a.recordAudit(r, e)
		if a.svc.Alerts != nil {
			a.svc.Alerts.SecurityNotice(r.ctx(), org, what) // logs it too
		} else {
			a.log.Warn().Str("org", org).Str("user", name).Int("failures", f.name).Int("addresses", f.addrs).Msg("security: a user's password is guessed from many addresses")
		}
	}
}

func (a *API) getSession(r *request) (int, any, error) {
	if r.session == nil {
		return 0, nil, newError("unauthorized", "log in (POST /api/v1/session)", "no session: this request came with a bearer token")
	}
	u, err := a.svc.People.UserByID(r.ctx(), r.session.UserID)
	if err != nil {
		return 0, nil, err
	}
	return http.StatusOK, SessionView{User: u, Org: u.Org, CSRF: record.CSRFToken(r.session.secret), ExpiresAt: r.session.ExpiresAt}, nil
}

func (a *API) logout(r *request) (int, any, error) {
	if r.session == nil {
		return 0, nil, newError("unauthorized", "", "no session: this request came with a bearer token")
	}
	if err := a.svc.People.DeleteSession(r.ctx(), r.session.Hash); err != nil {
		return 0, nil, err
	}
	r.SetCookie(&http.Cookie{Name: SessionCookie, Value: "", Path: "/", HttpOnly: true, SameSite: http.SameSiteStrictMode,
		Secure: r.Request().TLS != nil || a.cfg.SecureCookies, MaxAge: -1})
	return http.StatusNoContent, nil, nil
}

// Whoami is who calls: the calling token (for a user, the user's ID, name
// and organization-wide role), with the organization and every role.
type Whoami struct {
	record.Token
	Kind        string                 `json:"kind"`
	Roles       map[string]record.Role `json:"roles,omitempty"`
	User        string                 `json:"user,omitempty"`
	ServerAdmin bool                   `json:"server_admin,omitempty"`
}

func (a *API) whoami(r *request) (int, any, error) {
	w := Whoami{Token: r.token, Kind: r.who.Kind, Roles: r.who.Roles, User: r.who.UserID, ServerAdmin: r.who.ServerAdmin()}
	w.Org = r.who.Org
	return http.StatusOK, w, nil
}

// newID returns a fresh ID for a user.
func newID() string { return uuid.NewString() }
