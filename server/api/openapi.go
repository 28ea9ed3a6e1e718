package api

import (
	"fmt"
	"maps"
	"net/http"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/tetherhq/tether/model"
	"github.com/tetherhq/tether/server/record"
)

// openapiRoutes are the routes of this API's own description.
func (a *API) openapiRoutes() []route {
	return []route{
		{method: "GET", path: "/openapi.json", summary: "This API's OpenAPI document", out: of[map[string]any](), serve: a.openapi},
	}
}

// openapi serves an OpenAPI 3.0 document built from the route table, so it
// lists exactly what is served, with the role each operation needs and
// the types of what it reads and answers.
func (a *API) openapi(r *request) (int, any, error) { return http.StatusOK, a.Document(), nil }

// Document returns the API's OpenAPI document.
func (a *API) Document() map[string]any {
	doc, _ := buildDocument(a.routes(), a.cfg.Version)
	return doc
}

// DocumentIssues lists what the route table or the types do not say for
// the document to be complete (a test fails on any).
func (a *API) DocumentIssues() []string {
	_, s := buildDocument(a.routes(), a.cfg.Version)
	issues := slices.Clone(s.issues)
	slices.Sort(issues)
	return slices.Compact(issues)
}

// param is a query or path parameter.
type param struct {
	name string
	// typ is string, bool, an integer type or an enumerated string type.
	typ  reflect.Type
	desc string
	// min and max bound an integer (max 0: no bound above).
	min, max int64
	// def is the value taken when it is left out.
	def any
	// enum, when set, lists the values a string parameter takes (one
	// that reads more than its type's constants: a filter of families);
	// it may also be empty, meaning no filter.
	enum []string
}

// Parameters routes share.
var (
	pLimit  = param{name: "limit", typ: of[int](), min: 1, max: 10000, def: 100, desc: "at most this many, newest first"}
	pPage   = param{name: "limit", typ: of[int](), min: 1, max: MaxPage, desc: "a page of at most this many (none: every one)"}
	pOffset = param{name: "offset", typ: of[int](), min: 0, desc: "skip this many first"}
	pQ      = param{name: "q", typ: of[string](), desc: "text to find"}
	pAgent  = param{name: "agent", typ: of[string](), desc: "an agent's name"}
	pOrg    = param{name: "org", typ: of[string](), desc: "another organization (server admins)"}
	pUUID   = param{name: "id", typ: of[string](), desc: "a UUID"}
	pHook   = param{name: "id", typ: of[int64](), min: 1, desc: "the webhook's ID"}
)

// pathParams are the path parameters of every route, by name, unless the
// route says otherwise (route.pathParams).
var pathParams = map[string]param{
	"env":  {name: "env", typ: of[string](), desc: "the environment's name"},
	"n":    {name: "n", typ: of[int64](), min: 1, desc: "the version's number"},
	"name": {name: "name", typ: of[string](), desc: "the agent's (or user's) name"},
	"org":  {name: "org", typ: of[string](), desc: "the organization's name"},
	"id":   {name: "id", typ: of[string](), desc: "the ID"},
}

