package server_test

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/tetherhq/tether/model"
	"github.com/tetherhq/tether/server"
	"github.com/tetherhq/tether/server/record"
)

// wavesRig is a rig whose environment releases in waves (canary a, then
// b), with agents a and b online.
func wavesRig(t *testing.T, advance string) *rig {
	t.Helper()
	settings := record.DefaultEnvSettings()
	settings.AutoDeploy = true
	settings.Enrollment = record.EnrollOpen
	settings.Release = record.ReleaseStrategy{Mode: record.ReleaseWaves, Canary: "1", Waves: "100%", MaxFailed: "0", Advance: advance}
	r := startRig(t, server.Config{}, map[string]record.EnvSettings{"test": settings})
	r.startAgent("a", true)
	r.startAgent("b", true)
	r.waitOnline("a", "b")
	return r
}

func (r *rig) stage(id string) *record.Rollout {
	r.t.Helper()
	rel, err := r.srv.GetRelease(r.ctx, "test", id)
	if err != nil || rel.Rollout == nil {
		r.t.Fatalf("release %s: %+v, %v; want a staged rollout", id, rel, err)
	}
	return rel.Rollout
}

func (r *rig) content(agent, path string) string {
	b, _ := os.ReadFile(filepath.Join(r.roots[agent], path))
	return string(b)
}

// A canary that fails halts the rollout: b keeps version 1 (and a deploy
// of the environment gives it version 1 again); continue accepts the
// failure and sends b its wave; a second continue or an abort of the
// finished rollout is refused.
func TestRolloutHaltsOnAFailedCanaryAndContinues(t *testing.T) {
	r := wavesRig(t, record.AdvanceAuto)
	v1 := r.release(file("a", "/app", "one"), file("b", "/app", "one"))
	r.waitContent("a", "app", "one")
	r.waitContent("b", "app", "one")

	bad := file("a", "/missing/app", "x")
	rel, err := r.srv.Release(r.ctx, "test", r.export(file("a", "/app", "two"), bad, file("b", "/app", "two")).Number)
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the rollout halted", func() bool { return r.stage(rel.ReleaseID).Stage == record.StageHalted })
	ro := r.stage(rel.ReleaseID)
	if ro.Previous != v1.Number || ro.Sent != 1 || !slices.Equal(ro.Waves[0].FailedAgents, []string{"a"}) {
		t.Fatalf("halted rollout %+v: want previous %d, the canary sent and a failed", ro, v1.Number)
	}
	if r.content("a", "app") != "two" || r.content("b", "app") != "one" {
		t.Fatalf("a %q, b %q; want two, one", r.content("a", "app"), r.content("b", "app"))
	}
	// An operator's deploy repairs b against the version it is pinned to.
	if err := os.WriteFile(filepath.Join(r.roots["b"], "app"), []byte("edited"), 0o644); err != nil {
		t.Fatal(err)
	}
	d, err := r.srv.Deploy(r.ctx, "test", record.DeployRequest{Agents: []string{"b"}, Full: true})
	if err != nil {
		t.Fatal(err)
	}
	if d.Generation != rel.Number || len(d.Agents) != 1 {
		t.Fatalf("deploy %+v", d)
	}
	var acts []record.Action
	waitFor(t, "b's deploy reported", func() bool {
		acts, err = r.store.DeployActions(r.ctx, "test", d.ID, 10)
		return err == nil && len(acts) > 0
	})
	for _, a := range acts {
		if a.Version != v1.Number || a.ID.Agent != "b" {
			t.Fatalf("b's deploy during the rollout: %+v; want version %d", a, v1.Number)
		}
	}
	if r.content("b", "app") != "one" {
		t.Fatalf("b %q after a deploy during the rollout, want one", r.content("b", "app"))
	}

	if _, err := r.srv.ContinueRelease(r.ctx, "test", rel.ReleaseID); err != nil {
		t.Fatal(err)
	}
	r.waitContent("b", "app", "two")
	waitFor(t, "the rollout done", func() bool { return r.stage(rel.ReleaseID).Stage == record.StageDone })
	if _, err := r.srv.ContinueRelease(r.ctx, "test", rel.ReleaseID); !errors.Is(err, record.ErrReleaseFinished) {
		t.Fatalf("continue of a finished rollout: %v, want ErrReleaseFinished", err)
	}
	if _, err := r.srv.AbortRelease(r.ctx, "test", rel.ReleaseID); !errors.Is(err, record.ErrReleaseFinished) {
		t.Fatalf("abort of a finished rollout: %v, want ErrReleaseFinished", err)
	}
	if ro := r.stage(rel.ReleaseID); ro.Stage != record.StageDone {
		t.Fatalf("after refused verbs: %s, want done", ro.Stage)
	}
}

