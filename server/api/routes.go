package api

import (
	"context"
	"errors"
	"net/http"
	"net/netip"
	"net/url"
	"reflect"
	"strings"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/labstack/echo/v4/middleware"

	"github.com/tetherhq/tether/model"
	"github.com/tetherhq/tether/server/clientlimit"
	"github.com/tetherhq/tether/server/record"
)

// route is one endpoint: how it is reached, who may call it, what it is
// called in the audit log and the OpenAPI document, and what serves it.
type route struct {
	method, path string
	// role is the least role that may call it; "" needs no token.
	role record.Role
	// global routes need the role in every environment of the
	// organization (a token for every environment, or a user's
	// organization-wide role).
	global bool
	// server routes are for server admins (Principal.ServerAdmin).
	server bool
	// anyone: any authenticated caller, whatever its roles; the route
	// checks what it allows (a user changing their own password).
	anyone bool
	// action names a change in the audit log; reads have none.
	action  string
	summary string
	// query lists the query parameters it reads.
	query []param
	// pathParams types the path parameters pathParams does not, or
	// otherwise (an :id that is a number).
	pathParams []param
	// in is the type of the JSON body it reads, if it reads one
	// (inOptional: it may be left out); raw, the media types of a body
	// it reads as bytes. A route with neither reads no body. Bodies are
	// bounded by MaxBody, an upload's by MaxUpload.
	in         reflect.Type
	inOptional bool
	raw        []string
	// upload marks the version upload: its own body limit, deadlines
	// that fit its size, a bounded number at once.
	upload bool
	// stream marks the event stream, which lasts as long as its client.
	stream bool
	// wait marks a route that waits for agents up to a timeout of its
	// own, at most record.MaxPlanTimeout: its work may take that much
	// longer than HandlerTimeout.
	wait bool
	// maxBody, when set, bounds the body instead of MaxBody.
	maxBody int64
	// out is the type of the JSON answer (nil: none), sent with one of
	// the statuses ok (none: 200, or 204 without an answer); total: the
	// answer carries TotalHeader. The OpenAPI document says them, and a
	// test checks every answer against it.
	out   reflect.Type
	ok    []int
	total bool
	serve func(r *request) (int, any, error)
}

// request is one call, authenticated.
type request struct {
	echo.Context
	api *API
	// who calls; token is the calling token (for a user, one made up of
	// the user's ID and name, which handlers record as who did a thing).
	who   record.Principal
	token record.Token
	// session is the session the request came with, if it came with one.
	session *session
	// auditOrg is the organization the audit entry is of, when not the
	// caller's (a server admin managing another organization's users).
	auditOrg string
	// bodyMax bounds the body; upload says which limit it is.
	bodyMax int64
	upload  bool
	// detail is what the audit log says of the change beyond its target.
	detail string
}