// buildDocument builds the document of routes, with its schemas (and the
// issues found there).
func buildDocument(routes []route, version string) (map[string]any, *schemas) {
	s := newSchemas()
	errorRef := s.schema(of[Body]())
	paths := map[string]obj{}
	ids := map[string]string{}
	for _, rt := range routes {
		p := "/api/v1" + openapiPath(rt.path)
		if paths[p] == nil {
			paths[p] = obj{}
		}
		op := operation(s, rt)
		id := op["operationId"].(string)
		if other, ok := ids[id]; ok {
			s.issues = append(s.issues, fmt.Sprintf("%s %s and %s have one operationId %s", rt.method, rt.path, other, id))
		}
		ids[id] = rt.method + " " + rt.path
		paths[p][strings.ToLower(rt.method)] = op
	}
	s.issues = append(s.issues, unusedDescriptions(s)...)
	doc := map[string]any{
		"openapi": "3.0.3",
		"info": obj{
			"title":   "Tether API",
			"version": version,
			"description": "Every request but this document, logging in and a git host's push webhook carries Authorization: Bearer <token>, " +
				"or the session cookie " + SessionCookie + " of a login (POST /api/v1/session); with the cookie, changes (POST, PUT, PATCH, DELETE) " +
				"also carry the session's CSRF token as X-CSRF-Token. Errors are {\"error\": {code, message, hint, ref}}; codes are stable, " +
				"each answered with one HTTP status.",
		},
		"paths":    paths,
		"security": readSecurity,
		"components": obj{
			"securitySchemes": obj{
				"bearer":  obj{"type": "http", "scheme": "bearer", "description": "an API token (tether token create)"},
				"session": obj{"type": "apiKey", "in": "cookie", "name": SessionCookie, "description": "a login's session (POST /api/v1/session)"},
				"csrf":    obj{"type": "apiKey", "in": "header", "name": "X-CSRF-Token", "description": "the session's CSRF token (GET /api/v1/session), sent with the cookie on changes"},
			},
			"schemas":   s.defs,
			"responses": errorResponses(errorRef),
			"headers": obj{
				"RetryAfter": obj{"description": "seconds to wait before trying again", "schema": obj{"type": "integer", "minimum": 0}},
				"TotalCount": obj{"description": "how many entries match the filters in all (the page holds at most limit of them)", "schema": obj{"type": "integer", "minimum": 0}},
			},
		},
	}
	return doc, s
}

// Who may call: a token, or a session's cookie (with its CSRF token on a
// change).
var (
	readSecurity   = []any{obj{"bearer": []any{}}, obj{"session": []any{}}}
	changeSecurity = []any{obj{"bearer": []any{}}, obj{"session": []any{}, "csrf": []any{}}}
)

// operation describes one route.
func operation(s *schemas, rt route) obj {
	desc := rt.summary
	if rt.role != "" {
		desc += ". Needs role " + string(rt.role)
		if rt.global {
			desc += " on every environment"
		}
		desc += "."
	}
	op := obj{
		"summary":     rt.summary,
		"description": desc,
		"operationId": strings.ToLower(rt.method) + strings.NewReplacer("/", "_", ":", "", "{", "", "}", "").Replace(rt.path),
	}
	var params []any
	for _, seg := range strings.Split(rt.path, "/") {
		if name, ok := strings.CutPrefix(seg, ":"); ok {
			p, ok := pathParams[name]
			for _, o := range rt.pathParams {
				if o.name == name {
					p, ok = o, true
				}
			}
			if !ok {
				s.issues = append(s.issues, fmt.Sprintf("%s %s: path parameter %s has no type: add it to pathParams", rt.method, rt.path, name))
				p = param{name: name, typ: of[string]()}
			}
			params = append(params, parameter(s, p, "path"))
		}
	}
	for _, q := range rt.query {
		params = append(params, parameter(s, q, "query"))
	}
	if len(params) > 0 {
		op["parameters"] = params
	}
	switch {
	case rt.in != nil:
		op["requestBody"] = obj{"required": !rt.inOptional, "content": obj{"application/json": obj{"schema": s.schema(rt.in)}}}
	case len(rt.raw) > 0:
		content := obj{}
		for _, mt := range rt.raw {
			content[mt] = obj{"schema": rawSchema(mt)}
		}
		op["requestBody"] = obj{"required": true, "content": content}
	}
	op["responses"] = responses(s, rt)
	switch {
	case rt.role == "":
		op["security"] = []any{}
	case unsafe(rt.method):
		op["security"] = changeSecurity
	}
	return op
}

// rawSchema is the schema of a body read as bytes: a push webhook's
// payload (JSON, or a form with it in payload), or an archive.
func rawSchema(mediaType string) obj {
	switch mediaType {
	case "application/json":
		return obj{"type": "object", "description": "the git host's push payload"}
	case "application/x-www-form-urlencoded":
		return obj{"type": "object", "properties": obj{"payload": obj{"type": "string", "description": "the git host's push payload, JSON"}}}
	}
	return obj{"type": "string", "format": "binary"}
}

