package api

import (
	"maps"
	"net/http"
	"reflect"
	"slices"
	"strconv"

	"github.com/tetherhq/tether/model"
	"github.com/tetherhq/tether/server/record"
)

// Diff is what changed between two versions.
type Diff struct {
	From      int64      `json:"from"`
	To        int64      `json:"to"`
	Added     []model.ID `json:"added"`
	Removed   []model.ID `json:"removed"`
	Changed   []model.ID `json:"changed"`
	Unchanged int        `json:"unchanged"`
	// Resources are the added, removed and changed resources with their
	// attribute changes (sensitive values redacted), in ID order; at
	// most MaxDiffDetails of them, Truncated set when there were more.
	Resources []ResourceDiff `json:"resources"`
	Truncated bool           `json:"truncated,omitempty"`
}

// MaxDiffDetails bounds the resources whose attribute changes a diff
// shows; the others are counted in Added, Removed and Changed only.
const MaxDiffDetails = 1000

// Resource diff changes.
const (
	DiffAdded   = "added"
	DiffRemoved = "removed"
	DiffChanged = "changed"
)

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

func (a *API) diffVersions(r *request) (int, any, error) {
	in := r.input()
	env, to := in.env(), in.version()
	if in.err != nil {
		return 0, nil, in.err
	}
	var from int64
	var err error
	if s := r.QueryParam("from"); s != "" {
		if from, err = strconv.ParseInt(s, 10, 64); err != nil || from < 0 {
			return 0, nil, newError("bad_request", "", "from=%q: want a version number (0: the empty set)", s)
		}
	} else {
		rel, err := a.svc.Versions.ReleasedVersion(r.ctx(), env)
		switch {
		case err == nil && rel.Number != to:
			from = rel.Number
		case err == nil || isNotFound(err):
			from = to - 1
		default:
			return 0, nil, err
		}
	}
	next, err := a.svc.Versions.ResourceHashes(r.ctx(), env, to)
	if err != nil {
		return 0, nil, err
	}
	var prev []record.ResourceHash
	if from > 0 {
		if prev, err = a.svc.Versions.ResourceHashes(r.ctx(), env, from); err != nil {
			return 0, nil, err
		}
	}
	d := diffHashes(from, to, prev, next)
	if err := a.diffDetails(r, env, &d); err != nil {
		return 0, nil, err
	}
	return http.StatusOK, d, nil
}

// diffDetails reads the bodies of the resources d adds, removes or changes
// and says which of their attributes change.
func (a *API) diffDetails(r *request, env string, d *Diff) error {
	d.Resources = []ResourceDiff{}
	type one struct {
		id     model.ID
		change string
	}
	var all []one
	for _, set := range []struct {
		ids    []model.ID
		change string
	}{{d.Added, DiffAdded}, {d.Removed, DiffRemoved}, {d.Changed, DiffChanged}} {
		for _, id := range set.ids {
			all = append(all, one{id, set.change})
		}
	}
	slices.SortFunc(all, func(x, y one) int { return x.id.Compare(y.id) })
	if len(all) > MaxDiffDetails {
		all, d.Truncated = all[:MaxDiffDetails], true
	}
	for _, o := range all {
		var prev, next *model.Resource
		if o.change != DiffAdded {
			res, err := a.svc.Resources.Resource(r.ctx(), env, d.From, o.id)
			if err != nil {
				return err
			}
			prev = &res
		}
		if o.change != DiffRemoved {
			res, err := a.svc.Resources.Resource(r.ctx(), env, d.To, o.id)
			if err != nil {
				return err
			}
			next = &res
		}
		d.Resources = append(d.Resources, ResourceDiff{ID: o.id, Change: o.change, Attributes: attributeChanges(prev, next)})
	}
	return nil
}

// diffHashes compares two ID-sorted hash lists.
func diffHashes(from, to int64, prev, next []record.ResourceHash) Diff {
	d := Diff{From: from, To: to, Added: []model.ID{}, Removed: []model.ID{}, Changed: []model.ID{}}
	i, j := 0, 0
	for i < len(prev) || j < len(next) {
		var c int
		switch {
		case i == len(prev):
			c = 1
		case j == len(next):
			c = -1
		default:
			c = prev[i].ID.Compare(next[j].ID)
		}
		switch {
		case c < 0:
			d.Removed = append(d.Removed, prev[i].ID)
			i++
		case c > 0:
			d.Added = append(d.Added, next[j].ID)
			j++
		default:
			if prev[i].Hash != next[j].Hash {
				d.Changed = append(d.Changed, next[j].ID)
			} else {
				d.Unchanged++
			}
			i++
			j++
		}
	}
	return d
}

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