func (a *API) routes() []route {
	const (
		created  = http.StatusCreated
		accepted = http.StatusAccepted
	)
	agentQuery := []param{
		{name: "state", typ: of[record.AgentState](), desc: "agents in this state"},
		{name: "online", typ: of[bool](), desc: "agents online (true) or not (false)"},
		{name: "label", typ: of[string](), desc: "agents with this label: key=value, or key for any value"},
		pQ, pPage, pOffset,
	}
	resourceQuery := []param{
		pAgent,
		{name: "type", typ: of[string](), desc: "resources of this type"},
		{name: "state", typ: of[model.ResourceState](), desc: "resources in this state"},
		{name: "compliance", typ: of[model.Compliance](), desc: "resources of this compliance"},
		pQ, pPage, pOffset,
	}
	resourceID := []param{{name: "id", typ: of[string](), desc: "the resource's ID, URL-escaped: file[web-1,path=/etc/motd]"}}
	return append([]route{
		{method: "GET", path: "/envs", role: record.RoleViewer, summary: "List environments (those the token may see)", out: of[[]record.Environment](), serve: a.listEnvs},
		{method: "POST", path: "/envs", role: record.RoleAdmin, global: true, action: "env.create", summary: "Create an environment", in: of[EnvRequest](), out: of[record.Environment](), ok: []int{created}, serve: a.createEnv},
		{method: "GET", path: "/envs/:env", role: record.RoleViewer, summary: "Show an environment", out: of[record.Environment](), serve: a.getEnv},
		{method: "DELETE", path: "/envs/:env", role: record.RoleAdmin, global: true, action: "env.delete", summary: "Delete an environment and everything in it", serve: a.deleteEnv},
		{method: "GET", path: "/envs/:env/settings", role: record.RoleViewer, summary: "Show an environment's settings, key → value", out: of[map[string]string](), serve: a.getSettings},
		{method: "PATCH", path: "/envs/:env/settings", role: record.RoleOperator, action: "env.settings", summary: "Change settings: {key: value}; answers them all, key → value", in: of[map[string]string](), out: of[map[string]string](), serve: a.patchSettings},
		{method: "POST", path: "/envs/:env/halt", role: record.RoleOperator, action: "env.halt", summary: "Halt the environment: its agents change nothing on their hosts (no deploy, repair or heal) until resumed", out: of[record.Environment](), serve: a.halt(true)},
		{method: "POST", path: "/envs/:env/resume", role: record.RoleOperator, action: "env.resume", summary: "Resume a halted environment: what its agents missed is deployed at once", out: of[record.Environment](), serve: a.halt(false)},

		{method: "GET", path: "/envs/:env/versions", role: record.RoleViewer, summary: "List versions, newest first", out: of[[]model.Version](), serve: a.listVersions},
		{method: "POST", path: "/envs/:env/versions", role: record.RoleOperator, action: "version.export", summary: "Upload a compiled resource set as a new version (200 when the newest version held it already; release=true releases it too: 202 with the release's id, its fan-out in the background)",
			query: []param{{name: "release", typ: of[bool](), desc: "release the version too"}}, in: of[ExportRequest](), out: of[ExportResponse](), ok: []int{http.StatusOK, created, accepted}, upload: true, serve: a.putVersion},
		{method: "GET", path: "/envs/:env/versions/:n", role: record.RoleViewer, summary: "Show a version (with its resources, sensitive values redacted, if resources=true)", query: []param{{name: "resources", typ: of[bool](), desc: "list its resources too"}}, out: of[model.Version](), serve: a.getVersion},
		{method: "GET", path: "/envs/:env/versions/:n/diff", role: record.RoleViewer, summary: "What changed from version `from` (default: the released one, or n-1) to n", query: []param{{name: "from", typ: of[int64](), desc: "the version to compare with (0: the empty set)"}}, out: of[Diff](), serve: a.diffVersions},
		{method: "POST", path: "/envs/:env/versions/:n/release", role: record.RoleOperator, action: "version.release", summary: "Release a version: answers at once (202) with the release's id; its fan-out to agents runs in the background (GET /envs/{env}/releases/{id}). The released version answers 200 with already_released", out: of[record.Released](), ok: []int{http.StatusOK, accepted}, serve: a.release},
		{method: "GET", path: "/envs/:env/versions/:n/release-preview", role: record.RoleViewer, summary: "What releasing a version would take away, before it is released: per accepted agent, the resources it holds (of the version it holds) that the version does not have, each orphaned (left on the host as it is) or absent (purged already), and the agents that would leave the model (the version has nothing for them); nothing is released. Clients ask their user to confirm a release that takes anything away", out: of[record.ReleasePreview](), serve: a.releasePreview},
		{method: "POST", path: "/envs/:env/versions/:n/plan", role: record.RoleViewer, action: "version.plan", summary: "Plan a version before releasing it: each live agent dry-runs its part of the version (not released, nothing changed on any host) and the answer says, per agent and per attribute, what a deploy would change (current → desired, sensitive values redacted), naming the agents that did not answer within timeout (default 30s, at most 90s)", in: of[PlanRequest](), inOptional: true, out: of[record.Plan](), wait: true, serve: a.plan},
		{method: "GET", path: "/envs/:env/releases", role: record.RoleViewer, summary: "The environment's releases, newest first, with how far each fan-out to agents got", query: []param{pLimit}, out: of[[]record.Release](), serve: a.listReleases},
		{method: "GET", path: "/envs/:env/releases/:id", role: record.RoleViewer, summary: "One release: its version, state (running, done, failed), agents to reach, sent, up to date, and those pending with why and what brings them the version", out: of[record.Release](), serve: a.getRelease},
		{method: "POST", path: "/envs/:env/releases/:id/continue", role: record.RoleOperator, action: "release.continue", summary: "Continue a staged rollout: send its next wave now (whatever the current wave's agents reported), or go on past a halt (the failures so far are accepted)", out: of[record.Release](), serve: a.rolloutVerb("continue")},
		{method: "POST", path: "/envs/:env/releases/:id/abort", role: record.RoleOperator, action: "release.abort", summary: "Abort a staged rollout: no further wave is sent; agents not reached keep the version they had until the next release", out: of[record.Release](), serve: a.rolloutVerb("abort")},

		{method: "GET", path: "/envs/:env/resources", role: record.RoleViewer, summary: "List resources with their state and compliance; with limit, a page of them (offset, q: text in the ID; the header X-Total-Count says how many match)", query: resourceQuery, out: of[[]record.ResourceStatus](), total: true, serve: a.listResources},
		{method: "GET", path: "/envs/:env/resources/:id", role: record.RoleViewer, summary: "Show a resource of the released version (id URL-escaped)", pathParams: resourceID, out: of[ResourceView](), serve: a.getResource},
		{method: "GET", path: "/envs/:env/resources/:id/log", role: record.RoleViewer, summary: "A resource's action log, newest first", pathParams: resourceID, query: []param{pLimit}, out: of[[]record.Action](), serve: a.resourceLog},
		{method: "GET", path: "/envs/:env/resources/:id/history", role: record.RoleViewer, summary: "The versions that hold a resource, with its hash in each", pathParams: resourceID, out: of[[]record.ResourceHash](), serve: a.resourceHistory},

		{method: "GET", path: "/envs/:env/summary", role: record.RoleViewer, summary: "Count the environment's agents (online, offline, pending, rejected, paused) and resources (by state and by compliance)", out: of[Summary](), serve: a.summary},
		{method: "GET", path: "/envs/:env/agents", role: record.RoleViewer, summary: "List agents, online or not; state (pending, accepted, rejected), online (true, false), label (key=value or key) and q (text in the name or a label) filter them; with limit, a page of them (offset; the header X-Total-Count says how many match)", query: agentQuery, out: of[[]AgentView](), total: true, serve: a.listAgents},
		{method: "GET", path: "/envs/:env/agents/:name", role: record.RoleViewer, summary: "Show an agent with its facts", out: of[AgentView](), serve: a.getAgent},
		{method: "GET", path: "/envs/:env/inventory", role: record.RoleViewer, summary: "The environment's live inventory: accepted agents with their labels and facts, in the inventory format the compiler reads", out: of[model.Inventory](), serve: a.inventory},
		{method: "DELETE", path: "/envs/:env/agents/:name", role: record.RoleOperator, action: "agent.delete", summary: "Delete an agent: its record and what it reported are forgotten (its resources are available again) and its inbox removed from the broker; if it says hello again it is a new agent (pending, or accepted as the enrollment policy says). Answers with the agent as it was", out: of[AgentView](), serve: a.deleteAgent},
		{method: "POST", path: "/envs/:env/agents/:name/accept", role: record.RoleOperator, action: "agent.accept", summary: "Accept a discovered agent", out: of[AgentView](), serve: a.agentAction(record.AgentAccept)},
		{method: "POST", path: "/envs/:env/agents/:name/reject", role: record.RoleOperator, action: "agent.reject", summary: "Reject an agent", out: of[AgentView](), serve: a.agentAction(record.AgentReject)},
		{method: "POST", path: "/envs/:env/agents/:name/pause", role: record.RoleOperator, action: "agent.pause", summary: "Pause an agent: it changes nothing on its host (no deploy, repair or heal) until resumed", out: of[AgentView](), serve: a.agentAction(record.AgentPause)},
		{method: "POST", path: "/envs/:env/agents/:name/resume", role: record.RoleOperator, action: "agent.resume", summary: "Resume a paused agent: what it missed is deployed at once", out: of[AgentView](), serve: a.agentAction(record.AgentResume)},
		{method: "POST", path: "/envs/:env/agents/:name/facts-refresh", role: record.RoleOperator, action: "agent.facts-refresh", summary: "Ask an agent to report its facts again; its record is updated when the report arrives (202, the agent as recorded now)", out: of[AgentView](), ok: []int{accepted}, serve: a.factsRefresh},
		{method: "POST", path: "/envs/:env/agents/:name/rotate-key", role: record.RoleOperator, action: "agent.rotate-key", summary: "Ask an agent to replace its key by a signed rollover; its key changes when the rollover arrives (202, the agent as recorded now)", out: of[AgentView](), ok: []int{accepted}, serve: a.rotateKey},

		{method: "POST", path: "/envs/:env/deploy", role: record.RoleOperator, action: "env.deploy", summary: "Deploy the released version", in: of[OperationRequest](), inOptional: true, out: of[record.Deployment](), ok: []int{accepted}, serve: a.operation(record.OpDeploy)},
		{method: "POST", path: "/envs/:env/repair", role: record.RoleOperator, action: "env.repair", summary: "Verify everything and repair drift", in: of[OperationRequest](), inOptional: true, out: of[record.Deployment](), ok: []int{accepted}, serve: a.operation(record.OpRepair)},
		{method: "POST", path: "/envs/:env/dryrun", role: record.RoleViewer, action: "env.dryrun", summary: "Ask agents what a deploy would change", in: of[OperationRequest](), inOptional: true, out: of[record.Deployment](), ok: []int{accepted}, serve: a.operation(record.OpDryRun)},
		{method: "GET", path: "/envs/:env/source", role: record.RoleViewer, summary: "Where the server reads the environment's model: a git repository or an uploaded archive (credentials are never shown)", out: of[record.SourceView](), serve: a.getSource},
		{method: "PUT", path: "/envs/:env/source", role: record.RoleOperator, action: "env.source.set", summary: "Make a git repository the environment's source, and compile it (the answer shows a new webhook secret once)", in: of[record.SourceRequest](), out: of[record.SourceView](), serve: a.setSource},
		{method: "PUT", path: "/envs/:env/source/archive", role: record.RoleOperator, action: "env.source.upload", summary: "Make an uploaded tar or tar.gz archive the environment's source, and compile it", query: []param{{name: "subdir", typ: of[string](), desc: "the model's directory in the archive"}}, raw: []string{"application/gzip", "application/x-tar"}, upload: true, out: of[record.SourceView](), serve: a.uploadSource},
		{method: "DELETE", path: "/envs/:env/source", role: record.RoleOperator, action: "env.source.delete", summary: "Remove the environment's source: the server compiles it no more; what it released stays", serve: a.deleteSource},
		{method: "POST", path: "/envs/:env/compile/hook", summary: "A git host's push webhook (GitHub, GitLab, Gitea, Forgejo): no token; authenticated by the source's webhook secret (HMAC signature, GitLab signing or secret token). A push of the ref the source follows asks for a compile (202)", raw: []string{"application/json", "application/x-www-form-urlencoded"}, maxBody: webhookMaxBody, out: of[record.WebhookResult](), ok: []int{http.StatusOK, accepted}, serve: a.webhook},
		{method: "POST", path: "/envs/:env/compile", role: record.RoleOperator, action: "env.compile", summary: "Ask the server to compile the environment's model from its source (202 with the compile queue's state; 409 when the environment has no source)", out: of[record.CompileRequest](), ok: []int{accepted}, serve: a.requestCompile},
		{method: "GET", path: "/envs/:env/compiles", role: record.RoleViewer, summary: "The server's compiles of the environment's model, newest first", query: []param{pLimit}, out: of[[]record.Compile](), serve: a.listCompiles},
		{method: "GET", path: "/envs/:env/compiles/:id", role: record.RoleViewer, summary: "One compile's report: triggers, revision, outcome, diagnostics, resources per agent, version", out: of[record.Compile](), serve: a.getCompile},
		{method: "GET", path: "/envs/:env/deploys", role: record.RoleViewer, summary: "The environment's deploys, repairs and dry runs, newest first: trigger, who asked, version, agents asked, answered, ok and failed, outcome", query: []param{pAgent, {name: "kind", typ: of[record.Operation](), desc: "deploys of this kind"}, pLimit}, out: of[[]record.Deploy](), serve: a.listDeploys},
		{method: "GET", path: "/envs/:env/deploys/:id", role: record.RoleViewer, summary: "What a deploy, repair or dry run reported: the deploy with each agent's outcome, the agents that have not answered yet (waiting), and the actions (the dry-run report)", pathParams: []param{pUUID}, out: of[Report](), serve: a.deployReport},

		{method: "GET", path: "/envs/:env/enrollment-tokens", role: record.RoleOperator, summary: "List the environment's enrollment tokens (never their secrets)", out: of[[]record.EnrollmentToken](), serve: a.listEnrollTokens},
		{method: "POST", path: "/envs/:env/enrollment-tokens", role: record.RoleOperator, action: "enrollment_token.create", summary: "Create an enrollment token: agents that say hello with it are accepted (enrollment policy token); its secret is shown once", in: of[EnrollmentTokenRequest](), out: of[NewEnrollmentToken](), ok: []int{created}, serve: a.createEnrollToken},
		{method: "DELETE", path: "/envs/:env/enrollment-tokens/:id", role: record.RoleOperator, action: "enrollment_token.revoke", summary: "Revoke an enrollment token (agents it enrolled stay enrolled)", pathParams: []param{pUUID}, serve: a.revokeEnrollToken},
		{method: "GET", path: "/envs/:env/alerts", role: record.RoleViewer, summary: "Compliance and security alerts, newest first", query: []param{pAgent, {name: "kind", typ: of[string](), enum: record.AlertKindFilters(), desc: "alerts of this kind, or of this family (compile: every compile kind)"}, pLimit}, out: of[[]record.Alert](), serve: a.listAlerts},

		{method: "GET", path: "/tokens", role: record.RoleAdmin, global: true, summary: "List the organization's API tokens", out: of[[]record.Token](), serve: a.listTokens},
		{method: "POST", path: "/tokens", role: record.RoleAdmin, global: true, action: "token.create", summary: "Create an API token; its secret is shown once. It is owned by the calling user (whose rights bound it), by the user named, or by the organization (org_owned)", in: of[TokenRequest](), out: of[NewToken](), ok: []int{created}, serve: a.createToken},
		{method: "DELETE", path: "/tokens/:id", role: record.RoleAdmin, global: true, action: "token.revoke", summary: "Revoke an API token", pathParams: []param{pUUID}, serve: a.revokeToken},
		{method: "GET", path: "/audit", role: record.RoleAdmin, global: true, summary: "The audit log, newest first", query: []param{{name: "env", typ: of[string](), desc: "entries of this environment"}, pLimit}, out: of[[]record.AuditEntry](), serve: a.listAudit},

		{method: "GET", path: "/events", role: record.RoleViewer, summary: "Live events as server-sent events", query: []param{{name: "env", typ: of[string](), desc: "the events of this environment only"}}, stream: true, serve: a.events},
		{method: "POST", path: "/session", action: "session.login", summary: "Log in with a user name and password: sets the session cookie tether_session and answers the session with its CSRF token (throttled per user name and address: 429 with Retry-After)", in: of[SessionRequest](), out: of[SessionView](), serve: a.login},
		{method: "GET", path: "/session", role: record.RoleViewer, summary: "The session of the cookie sent: its user and CSRF token (changes made with the cookie send it as X-CSRF-Token)", out: of[SessionView](), serve: a.getSession},
		{method: "DELETE", path: "/session", role: record.RoleViewer, action: "session.logout", summary: "Log out: end the session of the cookie sent", serve: a.logout},
		{method: "GET", path: "/users", role: record.RoleAdmin, global: true, summary: "List the organization's users (a server admin names another organization with org)", query: []param{pOrg}, out: of[[]record.User](), serve: a.listUsers},
		{method: "POST", path: "/users", role: record.RoleAdmin, global: true, action: "user.create", summary: "Create a user with a password and roles (role: in every environment of the organization; roles: per environment)", query: []param{pOrg}, in: of[UserRequest](), out: of[record.User](), ok: []int{created}, serve: a.createUser},
		{method: "GET", path: "/users/:name", role: record.RoleAdmin, global: true, summary: "Show a user with its roles", query: []param{pOrg}, out: of[record.User](), serve: a.getUser},
		{method: "PATCH", path: "/users/:name", role: record.RoleViewer, anyone: true, action: "user.update", summary: "Change a user's roles or password (a new password ends the user's sessions); users may change their own password with current_password", query: []param{pOrg}, in: of[UserUpdate](), out: of[record.User](), serve: a.updateUser},
		{method: "DELETE", path: "/users/:name", role: record.RoleAdmin, global: true, action: "user.delete", summary: "Delete a user with its sessions and the tokens it owns", query: []param{pOrg}, serve: a.deleteUser},
		{method: "GET", path: "/orgs", role: record.RoleAdmin, global: true, server: true, summary: "List organizations (server admins)", out: of[[]record.Org](), serve: a.listOrgs},
		{method: "POST", path: "/orgs", role: record.RoleAdmin, global: true, server: true, action: "org.create", summary: "Create an organization (server admins); then create its first admin with POST /users?org=", in: of[OrgRequest](), out: of[record.Org](), ok: []int{created}, serve: a.createOrg},
		{method: "DELETE", path: "/orgs/:org", role: record.RoleAdmin, global: true, server: true, action: "org.delete", summary: "Delete an organization without environments, with its users and tokens (server admins)", serve: a.deleteOrg},
		{method: "GET", path: "/whoami", role: record.RoleViewer, summary: "The calling token", out: of[Whoami](), serve: a.whoami},
		{method: "GET", path: "/server", role: record.RoleViewer, summary: "The server's public key and its fingerprint (agents pin it with --server-key)", out: of[ServerInfo](), serve: a.serverInfo},
		{method: "GET", path: "/server/signing-key", role: record.RoleAdmin, global: true, summary: "Where a rollover of the server's signing key stands, and which agents are not ready for its next step", out: of[record.SigningKeyStatus](), serve: a.signingKeyStatus},
		{method: "POST", path: "/server/signing-key/new", role: record.RoleAdmin, global: true, action: "server.signing-key.new", summary: "Make the server's next signing key and announce it to every accepted agent (server.rollover)", out: of[record.SigningKeyStatus](), serve: a.signingKeyStep("new")},
		{method: "POST", path: "/server/signing-key/switch", role: record.RoleAdmin, global: true, action: "server.signing-key.switch", summary: "Make every server sign with the next key, once every accepted agent took it (or force); answers after the switch", in: of[SigningKeyRequest](), inOptional: true, out: of[record.SigningKeyStatus](), serve: a.signingKeyStep("switch")},
		{method: "POST", path: "/server/signing-key/retire", role: record.RoleAdmin, global: true, action: "server.signing-key.retire", summary: "Forget the key the servers signed with before the switch, once every accepted agent takes the new one (or force)", in: of[SigningKeyRequest](), inOptional: true, out: of[record.SigningKeyStatus](), serve: a.signingKeyStep("retire")},
		{method: "GET", path: "/openapi.json", summary: "This API's OpenAPI document", out: of[map[string]any](), serve: a.openapi},
	}, a.webhookRoutes()...)
}

