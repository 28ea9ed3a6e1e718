package server_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/tetherhq/tether/bus"
	"github.com/tetherhq/tether/bus/amqp/amqptest"
	"github.com/tetherhq/tether/model"
	"github.com/tetherhq/tether/model/testenv"
	"github.com/tetherhq/tether/server"
	"github.com/tetherhq/tether/server/api"
	"github.com/tetherhq/tether/server/record"
	"github.com/tetherhq/tether/server/store/postgres/pgtest"
)

// pgctl stops or starts the local PostgreSQL cluster. Fault tests run
// apart from the rest of the suite, one package at a time (`make test` runs
// them after it, with TETHER_FAULT_TESTS=1).
func pgctl(t *testing.T, action string) {
	t.Helper()
	versions, err := os.ReadDir("/etc/postgresql")
	if err != nil || len(versions) != 1 {
		t.Fatalf("fault tests need the one local cluster under /etc/postgresql: %v", err)
	}
	out, err := exec.Command("pg_ctlcluster", "--skip-systemctl-redirect", versions[0].Name(), "main", action).CombinedOutput()
	if err != nil {
		t.Fatalf("pg_ctlcluster %s: %v\n%s", action, err, out)
	}
}

// TestFaultPostgresRestart stops PostgreSQL under a running server: the API
// answers 503 with the code "unavailable" and /readyz says why; events that
// arrive meanwhile stay on the broker; once PostgreSQL is back every one is
// recorded and the API answers again.
func TestFaultPostgresRestart(t *testing.T) {
	testenv.Faults(t, "stop PostgreSQL")
	if os.Getenv("TETHER_TEST_POSTGRES") != "" {
		t.Skip("SKIPPED: TETHER_TEST_POSTGRES names a database this test cannot restart")
	}
	if _, err := exec.LookPath("pg_ctlcluster"); err != nil {
		t.Fatalf("this fault test needs pg_ctlcluster to stop the local PostgreSQL: %v", err)
	}
	ctx := context.Background()
	st := pgtest.Open(t)
	b := amqptest.Open(t, amqptest.Config(t))
	srv, err := server.New(server.Config{Consumers: 4}, st, b, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := srv.EnsureEnv(ctx, "prod", quietSettings()); err != nil {
		t.Fatal(err)
	}
	const n = 50
	v, rs := releaseFiles(t, srv, n)
	web := newFakeAgent(t, st, "prod", "web")
	tok, secret, err := api.IssueToken("root", record.RoleAdmin, "", "test", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if err := st.CreateToken(ctx, tok); err != nil {
		t.Fatal(err)
	}
	httpSrv := httptest.NewServer(api.New(api.Config{}, server.APIServices(srv, nil), zerolog.Nop()).Handler())
	defer httpSrv.Close()
	get := func(path string) (int, string) {
		req, _ := http.NewRequest("GET", httpSrv.URL+path, nil)
		req.Header.Set("Authorization", "Bearer "+secret)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var body struct {
			Error struct {
				Code string `json:"code"`
			} `json:"error"`
		}
		_ = json.NewDecoder(resp.Body).Decode(&body)
		return resp.StatusCode, body.Error.Code
	}
	runServer(t, srv)
	if code, _ := get("/api/v1/envs"); code != http.StatusOK {
		t.Fatalf("GET /envs before the fault: %d", code)
	}

	pgctl(t, "stop")
	restarted := false
	defer func() {
		if !restarted {
			pgctl(t, "start")
		}
	}()
	for _, path := range []string{"/api/v1/envs", "/api/v1/envs/prod/resources", "/readyz"} {
		if code, errCode := get(path); code != http.StatusServiceUnavailable || (path != "/readyz" && errCode != "unavailable") {
			t.Fatalf("GET %s with PostgreSQL stopped: %d %q, want 503 \"unavailable\"", path, code, errCode)
		}
	}
	// Events arriving now cannot be written: they must wait on the broker.
	for _, r := range rs {
		e := web.seal(t, "prod", bus.KindResourceStatus, bus.ResourceStatus{DeployID: "during-outage", Generation: v.Number,
			Results: []model.Result{{ID: r.ID, State: model.StateDeployed}}})
		if err := b.Publish(ctx, e); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(500 * time.Millisecond) // let the server try, and fail, to write some
	pgctl(t, "start")
	restarted = true

	waitFor(t, "the API back", func() bool { code, _ := get("/api/v1/envs"); return code == http.StatusOK })
	waitFor(t, "every event written after the outage", func() bool {
		sts, err := st.Statuses(ctx, "prod", record.StatusFilter{State: model.StateDeployed})
		return err == nil && len(sts) == n
	})
	if code, _ := get("/readyz"); code != http.StatusOK {
		t.Fatalf("/readyz after the outage: %d", code)
	}
	if _, errCode := get("/api/v1/envs/nope"); !strings.Contains(errCode, "not_found") {
		t.Fatalf("a plain 404 after the outage: %q", errCode)
	}
}
