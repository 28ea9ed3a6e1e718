package server_test

import (
	"fmt"
	"slices"
	"testing"

	"github.com/tetherhq/tether/model"
	"github.com/tetherhq/tether/server/record"
)

func purgedFile(agent, path string) model.Resource {
	return model.Resource{ID: model.ID{Type: "file", Agent: agent, Key: "path", Value: path}, Attributes: model.Attributes{"path": path}, Purged: true}
}

// waitGeneration waits until the server knows agent holds version n.
func (r *rig) waitGeneration(agent string, n int64) {
	r.t.Helper()
	waitFor(r.t, fmt.Sprintf("%s holding version %d", agent, n), func() bool {
		a, err := r.store.GetAgent(r.ctx, "test", agent)
		return err == nil && a.Generation == n
	})
}

// A rollback to a version made before an agent joined takes everything
// that agent holds away: the plan of that version says so for it (which
// answers its dry run of nothing with nothing to change), with each
// resource's fate, and that it leaves the model; the release preview says
// the same; and the release then does what they said.
func TestPlanAndPreviewNameWhatARollbackTakesAway(t *testing.T) {
	r := autoRig(t, "") // agent web
	v1 := r.release(file("web", "/app", "one"))
	r.waitContent("web", "app", "one")
	r.startAgent("web-2", true)
	r.waitOnline("web-2")
	gone := []model.Resource{file("web-2", "/app", "two"), file("web-2", "/site", "x"), purgedFile("web-2", "/old")}
	v2 := r.release(append([]model.Resource{file("web", "/app", "one")}, gone...)...)
	r.waitContent("web-2", "app", "two")
	r.waitGeneration("web", v2.Number)
	r.waitGeneration("web-2", v2.Number)

	want := record.Leaving{Agent: "web-2", From: v2.Number, LeavesModel: true, Orphaned: 2, Absent: 1, Resources: []record.LeavingResource{
		{ID: gone[0].ID, Fate: record.FateOrphaned}, {ID: gone[2].ID, Fate: record.FateAbsent}, {ID: gone[1].ID, Fate: record.FateOrphaned}}}
	same := func(got *record.Leaving) bool {
		return got != nil && got.Agent == want.Agent && got.From == want.From && got.LeavesModel && got.Orphaned == want.Orphaned &&
			got.Absent == want.Absent && slices.Equal(got.Resources, want.Resources)
	}

	p, err := r.srv.Plan(r.ctx, "test", v1.Number, record.PlanRequest{Timeout: patience})
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Agents) != 2 || p.Agents[0].Name != "web" || p.Agents[1].Name != "web-2" {
		t.Fatalf("plan agents %+v; want web and web-2", p.Agents)
	}
	if web := p.Agents[0]; web.Leaving != nil {
		t.Fatalf("plan of version %d for web: takes away %+v; want nothing (both versions have its one resource)", v1.Number, web.Leaving)
	}
	web2 := p.Agents[1]
	if web2.Outcome != record.PlanAnswered || len(web2.Resources) != 0 {
		t.Fatalf("plan for web-2: %+v; want answered with nothing to change in its (empty) part", web2)
	}
	if !same(web2.Leaving) {
		t.Fatalf("plan for web-2 takes away %+v; want %+v", web2.Leaving, want)
	}

	pv, err := r.srv.ReleasePreview(r.ctx, "test", v1.Number)
	if err != nil {
		t.Fatal(err)
	}
	if !pv.Rollback || pv.Released != v2.Number || pv.Agents != 1 || pv.LeaveModel != 1 || pv.Resources != 3 || len(pv.Leaving) != 1 || !same(&pv.Leaving[0]) || pv.Note != "" {
		t.Fatalf("release preview of version %d: %+v; want a rollback taking %+v", v1.Number, pv, want)
	}
	// purge_on_delete does not make agents remove anything: the preview
	// says so rather than promise it.
	if _, err := r.srv.UpdateEnvSettings(r.ctx, "test", func(s *record.EnvSettings) error { s.PurgeOnDelete = true; return nil }); err != nil {
		t.Fatal(err)
	}
	if pv, err = r.srv.ReleasePreview(r.ctx, "test", v1.Number); err != nil || pv.Note == "" || pv.Leaving[0].Orphaned != 2 {
		t.Fatalf("release preview with purge_on_delete: %+v, %v; want the same, with a note that nothing is removed", pv, err)
	}

	// What they said is what a release does.
	rel, err := r.srv.Release(r.ctx, "test", v1.Number)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.srv.WaitRelease(r.ctx, "test", rel.ReleaseID); err != nil {
		t.Fatal(err)
	}
	sts, err := r.store.Statuses(r.ctx, "test", record.StatusFilter{Agent: "web-2"})
	if err != nil {
		t.Fatal(err)
	}
	if len(sts) != 3 || slices.ContainsFunc(sts, func(s record.ResourceStatus) bool { return s.State != model.StateOrphaned }) {
		t.Fatalf("web-2's resources after the rollback: %+v; want the three orphaned", sts)
	}
	if r.content("web-2", "app") != "two" {
		t.Fatalf("web-2's /app after the rollback: %q; want it left as it was", r.content("web-2", "app"))
	}
	// Released, it takes nothing more away.
	if pv, err := r.srv.ReleasePreview(r.ctx, "test", rel.Number); err != nil || !pv.AlreadyReleased || pv.TakesAway() {
		t.Fatalf("release preview of the released version: %+v, %v; want already released, nothing taken away", pv, err)
	}
}

