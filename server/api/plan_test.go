package api_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/tetherhq/tether/model"
	"github.com/tetherhq/tether/server/api"
	"github.com/tetherhq/tether/server/record"
	"github.com/tetherhq/tether/server/store"
	"github.com/tetherhq/tether/server/store/postgres/pgtest"
)

func TestDiffAttributesSQLite(t *testing.T)   { testDiffAttributes(t, openSQLite(t)) }
func TestDiffAttributesPostgres(t *testing.T) { testDiffAttributes(t, pgtest.Open(t)) }

// A version diff says, per resource added, removed or changed, which
// attributes change from what to what; a sensitive value is never shown,
// but its change is.
func testDiffAttributes(t *testing.T, st store.Store) {
	r := newRig(t, st)
	r.must(r.admin, "POST", "/api/v1/envs", api.EnvRequest{Name: "prod"}, nil, 201)
	secret := func(v string) model.Resource {
		s := file("web-1", "/etc/secret", v)
		s.Sensitive = []string{"content"}
		return s
	}
	motd := file("web-1", "/etc/motd", "hello")
	motd.Attributes["mode"] = "0644"
	gone, same := file("web-1", "/etc/gone", "bye"), file("web-1", "/etc/same", "same")
	r.must(r.admin, "POST", "/api/v1/envs/prod/versions", api.ExportRequest{Resources: []model.Resource{secret("hunter2"), motd, gone, same}}, nil, 201)
	motd2 := file("web-1", "/etc/motd", "changed")
	motd2.Attributes["mode"] = "0600"
	motd2.Requires = []model.ID{secret("").ID}
	added := file("web-2", "/x", "y")
	r.must(r.admin, "POST", "/api/v1/envs/prod/versions", api.ExportRequest{Resources: []model.Resource{secret("hunter3"), motd2, same, added}}, nil, 201)

	var raw json.RawMessage
	r.must(r.admin, "GET", "/api/v1/envs/prod/versions/2/diff?from=1", nil, &raw, 200)
	if strings.Contains(string(raw), "hunter") {
		t.Fatalf("diff shows a sensitive value: %s", raw)
	}
	var d api.Diff
	if err := json.Unmarshal(raw, &d); err != nil {
		t.Fatal(err)
	}
	if len(d.Added) != 1 || len(d.Removed) != 1 || len(d.Changed) != 2 || d.Unchanged != 1 {
		t.Fatalf("diff ids %+v; want 1 added, 1 removed, 2 changed, 1 unchanged", d)
	}
	got := map[string]string{}
	for _, rd := range d.Resources {
		var parts []string
		for _, ch := range rd.Attributes {
			old, _ := json.Marshal(ch.Old)
			nw, _ := json.Marshal(ch.New)
			p := ch.Name + ":" + string(old) + "→" + string(nw)
			if ch.Sensitive {
				p += "(s)"
			}
			parts = append(parts, p)
		}
		got[rd.ID.String()] = rd.Change + " " + strings.Join(parts, " ")
	}
	want := map[string]string{
		motd.ID.String():       `changed content:"hello"→"changed" mode:"0644"→"0600" requires:null→["file[web-1,path=/etc/secret]"]`,
		secret("").ID.String(): `changed content:"(sensitive)"→"(sensitive)"(s)`,
		gone.ID.String():       `removed content:"bye"→null path:"/etc/gone"→null`,
		added.ID.String():      `added content:null→"y" path:null→"/x"`,
	}
	if len(got) != len(want) {
		t.Fatalf("diff resources %v; want %v", got, want)
	}
	for id, w := range want {
		if got[id] != w {
			t.Errorf("diff of %s:\n got %s\nwant %s", id, got[id], w)
		}
	}
	if d.Resources[0].ID.Compare(d.Resources[len(d.Resources)-1].ID) > 0 {
		t.Errorf("diff resources not in ID order: %+v", d.Resources)
	}
}