// A canary that requires a resource of an agent of a later wave goes in
// that wave: nothing reaches it before what it requires.
func TestRolloutWaitsForRequiredAgents(t *testing.T) {
	r := wavesRig(t, record.AdvanceManual)
	dep := file("b", "/dep", "one")
	rel, err := r.srv.Release(r.ctx, "test", r.export(file("a", "/app", "one", dep.ID), dep).Number)
	if err != nil {
		t.Fatal(err)
	}
	ro := r.stage(rel.ReleaseID)
	if len(ro.Waves) != 1 || !slices.Equal(ro.Waves[0].Agents, []string{"a", "b"}) || !slices.Equal(ro.Moved, []string{"a"}) {
		t.Fatalf("waves %+v moved %v; want one wave of a and b, a moved", ro.Waves, ro.Moved)
	}
	r.waitContent("a", "app", "one")
	waitFor(t, "the rollout done", func() bool { return r.stage(rel.ReleaseID).Stage == record.StageDone })

	// b requiring the canary's resource stays in its later wave, and
	// deploys there: it learned the outcome of what it requires when the
	// canary reported it.
	req := file("a", "/req", "two")
	rel, err = r.srv.Release(r.ctx, "test", r.export(file("a", "/app", "one"), dep, req, file("b", "/late", "two", req.ID)).Number)
	if err != nil {
		t.Fatal(err)
	}
	ro = r.stage(rel.ReleaseID)
	if len(ro.Waves) != 2 || !slices.Equal(ro.Waves[0].Agents, []string{"a"}) || len(ro.Moved) != 0 {
		t.Fatalf("waves %+v moved %v; want a, then b", ro.Waves, ro.Moved)
	}
	waitFor(t, "the canary done, waiting", func() bool { return r.stage(rel.ReleaseID).Stage == record.StageWaiting })
	if _, err := os.Stat(filepath.Join(r.roots["b"], "late")); err == nil {
		t.Fatal("b deployed before its wave")
	}
	if _, err := r.srv.ContinueRelease(r.ctx, "test", rel.ReleaseID); err != nil {
		t.Fatal(err)
	}
	r.waitContent("b", "late", "two")
	waitFor(t, "the rollout done", func() bool { return r.stage(rel.ReleaseID).Stage == record.StageDone })
}

// export stores a version of rs without releasing it.
func (r *rig) export(rs ...model.Resource) model.Version {
	r.t.Helper()
	v, _, err := r.srv.Export(r.ctx, "test", rs, model.VersionMeta{Compiler: "test"})
	if err != nil {
		r.t.Fatal(err)
	}
	return v
}

// A staged release with no accepted agent ends at once (done, no wave);
// one whose canary selector matches no agent is refused and releases
// nothing.
func TestRolloutEdges(t *testing.T) {
	settings := record.DefaultEnvSettings()
	settings.Enrollment = record.EnrollOpen
	settings.Release = record.ReleaseStrategy{Mode: record.ReleaseWaves, Canary: "role=canary", Waves: "100%", MaxFailed: "0", Advance: record.AdvanceAuto}
	r := startRig(t, server.Config{}, map[string]record.EnvSettings{"test": settings})
	rel, err := r.srv.Release(r.ctx, "test", r.export(file("a", "/app", "one")).Number)
	if err != nil {
		t.Fatal(err)
	}
	done, err := r.srv.WaitRelease(r.ctx, "test", rel.ReleaseID)
	if err != nil || done.State != record.ReleaseDone || done.Rollout == nil || done.Rollout.Stage != record.StageDone || len(done.Rollout.Waves) != 0 {
		t.Fatalf("rollout without agents: %+v, %v; want done with no wave", done, err)
	}

	r.startAgent("a", true)
	r.waitOnline("a")
	v := r.export(file("a", "/app", "two"))
	if _, err := r.srv.Release(r.ctx, "test", v.Number); !errors.Is(err, record.ErrInvalidSetting) {
		t.Fatalf("release with a canary selector matching nobody: %v, want ErrInvalidSetting", err)
	}
	if cur, err := r.store.ReleasedVersion(r.ctx, "test"); err != nil || cur.Number != rel.Number {
		t.Fatalf("released version %d (%v) after a refused release, want %d", cur.Number, err, rel.Number)
	}
}
