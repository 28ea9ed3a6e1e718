package console

import (
	"net/http"
	"net/url"

	"github.com/tetherhq/tether/model"
	"github.com/tetherhq/tether/server/record"
)

// The environments: the home page that lists them, and an
// environment's overview.

func home(v *visit) {
	if len(v.Envs) == 1 {
		http.Redirect(v.w, v.r, "/envs/"+url.PathEscape(v.Envs[0].Name), http.StatusSeeOther)
		return
	}
	v.Title = "Environments"
	v.render("home", http.StatusOK, nil)
}

// summary is the API's count of an environment's agents and resources.
type summary struct {
	Agents struct {
		Online, Offline, Pending, Rejected, Paused int
	} `json:"agents"`
	Resources struct {
		Total        int                         `json:"total"`
		ByState      map[model.ResourceState]int `json:"by_state"`
		ByCompliance map[model.Compliance]int    `json:"by_compliance"`
	} `json:"resources"`
}

// count is one labelled number of a summary.
type count struct {
	Label, Link string
	N           int
}

type overviewData struct {
	Summary     summary
	States      []count
	Compliance  []count
	Failed      []record.ResourceStatus
	FailedTotal int
	Drifted     []record.ResourceStatus
	DriftTotal  int
	Release     *record.Release
	Compile     *record.Compile
	Alerts      []record.Alert
}

// overviewStates are the resource states the overview counts, in its
// order, where any resource is in them.
var overviewStates = []model.ResourceState{model.StateDeployed, model.StateDeploying, model.StateAvailable, model.StateFailed, model.StateSkipped,
	model.StateUndefined, model.StateSkippedForUndefined, model.StateUnavailable, model.StateCancelled, model.StateOrphaned}

func overview(v *visit) {
	v.Title, v.Live = "Overview of "+v.Env, true
	e := v.envPath()
	var d overviewData
	if !v.get(e+"/summary", &d.Summary) {
		return
	}
	for _, s := range overviewStates {
		if n := d.Summary.Resources.ByState[s]; n > 0 {
			d.States = append(d.States, count{Label: string(s), N: n, Link: e + "/resources?state=" + string(s)})
		}
	}
	for _, s := range []model.Compliance{model.Compliant, model.NonCompliant, model.ComplianceUnknown} {
		d.Compliance = append(d.Compliance, count{Label: string(s), N: d.Summary.Resources.ByCompliance[s], Link: e + "/resources?compliance=" + string(s)})
	}
	h, ok := v.fetch(e+"/resources?state=failed&limit=10", &d.Failed)
	if !ok {
		return
	}
	d.FailedTotal = totalCount(h)
	if h, ok = v.fetch(e+"/resources?compliance=non_compliant&limit=10", &d.Drifted); !ok {
		return
	}
	d.DriftTotal = totalCount(h)
	d.Release = newest[record.Release](v, e+"/releases?limit=1")
	d.Compile = newest[record.Compile](v, e+"/compiles?limit=1")
	if !v.get(e+"/alerts?limit=10", &d.Alerts) {
		return
	}
	v.render("overview", http.StatusOK, d)
}
