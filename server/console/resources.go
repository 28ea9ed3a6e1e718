package console

import (
	"fmt"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"time"

	"github.com/tetherhq/tether/model"
	"github.com/tetherhq/tether/server/record"
)

// The resources of an environment: their list, and one resource with
// its drift and action log.

type resourcesData struct {
	Resources                         []record.ResourceStatus
	Pager                             pager
	Q, State, Compliance, Type, Agent string
	States, Compliances               []string
}

// resourceStates are the states the resources page filters by, in its
// order.
var resourceStates = []model.ResourceState{model.StateAvailable, model.StateDeploying, model.StateDeployed, model.StateFailed, model.StateSkipped,
	model.StateUndefined, model.StateSkippedForUndefined, model.StateUnavailable, model.StateCancelled, model.StateOrphaned}

func resources(v *visit) {
	v.Title, v.Live = "Resources of "+v.Env, true
	d := resourcesData{Q: v.query("q"), State: v.query("state"), Compliance: v.query("compliance"), Type: v.query("type"), Agent: v.query("agent"),
		Compliances: []string{string(model.Compliant), string(model.NonCompliant), string(model.ComplianceUnknown)}}
	for _, s := range resourceStates {
		d.States = append(d.States, string(s))
	}
	var ok bool
	if d.Resources, d.Pager, ok = listPage[record.ResourceStatus](v, v.envPath()+"/resources", "q", "state", "compliance", "type", "agent"); ok {
		v.render("resources", http.StatusOK, d)
	}
}

type resourceData struct {
	Status     record.ResourceStatus
	Attributes []fact
	Drift      []driftRow
	DriftAt    *time.Time
	Log        []record.Action
}

// driftRow is one drifted attribute: what the host holds, and what the
// version wants.
type driftRow struct {
	Name, Current, Desired string
}

func resource(v *visit) {
	raw := v.r.PathValue("id")
	v.Title, v.Live = "Resource "+raw, true
	id, err := model.ParseID(raw)
	if err != nil {
		v.fail(badRequest(fmt.Sprintf("resource ID %q: %v", raw, err), ""))
		return
	}
	path := v.envPath() + "/resources/" + url.PathEscape(raw)
	var view struct {
		record.ResourceStatus
		Resource *model.Resource `json:"resource"`
	}
	if !v.get(path, &view) {
		return
	}
	d := resourceData{Status: view.ResourceStatus}
	if view.Resource != nil {
		d.Attributes = factsOf(view.Resource.Attributes)
	}
	if d.Status.Compliance == model.NonCompliant {
		var als []record.Alert
		if !v.get(v.envPath()+"/alerts?kind=drift&limit=500&agent="+url.QueryEscape(id.Agent), &als) {
			return
		}
		d.Drift, d.DriftAt = driftOf(als, id)
	}
	if !v.get(path+"/log?limit=50", &d.Log) {
		return
	}
	v.render("resource", http.StatusOK, d)
}

// driftOf is the drift of resource id that the first open drift alert of
// als about it tells, by attribute, and when that alert was raised.
func driftOf(als []record.Alert, id model.ID) ([]driftRow, *time.Time) {
	for _, a := range als {
		if a.ID == nil || *a.ID != id || a.Compliance == model.Compliant {
			continue
		}
		var rows []driftRow
		for _, k := range slices.Sorted(maps.Keys(a.Changes)) {
			rows = append(rows, driftRow{Name: k, Current: show(a.Changes[k].Current), Desired: show(a.Changes[k].Desired)})
		}
		at := a.At
		return rows, &at
	}
	return nil, nil
}
