package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tetherhq/tether/model"
	"github.com/tetherhq/tether/server/api"
	"github.com/tetherhq/tether/server/record"
)

// planModel writes a model: host web with /srv/motd (content, mode) and
// /srv/other, host db with /srv/db.
func planModel(t *testing.T, motd, mode string) string {
	t.Helper()
	src := fmt.Sprintf(`host "web" {
  directory "srv" {
    path = "/srv"
  }
  file "motd" {
    path    = "/srv/motd"
    content = %q
    mode    = %q
  }
  file "other" {
    path    = "/srv/other"
    content = "other\n"
  }
}
host "db" {
  directory "srv" {
    path = "/srv"
  }
  file "db" {
    path    = "/srv/db"
    content = "db\n"
  }
}
`, motd, mode)
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "main.hcl"), []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

// TestPlanBeforeRelease plans a candidate version that changes a file's
// content and mode: `tether version plan` answers, for the agent, the
// file's content and mode current → desired, and names an agent that does
// not answer (stopped with SIGSTOP) and, later, agents that are offline.
// The host's file, the agent's desired state and the released version are
// unchanged. A dry run's report says what a deploy would do, not
// "deployed". Bad input (a version that does not exist, no agent online)
// gets a clear error and changes nothing.
func TestPlanBeforeRelease(t *testing.T) {
	c := newCluster(t)
	webRoot, dbRoot := t.TempDir(), t.TempDir()
	v1 := c.release(planModel(t, "one\n", "0644"))
	web := c.startAgent("web", agentOpts{stateDir: t.TempDir(), root: webRoot})
	db := c.startAgent("db", agentOpts{stateDir: t.TempDir(), root: dbRoot})
	c.converged(v1, 5, 60*time.Second)
	motd, other := filepath.Join(webRoot, "srv", "motd"), filepath.Join(webRoot, "srv", "other")

	// A dry run of the released version, after an edit by hand: its
	// report's rows say "would change", never "deployed".
	if err := os.WriteFile(other, []byte("edited\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	var d record.Deployment
	c.cliJSON(&d, "env", "dryrun", "--agent", "web")
	var report string
	waitFor(t, 60*time.Second, "the dry run's report", func() bool {
		report = c.cli("env", "report", d.ID)
		return strings.Contains(report, fileID("web", "/srv/other"))
	})
	if !regexp.MustCompile(`dryrun\s+would change\s+`+fmt.Sprint(v1)+`\s+content`).MatchString(report) || strings.Contains(report, "deployed") {
		t.Fatalf("env report %s:\n%s\nwant the edited file's row to say \"would change\", and no row \"deployed\"", d.ID, report)
	}
	if err := os.WriteFile(other, []byte("other\n"), 0o644); err != nil {
		t.Fatal(err)
	}

	// The candidate: exported, not released.
	var exp api.ExportResponse
	c.cliJSON(&exp, "export", planModel(t, "two\n", "0600"))
	v2 := exp.Version.Number
	if exp.Released || v2 != v1+1 {
		t.Fatalf("export: %+v; want version %d stored, not released", exp, v1+1)
	}

	// db is stopped (SIGSTOP): still online for the server, it does not
	// answer.
	if err := db.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	var plan record.Plan
	c.cliJSON(&plan, "version", "plan", fmt.Sprint(v2), "--timeout", "5s")
	if err := db.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	if plan.Version != v2 || plan.Released != v1 || len(plan.Agents) != 2 {
		t.Fatalf("plan: %+v; want version %d against released %d, two agents", plan, v2, v1)
	}
	if len(plan.NotAnswered) != 1 || plan.NotAnswered[0] != "db" {
		t.Fatalf("plan: not answered %v; want [db]", plan.NotAnswered)
	}
	var pw *record.PlanAgent
	for i := range plan.Agents {
		switch a := &plan.Agents[i]; a.Name {
		case "web":
			pw = a
		case "db":
			if a.Outcome != record.PlanNoAnswer || !a.Online {
				t.Fatalf("plan: db %+v; want online, no answer", a)
			}
		}
	}
	if pw == nil || pw.Outcome != record.PlanAnswered || len(pw.Resources) != 1 || pw.Unchanged != 2 {
		t.Fatalf("plan: web %+v; want answered, one resource to change, two unchanged", pw)
	}
	r := pw.Resources[0]
	want := model.Changes{"content": {Current: "one\n", Desired: "two\n"}, "mode": {Current: "0644", Desired: "0600"}}
	if r.ID.String() != fileID("web", "/srv/motd") || r.Would != model.WouldChange || len(r.Changes) != len(want) {
		t.Fatalf("plan: web's resource %+v; want %s to change content and mode", r, fileID("web", "/srv/motd"))
	}
	for k, ch := range want {
		if r.Changes[k] != ch {
			t.Fatalf("plan: %s %s: %v → %v; want %v → %v", r.ID, k, r.Changes[k].Current, r.Changes[k].Desired, ch.Current, ch.Desired)
		}
	}

	// The table says the same.
	out := c.cli("version", "plan", fmt.Sprint(v2), "--agent", "web", "--timeout", "30s")
	for _, line := range []string{`would change ` + fileID("web", "/srv/motd"), `content: "one\n" → "two\n"`, `mode: "0644" → "0600"`} {
		if !strings.Contains(out, line) {
			t.Fatalf("version plan %d:\n%s\nwant a line with %s", v2, out, line)
		}
	}

	// Nothing changed: the host's file, the released version, the
	// agent's desired state (a deploy of the released version changes
	// nothing).
	checkMotd := func() {
		t.Helper()
		fi, err := os.Stat(motd)
		b, rerr := os.ReadFile(motd)
		if err != nil || rerr != nil || string(b) != "one\n" || fi.Mode().Perm() != 0o644 {
			t.Fatalf("%s after a plan: %q, %v, %v %v; want %q, mode 0644", motd, b, fi.Mode(), err, rerr, "one\n")
		}
	}
	checkMotd()
	checkVersions := func() {
		t.Helper()
		var vs []model.Version
		c.cliJSON(&vs, "version", "list")
		states := map[int64]model.VersionState{}
		for _, v := range vs {
			states[v.Number] = v.State
		}
		if len(vs) != 2 || states[v1] != model.VersionReleased || states[v2] != model.VersionCandidate {
			t.Fatalf("versions after a plan: %v; want %d released, %d a candidate", states, v1, v2)
		}
	}
	checkVersions()
	if st := c.statuses()[fileID("web", "/srv/motd")]; st.Version != v1 {
		t.Fatalf("status of motd after a plan: %+v; want version %d", st, v1)
	}
	c.cliJSON(&d, "env", "deploy", "--agent", "web", "--full")
	waitFor(t, 60*time.Second, "the full deploy's end", func() bool {
		return strings.Contains(web.output(), `"deploy":"`+d.ID+`"`) && strings.Contains(web.output(), `"message":"job finished"`)
	})
	checkMotd()

	// Bad input: a version that does not exist; no agent online.
	code, _, errs := c.run("version", "plan", "99")
	if code != 1 || !strings.Contains(errs, "no version 99 in") {
		t.Fatalf("version plan 99: exit %d, %q; want a clear refusal", code, errs)
	}
	db.stop()
	web.stop()
	waitFor(t, 30*time.Second, "both agents offline", func() bool {
		return !c.agent("web").Online && !c.agent("db").Online
	})
	code, _, errs = c.run("version", "plan", fmt.Sprint(v2))
	if code != 1 || !strings.Contains(errs, "no agent online") || !strings.Contains(errs, "db, web") {
		t.Fatalf("version plan with no agent online: exit %d, %q; want a clear refusal naming db and web", code, errs)
	}
	checkMotd()
	checkVersions()
}
