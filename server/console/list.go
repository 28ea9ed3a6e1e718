package console

import (
	"net/http"
	"net/url"
	"strconv"
	"strings"
)

// offset reads the page's ?offset.
func offset(r *http.Request) int {
	n, err := strconv.Atoi(r.URL.Query().Get("offset"))
	if err != nil || n < 0 {
		return 0
	}
	return n
}

// pager is where a listing's page stands.
type pager struct {
	Total, Offset, Shown int
	Prev, Next           string
}

func newPager(r *http.Request, h http.Header, shown int) pager {
	total := totalCount(h)
	p := pager{Total: total, Offset: offset(r), Shown: shown}
	q := r.URL.Query()
	q.Del("fragment")
	if p.Offset > 0 {
		q.Set("offset", strconv.Itoa(max(p.Offset-PageSize, 0)))
		p.Prev = "?" + q.Encode()
	}
	if p.Offset+shown < total {
		q.Set("offset", strconv.Itoa(p.Offset+PageSize))
		p.Next = "?" + q.Encode()
	}
	return p
}

// Last is the number of the last row shown (1-based).
func (p pager) Last() int { return p.Offset + p.Shown }

// filters builds an API query from the page's filters that are set.
func filters(r *http.Request, keys ...string) url.Values {
	q := url.Values{}
	for _, k := range keys {
		if v := strings.TrimSpace(r.URL.Query().Get(k)); v != "" {
			q.Set(k, v)
		}
	}
	return q
}

// totalCount is how many rows a listing has in all, as the API's
// answer h says.
func totalCount(h http.Header) int {
	n, _ := strconv.Atoi(h.Get("X-Total-Count"))
	return n
}

// list gets at most limit rows of the listing at path, filtered by the
// page's query parameters keys; a failure is the error page, and list
// reports false.
func list[T any](v *visit, path string, limit int, keys ...string) ([]T, bool) {
	q := filters(v.r, keys...)
	q.Set("limit", strconv.Itoa(limit))
	var rows []T
	ok := v.get(path+"?"+q.Encode(), &rows)
	return rows, ok
}

// listPage gets the page's rows of the listing at path (PageSize of
// them from its ?offset), filtered by its query parameters keys, with
// where they stand in the listing.
func listPage[T any](v *visit, path string, keys ...string) ([]T, pager, bool) {
	q := filters(v.r, keys...)
	q.Set("limit", strconv.Itoa(PageSize))
	q.Set("offset", strconv.Itoa(offset(v.r)))
	var rows []T
	h, ok := v.fetch(path+"?"+q.Encode(), &rows)
	if !ok {
		return nil, pager{}, false
	}
	return rows, newPager(v.r, h, len(rows)), true
}

// newest gets the newest row of the listing at path (asked with
// limit=1), or nil where there is none or the API does not answer: the
// page shows it where there is one, and goes without it else.
func newest[T any](v *visit, path string) *T {
	var rows []T
	if err := v.call(http.MethodGet, path, nil, &rows); err != nil || len(rows) == 0 {
		return nil
	}
	return &rows[0]
}

// kindAgentList is what a page listing an environment's deploys or
// alerts shows: the rows, and the filters they were asked for with.
type kindAgentList[T any] struct {
	Rows        []T
	Kind, Agent string
}

// showKindAgentList shows page name: at most limit rows of the
// environment's listing of that name, filtered by kind and agent.
func showKindAgentList[T any](v *visit, name, title string, limit int) {
	v.Title, v.Live = title+" of "+v.Env, true
	if rows, ok := list[T](v, v.envPath()+"/"+name, limit, "kind", "agent"); ok {
		v.render(name, http.StatusOK, kindAgentList[T]{Rows: rows, Kind: v.query("kind"), Agent: v.query("agent")})
	}
}
