package api

import (
	"errors"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/labstack/echo/v4/middleware"

	"github.com/tetherhq/tether/model"
)

// route is one endpoint: how it is reached, who may call it, what it is
// called in the audit log and the OpenAPI document, and what serves it.
type route struct {
	method, path string
	// role is the least role that may call it; "" needs no token.
	role model.Role
	// global routes need a token valid for every environment.
	global bool
	// action names a change in the audit log; reads have none.
	action  string
	summary string
	// query lists the query parameters it reads (for the OpenAPI document).
	query []string
	// body describes the request body, if any.
	body  string
	serve func(r *request) (int, any, error)
}

// request is one call, authenticated.
type request struct {
	echo.Context
	api   *API
	token model.Token
	// detail is what the audit log says of the change beyond its target.
	detail string
}

func (a *API) routes() []route {
	return []route{
		{method: "GET", path: "/envs", role: model.RoleViewer, summary: "List environments (those the token may see)", serve: a.listEnvs},
		{method: "POST", path: "/envs", role: model.RoleAdmin, global: true, action: "env.create", summary: "Create an environment", body: "{name, settings?: {key: value}}", serve: a.createEnv},
		{method: "GET", path: "/envs/:env", role: model.RoleViewer, summary: "Show an environment", serve: a.getEnv},
		{method: "DELETE", path: "/envs/:env", role: model.RoleAdmin, global: true, action: "env.delete", summary: "Delete an environment and everything in it", serve: a.deleteEnv},
		{method: "GET", path: "/envs/:env/settings", role: model.RoleViewer, summary: "Show an environment's settings", serve: a.getSettings},
		{method: "PATCH", path: "/envs/:env/settings", role: model.RoleOperator, action: "env.settings", summary: "Change settings", body: "{key: value}", serve: a.patchSettings},
		{method: "POST", path: "/envs/:env/halt", role: model.RoleOperator, action: "env.halt", summary: "Halt every deploy of the environment", serve: a.halt(true)},
		{method: "POST", path: "/envs/:env/resume", role: model.RoleOperator, action: "env.resume", summary: "Resume a halted environment", serve: a.halt(false)},

		{method: "GET", path: "/envs/:env/versions", role: model.RoleViewer, summary: "List versions, newest first", serve: a.listVersions},
		{method: "POST", path: "/envs/:env/versions", role: model.RoleOperator, action: "version.export", summary: "Upload a compiled resource set as a new version", query: []string{"release"}, body: "{resources: [Resource], meta?: VersionMeta}", serve: a.putVersion},
		{method: "GET", path: "/envs/:env/versions/:n", role: model.RoleViewer, summary: "Show a version (with its resources, sensitive values redacted, if resources=true)", query: []string{"resources"}, serve: a.getVersion},
		{method: "GET", path: "/envs/:env/versions/:n/diff", role: model.RoleViewer, summary: "What changed from version `from` (default: the released one, or n-1) to n", query: []string{"from"}, serve: a.diffVersions},
		{method: "POST", path: "/envs/:env/versions/:n/release", role: model.RoleOperator, action: "version.release", summary: "Release a version", serve: a.release},

		{method: "GET", path: "/envs/:env/resources", role: model.RoleViewer, summary: "List resources with their state and compliance", query: []string{"agent", "type", "state", "compliance"}, serve: a.listResources},
		{method: "GET", path: "/envs/:env/resources/:id", role: model.RoleViewer, summary: "Show a resource of the released version (id URL-escaped)", serve: a.getResource},
		{method: "GET", path: "/envs/:env/resources/:id/log", role: model.RoleViewer, summary: "A resource's action log, newest first", query: []string{"limit"}, serve: a.resourceLog},
		{method: "GET", path: "/envs/:env/resources/:id/history", role: model.RoleViewer, summary: "The versions that hold a resource, with its hash in each", serve: a.resourceHistory},

		{method: "GET", path: "/envs/:env/agents", role: model.RoleViewer, summary: "List agents, online or not", serve: a.listAgents},
		{method: "GET", path: "/envs/:env/agents/:name", role: model.RoleViewer, summary: "Show an agent with its facts", serve: a.getAgent},
		{method: "POST", path: "/envs/:env/agents/:name/accept", role: model.RoleOperator, action: "agent.accept", summary: "Accept a discovered agent", serve: a.agentAction(model.AgentAccept)},
		{method: "POST", path: "/envs/:env/agents/:name/reject", role: model.RoleOperator, action: "agent.reject", summary: "Reject an agent", serve: a.agentAction(model.AgentReject)},
		{method: "POST", path: "/envs/:env/agents/:name/pause", role: model.RoleOperator, action: "agent.pause", summary: "Pause an agent: it is sent no deploy until resumed", serve: a.agentAction(model.AgentPause)},
		{method: "POST", path: "/envs/:env/agents/:name/resume", role: model.RoleOperator, action: "agent.resume", summary: "Resume a paused agent", serve: a.agentAction(model.AgentResume)},

		{method: "POST", path: "/envs/:env/deploy", role: model.RoleOperator, action: "env.deploy", summary: "Deploy the released version", body: "{agents?: [name], full?: bool}", serve: a.operation(model.OpDeploy)},
		{method: "POST", path: "/envs/:env/repair", role: model.RoleOperator, action: "env.repair", summary: "Verify everything and repair drift", body: "{agents?: [name]}", serve: a.operation(model.OpRepair)},
		{method: "POST", path: "/envs/:env/dryrun", role: model.RoleViewer, action: "env.dryrun", summary: "Ask agents what a deploy would change", body: "{agents?: [name]}", serve: a.operation(model.OpDryRun)},
		{method: "GET", path: "/envs/:env/deploys/:id", role: model.RoleViewer, summary: "What a deploy, repair or dry run reported (the dry-run report)", serve: a.deployReport},

		{method: "GET", path: "/envs/:env/enrollment-tokens", role: model.RoleOperator, summary: "List the environment's enrollment tokens (never their secrets)", serve: a.listEnrollTokens},
		{method: "POST", path: "/envs/:env/enrollment-tokens", role: model.RoleOperator, action: "enrollment_token.create", summary: "Create an enrollment token: agents that say hello with it are accepted (enrollment policy token); its secret is shown once", body: "{name, max_uses?, expires_in?}", serve: a.createEnrollToken},
		{method: "DELETE", path: "/envs/:env/enrollment-tokens/:id", role: model.RoleOperator, action: "enrollment_token.revoke", summary: "Revoke an enrollment token (agents it enrolled stay enrolled)", serve: a.revokeEnrollToken},
		{method: "GET", path: "/envs/:env/alerts", role: model.RoleViewer, summary: "Compliance and security alerts, newest first", query: []string{"agent", "kind", "limit"}, serve: a.listAlerts},

		{method: "GET", path: "/tokens", role: model.RoleAdmin, global: true, summary: "List API tokens", serve: a.listTokens},
		{method: "POST", path: "/tokens", role: model.RoleAdmin, global: true, action: "token.create", summary: "Create an API token; its secret is shown once", body: "{name, role, env?, expires_in?}", serve: a.createToken},
		{method: "DELETE", path: "/tokens/:id", role: model.RoleAdmin, global: true, action: "token.revoke", summary: "Revoke an API token", serve: a.revokeToken},
		{method: "GET", path: "/audit", role: model.RoleAdmin, global: true, summary: "The audit log, newest first", query: []string{"env", "limit"}, serve: a.listAudit},

		{method: "GET", path: "/events", role: model.RoleViewer, summary: "Live events as server-sent events", query: []string{"env"}, serve: a.events},
		{method: "GET", path: "/whoami", role: model.RoleViewer, summary: "The calling token", serve: a.whoami},
		{method: "GET", path: "/openapi.json", summary: "This API's OpenAPI document", serve: a.openapi},
	}
}

