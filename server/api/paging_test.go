package api_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/tetherhq/tether/model"
	"github.com/tetherhq/tether/server/api"
	"github.com/tetherhq/tether/server/record"
)

// Listings of agents and resources page and search on the server: limit
// and offset cut the matches, X-Total-Count counts them all, filters and
// q narrow them; bad paging is refused with a clear error; the summary
// counts agents and resources.
func TestPagingAndSearch(t *testing.T) {
	r := newRig(t, openSQLite(t))
	r.must(r.admin, "POST", "/api/v1/envs", api.EnvRequest{Name: "prod"}, nil, 201)
	ctx := context.Background()
	for i := range 25 {
		ag := record.Agent{Env: "prod", Name: fmt.Sprintf("web-%02d", i), State: record.AgentAccepted, Labels: map[string]string{"role": "web"},
			Connected: i%2 == 0, LastSeen: time.Now()}
		switch {
		case i >= 20:
			ag.State, ag.Labels = record.AgentPending, map[string]string{"role": "db"}
		case i == 19:
			ag.Paused = true
		}
		if err := r.st.UpsertAgent(ctx, ag); err != nil {
			t.Fatal(err)
		}
	}
	var res []model.Resource
	for i := range 30 {
		res = append(res, file(fmt.Sprintf("web-%02d", i%3), fmt.Sprintf("/etc/f%02d", i), "x"))
	}
	r.must(r.admin, "POST", "/api/v1/envs/prod/versions?release=true", api.ExportRequest{Resources: res}, nil, 202)

	names := func(path string) ([]string, int) {
		t.Helper()
		a := r.send(r.admin, "GET", path, nil)
		if a.status != http.StatusOK {
			t.Fatalf("GET %s: %d %s", path, a.status, a.body)
		}
		var ags []api.AgentView
		decode(t, a.body, &ags)
		var out []string
		for _, ag := range ags {
			out = append(out, ag.Name)
		}
		total, _ := strconv.Atoi(a.header.Get(api.TotalHeader))
		return out, total
	}
	for _, tc := range []struct {
		path  string
		first string
		n     int
		total int
	}{
		{"/api/v1/envs/prod/agents?limit=10", "web-00", 10, 25},
		{"/api/v1/envs/prod/agents?limit=10&offset=20", "web-20", 5, 25},
		{"/api/v1/envs/prod/agents?limit=10&offset=99", "", 0, 25},
		{"/api/v1/envs/prod/agents?state=pending&limit=3", "web-20", 3, 5},
		{"/api/v1/envs/prod/agents?label=role=db&limit=50", "web-20", 5, 5},
		{"/api/v1/envs/prod/agents?label=role&limit=50", "web-00", 25, 25},
		{"/api/v1/envs/prod/agents?q=WEB-1&limit=50", "web-10", 10, 10},
		{"/api/v1/envs/prod/agents?q=role%3Ddb&limit=50", "web-20", 5, 5},
		{"/api/v1/envs/prod/agents?online=false&limit=50", "web-01", 10, 10},
		{"/api/v1/envs/prod/agents?online=true&label=role%3Dweb&q=1&limit=2&offset=1", "web-12", 2, 5},
		{"/api/v1/envs/prod/agents?state=accepted&limit=10&offset=10", "web-10", 10, 20},
		{"/api/v1/envs/prod/agents?state=rejected", "", 0, 0},
		{"/api/v1/envs/prod/agents", "web-00", 25, 25},
		{"/api/v1/envs/prod/agents?offset=24", "web-24", 1, 25},
	} {
		got, total := names(tc.path)
		if len(got) != tc.n || total != tc.total || (tc.n > 0 && got[0] != tc.first) {
			t.Errorf("GET %s: %d agents from %v, total %d; want %d from %s, total %d", tc.path, len(got), got, total, tc.n, tc.first, tc.total)
		}
	}
	if got, _ := names("/api/v1/envs/prod/agents"); len(got) != 25 {
		t.Errorf("agents without limit: %d, want all 25", len(got))
	}

	a := r.send(r.admin, "GET", "/api/v1/envs/prod/resources?agent=web-01&q=f1&limit=2&offset=1", nil)
	var sts []record.ResourceStatus
	decode(t, a.body, &sts)
	if a.status != 200 || len(sts) != 2 || a.header.Get(api.TotalHeader) != "4" || sts[0].ID.Value != "/etc/f13" {
		t.Errorf("resources of web-01 with f1, page 2: %d %v total %s; want 2 from /etc/f13 of 4 (f10, f13, f16, f19)", a.status, sts, a.header.Get(api.TotalHeader))
	}

	for _, path := range []string{
		"/api/v1/envs/prod/agents?limit=0", "/api/v1/envs/prod/agents?limit=1001", "/api/v1/envs/prod/agents?offset=-1",
		"/api/v1/envs/prod/agents?state=gone", "/api/v1/envs/prod/agents?online=maybe", "/api/v1/envs/prod/resources?limit=x",
		"/api/v1/envs/prod/agents?label=%3Dweb", "/api/v1/envs/prod/agents?label=my%20role", `/api/v1/envs/prod/agents?label=role"%5D`,
	} {
		if a := r.send(r.admin, "GET", path, nil); a.code() != "bad_request" {
			t.Errorf("GET %s: %d %s, want bad_request", path, a.status, a.body)
		}
	}

	var s api.Summary
	r.must(r.admin, "GET", "/api/v1/envs/prod/summary", nil, &s, 200)
	if s.Agents != (api.AgentCounts{Online: 10, Offline: 10, Pending: 5, Paused: 1}) || s.Resources.Total != 30 ||
		s.Resources.ByCompliance[model.ComplianceUnknown] != 30 {
		t.Errorf("summary %+v, want 10 online, 10 offline, 5 pending, 1 paused; 30 resources of unknown compliance", s)
	}
}

func decode(t *testing.T, b []byte, v any) {
	t.Helper()
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatalf("decode %s: %v", b, err)
	}
}
