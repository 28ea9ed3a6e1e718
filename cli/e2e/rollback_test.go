package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/tetherhq/tether/model"
	"github.com/tetherhq/tether/server/record"
)

// TestRollbackToARetiredVersion releases version 1, then 2, then version 1
// again with `tether version release 1 --wait`: the agent's files are
// those of version 1 again, the rollback is a new version (a copy of 1,
// retiring 2), its release id is printed and names the deploy in the
// action log. A heal of drift under drift_policy=heal is in the resource's
// log as its own kind.
func TestRollbackToARetiredVersion(t *testing.T) {
	c := newCluster(t)
	c.cli("env", "settings", "set", "drift_policy", "heal")
	const n = 3
	one := func(i int) string { return fmt.Sprintf("one %d\n", i) }
	two := func(i int) string { return fmt.Sprintf("two %d\n", i) }
	root := t.TempDir()
	v1 := c.release(fileModel(t, n, one, nil))
	c.startAgent("web", agentOpts{stateDir: t.TempDir(), root: root})
	c.converged(v1, n+1, 60*time.Second)
	v2 := c.release(fileModel(t, n, two, nil))
	c.converged(v2, n+1, 60*time.Second)
	checkFiles(t, root, n, two)

	code, out, errs := c.run("version", "release", fmt.Sprint(v1), "--wait", "--timeout", "60s")
	if code != 0 {
		t.Fatalf("version release %d --wait: exit %d\n%s\n%s", v1, code, out, errs)
	}
	m := regexp.MustCompile(`version (\d+) released again as version (\d+)[^\n]*\nrelease ([0-9a-f-]{36}): `).FindStringSubmatch(out)
	if m == nil || m[1] != fmt.Sprint(v1) || m[2] != fmt.Sprint(v2+1) {
		t.Fatalf("version release %d printed %q; want it released again as version %d, with the release id", v1, out, v2+1)
	}
	v3, releaseID := v2+1, m[3]
	if !strings.Contains(out, fmt.Sprintf("version %d deployed", v3)) {
		t.Fatalf("version release --wait printed %q; want the deploy of version %d followed", out, v3)
	}
	checkFiles(t, root, n, one)
	c.converged(v3, n+1, 60*time.Second)

	var vs []model.Version
	c.cliJSON(&vs, "version", "list")
	states := map[int64]model.VersionState{}
	for _, v := range vs {
		states[v.Number] = v.State
		if v.Number == v3 && v.Meta.RollbackOf != v1 {
			t.Fatalf("version %d: rollback_of %d, want %d", v3, v.Meta.RollbackOf, v1)
		}
	}
	if states[v1] != model.VersionRetired || states[v2] != model.VersionRetired || states[v3] != model.VersionReleased {
		t.Fatalf("versions %v: want %d and %d retired, %d released", states, v1, v2, v3)
	}
	// The deploys of the rollback carry its release id.
	id := fileID("web", "/srv/f1")
	var acts []record.Action
	c.cliJSON(&acts, "resource", "log", id)
	found := false
	for _, a := range acts {
		found = found || a.Kind == record.ActionDeploy && a.Version == v3 && a.DeployID == releaseID && len(a.Changes) > 0
	}
	if !found {
		t.Fatalf("resource log %s: %+v; want a deploy of version %d under release %s", id, acts, v3, releaseID)
	}

	// Drift healed by the agent is in the resource's log as a heal.
	path := filepath.Join(root, "srv", "f1")
	if err := os.WriteFile(path, []byte("edited by hand\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 60*time.Second, "the heal in the resource log", func() bool {
		code, out, _ := c.run("resource", "log", id)
		return code == 0 && regexp.MustCompile(`(?m)\sheal\s+deployed\s+`+fmt.Sprint(v3)+`\s+\S*content\S*\s+healed`).MatchString(out)
	})
	if b, err := os.ReadFile(path); err != nil || string(b) != one(1) {
		t.Fatalf("%s after the heal: %q, %v; want %q", path, b, err, one(1))
	}

	// A version that does not exist: refused with its code, nothing changed.
	code, _, errs = c.run("version", "release", "99")
	if code != 1 || !strings.Contains(errs, "no version 99 in") {
		t.Fatalf("version release 99: exit %d, %q; want a clear refusal", code, errs)
	}
	c.cliJSON(&vs, "version", "list")
	if len(vs) != 3 || vs[0].Number != v3 || vs[0].State != model.VersionReleased {
		t.Fatalf("versions after a refused release: %+v; want the same three, %d released", vs, v3)
	}
}
