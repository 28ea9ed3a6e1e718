package api

import (
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

// agentFilter reads the filters of a listing of agents: state, online,
// label (key=value, or key for any value) and the search text q, found in
// the name or a label.
func (a *API) agentFilter(r *request, p pageQuery) (record.AgentFilter, error) {
	f := record.AgentFilter{State: record.AgentState(r.QueryParam("state")), Search: p.q, Limit: p.limit, Offset: p.offset}
	switch f.State {
	case "", record.AgentPending, record.AgentAccepted, record.AgentRejected:
	default:
		return f, newError("bad_request", "", "state=%q: want pending, accepted or rejected", clip(string(f.State)))
	}
	switch o := r.QueryParam("online"); o {
	case "":
	case "true", "false":
		b := o == "true"
		f.Online, f.OnlineSince = &b, a.onlineSince()
	default:
		return f, newError("bad_request", "", "online=%q: want true or false", clip(o))
	}
	if l := r.QueryParam("label"); l != "" {
		k, v, ok := strings.Cut(l, "=")
		if model.ValidateLabels(map[string]string{k: ""}) != nil {
			return f, newError("bad_request", "", "label=%q: a label key is letters, digits, '.', '-' and '_', at most %d bytes: give key=value or key",
				clip(l), model.MaxLabelKeyLen)
		}
		f.LabelKey = k
		if ok {
			f.LabelValue = &v
		}
	}
	return f, nil
}
