package api

import (
	"fmt"
	"maps"
	"net/http"
	"reflect"
	"slices"
	"time"

	"github.com/tetherhq/tether/model"
	"github.com/tetherhq/tether/server/record"
)

// PlanRequest is the body of a plan: the agents to ask (none: every
// accepted one) and how long to wait for their answers ("30s"; at most
// record.MaxPlanTimeout).
type PlanRequest struct {
	Agents  []string `json:"agents,omitempty"`
	Timeout string   `json:"timeout,omitempty"`
}

func (a *API) plan(r *request) (int, any, error) {
	env, err := a.existingEnv(r)
	if err != nil {
		return 0, nil, err
	}
	n, err := r.number("n")
	if err != nil {
		return 0, nil, err
	}
	var req PlanRequest
	if r.Request().ContentLength != 0 {
		if err := a.decode(r, &req); err != nil {
			return 0, nil, err
		}
	}
	if err := validAgentNames(req.Agents); err != nil {
		return 0, nil, err
	}
	timeout := record.DefaultPlanTimeout
	if req.Timeout != "" {
		if timeout, err = time.ParseDuration(req.Timeout); err != nil || timeout <= 0 || timeout > record.MaxPlanTimeout {
			return 0, nil, newError("invalid", "give a duration such as 30s", "timeout %q: want a duration above 0 and at most %s", clip(req.Timeout), record.MaxPlanTimeout)
		}
	}
	if a.svc.Plans == nil {
		return 0, nil, newError("conflict", "", "this server answers no plans")
	}
	if _, err := a.svc.Versions.GetVersion(r.ctx(), env, n, false); isNotFound(err) {
		return 0, nil, a.missingVersion(r, env, n)
	} else if err != nil {
		return 0, nil, err
	}
	p, err := a.svc.Plans.Plan(r.ctx(), env, n, record.PlanRequest{Agents: req.Agents, Timeout: timeout, OfflineAfter: a.cfg.OfflineAfter})
	if err != nil {
		return 0, nil, err
	}
	r.detail = fmt.Sprintf("plan %s of version %d", p.ID, n)
	return http.StatusOK, p, nil
}

// releasePreview says what releasing a version would take away from each
// accepted agent, before it is released: what a client asks its user to
// confirm.
func (a *API) releasePreview(r *request) (int, any, error) {
	env, err := a.existingEnv(r)
	if err != nil {
		return 0, nil, err
	}
	n, err := r.number("n")
	if err != nil {
		return 0, nil, err
	}
	if a.svc.Plans == nil {
		return 0, nil, newError("conflict", "", "this server previews no releases")
	}
	if _, err := a.svc.Versions.GetVersion(r.ctx(), env, n, false); isNotFound(err) {
		return 0, nil, a.missingVersion(r, env, n)
	} else if err != nil {
		return 0, nil, err
	}
	p, err := a.svc.Plans.ReleasePreview(r.ctx(), env, n)
	if err != nil {
		return 0, nil, err
	}
	return http.StatusOK, p, nil
}

// MaxDiffDetails bounds the resources whose attribute changes a diff
// shows; the others are counted in Added, Removed and Changed only.
const MaxDiffDetails = 1000

// ResourceDiff is what changed in one resource between two versions.
type ResourceDiff struct {
	ID model.ID `json:"id"`
	// Change is added, removed or changed.
	Change string `json:"change"`
	// Attributes are the attributes that differ, by name; requires,
	// subscribes and purged are shown as attributes too.
	Attributes []AttributeChange `json:"attributes"`
}

// AttributeChange is one attribute's value in the older version (Old) and
// the newer (New); nil where it has none. A sensitive value is shown as
// model.RedactedValue, and Sensitive is set.
type AttributeChange struct {
	Name      string `json:"name"`
	Old       any    `json:"old"`
	New       any    `json:"new"`
	Sensitive bool   `json:"sensitive,omitempty"`
}

// Resource diff changes.
const (
	DiffAdded   = "added"
	DiffRemoved = "removed"
	DiffChanged = "changed"
)

// attributeChanges compares a resource in two versions (prev or next nil:
// added or removed), by attribute, sorted by name. Sensitive values are
// compared by their sealed digests (or in clear, where not sealed) and
// never shown.
func attributeChanges(prev, next *model.Resource) []AttributeChange {
	type side struct {
		val       any
		has, sens bool
		cmp       any
	}
	read := func(r *model.Resource) map[string]side {
		out := map[string]side{}
		if r == nil {
			return out
		}
		for k, v := range r.Attributes {
			s := side{val: v, has: true, cmp: v}
			if r.IsSensitive(k) {
				s.val, s.sens = model.RedactedValue, true
			}
			out[k] = s
		}
		for k, v := range r.Sealed {
			out[k] = side{val: model.RedactedValue, has: true, sens: true, cmp: v.Digest}
		}
		if len(r.Requires) > 0 {
			out["requires"] = side{val: idStrings(r.Requires), has: true, cmp: idStrings(r.Requires)}
		}
		if len(r.Subscribes) > 0 {
			out["subscribes"] = side{val: idStrings(r.Subscribes), has: true, cmp: idStrings(r.Subscribes)}
		}
		if r.Purged {
			out["purged"] = side{val: true, has: true, cmp: true}
		}
		return out
	}
	a, b := read(prev), read(next)
	names := map[string]bool{}
	for k := range a {
		names[k] = true
	}
	for k := range b {
		names[k] = true
	}
	var out []AttributeChange
	for _, k := range slices.Sorted(maps.Keys(names)) {
		x, y := a[k], b[k]
		if x.has == y.has && x.sens == y.sens && reflect.DeepEqual(x.cmp, y.cmp) {
			continue
		}
		out = append(out, AttributeChange{Name: k, Old: x.val, New: y.val, Sensitive: x.sens || y.sens})
	}
	if out == nil {
		out = []AttributeChange{}
	}
	return out
}

func idStrings(ids []model.ID) []string {
	out := make([]string, len(ids))
	for i, id := range ids {
		out[i] = id.String()
	}
	slices.Sort(out)
	return out
}