// build makes the public handler, or (ops) the operations one.
func (a *API) build(ops bool) *echo.Echo {
	e := echo.New()
	e.HideBanner, e.HidePort = true, true
	e.HTTPErrorHandler = a.errorHandler
	if !ops {
		e.Pre(a.limitAnonymous)
	}
	e.Use(middleware.RecoverWithConfig(middleware.RecoverConfig{DisableStackAll: true, LogErrorFunc: func(c echo.Context, err error, stack []byte) error {
		a.log.Error().Err(err).Bytes("stack", stack).Str("path", clip(c.Request().URL.Path)).Msg("panic serving a request")
		return errors.New("panic serving a request")
	}}))
	if !ops {
		v1 := e.Group("/api/v1")
		for _, rt := range a.routes() {
			v1.Add(rt.method, rt.path, a.handler(rt))
		}
	}
	e.GET("/healthz", func(c echo.Context) error { return c.JSON(http.StatusOK, map[string]string{"status": "ok"}) })
	e.GET("/readyz", a.readyz(ops))
	if a.svc.Metrics != nil && (ops || !a.cfg.SeparateOps) {
		e.GET("/metrics", echo.WrapHandler(a.svc.Metrics))
	}
	return e
}

// handler wraps a route: authentication, authorization, the body limit,
// the time its work may take, the audit log and the request metric.
func (a *API) handler(rt route) echo.HandlerFunc {
	return func(c echo.Context) error {
		start := a.now()
		r := &request{Context: c, api: a}
		if !rt.stream && !rt.upload {
			limit := a.cfg.HandlerTimeout
			if rt.wait {
				limit += record.MaxPlanTimeout
			}
			ctx, cancel := context.WithTimeout(c.Request().Context(), limit)
			defer cancel()
			c.SetRequest(c.Request().WithContext(ctx))
		}
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
		a.observe(rt.path, rt.method, c.Response().Status, time.Since(start))
		if werr != nil {
			// The client went away mid-answer; nothing more to tell it.
			a.log.Debug().Err(werr).Str("path", clip(c.Request().URL.Path)).Msg("response not fully written")
		}
		return nil
	}
}