// A plan of a version that does not exist is a 404; with no agent, or no
// agent online, it is refused naming them; a bad timeout is refused.
// Nothing is sent and nothing changes.
func TestPlanBadInput(t *testing.T) {
	r := newRig(t, openSQLite(t))
	r.must(r.admin, "POST", "/api/v1/envs", api.EnvRequest{Name: "prod"}, nil, 201)
	r.must(r.admin, "POST", "/api/v1/envs/prod/versions?release=true", api.ExportRequest{Resources: []model.Resource{file("web-1", "/etc/motd", "one")}}, nil, 202)
	r.must(r.admin, "POST", "/api/v1/envs/prod/versions", api.ExportRequest{Resources: []model.Resource{file("web-1", "/etc/motd", "two")}}, nil, 201)

	var e api.Body
	if status, code := r.do(r.admin, "POST", "/api/v1/envs/prod/versions/99/plan", nil, &e); status != 404 || code != "not_found" || !strings.Contains(e.Error.Message, "no version 99") {
		t.Fatalf("plan of version 99: %d %s %+v; want 404 not_found naming it", status, code, e.Error)
	}
	if status, code := r.do(r.admin, "POST", "/api/v1/envs/nope/versions/2/plan", nil, nil); status != 404 || code != "not_found" {
		t.Fatalf("plan in an unknown environment: %d %s; want 404", status, code)
	}
	if _, code := r.do(r.admin, "POST", "/api/v1/envs/prod/versions/2/plan", nil, &e); code != "no_agents" {
		t.Fatalf("plan with no agent: %s %+v; want no_agents", code, e.Error)
	}
	// An accepted agent that is offline is named, and not asked.
	if err := r.st.UpsertAgent(context.Background(), record.Agent{Env: "prod", Name: "web-1", PublicKey: make([]byte, 32), State: record.AgentAccepted,
		LastSeen: time.Now().Add(-time.Hour)}); err != nil {
		t.Fatal(err)
	}
	if err := r.bus.DeclareInbox(context.Background(), "prod", "web-1"); err != nil {
		t.Fatal(err)
	}
	if _, code := r.do(r.admin, "POST", "/api/v1/envs/prod/versions/2/plan", nil, &e); code != "no_agents" || !strings.Contains(e.Error.Message, "web-1") {
		t.Fatalf("plan with the only agent offline: %s %+v; want no_agents naming web-1", code, e.Error)
	}
	for _, body := range []string{`{"timeout":"5m"}`, `{"timeout":"soon"}`, `{"timeout":"-1s"}`, `{"agents":["bad name!"]}`, `{"nope":1}`} {
		if status, code := r.do(r.admin, "POST", "/api/v1/envs/prod/versions/2/plan", body, &e); status != 400 && status != 422 {
			t.Fatalf("plan with %s: %d %s; want a refusal of the request (400 or 422)", body, status, code)
		}
	}
	var vs []model.Version
	r.must(r.admin, "GET", "/api/v1/envs/prod/versions", nil, &vs, 200)
	if len(vs) != 2 || vs[1].State != model.VersionReleased || vs[0].State != model.VersionCandidate {
		t.Fatalf("versions after refused plans: %+v; want 1 released, 2 a candidate", vs)
	}
}

// A release preview is a viewer's read: what releasing a version would
// take away from each accepted agent, from the version the agent holds;
// a version that does not exist is a 404. Nothing is released.
func TestReleasePreview(t *testing.T) {
	r := newRig(t, openSQLite(t))
	ctx := context.Background()
	r.must(r.admin, "POST", "/api/v1/envs", api.EnvRequest{Name: "prod"}, nil, 201)
	r.must(r.admin, "POST", "/api/v1/envs/prod/versions?release=true", api.ExportRequest{Resources: []model.Resource{file("web-1", "/etc/motd", "one")}}, nil, 202)
	r.must(r.admin, "POST", "/api/v1/envs/prod/versions?release=true",
		api.ExportRequest{Resources: []model.Resource{file("web-1", "/etc/motd", "one"), file("web-2", "/etc/motd", "two")}}, nil, 202)
	for _, name := range []string{"web-1", "web-2"} {
		if err := r.st.UpsertAgent(ctx, record.Agent{Env: "prod", Name: name, PublicKey: make([]byte, 32), State: record.AgentAccepted, Generation: 2}); err != nil {
			t.Fatal(err)
		}
	}
	viewer := r.token("v", record.RoleViewer, "")
	var pv record.ReleasePreview
	r.must(viewer, "GET", "/api/v1/envs/prod/versions/1/release-preview", nil, &pv, 200)
	if pv.Version != 1 || pv.Released != 2 || !pv.Rollback || pv.Agents != 1 || pv.LeaveModel != 1 || len(pv.Leaving) != 1 ||
		pv.Leaving[0].Agent != "web-2" || pv.Leaving[0].From != 2 || len(pv.Leaving[0].Resources) != 1 || pv.Leaving[0].Resources[0].Fate != record.FateOrphaned {
		t.Fatalf("preview of version 1: %+v; want web-2 leaving the model with its one resource orphaned", pv)
	}
	var e api.Body
	if status, code := r.do(viewer, "GET", "/api/v1/envs/prod/versions/9/release-preview", nil, &e); status != 404 || code != "not_found" || !strings.Contains(e.Error.Message, "no version 9") {
		t.Fatalf("preview of version 9: %d %s %+v; want 404 not_found naming it", status, code, e.Error)
	}
	if v, err := r.st.ReleasedVersion(ctx, "prod"); err != nil || v.Number != 2 {
		t.Fatalf("released after previews: %d, %v; want 2", v.Number, err)
	}
}