// parameter describes a parameter.
func parameter(s *schemas, p param, in string) obj {
	sc := s.schema(p.typ)
	if p.enum != nil {
		sc = obj{"type": "string", "enum": p.enum}
	}
	if sc["type"] == "integer" {
		sc["minimum"] = p.min
		if p.max > 0 {
			sc["maximum"] = p.max
		}
	}
	if p.def != nil {
		sc["default"] = p.def
	}
	out := obj{"name": p.name, "in": in, "schema": sc}
	if p.enum != nil && in == "query" {
		out["allowEmptyValue"] = true
	}
	if in == "path" {
		out["required"] = true
	}
	if p.desc != "" {
		out["description"] = p.desc
	}
	return out
}

// responses describes what a route answers: its successes, typed, and
// the errors it may answer, per status, with the error body.
func responses(s *schemas, rt route) obj {
	out := obj{}
	ok := rt.ok
	if len(ok) == 0 {
		ok = []int{http.StatusOK}
		if rt.out == nil && !rt.stream {
			ok = []int{http.StatusNoContent}
		}
	}
	for _, status := range ok {
		r := obj{"description": http.StatusText(status)}
		switch {
		case rt.stream:
			r["content"] = obj{"text/event-stream": obj{"schema": obj{"type": "string", "description": eventStreamFormat}}}
		case rt.out != nil:
			r["content"] = obj{"application/json": obj{"schema": s.schema(rt.out)}}
		}
		if rt.total {
			r["headers"] = obj{TotalHeader: obj{"$ref": "#/components/headers/TotalCount"}}
		}
		out[strconv.Itoa(status)] = r
	}
	for _, status := range errorStatuses(rt) {
		out[strconv.Itoa(status)] = obj{"$ref": "#/components/responses/" + errorResponseName(status)}
	}
	out["default"] = obj{"$ref": "#/components/responses/Error"}
	return out
}

// eventStreamFormat is what the event stream writes.
const eventStreamFormat = "Server-sent events: \"id: <id>\", \"event: <kind>\" and \"data: <JSON of the event, with its id>\" per event, " +
	"a comment line every keep-alive while idle; the first block, a comment and \"id: <id>\" without data, says what the stream follows " +
	"and where in the event log it starts (a client that saw no event resumes after it). " +
	"Send Last-Event-ID to resume after an event; one the server does not keep any more starts the stream with an events.missed event."

// errorStatuses lists the error statuses a route answers for what its
// request says (a missing environment, a bad body); the server's own
// failures, and the rate limits, which any route may answer, are the
// default answer.
func errorStatuses(rt route) []int {
	set := map[int]bool{}
	hasBody := rt.in != nil || len(rt.raw) > 0
	if hasBody || len(rt.query) > 0 || strings.Contains(rt.path, ":") {
		set[http.StatusBadRequest] = true
	}
	if rt.role != "" {
		set[http.StatusUnauthorized] = true
		set[http.StatusForbidden] = true
	}
	if rt.role == "" && hasBody {
		set[http.StatusUnauthorized] = true // a login, a push webhook
	}
	if strings.Contains(rt.path, ":") {
		set[http.StatusNotFound] = true
	}
	if rt.method != http.MethodGet {
		set[http.StatusConflict] = true
	}
	if hasBody {
		set[http.StatusRequestEntityTooLarge] = true
		set[http.StatusUnprocessableEntity] = true
	}
	return slices.Sorted(maps.Keys(set))
}

// errorResponses are the components of error answers: one per status,
// naming its codes, and Error for any.
func errorResponses(body obj) obj {
	byStatus := map[int][]string{}
	for code, status := range Codes {
		byStatus[status] = append(byStatus[status], code)
	}
	var all []string
	out := obj{}
	for _, status := range slices.Sorted(maps.Keys(byStatus)) {
		codes := byStatus[status]
		slices.Sort(codes)
		what := fmt.Sprintf("%d %s: %s", status, http.StatusText(status), strings.Join(codes, ", "))
		all = append(all, what)
		out[errorResponseName(status)] = obj{"description": what, "content": obj{"application/json": obj{"schema": body}}}
	}
	out["Error"] = obj{
		"description": "An error of the catalogue. Any operation may answer 429 rate_limited and 503 busy or unavailable (with Retry-After), " +
			"500 internal and 504 timeout. Codes by status: " + strings.Join(all, "; "),
		"headers": obj{"Retry-After": obj{"$ref": "#/components/headers/RetryAfter"}},
		"content": obj{"application/json": obj{"schema": body}},
	}
	return out
}