func (a *API) build() *echo.Echo {
	e := echo.New()
	e.HideBanner, e.HidePort = true, true
	e.HTTPErrorHandler = a.errorHandler
	e.Use(middleware.RecoverWithConfig(middleware.RecoverConfig{DisableStackAll: true, LogErrorFunc: func(c echo.Context, err error, stack []byte) error {
		a.log.Error().Err(err).Bytes("stack", stack).Str("path", c.Request().URL.Path).Msg("panic serving a request")
		return newError("internal", "see the server log", "internal error")
	}}))
	v1 := e.Group("/api/v1")
	for _, rt := range a.routes() {
		v1.Add(rt.method, rt.path, a.handler(rt))
	}
	e.GET("/healthz", func(c echo.Context) error { return c.JSON(http.StatusOK, map[string]string{"status": "ok"}) })
	e.GET("/readyz", a.readyz)
	if a.svc.Metrics != nil {
		e.GET("/metrics", echo.WrapHandler(a.svc.Metrics))
	}
	return e
}

// handler wraps a route: authentication, authorization, the audit log and
// the request metric.
func (a *API) handler(rt route) echo.HandlerFunc {
	return func(c echo.Context) error {
		start := a.now()
		r := &request{Context: c, api: a}
		status, body, err := a.call(rt, r)
		var werr error
		switch {
		case err != nil:
			a.errorHandler(err, c)
		case status == 0:
			// the route wrote its own response (the event stream)
		case body == nil:
			werr = c.NoContent(status)
		default:
			werr = c.JSON(status, body)
		}
		if a.svc.Observer != nil {
			a.svc.Observer.ObserveRequest(rt.path, rt.method, c.Response().Status, time.Since(start))
		}
		if werr != nil {
			// The client went away mid-answer; nothing more to tell it.
			a.log.Debug().Err(werr).Str("path", c.Request().URL.Path).Msg("response not fully written")
		}
		return nil
	}
}