func (a *API) observe(route, method string, status int, d time.Duration) {
	if a.svc.Observer != nil {
		a.svc.Observer.ObserveRequest(route, method, status, d)
	}
}

func (a *API) call(rt route, r *request) (int, any, error) {
	if rt.role != "" {
		who, err := a.authenticate(r)
		if err != nil {
			return 0, nil, err
		}
		r.who = who
		r.SetRequest(r.Request().WithContext(record.WithWho(r.ctx(), who.Name)))
		if err := a.checkCSRF(r); err != nil {
			return 0, nil, err
		}
		if err := a.authorize(r, rt); err != nil {
			return 0, nil, err
		}
	}
	if a.svc.People == nil && (strings.HasPrefix(rt.path, "/users") || strings.HasPrefix(rt.path, "/orgs") || rt.path == "/session") {
		return 0, nil, newError("conflict", "use a bearer token", "this server keeps no users")
	}
	if rt.in != nil || len(rt.raw) > 0 {
		if err := a.bodyLimit(r, rt); err != nil {
			return 0, nil, err
		}
	}
	status, body, err := rt.serve(r)
	if err == nil && rt.action != "" {
		a.audit(r, rt)
	}
	return status, body, err
}

// bodyLimit bounds the request body of rt: a body announced larger than
// the limit is refused before a byte of it is read, one that turns out
// larger fails its read.
func (a *API) bodyLimit(r *request, rt route) error {
	r.bodyMax, r.upload = a.cfg.MaxBody, rt.upload
	if rt.upload {
		r.bodyMax = a.cfg.MaxUpload
	}
	if rt.maxBody > 0 {
		r.bodyMax = rt.maxBody
	}
	req := r.Request()
	if req.ContentLength > r.bodyMax {
		return r.tooLarge()
	}
	req.Body = http.MaxBytesReader(r.Response().Writer, req.Body, r.bodyMax)
	return nil
}