// errorResponseName names the error answer of a status: NotFound.
func errorResponseName(status int) string {
	return strings.NewReplacer(" ", "", "-", "").Replace(http.StatusText(status))
}

// openapiPath writes echo's :param as OpenAPI's {param}.
func openapiPath(p string) string {
	segs := strings.Split(p, "/")
	for i, s := range segs {
		if name, ok := strings.CutPrefix(s, ":"); ok {
			segs[i] = "{" + name + "}"
		}
	}
	return strings.Join(segs, "/")
}

// special are the schemas of types that JSON writes otherwise than
// their Go shape says.
var special = map[reflect.Type]obj{
	timeType:               {"type": "string", "format": "date-time"},
	rawMessageType:         {"description": "any JSON value", "nullable": true},
	of[model.ID]():         {"type": "string", "description": "a resource ID: type[agent,key=value], e.g. file[web-1,path=/etc/motd]"},
	of[model.Hash]():       {"type": "string", "pattern": "^[0-9a-f]{64}$", "description": "SHA-256 in hex"},
	of[record.Duration]():  {"type": "string", "description": "a duration as 90s, 10m or 1h30m (a number is read as nanoseconds)"},
	of[model.Attributes](): {"type": "object", "additionalProperties": obj{"nullable": true}, "description": "attribute name → value"},
}

// componentNames names the components whose Go name is not theirs.
// (Enrollment's constants would be EnrollmentToken in a generated Go
// client, the name of another component).
var componentNames = map[reflect.Type]string{
	of[Body]():              "Error",
	of[Error]():             "ErrorDetail",
	of[record.Enrollment](): "EnrollmentPolicy",
}

// enumValues lists the values of each enumerated string type, which the
// document writes as an enum (TestEnumsComplete checks each list against
// the type's constants).
var enumValues = sync.OnceValue(func() map[reflect.Type][]string {
	out := map[reflect.Type][]string{}
	add := func(t reflect.Type, vals []string) { out[t] = vals }
	add(enum(model.ResourceStates()...))
	add(enum(model.Compliant, model.NonCompliant, model.ComplianceUnknown))
	add(enum(model.VersionCandidate, model.VersionReleased, model.VersionRetired))
	add(enum(model.DriftAlert, model.DriftHeal))
	add(enum(record.RoleAdmin, record.RoleOperator, record.RoleViewer))
	add(enum(record.AlertKinds...))
	add(enum(record.EnrollManual, record.EnrollToken, record.EnrollOpen))
	add(enum(record.AgentPending, record.AgentAccepted, record.AgentRejected))
	add(enum(record.ActionDeploy, record.ActionDryRun, record.ActionHeal))
	add(enum(record.OpDeploy, record.OpRepair, record.OpDryRun))
	add(enum(record.DeployByRelease, record.DeployByOperator, record.DeployByHello, record.DeployByDeployInterval, record.DeployByRepairInterval, record.DeployByResume, record.DeployByPlan))
	add(enum(record.DeployRunning, record.DeployOK, record.DeployFailed))
	add(enum(record.AgentWaiting, record.AgentOK, record.AgentFailed))
	add(enum(record.ReleaseRunning, record.ReleaseDone, record.ReleaseFailed))
	add(enum(record.PendingNotConnected, record.PendingInboxFull, record.PendingSendFailed, record.PendingNoKeyAgreement))
	add(enum(record.StageDeploying, record.StageWaiting, record.StageHalted, record.StageAborted, record.StageDone))
	add(enum(record.DeliveryPending, record.DeliveryDelivered, record.DeliveryFailed))
	add(enum(record.CompileRunning, record.CompileReleased, record.CompileCandidate, record.CompileUnchanged, record.CompileSkipped, record.CompileFailed))
	add(enum(record.TriggerOperator, record.TriggerWebhook, record.TriggerPoll, record.TriggerAgent, record.TriggerFacts))
	add(enum(record.SigningKeySteady, record.SigningKeyAnnounced, record.SigningKeySwitching, record.SigningKeySwitched))
	add(enum(record.ParamString, record.ParamInt, record.ParamBool, record.ParamSecret))
	add(enum(record.HostDefined, record.HostProvisioning, record.HostProvisioned, record.HostFailed, record.HostDeprovisioning))
	add(enum(record.PowerRunning, record.PowerStopped, record.PowerPaused, record.PowerCrashed, record.PowerUnknown, record.PowerStarting))
	return out
})

