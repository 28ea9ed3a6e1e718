package api

import (
	"net/url"
	"strings"

	"github.com/tetherhq/tether/model"
	"github.com/tetherhq/tether/server/record"
)

// auditRoutes are the routes of the audit log.
func (a *API) auditRoutes() []route {
	return []route{
		{method: "GET", path: "/audit", role: record.RoleAdmin, global: true, summary: "The audit log, newest first", query: []param{{name: "env", typ: of[string](), desc: "entries of this environment"}, pLimit}, out: of[[]record.AuditEntry](), serve: a.listAudit},
	}
}

func (a *API) listAudit(r *request) (int, any, error) {
	in := r.input()
	limit := in.limit()
	env := r.QueryParam("env")
	if env != "" {
		in.check(auditEnvError(env))
	}
	return listing(in, func() ([]record.AuditEntry, error) {
		return a.svc.Records.Audit(r.ctx(), record.AuditFilter{Env: env, Org: r.who.Org, Limit: limit})
	})
}

// auditEnvError checks the env filter of the audit log.
func auditEnvError(env string) error {
	if err := model.ValidateEnvName(clip(env)); err != nil {
		return newError("bad_request", "", "env=: %v", err)
	}
	return nil
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

// recordAudit writes an entry of the audit log that no route's change
// makes (a failed login); one that cannot be written is logged.
func (a *API) recordAudit(r *request, e record.AuditEntry) {
	if err := a.svc.Records.RecordAudit(r.ctx(), e); err != nil {
		a.log.Error().Err(err).Str("action", e.Action).Msg("audit log entry lost")
	}
}
