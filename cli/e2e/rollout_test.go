package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tetherhq/tether/model"
	"github.com/tetherhq/tether/server/record"
)

// rolloutModel writes a model of hosts a1..a3, each with /srv/app holding
// content; broken hosts also get a file whose parent directory is missing
// (its deploy fails).
func rolloutModel(t *testing.T, content string, broken ...string) string {
	t.Helper()
	var b strings.Builder
	for _, h := range []string{"a1", "a2", "a3"} {
		fmt.Fprintf(&b, "host %q {\n  directory \"srv\" {\n    path = \"/srv\"\n  }\n  file \"app\" {\n    path    = \"/srv/app\"\n    content = %q\n  }\n", h, content)
		for _, x := range broken {
			if x == h {
				b.WriteString("  file \"orphan\" {\n    path    = \"/missing/parent/orphan\"\n    content = \"x\"\n  }\n")
			}
		}
		b.WriteString("}\n")
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "main.hcl"), []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

// TestStagedRollout runs staged rollouts over three agents with a canary
// wave of one (a1, the first by name) and no failure allowed:
//   - the first release succeeds wave by wave and reaches every agent;
//   - a release whose canary fails halts after the canary: the other
//     agents keep the old version, even when restarted (their hello is
//     answered with the version they are pinned to); abort leaves them so,
//     and a second abort or a continue of the finished rollout is refused,
//     changing nothing; a continue of an unknown id is refused;
//   - with release_advance = manual, a good release waits after the canary
//     and continue takes it to every agent.
func TestStagedRollout(t *testing.T) {
	c := newCluster(t)
	for _, kv := range [][2]string{{"release_strategy", "waves"}, {"release_canary", "1"}, {"release_waves", "100%"}, {"release_max_failed", "0"}} {
		c.cli("env", "settings", "set", kv[0], kv[1])
	}
	roots := map[string]string{}
	dirs := map[string]string{}
	procs := map[string]*proc{}
	for _, h := range []string{"a1", "a2", "a3"} {
		roots[h], dirs[h] = t.TempDir(), t.TempDir()
		procs[h] = c.startAgent(h, agentOpts{stateDir: dirs[h], root: roots[h]})
	}
	waitFor(t, 60*time.Second, "three accepted agents", func() bool {
		for _, h := range []string{"a1", "a2", "a3"} {
			if a := c.agent(h); a.State != record.AgentAccepted || !a.Online {
				return false
			}
		}
		return true
	})
	app := func(h string) string {
		b, _ := os.ReadFile(filepath.Join(roots[h], "srv", "app"))
		return string(b)
	}
	status := func() record.Release {
		var r record.Release
		c.cliJSON(&r, "release", "status")
		if r.Rollout == nil {
			t.Fatalf("release status: %+v, want a staged rollout", r)
		}
		return r
	}

	// 1. Wave by wave to every agent.
	v1 := c.release(rolloutModel(t, "one\n"))
	waitFor(t, 90*time.Second, "the first rollout done", func() bool {
		r := status()
		return r.State == record.ReleaseDone && r.Rollout.Stage == record.StageDone
	})
	r := status()
	if len(r.Rollout.Waves) != 2 || strings.Join(r.Rollout.Waves[0].Agents, ",") != "a1" || r.Rollout.Waves[1].Succeeded != 2 || r.Version != v1 {
		t.Fatalf("first rollout: %+v; want the canary a1, then a2 and a3 succeeded", r.Rollout)
	}
	c.converged(v1, 6, 60*time.Second)
	for h := range roots {
		if got := app(h); got != "one\n" {
			t.Fatalf("%s: /srv/app %q after the first rollout, want one", h, got)
		}
	}

	// 2. The canary fails: halted, the others keep version 1.
	// export --release --wait stops at the halt, exit 1, saying what to do.
	code, out, errs := c.run("export", "--release", "--wait", "--timeout", "90s", rolloutModel(t, "two\n", "a1"))
	if code != 1 || !strings.Contains(errs, "staged rollout halted") || !strings.Contains(errs, "tether release status") {
		t.Fatalf("export --release --wait of a failing canary: exit %d\n%s\n%s; want exit 1 naming the halt", code, out, errs)
	}
	r = status()
	v2 := r.Version
	if v2 != v1+1 {
		t.Fatalf("newest release is of version %d, want %d", v2, v1+1)
	}
	if r.State != record.ReleaseRunning || r.Version != v2 || r.Rollout.Sent != 1 || r.Rollout.Waves[0].FailedCount != 1 ||
		strings.Join(r.Rollout.Waves[0].FailedAgents, ",") != "a1" || r.Rollout.Previous != v1 {
		t.Fatalf("halted rollout: %+v %+v; want running, canary sent and failed (a1), previous %d", r, r.Rollout, v1)
	}
	out = c.cli("release", "status")
	if !strings.Contains(out, "halted") || !strings.Contains(out, "wave 1 failed: a1") {
		t.Fatalf("release status printed %q; want halted and the failed canary named", out)
	}
	if app("a1") != "two\n" || app("a2") != "one\n" || app("a3") != "one\n" {
		t.Fatalf("after the halt: a1 %q a2 %q a3 %q; want two, one, one", app("a1"), app("a2"), app("a3"))
	}
	// A restarted agent outside the canary is answered with version 1.
	procs["a2"].stop()
	waitFor(t, 60*time.Second, "a2 offline", func() bool { return !c.agent("a2").Online })
	c.startAgent("a2", agentOpts{stateDir: dirs["a2"], root: roots["a2"]})
	waitFor(t, 60*time.Second, "a2 back online", func() bool { return c.agent("a2").Online })
	if g := c.agent("a2").Generation; g != v1 {
		t.Fatalf("a2 holds generation %d after its hello during the rollout, want %d", g, v1)
	}

	// Bad input: an unknown id; nothing changes.
	code, _, errs = c.run("release", "continue", "00000000-0000-4000-8000-000000000000")
	if code != 1 || !strings.Contains(errs, "no release") {
		t.Fatalf("continue of an unknown id: exit %d, %q; want a clear refusal", code, errs)
	}
	// Abort: no further wave.
	out = c.cli("release", "abort", r.ID)
	if !strings.Contains(out, "aborted") {
		t.Fatalf("release abort printed %q", out)
	}
	r = status()
	if r.State != record.ReleaseDone || r.Rollout.Stage != record.StageAborted {
		t.Fatalf("after abort: %s %s, want done, aborted", r.State, r.Rollout.Stage)
	}
	for _, verb := range []string{"abort", "continue"} {
		code, _, errs := c.run("release", verb, r.ID)
		if code != 1 || !strings.Contains(errs, "has ended (aborted)") || !strings.Contains(errs, "nothing changed") {
			t.Fatalf("%s of an aborted rollout: exit %d, %q; want a clear refusal", verb, code, errs)
		}
	}
	if again := status(); again.Rollout.Stage != record.StageAborted || again.Rollout.Asked != r.Rollout.Asked {
		t.Fatalf("a refused verb changed the rollout: %+v", again.Rollout)
	}
	time.Sleep(2 * time.Second) // no wave may follow an abort
	if app("a2") != "one\n" || app("a3") != "one\n" {
		t.Fatalf("after the abort: a2 %q a3 %q; want one, one", app("a2"), app("a3"))
	}

	// 3. Manual advance: the canary succeeds, the rest waits for continue.
	c.cli("env", "settings", "set", "release_advance", "manual")
	v3 := c.release(rolloutModel(t, "three\n"))
	waitFor(t, 90*time.Second, "the canary succeeded, waiting", func() bool {
		r := status()
		return r.Version == v3 && r.Rollout.Stage == record.StageWaiting
	})
	if app("a1") != "three\n" || app("a2") != "one\n" || app("a3") != "one\n" {
		t.Fatalf("waiting after the canary: a1 %q a2 %q a3 %q; want three, one, one", app("a1"), app("a2"), app("a3"))
	}
	out = c.cli("release", "continue")
	if !strings.Contains(out, "continuing") {
		t.Fatalf("release continue printed %q", out)
	}
	waitFor(t, 90*time.Second, "the rollout done after continue", func() bool {
		r := status()
		return r.State == record.ReleaseDone && r.Rollout.Stage == record.StageDone
	})
	waitFor(t, 60*time.Second, "version 3 deployed everywhere", func() bool {
		n := 0
		for _, st := range c.statuses() {
			if st.Version == v3 && st.State == model.StateDeployed {
				n++
			}
		}
		return n == 6 // the orphan of version 2 left the model
	})
	for h := range roots {
		if got := app(h); got != "three\n" {
			t.Fatalf("%s: /srv/app %q after continue, want three", h, got)
		}
	}
}
