package server_test

import (
	"context"
	"io"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rs/zerolog"

	"github.com/tetherhq/tether/bus"
	"github.com/tetherhq/tether/model"
	"github.com/tetherhq/tether/server"
	"github.com/tetherhq/tether/server/record"
	"github.com/tetherhq/tether/server/store/sqlite"
)

// TestFleetGauges: /metrics shows the fleet's agents by status, its
// resources by state and compliance, the open drift alerts and the
// webhook deliveries, per environment.
func TestFleetGauges(t *testing.T) {
	ctx := context.Background()
	st, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "t.db"), sqlite.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	b := bus.NewLocal(zerolog.Nop())
	defer b.Close()
	srv, err := server.New(server.Config{}, st, b, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := srv.EnsureEnv(ctx, "prod", record.DefaultEnvSettings()); err != nil {
		t.Fatal(err)
	}
	res := model.Resource{ID: model.ID{Type: "file", Agent: "web-1", Key: "path", Value: "/etc/motd"}, Attributes: map[string]any{"path": "/etc/motd", "content": "hi"}}
	v, err := st.PutVersion(ctx, "prod", model.VersionMeta{Compiler: "test"}, []model.Resource{res})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.Release(ctx, "prod", v.Number); err != nil {
		t.Fatal(err)
	}
	for _, a := range []record.Agent{
		{Env: "prod", Name: "web-1", State: record.AgentAccepted, Connected: true, PublicKey: []byte{1}},
		{Env: "prod", Name: "web-2", State: record.AgentAccepted, PublicKey: []byte{2}},
		{Env: "prod", Name: "web-3", State: record.AgentPending, PublicKey: []byte{3}},
	} {
		if err := st.UpsertAgent(ctx, a); err != nil {
			t.Fatal(err)
		}
	}
	rec := httptest.NewRecorder()
	srv.Metrics().Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	body, _ := io.ReadAll(rec.Body)
	for _, want := range []string{
		`tether_fleet_agents{env="prod",status="online"} 1`,
		`tether_fleet_agents{env="prod",status="offline"} 1`,
		`tether_fleet_agents{env="prod",status="pending"} 1`,
		`tether_fleet_resources{compliance="unknown",env="prod",state="available"} 1`,
		`tether_fleet_open_alerts{env="prod"} 0`,
		`tether_webhook_deliveries{state="pending"} 0`,
	} {
		if !strings.Contains(string(body), want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	if t.Failed() {
		t.Logf("/metrics:\n%s", body)
	}
}