// In a staged rollout agents hold different versions: what a release
// takes away from each is counted from the version it holds, not from
// the released one. b, pinned to version 1 while the canary a took
// version 2, loses what version 1 had and version 3 has not, although
// version 2 had dropped it already.
func TestReleasePreviewCountsFromWhatEachAgentHolds(t *testing.T) {
	r := wavesRig(t, record.AdvanceAuto)
	v1 := r.release(file("a", "/app", "one"), file("b", "/app", "one"), file("b", "/extra", "x"))
	r.waitContent("b", "extra", "x")
	r.waitGeneration("b", v1.Number)
	if _, err := r.srv.UpdateEnvSettings(r.ctx, "test", func(s *record.EnvSettings) error { s.Release.Advance = record.AdvanceManual; return nil }); err != nil {
		t.Fatal(err)
	}
	v2 := r.export(file("a", "/app", "two"), file("b", "/app", "two"))
	rel, err := r.srv.Release(r.ctx, "test", v2.Number)
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the canary done, the rollout waiting", func() bool { return r.stage(rel.ReleaseID).Stage == record.StageWaiting })
	r.waitGeneration("a", v2.Number)
	if a, err := r.store.GetAgent(r.ctx, "test", "b"); err != nil || a.Generation != v1.Number {
		t.Fatalf("b: %+v, %v; want it holding version %d", a, err, v1.Number)
	}
	v3 := r.export(file("a", "/app", "three"), file("b", "/app", "three"))

	pv, err := r.srv.ReleasePreview(r.ctx, "test", v3.Number)
	if err != nil {
		t.Fatal(err)
	}
	extra := file("b", "/extra", "x").ID
	if !pv.Staged || pv.Rollback || pv.Agents != 1 || len(pv.Leaving) != 1 || pv.Leaving[0].Agent != "b" || pv.Leaving[0].From != v1.Number ||
		pv.Leaving[0].LeavesModel || !slices.Equal(pv.Leaving[0].Resources, []record.LeavingResource{{ID: extra, Fate: record.FateOrphaned}}) {
		t.Fatalf("release preview of version %d: %+v; want b losing %s from version %d, staged", v3.Number, pv, extra, v1.Number)
	}
	p, err := r.srv.Plan(r.ctx, "test", v3.Number, record.PlanRequest{Timeout: patience})
	if err != nil {
		t.Fatal(err)
	}
	if i := slices.IndexFunc(p.Agents, func(a record.PlanAgent) bool { return a.Name == "b" }); i < 0 || p.Agents[i].Leaving == nil || p.Agents[i].Leaving.Orphaned != 1 {
		t.Fatalf("plan of version %d: %+v; want b losing one resource", v3.Number, p.Agents)
	}
}
