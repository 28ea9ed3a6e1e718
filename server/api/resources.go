package api

import (
	"net/http"
	"net/url"
	"slices"
	"strconv"

	"github.com/tetherhq/tether/model"
	"github.com/tetherhq/tether/server/record"
)

// ResourceView is a resource as the API shows it: where it stands and, for
// one resource, what it is (sensitive values redacted).
type ResourceView struct {
	record.ResourceStatus
	Resource *model.Resource `json:"resource,omitempty"`
}

// resourceRoutes are the routes of the resources of the released version.
func (a *API) resourceRoutes() []route {
	resourceQuery := []param{
		pAgent,
		{name: "type", typ: of[string](), desc: "resources of this type"},
		{name: "state", typ: of[model.ResourceState](), desc: "resources in this state"},
		{name: "compliance", typ: of[model.Compliance](), desc: "resources of this compliance"},
		pQ, pPage, pOffset,
	}
	resourceID := []param{{name: "id", typ: of[string](), desc: "the resource's ID, URL-escaped: file[web-1,path=/etc/motd]"}}
	return []route{
		{method: "GET", path: "/envs/:env/resources", role: record.RoleViewer, summary: "List resources with their state and compliance; with limit, a page of them (offset, q: text in the ID; the header X-Total-Count says how many match)", query: resourceQuery, out: of[[]record.ResourceStatus](), total: true, serve: a.listResources},
		{method: "GET", path: "/envs/:env/resources/:id", role: record.RoleViewer, summary: "Show a resource of the released version (id URL-escaped)", pathParams: resourceID, out: of[ResourceView](), serve: a.getResource},
		{method: "GET", path: "/envs/:env/resources/:id/log", role: record.RoleViewer, summary: "A resource's action log, newest first", pathParams: resourceID, query: []param{pLimit}, out: of[[]record.Action](), serve: a.resourceLog},
		{method: "GET", path: "/envs/:env/resources/:id/history", role: record.RoleViewer, summary: "The versions that hold a resource, with its hash in each", pathParams: resourceID, out: of[[]record.ResourceHash](), serve: a.resourceHistory},
	}
}

// resource is the :id parameter, a resource ID URL-escaped by the client.
func (in *input) resource() model.ID { return take(in, in.r.resourceID) }

func (r *request) resourceID() (model.ID, error) {
	raw, err := url.PathUnescape(r.Param("id"))
	if err != nil {
		return model.ID{}, newError("bad_request", "URL-escape the ID", "resource ID %q: %v", clip(r.Param("id")), err)
	}
	if len(raw) > maxIDLen {
		return model.ID{}, newError("bad_request", "", "resource ID of %d bytes: at most %d", len(raw), maxIDLen)
	}
	id, err := model.ParseID(raw)
	if err != nil {
		return model.ID{}, newError("bad_request", "IDs look like file[web-1,path=/etc/motd], URL-escaped", "resource ID %q: %s", clip(raw), clip(err.Error()))
	}
	return id, nil
}

// maxIDLen bounds a printed resource ID: model's limits on its parts, and
// its punctuation.
const maxIDLen = 64 + 253 + 64 + 4096 + 4

func (a *API) listResources(r *request) (int, any, error) {
	in := r.input()
	env := in.env()
	agent, typ := in.filters()
	f := record.StatusFilter{Agent: agent, Type: typ,
		State: model.ResourceState(r.QueryParam("state")), Compliance: model.Compliance(r.QueryParam("compliance"))}
	in.check(statusFilterError(f))
	p := in.page()
	if in.err != nil {
		return 0, nil, in.err
	}
	if _, err := a.svc.Envs.GetEnv(r.ctx(), env); err != nil {
		return 0, nil, err
	}
	// The store finds, counts and cuts the page: a listing of 200,000
	// resources is never read whole for a page of it.
	f.Search, f.Limit, f.Offset = p.q, p.limit, p.offset
	sts, err := a.svc.Resources.Statuses(r.ctx(), env, f)
	if err != nil {
		return 0, nil, err
	}
	total := len(sts)
	if p.limit > 0 && (p.offset > 0 || total == p.limit) {
		// A page that is not all there is: count the rest in the store.
		if total, err = a.svc.Resources.CountStatuses(r.ctx(), env, f, 0); err != nil {
			return 0, nil, err
		}
	}
	r.Response().Header().Set(TotalHeader, strconv.Itoa(total))
	return http.StatusOK, nonNil(sts), nil
}

// statusFilterError checks the state and compliance of a listing of
// resources.
func statusFilterError(f record.StatusFilter) error {
	if f.State != "" && !f.State.Valid() {
		return newError("bad_request", "", "state=%q: not a resource state", clip(string(f.State)))
	}
	if f.Compliance != "" && !f.Compliance.Valid() {
		return newError("bad_request", "", "compliance=%q: want compliant, non_compliant or unknown", clip(string(f.Compliance)))
	}
	return nil
}

func (a *API) getResource(r *request) (int, any, error) {
	in := r.input()
	env, id := in.env(), in.resource()
	if in.err != nil {
		return 0, nil, in.err
	}
	sts, err := a.svc.Resources.Statuses(r.ctx(), env, record.StatusFilter{Agent: id.Agent, Type: id.Type})
	if err != nil {
		return 0, nil, err
	}
	i := slices.IndexFunc(sts, func(s record.ResourceStatus) bool { return s.ID == id })
	if i < 0 {
		return 0, nil, newError("not_found", "tether resource list shows what there is", "no resource %s in environment %s", id, env)
	}
	view := ResourceView{ResourceStatus: sts[i]}
	res, err := a.svc.Resources.Resource(r.ctx(), env, sts[i].Version, id)
	if err == nil {
		res = redacted(res)
		view.Resource = &res
	} else if !isNotFound(err) {
		return 0, nil, err
	}
	return http.StatusOK, view, nil
}

func (a *API) resourceLog(r *request) (int, any, error) {
	in := r.input()
	env, id, limit := in.env(), in.resource(), in.limit()
	return listing(in, func() ([]record.Action, error) { return a.svc.Resources.Actions(r.ctx(), env, id, limit) })
}

func (a *API) resourceHistory(r *request) (int, any, error) {
	in := r.input()
	env, id := in.env(), in.resource()
	return listing(in, func() ([]record.ResourceHash, error) { return a.svc.Resources.ResourceHistory(r.ctx(), env, id) })
}
