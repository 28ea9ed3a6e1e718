package api_test

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/tetherhq/tether/bus"
	"github.com/tetherhq/tether/model"
	"github.com/tetherhq/tether/server"
	"github.com/tetherhq/tether/server/api"
	"github.com/tetherhq/tether/server/record"
	"github.com/tetherhq/tether/server/scheduler"
)

// patience bounds the waits of these tests: a guard against hangs, not a
// speed assertion.
const releasePatience = 30 * time.Second

// run runs the server (its fan-outs of releases among the rest) until the
// test ends.
func (r *rig) run() {
	r.t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.srv.Run(ctx) }()
	r.t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
			r.t.Errorf("server: %v", err)
		}
	})
}

// waitRelease polls a release until it is no longer running.
func (r *rig) waitRelease(env, id string) record.Release {
	r.t.Helper()
	deadline := time.Now().Add(releasePatience)
	for {
		var rel record.Release
		r.must(r.admin, "GET", "/api/v1/envs/"+env+"/releases/"+url.PathEscape(id), nil, &rel, 200)
		if rel.State != record.ReleaseRunning {
			return rel
		}
		if time.Now().After(deadline) {
			r.t.Fatalf("release %s still running after %v: %+v", id, releasePatience, rel)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// gatedBus holds every batch of commands until the test opens its gate:
// a broker as slow as the test wants.
type gatedBus struct {
	*bus.Local
	gate    chan struct{}
	batches chan int // the size of each batch as it arrives
}

func (b *gatedBus) SendBatch(ctx context.Context, msgs []bus.Outgoing) []error {
	select {
	case b.batches <- len(msgs):
	default:
	}
	select {
	case <-b.gate:
	case <-ctx.Done():
		errs := make([]error, len(msgs))
		for i := range errs {
			errs[i] = ctx.Err()
		}
		return errs
	}
	return b.Local.SendBatch(ctx, msgs)
}

// A release answers at once (202, with its id) while its fan-out to 500
// agents is held up at the broker, and other requests are served
// meanwhile; once the broker takes the commands, the release is done and
// says so.
func TestReleaseDoesNotWaitForItsFanout(t *testing.T) {
	gb := &gatedBus{gate: make(chan struct{}), batches: make(chan int, 64)}
	r := newServerRigOn(t, openSQLite(t), server.Config{Fanout: fanout(100, 2)}, api.Config{MaxUpload: 1 << 20}, zerolog.Nop(),
		func(l *bus.Local) bus.Bus { gb.Local = l; return gb })
	ctx := context.Background()
	r.must(r.admin, "POST", "/api/v1/envs", api.EnvRequest{Name: "prod"}, nil, 201)
	const agents = 500
	var rs []model.Resource
	for i := range agents {
		name := fmt.Sprintf("web-%03d", i)
		if err := r.st.UpsertAgent(ctx, record.Agent{Env: "prod", Name: name, State: record.AgentAccepted}); err != nil {
			t.Fatal(err)
		}
		if err := r.bus.DeclareInbox(ctx, "prod", name); err != nil {
			t.Fatal(err)
		}
		rs = append(rs, file(name, "/etc/motd", "hello"))
	}
	r.run()
	var exp api.ExportResponse
	r.must(r.admin, "POST", "/api/v1/envs/prod/versions?release=true", api.ExportRequest{Resources: rs}, &exp, 202)
	if exp.ReleaseID == "" || !exp.Released {
		t.Fatalf("export with release: %+v, want released with a release id", exp)
	}
	// The fan-out has reached the broker, which holds it.
	select {
	case <-gb.batches:
	case <-time.After(releasePatience):
		t.Fatal("the fan-out sent nothing")
	}
	// Other requests are answered meanwhile, and the release says it runs.
	var rel record.Release
	r.must(r.admin, "GET", "/api/v1/envs/prod/releases/"+exp.ReleaseID, nil, &rel, 200)
	if rel.State != record.ReleaseRunning || rel.Version != exp.Version.Number || rel.Env != "prod" {
		t.Fatalf("release while its fan-out is held: %+v, want running, version %d", rel, exp.Version.Number)
	}
	var vs []model.Version
	r.must(r.admin, "GET", "/api/v1/envs/prod/versions", nil, &vs, 200)
	if len(vs) != 1 || vs[0].State != model.VersionReleased {
		t.Fatalf("versions while the fan-out is held: %+v, want the one, released", vs)
	}
	// Releasing the released version again changes nothing: no second
	// release.
	var again record.Released
	r.must(r.admin, "POST", fmt.Sprintf("/api/v1/envs/prod/versions/%d/release", exp.Version.Number), nil, &again, 200)
	if !again.AlreadyReleased || again.ReleaseID != "" || again.Number != exp.Version.Number {
		t.Fatalf("release of the released version: %+v, want already_released and no release", again)
	}
	close(gb.gate)
	rel = r.waitRelease("prod", exp.ReleaseID)
	if rel.State != record.ReleaseDone || rel.Agents != agents || rel.Sent+rel.UpToDate != agents || rel.PendingCount != 0 || rel.FinishedAt == nil {
		t.Fatalf("release after the broker took it: %+v, want done, %d agents reached", rel, agents)
	}
	var list []record.Release
	r.must(r.admin, "GET", "/api/v1/envs/prod/releases", nil, &list, 200)
	if len(list) != 1 {
		t.Fatalf("releases %+v, want the one", list)
	}
	// Each agent holds its desired state, and a deploy (the environment
	// deploys automatically) after it.
	for _, name := range []string{"web-000", "web-250", "web-499"} {
		got := untilDeploy(t, r.bus, "prod", name)
		if got[0] != bus.KindDesiredFull {
			t.Fatalf("%s got %v, want its desired state before a deploy", name, got)
		}
	}
}

// untilDeploy consumes an agent's inbox up to its first deploy and
// returns the kinds of the commands in order.
func untilDeploy(t *testing.T, b *bus.Local, env, agent string) []bus.Kind {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), releasePatience)
	defer cancel()
	var kinds []bus.Kind
	err := b.ConsumeInbox(ctx, env, agent, func(_ context.Context, d bus.Delivery) error {
		kinds = append(kinds, d.Envelope.Kind)
		if d.Envelope.Kind == bus.KindDeploy {
			cancel()
		}
		return nil
	})
	if len(kinds) == 0 || kinds[len(kinds)-1] != bus.KindDeploy {
		t.Fatalf("%s received %v (%v), want commands up to a deploy", agent, kinds, err)
	}
	return kinds
}

func fanout(page, workers int) scheduler.FanoutConfig {
	return scheduler.FanoutConfig{PageSize: page, Workers: workers}
}

// Releasing an older version rolls back: a copy numbered after the newest
// is released (202, its rollback_of names the version). A pruned version
// and one that never existed are refused with not_found, saying which;
// releasing the released version changes nothing (200, already_released).
func TestReleaseOfOlderAndMissingVersions(t *testing.T) {
	r := newServerRigOn(t, openSQLite(t), server.Config{}, api.Config{}, zerolog.Nop(), nil)
	r.must(r.admin, "POST", "/api/v1/envs", api.EnvRequest{Name: "prod", Settings: map[string]string{"versions_to_keep": "2"}}, nil, 201)
	r.run()
	for i := 1; i <= 3; i++ {
		var exp api.ExportResponse
		r.must(r.admin, "POST", "/api/v1/envs/prod/versions?release=true", api.ExportRequest{Resources: []model.Resource{file("web", "/motd", fmt.Sprint(i))}}, &exp, 202)
		r.waitRelease("prod", exp.ReleaseID)
	}
	deadline := time.Now().Add(releasePatience)
	for {
		var vs []model.Version
		r.must(r.admin, "GET", "/api/v1/envs/prod/versions", nil, &vs, 200)
		if len(vs) == 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("versions %+v: want version 1 pruned (versions_to_keep 2)", vs)
		}
		time.Sleep(10 * time.Millisecond)
	}

	var rel record.Released
	r.must(r.admin, "POST", "/api/v1/envs/prod/versions/2/release", nil, &rel, 202)
	if rel.Number != 4 || rel.Meta.RollbackOf != 2 || rel.State != model.VersionReleased || rel.ReleaseID == "" {
		t.Fatalf("release of retired version 2: %+v; want version 4 released, a rollback of 2, with a release id", rel)
	}
	r.waitRelease("prod", rel.ReleaseID)

	for _, tt := range []struct {
		path, want string
	}{
		{"/api/v1/envs/prod/versions/1/release", "version 1 of prod was pruned: the environment keeps its newest 2 versions"},
		{"/api/v1/envs/prod/versions/9/release", "no version 9 in prod"},
	} {
		var e api.Body
		if status, code := r.do(r.admin, "POST", tt.path, nil, &e); status != 404 || code != "not_found" || !strings.Contains(e.Error.Message, tt.want) {
			t.Fatalf("POST %s: %d %s %+v; want 404 not_found saying %q", tt.path, status, code, e.Error, tt.want)
		}
	}
	var again record.Released
	r.must(r.admin, "POST", "/api/v1/envs/prod/versions/4/release", nil, &again, 200)
	if !again.AlreadyReleased || again.ReleaseID != "" {
		t.Fatalf("release of the released version: %+v; want already_released, no release", again)
	}
	var vs []model.Version
	r.must(r.admin, "GET", "/api/v1/envs/prod/versions", nil, &vs, 200)
	if len(vs) == 0 || vs[0].Number != 4 || vs[0].State != model.VersionReleased {
		t.Fatalf("versions after the refused releases: %+v; want 4 the newest, released", vs)
	}
}
