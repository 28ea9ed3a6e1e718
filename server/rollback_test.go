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

// autoRig is a rig whose environment deploys each release, with drift
// policy policy (empty: the default), and one agent, web, online.
func autoRig(t *testing.T, policy model.DriftPolicy) *rig {
	t.Helper()
	settings := record.DefaultEnvSettings()
	settings.AutoDeploy = true
	settings.Enrollment = record.EnrollOpen
	if policy != "" {
		settings.DriftPolicy = policy
	}
	r := startRig(t, server.Config{}, map[string]record.EnvSettings{"test": settings})
	r.startAgent("web", true)
	r.waitOnline("web")
	return r
}

// waitContent waits until the agent's file at path holds content.
func (r *rig) waitContent(agent, path, content string) {
	r.t.Helper()
	waitFor(r.t, agent+path+" to hold "+content, func() bool {
		got, err := os.ReadFile(filepath.Join(r.roots[agent], path))
		return err == nil && string(got) == content
	})
}

// Releasing a retired version again is a rollback: its resource set is
// released as a new version (agents only move forward), the one released
// before is retired, and the agent's files go back. The deploys the
// release sends carry its id. A version that is not there is refused,
// and nothing changes.
func TestRollbackReleasesARetiredVersionAgain(t *testing.T) {
	r := autoRig(t, "")
	v1 := r.release(file("web", "/motd", "one"))
	r.waitContent("web", "motd", "one")
	v2 := r.release(file("web", "/motd", "two"))
	r.waitContent("web", "motd", "two")

	rel, err := r.srv.Release(r.ctx, "test", v1.Number)
	if err != nil {
		t.Fatal(err)
	}
	if rel.Number != v2.Number+1 || rel.Meta.RollbackOf != v1.Number || rel.State != model.VersionReleased || rel.ReleaseID == "" {
		t.Fatalf("release of retired version %d: %+v; want version %d released, a rollback of %d, with a release id", v1.Number, rel, v2.Number+1, v1.Number)
	}
	if rel.SetHash != v1.SetHash {
		t.Fatalf("rollback's set hash %s, want version %d's %s", rel.SetHash, v1.Number, v1.SetHash)
	}
	r.waitContent("web", "motd", "one")
	done, err := r.srv.WaitRelease(r.ctx, "test", rel.ReleaseID)
	if err != nil || done.State != record.ReleaseDone {
		t.Fatalf("rollback's release: %+v, %v; want done", done, err)
	}
	states := map[int64]model.VersionState{}
	vs, err := r.store.ListVersions(r.ctx, "test")
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range vs {
		states[v.Number] = v.State
	}
	want := map[int64]model.VersionState{v1.Number: model.VersionRetired, v2.Number: model.VersionRetired, rel.Number: model.VersionReleased}
	if len(states) != len(want) {
		t.Fatalf("versions %v, want %v", states, want)
	}
	for n, s := range want {
		if states[n] != s {
			t.Fatalf("versions %v, want %v", states, want)
		}
	}
	// The agent deployed the rollback under the release's id.
	id := file("web", "/motd", "one").ID
	waitFor(t, "the rollback's deploy in the action log", func() bool {
		acts, err := r.store.Actions(r.ctx, "test", id, 10)
		return err == nil && slices.ContainsFunc(acts, func(a record.Action) bool {
			return a.Kind == record.ActionDeploy && a.Version == rel.Number && a.DeployID == rel.ReleaseID
		})
	})

	// A version that does not exist: refused, nothing changed.
	if _, err := r.srv.Release(r.ctx, "test", 99); !errors.Is(err, model.ErrNotFound) {
		t.Fatalf("release of version 99: %v, want ErrNotFound", err)
	}
	if cur, err := r.store.ReleasedVersion(r.ctx, "test"); err != nil || cur.Number != rel.Number {
		t.Fatalf("released version after a refused release: %+v, %v; want %d", cur, err, rel.Number)
	}
	if latest, err := r.store.LatestVersion(r.ctx, "test"); err != nil || latest.Number != rel.Number {
		t.Fatalf("newest version after a refused release: %+v, %v; want %d", latest, err, rel.Number)
	}
}

// A candidate older than the released version is released as a copy too:
// agents hold the newer generation and would refuse it.
func TestReleasingAnOlderCandidateCopiesIt(t *testing.T) {
	r := autoRig(t, "")
	old, _, err := r.srv.Export(r.ctx, "test", []model.Resource{file("web", "/motd", "old")}, model.VersionMeta{Compiler: "test"})
	if err != nil {
		t.Fatal(err)
	}
	cur := r.release(file("web", "/motd", "new"))
	r.waitContent("web", "motd", "new")
	rel, err := r.srv.Release(r.ctx, "test", old.Number)
	if err != nil || rel.Number <= cur.Number || rel.Meta.RollbackOf != old.Number {
		t.Fatalf("release of candidate %d below released %d: %+v, %v; want a copy numbered after %d", old.Number, cur.Number, rel, err, cur.Number)
	}
	r.waitContent("web", "motd", "old")
}

// A heal (drift undone by the agent under drift_policy heal) is an entry
// of kind heal in the resource's action log, with the drift it undid.
func TestHealIsInTheResourceLog(t *testing.T) {
	r := autoRig(t, model.DriftHeal)
	res := file("web", "/motd", "one")
	r.release(res)
	r.waitContent("web", "motd", "one")
	// Replaced whole, as an editor saves: written in place, the agent
	// could read the file truncated, heal it by renaming its own over
	// it, and the rest of the write would go to the file replaced.
	tmp := filepath.Join(r.roots["web"], ".motd.swp")
	if err := os.WriteFile(tmp, []byte("tampered"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(r.roots["web"], "motd")); err != nil {
		t.Fatal(err)
	}
	r.waitContent("web", "motd", "one")
	waitFor(t, "a heal in the resource's action log", func() bool {
		acts, err := r.store.Actions(r.ctx, "test", res.ID, 10)
		return err == nil && slices.ContainsFunc(acts, func(a record.Action) bool {
			return a.Kind == record.ActionHeal && a.State == model.StateDeployed && a.Changes["content"].Current == "tampered"
		})
	})
}