// tooLarge is the answer to a body over its limit, naming the limit and
// the setting that raises it.
func (r *request) tooLarge() *Error {
	got := ""
	if n := r.Request().ContentLength; n > r.bodyMax {
		got = " (" + size(n) + ")"
	}
	if r.upload {
		return newError("too_large", "split the model across environments, or raise the server's max-upload setting (tether server --max-upload, TETHER_MAX_UPLOAD)",
			"the version upload%s is larger than %s, the server's max-upload", got, size(r.bodyMax))
	}
	return newError("too_large", "raise the server's max-body setting (tether server --max-body, TETHER_MAX_BODY)",
		"request body%s is larger than %s, the server's max-body", got, size(r.bodyMax))
}

// limitAnonymous holds requests without a bearer token or session cookie
// to their client's bucket (AnonymousRate), health checks excepted: a
// prober must always get through. Requests with a credential are counted
// when their authentication fails (authenticate).
func (a *API) limitAnonymous(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		req := c.Request()
		if req.URL.Path == "/healthz" || credentialed(req) {
			return next(c)
		}
		if ok, wait := a.anonymous.Take(a.client(req), a.now()); !ok {
			a.errorHandler(rateLimited(wait, "too many requests without a token from this address", "wait the Retry-After seconds; requests with a valid token are not limited so"), c)
			a.observe("", req.Method, http.StatusTooManyRequests, 0)
			return nil
		}
		return next(c)
	}
}

