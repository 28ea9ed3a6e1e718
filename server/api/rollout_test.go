package api_test

import (
	"context"
	"testing"

	"github.com/rs/zerolog"

	"github.com/tetherhq/tether/model"
	"github.com/tetherhq/tether/server"
	"github.com/tetherhq/tether/server/api"
	"github.com/tetherhq/tether/server/record"
)

// Continue and abort act on a running staged rollout only: a release to
// every agent at once is 409 not_staged, an unknown id 404, a finished
// rollout 409 release_finished; none changes anything.
func TestRolloutVerbs(t *testing.T) {
	r := newServerRig(t, openSQLite(t), server.Config{}, api.Config{MaxUpload: 1 << 20}, zerolog.Nop())
	ctx := context.Background()
	r.must(r.admin, "POST", "/api/v1/envs", api.EnvRequest{Name: "prod"}, nil, 201)
	for _, name := range []string{"a", "b"} {
		if err := r.st.UpsertAgent(ctx, record.Agent{Env: "prod", Name: name, State: record.AgentAccepted}); err != nil {
			t.Fatal(err)
		}
		if err := r.bus.DeclareInbox(ctx, "prod", name); err != nil {
			t.Fatal(err)
		}
	}
	r.run()
	release := func(content string) string {
		var exp api.ExportResponse
		r.must(r.admin, "POST", "/api/v1/envs/prod/versions?release=true",
			api.ExportRequest{Resources: []model.Resource{file("a", "/motd", content), file("b", "/motd", content)}}, &exp, 202)
		return exp.ReleaseID
	}
	all := release("one")
	r.waitRelease("prod", all)
	for _, tt := range []struct {
		name, token, path string
		status            int
		code              string
	}{
		{"continue at once", r.admin, "/releases/" + all + "/continue", 409, "not_staged"},
		{"abort at once", r.admin, "/releases/" + all + "/abort", 409, "not_staged"},
		{"unknown", r.admin, "/releases/00000000-0000-4000-8000-000000000000/continue", 404, "not_found"},
	} {
		if got, code := r.do(tt.token, "POST", "/api/v1/envs/prod"+tt.path, nil, nil); got != tt.status || code != tt.code {
			t.Fatalf("%s: %d %s, want %d %s", tt.name, got, code, tt.status, tt.code)
		}
	}

	r.must(r.admin, "PATCH", "/api/v1/envs/prod/settings", map[string]string{"release_strategy": "waves", "release_canary": "1"}, nil, 200)
	staged := release("two")
	var rel record.Release
	r.must(r.admin, "GET", "/api/v1/envs/prod/releases/"+staged, nil, &rel, 200)
	if rel.Rollout == nil || len(rel.Rollout.Waves) != 2 || rel.Rollout.Waves[0].Agents[0] != "a" {
		t.Fatalf("staged release %+v: want two waves, the canary a", rel.Rollout)
	}
	// No agent runs: the canary stays pending, the rollout running.
	r.must(r.admin, "POST", "/api/v1/envs/prod/releases/"+staged+"/abort", nil, &rel, 200)
	if rel.State != record.ReleaseDone || rel.Rollout.Stage != record.StageAborted {
		t.Fatalf("abort: %s %s, want done, aborted", rel.State, rel.Rollout.Stage)
	}
	for _, verb := range []string{"abort", "continue"} {
		if got, code := r.do(r.admin, "POST", "/api/v1/envs/prod/releases/"+staged+"/"+verb, nil, nil); got != 409 || code != "release_finished" {
			t.Fatalf("%s of an aborted rollout: %d %s, want 409 release_finished", verb, got, code)
		}
	}
	pins, err := r.st.AgentPins(ctx, "prod")
	if err != nil || len(pins) != 1 || pins["b"] != rel.Version-1 {
		t.Fatalf("pins after the abort: %v, %v; want b kept on version %d", pins, err, rel.Version-1)
	}
}
