package storetest

import (
	"errors"
	"testing"

	"github.com/tetherhq/tether/model"
	"github.com/tetherhq/tether/server/record"
	"github.com/tetherhq/tether/server/store"
)

func testRollouts(t *testing.T, s store.Store) {
	mustEnv(t, s, "prod")

	// A release to every agent at once is neither continued nor aborted.
	all, err := s.StartRelease(ctx, record.Release{Env: "prod", Version: 1})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.ContinueRelease(ctx, "prod", all.ID); !errors.Is(err, record.ErrNotStaged) || !errors.Is(err, model.ErrConflict) {
		t.Fatalf("continue of a release at once: %v, want ErrNotStaged and ErrConflict", err)
	}
	if _, err := s.AbortRelease(ctx, "prod", "3f1c0000-0000-4000-8000-000000000000", "x"); !errors.Is(err, model.ErrNotFound) {
		t.Fatalf("abort of an unknown release: %v, want ErrNotFound", err)
	}

	// A staged one keeps its rollout; continues are counted.
	r, err := s.StartRelease(ctx, record.Release{Env: "prod", Version: 2})
	if err != nil {
		t.Fatal(err)
	}
	r.Agents = 3
	r.Rollout = &record.Rollout{Stage: record.StageDeploying, Previous: 1, Strategy: record.DefaultReleaseStrategy(), Sent: 1,
		Waves: []record.Wave{{Name: "canary", Agents: []string{"a"}, FailedCount: 1, FailedAgents: []string{"a"}}, {Name: "100%", Agents: []string{"b", "c"}}}}
	if _, err := s.UpdateRelease(ctx, r); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if _, err := s.ContinueRelease(ctx, "prod", r.ID); err != nil {
			t.Fatal(err)
		}
	}
	got, err := s.GetRelease(ctx, "prod", r.ID)
	if err != nil || got.Rollout == nil || got.Rollout.Asked != 2 || got.Rollout.Previous != 1 || len(got.Rollout.Waves) != 2 ||
		got.Rollout.Waves[0].FailedAgents[0] != "a" || got.Rollout.Stage != record.StageDeploying {
		t.Fatalf("got %+v (rollout %+v), %v; want the rollout back with 2 continues asked", got, got.Rollout, err)
	}
	// The driver's update keeps the operator's count.
	got.Rollout.Stage = record.StageHalted
	if _, err := s.UpdateRelease(ctx, got); err != nil {
		t.Fatal(err)
	}
	ab, err := s.AbortRelease(ctx, "prod", r.ID, "aborted by an operator")
	if err != nil || ab.State != record.ReleaseDone || ab.Rollout.Stage != record.StageAborted || ab.FinishedAt == nil || ab.Rollout.Asked != 2 {
		t.Fatalf("abort: %+v, %v; want done, aborted, finished, 2 continues", ab, err)
	}
	// Finished: nothing to continue or abort, nothing changed.
	for _, verb := range []func() (record.Release, error){
		func() (record.Release, error) { return s.ContinueRelease(ctx, "prod", r.ID) },
		func() (record.Release, error) { return s.AbortRelease(ctx, "prod", r.ID, "again") },
	} {
		if _, err := verb(); !errors.Is(err, record.ErrReleaseFinished) || !errors.Is(err, model.ErrConflict) {
			t.Fatalf("got %v, want ErrReleaseFinished and ErrConflict", err)
		}
	}
	if again, _ := s.GetRelease(ctx, "prod", r.ID); again.Note != "aborted by an operator" || again.Rollout.Asked != 2 {
		t.Fatalf("after refused verbs: %+v, want unchanged", again)
	}
	if _, err := s.UpdateRelease(ctx, got); !errors.Is(err, model.ErrConflict) {
		t.Fatalf("driver update after abort: %v, want ErrConflict", err)
	}

	// Pins: set, kept when set already, read, removed.
	if err := s.PinAgents(ctx, "prod", 1, []string{"b", "c"}); err != nil {
		t.Fatal(err)
	}
	if err := s.PinAgents(ctx, "prod", 2, []string{"c", "d"}); err != nil {
		t.Fatal(err)
	}
	pins, err := s.AgentPins(ctx, "prod")
	if err != nil || len(pins) != 3 || pins["b"] != 1 || pins["c"] != 1 || pins["d"] != 2 {
		t.Fatalf("pins %v, %v; want b=1 c=1 (kept) d=2", pins, err)
	}
	if v, ok, err := s.AgentPin(ctx, "prod", "c"); err != nil || !ok || v != 1 {
		t.Fatalf("pin of c: %d %v %v, want 1", v, ok, err)
	}
	if _, ok, err := s.AgentPin(ctx, "prod", "a"); err != nil || ok {
		t.Fatalf("pin of a: %v %v, want none", ok, err)
	}
	if err := s.UnpinAgents(ctx, "prod", []string{"b"}); err != nil {
		t.Fatal(err)
	}
	if pins, _ := s.AgentPins(ctx, "prod"); len(pins) != 2 || pins["b"] != 0 {
		t.Fatalf("after unpinning b: %v", pins)
	}
	if err := s.UnpinAgents(ctx, "prod", nil); err != nil {
		t.Fatal(err)
	}
	if pins, _ := s.AgentPins(ctx, "prod"); len(pins) != 0 {
		t.Fatalf("after unpinning all: %v", pins)
	}

	// A version an agent is pinned to is never pruned.
	var vs []int64
	for i := range 3 {
		v, err := s.PutVersion(ctx, "prod", model.VersionMeta{Compiler: "test"}, []model.Resource{{ID: model.ID{Type: "file", Agent: "c", Key: "path", Value: "/f"},
			Attributes: model.Attributes{"path": "/f", "content": string(rune('a' + i))}}})
		if err != nil {
			t.Fatal(err)
		}
		vs = append(vs, v.Number)
	}
	if err := s.PinAgents(ctx, "prod", vs[0], []string{"e"}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.PruneVersions(ctx, "prod", 1); err != nil {
		t.Fatal(err)
	}
	for i, n := range vs {
		_, err := s.GetVersion(ctx, "prod", n, false)
		if kept := err == nil; kept != (i != 1) {
			t.Fatalf("version %d kept %v (%v) after pruning to 1 with %d pinned; want only %d pruned", n, kept, err, vs[0], vs[1])
		}
	}
	if err := s.UnpinAgents(ctx, "prod", nil); err != nil {
		t.Fatal(err)
	}
	if pins, _ := s.AgentPins(ctx, "prod"); len(pins) != 0 {
		t.Fatalf("after unpinning all: %v", pins)
	}
}