func rateLimited(wait time.Duration, why, hint string) *Error {
	e := newError("rate_limited", hint, "%s: retry in %s", why, wait.Round(time.Second).String())
	if wait < time.Second {
		e.Message = why + ": retry in a second"
	}
	e.RetryAfter = wait
	return e
}

// bearer returns the request's bearer token, if any.
func bearer(req *http.Request) string {
	secret, ok := strings.CutPrefix(req.Header.Get("Authorization"), "Bearer ")
	if !ok {
		return ""
	}
	return strings.TrimSpace(secret)
}

// client returns the key the request's client is counted under: its
// address, or, from a trusted proxy, the address the proxy says it
// forwards for.
func (a *API) client(req *http.Request) clientlimit.Client {
	ap, err := netip.ParseAddrPort(req.RemoteAddr)
	if err != nil {
		return clientlimit.ClientOfRemote(req.RemoteAddr)
	}
	addr := ap.Addr().Unmap()
	if a.trusted(addr) {
		hops := strings.Split(strings.Join(req.Header.Values("X-Forwarded-For"), ","), ",")
		for i := len(hops) - 1; i >= 0; i-- {
			hop, err := netip.ParseAddr(strings.TrimSpace(hops[i]))
			if err != nil {
				break
			}
			addr = hop.Unmap()
			if !a.trusted(addr) {
				break
			}
		}
	}
	return clientlimit.ClientOf(addr)
}

