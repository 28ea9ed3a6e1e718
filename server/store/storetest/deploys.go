package storetest

import (
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/tetherhq/tether/model"
	"github.com/tetherhq/tether/server/record"
	"github.com/tetherhq/tether/server/store"
)

// testDeploys: deploys are listed newest first with who asked and what set
// them off, and each agent's run is counted as the results say it ended.
func testDeploys(t *testing.T, s store.Store) {
	mustEnv(t, s, "prod")
	xa, xb := file("a", "/x", "1"), file("b", "/x", "1")
	v := mustPut(t, s, "prod", xa, xb)
	mustRelease(t, s, "prod", v.Number)

	for _, tc := range []struct {
		name string
		d    record.Deploy
		want error
	}{
		{"no id", record.Deploy{Env: "prod", Kind: record.OpDeploy, Trigger: record.DeployByOperator, Version: 1}, model.ErrInvalid},
		{"bad kind", record.Deploy{ID: "k", Env: "prod", Kind: "explode", Trigger: record.DeployByOperator, Version: 1}, model.ErrInvalid},
		{"no trigger", record.Deploy{ID: "k", Env: "prod", Kind: record.OpDeploy, Version: 1}, model.ErrInvalid},
		{"unknown environment", record.Deploy{ID: "k", Env: "nope", Kind: record.OpDeploy, Trigger: record.DeployByOperator, Version: 1}, model.ErrNotFound},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := s.RecordDeploy(ctx, tc.d, []string{"a"}); !errors.Is(err, tc.want) {
				t.Fatalf("got %v, want %v", err, tc.want)
			}
		})
	}

	rel := record.Deploy{ID: "d1", Env: "prod", Kind: record.OpDeploy, Trigger: record.DeployByRelease, Who: "alice", Version: v.Number}
	if err := s.RecordDeploy(ctx, rel, nil); err != nil {
		t.Fatal(err)
	}
	// The fan-out adds agents page by page; recording the deploy again
	// changes nothing of it.
	again := rel
	again.Who = record.WhoServer
	if err := s.RecordDeploy(ctx, again, []string{"a", "b"}); err != nil {
		t.Fatal(err)
	}
	if err := s.RecordDeploy(ctx, again, []string{"b", "c"}); err != nil {
		t.Fatal(err)
	}
	dry := record.Deploy{ID: "d2", Env: "prod", Kind: record.OpDryRun, Trigger: record.DeployByOperator, Who: "bob", Version: v.Number}
	if err := s.RecordDeploy(ctx, dry, []string{"a"}); err != nil {
		t.Fatal(err)
	}

	d, err := s.GetDeploy(ctx, "prod", "d1")
	if err != nil {
		t.Fatal(err)
	}
	if d.Who != "alice" || d.Trigger != record.DeployByRelease || d.Kind != record.OpDeploy || d.Version != v.Number ||
		d.Asked != 3 || d.Answered != 0 || d.Outcome != record.DeployRunning || d.FinishedAt != nil {
		t.Fatalf("deploy just sent: %+v; want alice's release to 3 agents, running", d)
	}
	if got := d.Waiting(); !slices.Equal(got, []string{"a", "b", "c"}) {
		t.Fatalf("waiting: %v, want a b c", got)
	}

	// a reports a failure, then its run ends; b's run ends with nothing
	// failed; c was not reached.
	batches := []store.ResultBatch{
		{Env: "prod", Agent: "a", Seq: 1, Version: v.Number, DeployID: "d1", Results: []model.Result{result(xa, model.StateFailed, nil)}},
		{Env: "prod", Agent: "a", Seq: 2, Version: v.Number, DeployID: "d1", Done: true},
		{Env: "prod", Agent: "b", Seq: 1, Version: v.Number, DeployID: "d1", Results: []model.Result{result(xb, model.StateDeployed, nil)}, Done: true},
		// an answer to a deploy not recorded (yet) lists nothing
		{Env: "prod", Agent: "b", Seq: 2, Version: v.Number, DeployID: "unknown", Done: true},
	}
	for _, b := range batches {
		if _, err := s.RecordResults(ctx, []store.ResultBatch{b}); err != nil {
			t.Fatal(err)
		}
	}
	if d, err = s.GetDeploy(ctx, "prod", "d1"); err != nil {
		t.Fatal(err)
	}
	if d.Asked != 3 || d.Answered != 2 || d.OK != 1 || d.Failed != 1 || d.Outcome != record.DeployRunning {
		t.Fatalf("after a and b answered: %+v; want 3 asked, 2 answered, 1 ok, 1 failed, running", d)
	}
	if got := d.Waiting(); !slices.Equal(got, []string{"c"}) {
		t.Fatalf("waiting: %v, want c", got)
	}
	if a := d.Agents[0]; a.Agent != "a" || a.Outcome != record.AgentFailed || a.FailedResources != 1 || a.FinishedAt == nil {
		t.Fatalf("agent a: %+v; want failed with 1 failed resource", a)
	}
	if b := d.Agents[1]; b.Outcome != record.AgentOK || b.FailedResources != 0 {
		t.Fatalf("agent b: %+v; want ok", b)
	}
	if err := s.EndDeployAgents(ctx, "prod", "d1", []string{"c"}, "not reached"); err != nil {
		t.Fatal(err)
	}
	if d, err = s.GetDeploy(ctx, "prod", "d1"); err != nil {
		t.Fatal(err)
	}
	if c := d.Agents[2]; c.Outcome != record.AgentFailed || c.Error != "not reached" {
		t.Fatalf("agent c: %+v; want failed, not reached", c)
	}
	if d.Answered != 3 || d.Outcome != record.DeployFailed || d.FinishedAt == nil || len(d.Waiting()) != 0 {
		t.Fatalf("every agent answered: %+v; want failed, finished", d)
	}

	// a run that could not complete is failed, with why
	if _, err := s.RecordResults(ctx, []store.ResultBatch{{Env: "prod", Agent: "a", Seq: 3, Version: v.Number, DeployID: "d2", Done: true, Error: "generation gap"}}); err != nil {
		t.Fatal(err)
	}

	for _, tc := range []struct {
		name string
		f    record.DeployFilter
		want []string
	}{
		{"all, newest first", record.DeployFilter{}, []string{"d2", "d1"}},
		{"limit", record.DeployFilter{Limit: 1}, []string{"d2"}},
		{"kind", record.DeployFilter{Kind: record.OpDeploy}, []string{"d1"}},
		{"agent", record.DeployFilter{Agent: "b"}, []string{"d1"}},
		{"agent of none", record.DeployFilter{Agent: "zz"}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ds, err := s.ListDeploys(ctx, "prod", tc.f)
			if err != nil {
				t.Fatal(err)
			}
			var ids []string
			for _, d := range ds {
				ids = append(ids, d.ID)
				if len(d.Agents) != 0 {
					t.Fatalf("listed %s with its agents: %+v", d.ID, d.Agents)
				}
			}
			if !slices.Equal(ids, tc.want) {
				t.Fatalf("got %v, want %v", ids, tc.want)
			}
		})
	}
	ds, err := s.ListDeploys(ctx, "prod", record.DeployFilter{Kind: record.OpDryRun})
	if err != nil || len(ds) != 1 {
		t.Fatalf("dry runs: %+v, %v", ds, err)
	}
	if d := ds[0]; d.Who != "bob" || d.Trigger != record.DeployByOperator || d.Asked != 1 || d.Failed != 1 || d.Outcome != record.DeployFailed {
		t.Fatalf("dry run listed as %+v; want bob's, 1 asked, failed", d)
	}
	if _, err := s.ListDeploys(ctx, "prod", record.DeployFilter{Kind: "explode"}); !errors.Is(err, model.ErrInvalid) {
		t.Fatalf("bad kind: %v, want invalid", err)
	}
	if _, err := s.GetDeploy(ctx, "prod", "nope"); !errors.Is(err, model.ErrNotFound) {
		t.Fatalf("unknown deploy: %v, want not found", err)
	}
	// An answer that comes before its deploy is recorded is kept.
	if _, err := s.RecordResults(ctx, []store.ResultBatch{{Env: "prod", Agent: "a", Seq: 4, Version: v.Number, DeployID: "d3", Done: true}}); err != nil {
		t.Fatal(err)
	}
	if err := s.RecordDeploy(ctx, record.Deploy{ID: "d3", Env: "prod", Kind: record.OpDeploy, Trigger: record.DeployByResume, Who: "carol", Version: v.Number}, []string{"a", "b"}); err != nil {
		t.Fatal(err)
	}
	if d, err := s.GetDeploy(ctx, "prod", "d3"); err != nil || d.Asked != 2 || d.Answered != 1 || d.OK != 1 || !slices.Equal(d.Waiting(), []string{"b"}) {
		t.Fatalf("deploy answered before it was recorded: %+v, %v; want a ok, b waiting", d, err)
	}

	// Pruning deletes the oldest first, with their agents.
	n, err := s.PruneDeploys(ctx, time.Now().Add(time.Hour), 1)
	if err != nil || n != 1 {
		t.Fatalf("prune: %d, %v; want 1", n, err)
	}
	if _, err := s.GetDeploy(ctx, "prod", "d1"); !errors.Is(err, model.ErrNotFound) {
		t.Fatalf("pruned deploy: %v, want not found", err)
	}
	if ds, err := s.ListDeploys(ctx, "prod", record.DeployFilter{}); err != nil || len(ds) != 2 || ds[0].ID != "d3" || ds[1].ID != "d2" {
		t.Fatalf("after prune: %+v, %v; want d3, d2", ds, err)
	}
	// Recorded again (an id used once more), d1 has none of its old agents.
	if err := s.RecordDeploy(ctx, rel, nil); err != nil {
		t.Fatal(err)
	}
	if d, err := s.GetDeploy(ctx, "prod", "d1"); err != nil || d.Asked != 0 {
		t.Fatalf("d1 recorded again after its prune: %+v, %v; want no agents", d, err)
	}
}
