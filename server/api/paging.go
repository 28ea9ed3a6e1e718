package api

import (
	"net/http"
	"strconv"
	"strings"

	"github.com/tetherhq/tether/model"
	"github.com/tetherhq/tether/server/record"
)

// TotalHeader carries, on a paged listing, how many entries match its
// filters in all (the page holds at most limit of them).
const TotalHeader = "X-Total-Count"

// MaxPage bounds the limit of a paged listing.
const MaxPage = 1000

// pageQuery is a listing's page: offset, limit (0: everything) and the
// search text q.
type pageQuery struct {
	offset, limit int
	q             string
}

// page reads limit, offset and q. Without limit the listing is whole, as
// clients before paging expect.
func (r *request) page() (pageQuery, error) {
	var p pageQuery
	if s := r.QueryParam("limit"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > MaxPage {
			return p, newError("bad_request", "", "limit=%q: want a number from 1 to %d", clip(s), MaxPage)
		}
		p.limit = n
	}
	if s := r.QueryParam("offset"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 0 {
			return p, newError("bad_request", "", "offset=%q: want a number of 0 or more", clip(s))
		}
		p.offset = n
	}
	p.q = strings.ToLower(model.Clip(strings.TrimSpace(r.QueryParam("q")), 200))
	return p, nil
}

// cut returns the page of all, and says how many there were in all.
func cut[T any](r *request, p pageQuery, all []T) []T {
	r.Response().Header().Set(TotalHeader, strconv.Itoa(len(all)))
	if p.offset >= len(all) {
		return all[:0]
	}
	all = all[p.offset:]
	if p.limit > 0 && p.limit < len(all) {
		all = all[:p.limit]
	}
	return all
}

// agentFilter narrows a listing of agents: state, a label (key=value, or
// key for any value) and the search text, found in the name, a label or
// the version.
type agentFilter struct {
	state      record.AgentState
	labelKey   string
	labelValue *string
	q          string
	// online, when set, keeps accepted agents online (true) or offline.
	online *bool
}

func (r *request) agentFilter(q string) (agentFilter, error) {
	f := agentFilter{state: record.AgentState(r.QueryParam("state")), q: q}
	switch f.state {
	case "", record.AgentPending, record.AgentAccepted, record.AgentRejected:
	default:
		return f, newError("bad_request", "", "state=%q: want pending, accepted or rejected", clip(string(f.state)))
	}
	switch o := r.QueryParam("online"); o {
	case "":
	case "true", "false":
		b := o == "true"
		f.online = &b
	default:
		return f, newError("bad_request", "", "online=%q: want true or false", clip(o))
	}
	if l := r.QueryParam("label"); l != "" {
		k, v, ok := strings.Cut(l, "=")
		f.labelKey = k
		if ok {
			f.labelValue = &v
		}
	}
	return f, nil
}

func (f agentFilter) match(ag record.Agent, online func(record.Agent) bool) bool {
	if f.state != "" && ag.State != f.state {
		return false
	}
	if f.online != nil && (ag.State != record.AgentAccepted || online(ag) != *f.online) {
		return false
	}
	if f.labelKey != "" {
		v, ok := ag.Labels[f.labelKey]
		if !ok || (f.labelValue != nil && v != *f.labelValue) {
			return false
		}
	}
	if f.q == "" || strings.Contains(strings.ToLower(ag.Name), f.q) {
		return true
	}
	for k, v := range ag.Labels {
		if strings.Contains(strings.ToLower(k+"="+v), f.q) {
			return true
		}
	}
	return false
}

// Summary counts an environment's agents and resources, for an overview
// of the fleet.
type Summary struct {
	Agents    AgentCounts    `json:"agents"`
	Resources ResourceCounts `json:"resources"`
}

// AgentCounts counts agents: accepted ones online and offline, pending,
// rejected and paused ones.
type AgentCounts struct {
	Online   int `json:"online"`
	Offline  int `json:"offline"`
	Pending  int `json:"pending"`
	Rejected int `json:"rejected"`
	Paused   int `json:"paused"`
}

// ResourceCounts counts the resources of the released version, by state
// and by compliance.
type ResourceCounts struct {
	Total        int                         `json:"total"`
	ByState      map[model.ResourceState]int `json:"by_state"`
	ByCompliance map[model.Compliance]int    `json:"by_compliance"`
}

func (a *API) summary(r *request) (int, any, error) {
	env, err := a.existingEnv(r)
	if err != nil {
		return 0, nil, err
	}
	ags, err := a.svc.Agents.ListAgents(r.ctx(), env)
	if err != nil {
		return 0, nil, err
	}
	var s Summary
	for _, ag := range ags {
		switch {
		case ag.State == record.AgentPending:
			s.Agents.Pending++
		case ag.State == record.AgentRejected:
			s.Agents.Rejected++
		case a.online(ag):
			s.Agents.Online++
		default:
			s.Agents.Offline++
		}
		if ag.Paused && ag.State == record.AgentAccepted {
			s.Agents.Paused++
		}
	}
	counts, err := a.svc.Resources.StatusCounts(r.ctx(), env)
	if err != nil {
		return 0, nil, err
	}
	s.Resources = ResourceCounts{ByState: map[model.ResourceState]int{}, ByCompliance: map[model.Compliance]int{}}
	for _, c := range counts {
		s.Resources.Total += c.N
		s.Resources.ByState[c.State] += c.N
		s.Resources.ByCompliance[c.Compliance] += c.N
	}
	return http.StatusOK, s, nil
}