// enum returns T's type and its values as strings.
func enum[T ~string](vals ...T) (reflect.Type, []string) {
	out := make([]string, len(vals))
	for i, v := range vals {
		out[i] = string(v)
	}
	return of[T](), out
}

// installFormats are the formats of a netboot distribution's install
// template.
var installFormats = []string{record.InstallCloudInit, record.InstallPreseed, record.InstallKickstart, record.InstallNone}

// fieldSchemas are the schemas of fields their Go type says too little
// of (a string of a fixed set of untyped constants) or too much (a role
// that may also be taken away), by component and JSON name.
var fieldSchemas = sync.OnceValue(func() map[reflect.Type]map[string]obj {
	oneOf := func(vals ...string) obj { return obj{"type": "string", "enum": vals} }
	roles := func(more ...string) []string {
		return append([]string{string(record.RoleAdmin), string(record.RoleOperator), string(record.RoleViewer)}, more...)
	}
	return map[reflect.Type]map[string]obj{
		of[Error](): {"code": oneOf(slices.Sorted(maps.Keys(Codes))...)},
		of[record.PlanAgent](): {"outcome": oneOf(record.PlanAnswered, record.PlanNoAnswer, record.PlanOffline, record.PlanUnreached,
			record.PlanRefused, record.PlanTooOld, record.PlanFailed)},
		of[record.SourceView]():      {"kind": oneOf(record.SourceGit, record.SourceArchive)},
		of[record.LeavingResource](): {"fate": oneOf(record.FateOrphaned, record.FateAbsent)},
		of[record.ReleaseStrategy](): {"mode": oneOf(record.ReleaseAll, record.ReleaseWaves), "advance": oneOf(record.AdvanceAuto, record.AdvanceManual)},
		of[record.Platform]():        {"driver": oneOf(record.Drivers()...)},
		of[PlatformRequest]():        {"driver": oneOf(record.Drivers()...)},
		of[record.Distribution]():    {"kind": oneOf(record.DistNetboot, record.DistImage), "install_format": oneOf(installFormats...)},
		of[DistributionRequest]():    {"kind": oneOf(record.DistNetboot, record.DistImage), "install_format": oneOf(installFormats...)},
		of[UserUpdate](): {
			"role":  obj{"type": "string", "enum": roles("none"), "description": "the role in every environment; none takes it away"},
			"roles": obj{"type": "object", "additionalProperties": obj{"type": "string", "enum": roles("")}, "description": "environment → role; \"\" takes that role away"},
		},
	}
})

// typeDescriptions describe components.
var typeDescriptions = map[reflect.Type]string{
	of[record.Release](): "A release of a version and how far its fan-out to the environment's accepted agents got. " +
		"sent + up_to_date + pending_count reach agents when it is done.",
	of[record.Released](): "The version released (its fields, as GET /envs/{env}/versions/{n} shows them), with the release's id and the release as it started.",
	of[record.Rollout]():  "A staged release's waves and where they stand (absent for a release to every agent at once).",
	of[record.Deploy](): "A deploy, repair or dry run sent to agents: what set it off, who asked, " +
		"and how many of the agents it was sent to answered (ok or failed).",
	of[record.Plan]():     "What a deploy of the version would change per agent; nothing was changed.",
	of[Summary]():         "An environment's agents and resources, counted.",
	of[record.Webhook]():  "Where an environment's events are posted, signed with the webhook's secret.",
	of[record.Delivery](): "One event posted to one webhook, with its last attempt.",
	of[AgentView]():       "An agent as the API shows it: its record, whether it is online, and its keys' fingerprints.",
	of[Body]():            "The body of every error answer.",
	of[record.Platform](): "Where machines are made: a driver, its settings (defaults filled in), its templates, and the agent that serves it.",
	of[record.Distribution](): "What is installed on a host's machine: netboot (kernel, initrd, an install template rendered with the host's context) " +
		"or image (a gold image per platform, with cloud-init user-data on its NoCloud seed), with typed parameters. Secret settings are shown as \"(secret)\".",
	of[record.Host]():     "The blueprint of a machine (platform, distribution, applications, labels, settings) with where its provisioning stands.",
	of[record.HostView](): "A host with its context (each setting's value and where it came from, secrets hidden), its machine's name on its platform and its instance.",
	of[record.Instance](): "A real machine: made from a host, or reported by a platform's agent without one (discovered).",
}

