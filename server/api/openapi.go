package api

import (
	"net/http"
	"slices"
	"strings"

	"github.com/tetherhq/tether/server/record"
)

// openapi serves an OpenAPI 3.0 document built from the route table, so it
// lists exactly what is served, with the role each operation needs.
func (a *API) openapi(r *request) (int, any, error) { return http.StatusOK, a.Document(), nil }

// Document returns the API's OpenAPI document.
func (a *API) Document() map[string]any {
	paths := map[string]map[string]any{}
	for _, rt := range a.routes() {
		p := "/api/v1" + openapiPath(rt.path)
		if paths[p] == nil {
			paths[p] = map[string]any{}
		}
		var params []map[string]any
		for _, seg := range strings.Split(rt.path, "/") {
			if name, ok := strings.CutPrefix(seg, ":"); ok {
				params = append(params, map[string]any{"name": name, "in": "path", "required": true, "schema": map[string]string{"type": "string"}})
			}
		}
		for _, q := range rt.query {
			params = append(params, map[string]any{"name": q, "in": "query", "schema": map[string]string{"type": "string"}})
		}
		desc := rt.summary
		if rt.role != "" {
			desc += ". Needs role " + string(rt.role)
			if rt.global {
				desc += " on every environment"
			}
			desc += "."
		}
		op := map[string]any{
			"summary":     rt.summary,
			"description": desc,
			"operationId": strings.ToLower(rt.method) + strings.NewReplacer("/", "_", ":", "", "{", "", "}", "").Replace(rt.path),
			"responses": map[string]any{
				"2XX":     map[string]any{"description": "success", "content": map[string]any{"application/json": map[string]any{}}},
				"default": map[string]any{"description": "error", "content": map[string]any{"application/json": map[string]any{"schema": map[string]any{"$ref": "#/components/schemas/Error"}}}},
			},
		}
		if rt.returns != "" {
			schema := map[string]any{"$ref": "#/components/schemas/" + strings.TrimPrefix(rt.returns, "[]")}
			if strings.HasPrefix(rt.returns, "[]") {
				schema = map[string]any{"type": "array", "items": schema}
			}
			op["responses"].(map[string]any)["2XX"] = map[string]any{"description": "success", "content": map[string]any{"application/json": map[string]any{"schema": schema}}}
		}
		if len(params) > 0 {
			op["parameters"] = params
		}
		if rt.body != "" {
			op["requestBody"] = map[string]any{"description": rt.body, "content": map[string]any{"application/json": map[string]any{}}}
		}
		if rt.role == "" {
			op["security"] = []any{}
		}
		paths[p][strings.ToLower(rt.method)] = op
	}
	codes := make([]string, 0, len(Codes))
	for c := range Codes {
		codes = append(codes, c)
	}
	slices.Sort(codes)
	return map[string]any{
		"openapi": "3.0.3",
		"info": map[string]any{
			"title":       "Tether API",
			"version":     a.cfg.Version,
			"description": "Every request but this document and logging in carries Authorization: Bearer <token>, or the session cookie tether_session of a login (POST /session); with the cookie, changes (POST, PUT, PATCH, DELETE) also carry the session's CSRF token as X-CSRF-Token. Errors are {\"error\": {code, message, hint}}; codes are stable.",
		},
		"paths":    paths,
		"security": []any{map[string]any{"bearer": []any{}}, map[string]any{"session": []any{}}},
		"components": map[string]any{
			"securitySchemes": map[string]any{"bearer": map[string]any{"type": "http", "scheme": "bearer"},
				"session": map[string]any{"type": "apiKey", "in": "cookie", "name": SessionCookie}},
			"schemas": map[string]any{
				"Error": map[string]any{"type": "object", "properties": map[string]any{"error": map[string]any{"type": "object", "properties": map[string]any{
					"code":    map[string]any{"type": "string", "enum": codes},
					"message": map[string]any{"type": "string"},
					"hint":    map[string]any{"type": "string"},
				}}}},
				"Release":        releaseSchema,
				"Released":       releasedSchema,
				"ExportResponse": exportSchema,
				"Deploy":         deploySchema,
				"Report":         reportSchema,
				"Plan":           planSchema,
				"ReleasePreview": releasePreviewSchema,
				"Summary":        summarySchema,
				"Webhook":        webhookSchema,
				"Delivery":       deliverySchema,
			},
		},
	}
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

// Schemas of the answers about releases: a release answers at once (202)
// and its fan-out to agents is followed through GET /envs/{env}/releases/{id}.
var (
	str          = map[string]any{"type": "string"}
	integer      = map[string]any{"type": "integer"}
	pendingAgent = map[string]any{"type": "object", "properties": map[string]any{
		"agent":  str,
		"reason": map[string]any{"type": "string", "enum": []string{"not_connected", "inbox_full", "send_failed", "no_key_agreement"}},
		"later":  map[string]any{"type": "string", "description": "what brings the agent the version later"},
	}}
	releaseSchema = map[string]any{"type": "object", "description": "A release of a version and how far its fan-out to the environment's accepted agents got. " +
		"sent + up_to_date + pending_count reach agents when it is done.", "properties": map[string]any{
		"id":            str,
		"env":           str,
		"version":       integer,
		"state":         map[string]any{"type": "string", "enum": []string{"running", "done", "failed"}},
		"agents":        map[string]any{"type": "integer", "description": "accepted agents to reach (0 until listed)"},
		"sent":          map[string]any{"type": "integer", "description": "agents sent what they miss of the version"},
		"up_to_date":    map[string]any{"type": "integer", "description": "agents that held the version already"},
		"pending":       map[string]any{"type": "array", "items": pendingAgent, "description": "agents not reached at once (at most 1000 listed)"},
		"pending_count": integer,
		"note":          map[string]any{"type": "string", "description": "why a fan-out failed, or that a newer release superseded it"},
		"started_at":    map[string]any{"type": "string", "format": "date-time"},
		"finished_at":   map[string]any{"type": "string", "format": "date-time"},
		"rollout":       rolloutSchema,
	}}
	strs          = map[string]any{"type": "array", "items": str}
	rolloutSchema = map[string]any{"type": "object", "description": "A staged release's waves and where they stand (absent for a release to every agent at once).", "properties": map[string]any{
		"stage":    map[string]any{"type": "string", "enum": []string{"deploying", "waiting", "halted", "aborted", "done"}},
		"wave":     map[string]any{"type": "integer", "description": "index of the current wave"},
		"sent":     map[string]any{"type": "integer", "description": "waves sent"},
		"previous": map[string]any{"type": "integer", "description": "the version agents not reached keep (0: none)"},
		"strategy": map[string]any{"type": "object", "description": "the environment's release settings when it started: mode, canary, waves, max_failed, advance"},
		"waves": map[string]any{"type": "array", "items": map[string]any{"type": "object", "properties": map[string]any{
			"name": str, "agents": strs, "succeeded": integer, "failed": integer, "pending": integer,
			"failed_agents": strs, "pending_agents": strs,
		}}},
		"continues": map[string]any{"type": "integer", "description": "operators' continues acted on"},
		"asked":     map[string]any{"type": "integer", "description": "operators' continues asked for"},
		"accepted":  map[string]any{"type": "integer", "description": "failed agents a continue accepted: the threshold counts the failures after them"},
		"moved":     map[string]any{"type": "array", "items": str, "description": "agents put in a later wave for requiring an agent of that wave"},
	}}
	releasedSchema = map[string]any{"type": "object", "description": "The version released (its fields, as GET /envs/{env}/versions/{n} shows them), " +
		"with the release's id and the release as it started.", "properties": map[string]any{
		"env":        str,
		"number":     integer,
		"state":      str,
		"release_id": str,
		"release":    map[string]any{"$ref": "#/components/schemas/Release"},
	}}
	deployAgent = map[string]any{"type": "object", "properties": map[string]any{
		"agent":            str,
		"outcome":          map[string]any{"type": "string", "enum": []string{"waiting", "ok", "failed"}},
		"failed_resources": integer,
		"error":            map[string]any{"type": "string", "description": "why its run could not complete, or that the deploy did not reach it"},
		"finished_at":      map[string]any{"type": "string", "format": "date-time"},
	}}
	deploySchema = map[string]any{"type": "object", "description": "A deploy, repair or dry run sent to agents: what set it off, who asked, " +
		"and how many of the agents it was sent to answered (ok or failed).", "properties": map[string]any{
		"id":          str,
		"env":         str,
		"kind":        map[string]any{"type": "string", "enum": []string{"deploy", "repair", "dryrun"}},
		"trigger":     map[string]any{"type": "string", "enum": []string{"release", "operator", "hello", "deploy_interval", "repair_interval", "resume", "plan"}},
		"who":         map[string]any{"type": "string", "description": "the API token's (or user's) name; server for what the server started by itself"},
		"version":     integer,
		"asked":       integer,
		"answered":    integer,
		"ok":          integer,
		"failed":      integer,
		"outcome":     map[string]any{"type": "string", "enum": []string{"running", "ok", "failed"}},
		"started_at":  map[string]any{"type": "string", "format": "date-time"},
		"finished_at": map[string]any{"type": "string", "format": "date-time"},
		"agents":      map[string]any{"type": "array", "items": deployAgent, "description": "only in one deploy's report"},
	}}
	reportSchema = map[string]any{"type": "object", "properties": map[string]any{
		"id":      str,
		"deploy":  map[string]any{"$ref": "#/components/schemas/Deploy"},
		"waiting": map[string]any{"type": "array", "items": str, "description": "agents it was sent to that have not answered yet"},
		"actions": map[string]any{"type": "array", "items": map[string]any{"type": "object"}},
	}}
	planSchema = map[string]any{"type": "object", "description": "What a deploy of the version would change per agent; nothing was changed.", "properties": map[string]any{
		"id":           str,
		"env":          str,
		"version":      integer,
		"released":     integer,
		"not_answered": map[string]any{"type": "array", "items": str},
		"timeout_ns":   integer,
		"agents": map[string]any{"type": "array", "items": map[string]any{"type": "object", "properties": map[string]any{
			"name":      str,
			"outcome":   map[string]any{"type": "string", "enum": []string{record.PlanAnswered, record.PlanNoAnswer, record.PlanOffline, record.PlanUnreached, record.PlanRefused, record.PlanTooOld, record.PlanFailed}},
			"online":    map[string]any{"type": "boolean"},
			"paused":    map[string]any{"type": "boolean"},
			"note":      str,
			"unchanged": integer,
			"resources": map[string]any{"type": "array", "items": map[string]any{"type": "object", "properties": map[string]any{
				"id":      str,
				"would":   str,
				"state":   str,
				"changes": map[string]any{"type": "object", "description": "attribute → {current, desired}, sensitive values redacted"},
				"message": str,
			}}},
			"leaving": leavingSchema,
		}}},
		"note": map[string]any{"type": "string", "description": "what purge_on_delete means for the resources taken away, when it is on"},
	}}
	leavingSchema = map[string]any{"type": "object", "description": "What a release of the version takes away from one agent: the resources of the version it holds that the version does not have.", "properties": map[string]any{
		"agent":        str,
		"from":         map[string]any{"type": "integer", "description": "the version the agent holds"},
		"leaves_model": map[string]any{"type": "boolean", "description": "the version has nothing for the agent at all"},
		"orphaned":     map[string]any{"type": "integer", "description": "resources left on the host as they are, no longer managed"},
		"absent":       map[string]any{"type": "integer", "description": "resources purged in the version held: absent, and no longer kept so"},
		"resources": map[string]any{"type": "array", "description": "the resources, in ID order (at most 1000 over a whole answer)", "items": map[string]any{"type": "object", "properties": map[string]any{
			"id":   str,
			"fate": map[string]any{"type": "string", "enum": []string{record.FateOrphaned, record.FateAbsent}},
		}}},
	}}
	releasePreviewSchema = map[string]any{"type": "object", "description": "What releasing the version would take away from each accepted agent; nothing is released.", "properties": map[string]any{
		"env":              str,
		"version":          integer,
		"released":         map[string]any{"type": "integer", "description": "the version released now (0: none)"},
		"rollback":         map[string]any{"type": "boolean", "description": "the version is older than the released one, or retired: a release copies it into a new version"},
		"already_released": map[string]any{"type": "boolean", "description": "the version is the released one: a release changes nothing"},
		"staged":           map[string]any{"type": "boolean", "description": "the environment releases in waves: each agent loses its resources when its wave comes"},
		"leaving":          map[string]any{"type": "array", "items": leavingSchema, "description": "the agents that lose resources, by name"},
		"agents":           integer,
		"leave_model":      integer,
		"resources":        integer,
		"note":             map[string]any{"type": "string", "description": "what purge_on_delete means here, when it is on"},
	}}
	counts        = map[string]any{"type": "object", "additionalProperties": integer}
	summarySchema = map[string]any{"type": "object", "description": "An environment's agents and resources, counted.", "properties": map[string]any{
		"agents": map[string]any{"type": "object", "properties": map[string]any{
			"online": integer, "offline": integer, "pending": integer, "rejected": integer, "paused": integer,
		}},
		"resources": map[string]any{"type": "object", "properties": map[string]any{
			"total": integer, "by_state": counts, "by_compliance": counts,
		}},
	}}
	exportSchema = map[string]any{"type": "object", "properties": map[string]any{
		"version":    map[string]any{"type": "object"},
		"reused":     map[string]any{"type": "boolean"},
		"released":   map[string]any{"type": "boolean"},
		"release_id": map[string]any{"type": "string", "description": "set when release=true released the version (202)"},
		"release":    map[string]any{"$ref": "#/components/schemas/Release"},
	}}
)

// Schemas of webhooks and their deliveries.
var (
	dateTime      = map[string]any{"type": "string", "format": "date-time"}
	webhookSchema = map[string]any{"type": "object", "description": "Where an environment's events are posted, signed with the webhook's secret.", "properties": map[string]any{
		"id":         integer,
		"env":        str,
		"name":       str,
		"url":        str,
		"secret":     map[string]any{"type": "string", "description": "only in the answer of the call that made or set it"},
		"kinds":      map[string]any{"type": "array", "items": str, "description": "the event kinds posted; [\"*\"]: all"},
		"enabled":    map[string]any{"type": "boolean"},
		"created_by": str,
		"created_at": dateTime,
		"updated_at": dateTime,
	}}
	deliverySchema = map[string]any{"type": "object", "description": "One event posted to one webhook, with its last attempt.", "properties": map[string]any{
		"id":          map[string]any{"type": "integer", "description": "the delivery ID, sent as the Webhook-Id header: the same on every attempt"},
		"webhook_id":  integer,
		"event_id":    map[string]any{"type": "integer", "description": "the event's ID in the event log (0: a test)"},
		"kind":        str,
		"state":       map[string]any{"type": "string", "enum": []string{"pending", "delivered", "failed"}},
		"attempts":    integer,
		"status_code": map[string]any{"type": "integer", "description": "the receiver's answer to the last attempt (0: none, see error)"},
		"error":       str,
		"latency_ms":  integer,
		"next_at":     map[string]any{"type": "string", "format": "date-time", "description": "when a pending delivery is tried next"},
		"created_at":  dateTime,
		"finished_at": dateTime,
	}}
)
