package api

import (
	"github.com/tetherhq/tether/server/record"
)

// alertRoutes are the routes of compliance and security alerts.
func (a *API) alertRoutes() []route {
	return []route{
		{method: "GET", path: "/envs/:env/alerts", role: record.RoleViewer, summary: "Compliance and security alerts, newest first", query: []param{pAgent, {name: "kind", typ: of[string](), enum: record.AlertKindFilters(), desc: "alerts of this kind, or of this family (compile: every compile kind)"}, pLimit}, out: of[[]record.Alert](), serve: a.listAlerts},
	}
}

func (a *API) listAlerts(r *request) (int, any, error) {
	in := r.input()
	env, limit := in.env(), in.limit()
	kinds := take(in, func() ([]record.AlertKind, error) { return alertKinds(r.QueryParam("kind")) })
	agent, _ := in.filters()
	return listing(in, func() ([]record.Alert, error) {
		return a.svc.Records.Alerts(r.ctx(), record.AlertFilter{Env: env, Agent: agent, Kinds: kinds, Limit: limit})
	})
}

// alertKinds reads the kind filter of a listing of alerts.
func alertKinds(s string) ([]record.AlertKind, error) {
	kinds, err := record.ParseAlertKinds(s)
	if err != nil {
		return nil, newError("bad_request", "", "kind=%q: want %s", clip(s), record.AlertKindsHelp)
	}
	return kinds, nil
}