func (a *API) trusted(addr netip.Addr) bool {
	for _, p := range a.cfg.TrustedProxies {
		if p.Contains(addr) {
			return true
		}
	}
	return false
}

// audit records a change that was made. The change stands if the record
// cannot be written; that is logged. Its texts are clipped, never refused.
func (a *API) audit(r *request, rt route) {
	var target []string
	for _, name := range r.ParamNames() {
		if name != "env" {
			v, _ := url.PathUnescape(r.Param(name))
			target = append(target, v)
		}
	}
	org := r.who.Org
	if r.auditOrg != "" {
		org = r.auditOrg
	}
	e := record.AuditEntry{Org: org, Actor: model.Clip(r.who.Actor(), model.MaxAuditLen), Action: rt.action, Env: r.Param("env"),
		Target: model.Clip(strings.Join(target, " "), model.MaxAuditLen), Detail: model.Clip(r.detail, model.MaxAuditLen)}
	if err := a.svc.Records.RecordAudit(r.ctx(), e); err != nil {
		a.log.Error().Err(err).Str("action", rt.action).Str("actor", e.Actor).Msg("audit log entry lost")
	}
}

// readyz runs the readiness checks. The public answer says which check
// fails, not why (the why may name hosts and drivers): the reason is
// logged when a check starts failing, and shown on the operations
// listener (detail).
func (a *API) readyz(detail bool) echo.HandlerFunc {
	return func(c echo.Context) error {
		out := map[string]string{}
		status := http.StatusOK
		for name, check := range a.svc.Ready {
			why := "ok"
			if err := check(c.Request().Context()); err != nil {
				status = http.StatusServiceUnavailable
				why = err.Error()
			}
			a.readyMu.Lock()
			if was := a.ready[name]; was != why {
				a.ready[name] = why
				if why != "ok" {
					a.log.Warn().Str("check", name).Str("reason", why).Msg("not ready")
				} else if was != "" {
					a.log.Info().Str("check", name).Msg("ready again")
				}
			}
			a.readyMu.Unlock()
			if why != "ok" && !detail {
				why = "unavailable"
			}
			out[name] = why
		}
		return c.JSON(status, out)
	}
}