// fieldDescriptions describe properties, by component and JSON name.
var fieldDescriptions = map[reflect.Type]map[string]string{
	of[record.PendingAgent](): {"later": "what brings the agent the version later"},
	of[record.Release](): {
		"agents":     "accepted agents to reach (0 until listed)",
		"sent":       "agents sent what they miss of the version",
		"up_to_date": "agents that held the version already",
	},
	of[record.Fanout](): {
		"pending": "agents not reached at once (at most 1000 listed)",
		"note":    "why a fan-out failed, or that a newer release superseded it",
	},
	of[record.Rollout](): {
		"wave":      "index of the current wave",
		"sent":      "waves sent",
		"previous":  "the version agents not reached keep (0: none)",
		"strategy":  "the environment's release settings when it started",
		"continues": "operators' continues acted on",
		"asked":     "operators' continues asked for",
		"accepted":  "failed agents a continue accepted: the threshold counts the failures after them",
		"moved":     "agents put in a later wave for requiring an agent of that wave",
	},
	of[record.DeployAgent](): {"error": "why its run could not complete, or that the deploy did not reach it"},
	of[record.Deploy](): {
		"who":    "the API token's (or user's) name; server for what the server started by itself",
		"agents": "only in one deploy's report",
	},
	of[Report]():              {"waiting": "agents it was sent to that have not answered yet"},
	of[record.PlanResource](): {"changes": "attribute → {current, desired}, sensitive values redacted"},
	of[ExportResponse]():      {"release_id": "set when release=true released the version (202)"},
	of[record.Webhook](): {
		"secret": "only in the answer of the call that made or set it",
		"kinds":  "the event kinds posted; [\"*\"]: all",
	},
	of[record.Host](): {
		"reason":   "why a failed host failed, as the driver or the server said it",
		"instance": "the driver's ID of the machine the host became",
	},
	of[record.HostView](): {
		"machine":        "the machine's name on its platform (ENV.HOST)",
		"instance_state": "the machine as its platform's agent last reported it",
	},
	of[record.Delivery](): {
		"id":          "the delivery ID, sent as the Webhook-Id header: the same on every attempt",
		"event_id":    "the event's ID in the event log (0: a test)",
		"status_code": "the receiver's answer to the last attempt (0: none, see error)",
		"next_at":     "when a pending delivery is tried next",
	},
}

// unusedDescriptions finds descriptions of properties no schema has: a
// renamed field leaves one behind.
func unusedDescriptions(s *schemas) []string {
	var out []string
	for what, m := range map[string]map[reflect.Type][]string{"fieldDescriptions": fieldKeys(fieldDescriptions), "fieldSchemas": fieldKeys(fieldSchemas())} {
		for t, fields := range m {
			names := map[string]bool{}
			for _, f := range jsonFields(t) {
				names[f.name] = true
			}
			for _, name := range fields {
				if !names[name] {
					out = append(out, fmt.Sprintf("%s: %s has no property %s", what, t, name))
				}
			}
		}
	}
	for t := range typeDescriptions {
		if _, ok := s.names[t]; !ok {
			out = append(out, fmt.Sprintf("typeDescriptions: %s is not in the document", t))
		}
	}
	return out
}

func fieldKeys[V any](m map[reflect.Type]map[string]V) map[reflect.Type][]string {
	out := map[reflect.Type][]string{}
	for t, fields := range m {
		out[t] = slices.Collect(maps.Keys(fields))
	}
	return out
}