func (a *API) call(rt route, r *request) (int, any, error) {
	if rt.role != "" {
		tok, err := a.authenticate(r)
		if err != nil {
			return 0, nil, err
		}
		r.token = tok
		if !tok.Role.Allows(rt.role) {
			return 0, nil, newError("forbidden", "ask an admin for a token with that role", "token %q has role %s; %s %s needs %s", tok.Name, tok.Role, rt.method, rt.path, rt.role)
		}
		if rt.global && tok.Env != "" {
			return 0, nil, newError("forbidden", "", "token %q is scoped to environment %s; this needs a token for every environment", tok.Name, tok.Env)
		}
		if env := r.Param("env"); env != "" && !tok.Covers(env) {
			return 0, nil, newError("forbidden", "", "token %q is scoped to environment %s, not %s", tok.Name, tok.Env, env)
		}
	}
	status, body, err := rt.serve(r)
	if err == nil && rt.action != "" {
		a.audit(r, rt)
	}
	return status, body, err
}

// authenticate finds the request's bearer token.
func (a *API) authenticate(r *request) (model.Token, error) {
	h := r.Request().Header.Get("Authorization")
	secret, ok := strings.CutPrefix(h, "Bearer ")
	if !ok || strings.TrimSpace(secret) == "" {
		return model.Token{}, newError("unauthorized", "send Authorization: Bearer <token> (tether reads it from TETHER_TOKEN or .tether)", "no bearer token")
	}
	tok, err := a.svc.Tokens.TokenByHash(r.Request().Context(), model.HashSecret(strings.TrimSpace(secret)))
	if errors.Is(err, model.ErrNotFound) {
		return model.Token{}, newError("unauthorized", "check the token, or ask an admin for a new one", "unknown or revoked token")
	}
	if err != nil {
		return model.Token{}, err
	}
	if tok.Expired(a.now()) {
		return model.Token{}, newError("unauthorized", "ask an admin for a new token", "token %q expired at %s", tok.Name, tok.ExpiresAt.Format(time.RFC3339))
	}
	return tok, nil
}

// audit records a change that was made. The change stands if the record
// cannot be written; that is logged.
func (a *API) audit(r *request, rt route) {
	var target []string
	for _, name := range r.ParamNames() {
		if name != "env" {
			v, _ := url.PathUnescape(r.Param(name))
			target = append(target, v)
		}
	}
	e := model.AuditEntry{Actor: r.token.Name + " (" + r.token.ID + ")", Action: rt.action, Env: r.Param("env"),
		Target: strings.Join(target, " "), Detail: r.detail}
	if err := a.svc.Records.RecordAudit(r.Request().Context(), e); err != nil {
		a.log.Error().Err(err).Str("action", rt.action).Str("actor", e.Actor).Msg("audit log entry lost")
	}
}

func (a *API) readyz(c echo.Context) error {
	out := map[string]string{}
	status := http.StatusOK
	for name, check := range a.svc.Ready {
		if err := check(c.Request().Context()); err != nil {
			out[name] = err.Error()
			status = http.StatusServiceUnavailable
			continue
		}
		out[name] = "ok"
	}
	return c.JSON(status, out)
}
