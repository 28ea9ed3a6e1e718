package agent

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tetherhq/tether/bus"
	"github.com/tetherhq/tether/model"
)

// planResults gathers the results of one dry run or plan until its last
// batch, checking that every batch carries generation gen.
func (s *fakeServer) planResults(from *int, agent, id string, gen int64) (map[model.ID]model.Result, bus.ResourceStatus) {
	s.t.Helper()
	got := map[model.ID]model.Result{}
	for {
		e := s.next(from, agent, bus.KindDryRunResult)
		var body bus.ResourceStatus
		if err := e.DecodeBody(&body); err != nil {
			s.t.Fatal(err)
		}
		if body.DeployID != id {
			continue
		}
		if body.Generation != gen {
			s.t.Fatalf("plan %s: a batch of generation %d, want %d", id, body.Generation, gen)
		}
		for _, r := range body.Results {
			got[r.ID] = r
		}
		if body.Done {
			return got, body
		}
	}
}

// A plan (a dry run carrying another desired state) is answered under the
// candidate's generation, even while the agent is paused, and changes
// nothing: not the host, not the desired state the agent holds. A plan
// whose slice does not match its hash is refused with an answer.
func TestPlanIsEvaluatedNeverKept(t *testing.T) {
	s := newFakeServer(t)
	dir, root := t.TempDir(), t.TempDir()
	var seen int
	r := start(t, s, "web", dir, root, nil)
	s.next(&seen, "web", bus.KindHello)
	s.enroll("web")
	s.deploy(&seen, "web", 1, "d1", "", file("web", "/a", "A"))
	s.send("web", bus.KindPause, bus.Empty{})

	cand := model.SliceOf("web", 2, []model.Resource{file("web", "/a", "B"), file("web", "/c", "C")})
	h, err := cand.Hash()
	if err != nil {
		t.Fatal(err)
	}
	s.send("web", bus.KindDryRun, bus.DryRun{DeployID: "p1", Generation: 1, Plan: &bus.Plan{Generation: 2, Resources: cand.Resources, SliceHash: h}})
	got, last := s.planResults(&seen, "web", "p1", 2)
	a, c := file("web", "/a", "").ID, file("web", "/c", "").ID
	if last.Error != "" || len(got) != 2 {
		t.Fatalf("plan: %d results, end %+v; want 2, no error", len(got), last)
	}
	if ch := got[a].Changes["content"]; model.DryRunOutcome(got[a].State, got[a].Changes) != model.WouldChange || ch.Current != "A" || ch.Desired != "B" {
		t.Fatalf("plan of /a: %+v; want content A → B", got[a])
	}
	if model.DryRunOutcome(got[c].State, got[c].Changes) != model.WouldCreate {
		t.Fatalf("plan of /c: %+v; want would create", got[c])
	}
	if b, _ := os.ReadFile(filepath.Join(root, "a")); string(b) != "A" {
		t.Fatalf("/a after a plan holds %q, want A", b)
	}
	if _, err := os.Stat(filepath.Join(root, "c")); !os.IsNotExist(err) {
		t.Fatalf("/c after a plan: %v; want it absent", err)
	}
	if g := r.a.journal.Slice().Generation; g != 1 {
		t.Fatalf("the agent holds generation %d after a plan of 2; want 1", g)
	}

	s.send("web", bus.KindDryRun, bus.DryRun{DeployID: "p2", Generation: 1, Plan: &bus.Plan{Generation: 2, Resources: cand.Resources[:1], SliceHash: h}})
	if got, last := s.planResults(&seen, "web", "p2", 2); len(got) != 0 || !strings.Contains(last.Error, "plan refused") {
		t.Fatalf("plan with a wrong hash: %v, end %+v; want refused", got, last)
	}

	// Resumed, a deploy of what it holds deploys version 1, not the plan.
	s.send("web", bus.KindResume, bus.Empty{})
	s.send("web", bus.KindDeploy, bus.Deploy{DeployID: "d2", Mode: bus.DeployFull, Generation: 1})
	got, last = s.results(&seen, "web", "d2")
	if last.Generation != 1 || len(got) != 1 || len(got[a].Changes) != 0 {
		t.Fatalf("deploy after a plan: %v, end %+v; want /a of generation 1 unchanged", got, last)
	}
	if b, _ := os.ReadFile(filepath.Join(root, "a")); string(b) != "A" {
		t.Fatalf("/a after the deploy holds %q, want A", b)
	}
}
