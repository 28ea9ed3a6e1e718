package api_test

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/tetherhq/tether/model"
	"github.com/tetherhq/tether/server/api"
	"github.com/tetherhq/tether/server/record"
)

// The live inventory lists the accepted agents with their labels and facts,
// in the format the compiler reads; pending and rejected agents are not in
// it, and a viewer may read it.
func TestInventory(t *testing.T) {
	r := newRig(t, openSQLite(t))
	r.must(r.admin, "POST", "/api/v1/envs", api.EnvRequest{Name: "prod"}, nil, 201)
	empty := r.send(r.admin, "GET", "/api/v1/envs/prod/inventory", nil)
	if inv, err := model.ParseInventory(bytes.NewReader(empty.body)); empty.status != 200 || err != nil || len(inv.Agents) != 0 {
		t.Fatalf("inventory of an environment without agents: %d %s (%v)", empty.status, empty.body, err)
	}
	for _, ag := range []record.Agent{
		{Env: "prod", Name: "web-1", State: record.AgentAccepted, Labels: map[string]string{"role": "web"}, Facts: map[string]any{"ipv4": "10.0.0.1", "cpus": 2}},
		{Env: "prod", Name: "db-1", State: record.AgentAccepted},
		{Env: "prod", Name: "web-2", State: record.AgentPending, Labels: map[string]string{"role": "web"}},
		{Env: "prod", Name: "web-3", State: record.AgentRejected, Labels: map[string]string{"role": "web"}},
	} {
		ag.LastSeen = time.Now()
		if err := r.st.UpsertAgent(context.Background(), ag); err != nil {
			t.Fatal(err)
		}
	}
	viewer := r.token("dash", record.RoleViewer, "")
	a := r.send(viewer, "GET", "/api/v1/envs/prod/inventory", nil)
	if a.status != 200 {
		t.Fatalf("inventory: %d %s", a.status, a.body)
	}
	inv, err := model.ParseInventory(bytes.NewReader(a.body))
	if err != nil {
		t.Fatalf("the inventory does not parse as one: %v\n%s", err, a.body)
	}
	if len(inv.Agents) != 2 || inv.Agents[0].Name != "db-1" || inv.Agents[1].Name != "web-1" {
		t.Fatalf("inventory agents %+v, want db-1 and web-1 (accepted only, by name)", inv.Agents)
	}
	web := inv.Agents[1]
	if web.Labels["role"] != "web" || web.Facts["ipv4"] != "10.0.0.1" || web.Facts["cpus"] == nil {
		t.Fatalf("web-1 in the inventory: %+v", web)
	}
	if a := r.send(r.admin, "GET", "/api/v1/envs/nope/inventory", nil); a.code() != "not_found" {
		t.Fatalf("inventory of a missing environment: %d %s", a.status, a.body)
	}
}
