package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tetherhq/tether/server/api"
	"github.com/tetherhq/tether/server/record"
)

// TestDeployHistory: with a server, PostgreSQL, RabbitMQ and two agents, a
// release, a repair and a dry run are listed by `tether env deploys` with
// what set them off, who asked and each agent's outcome; a deploy's report
// names a stopped agent as not answered, and `--wait` names it while it
// waits; a heal that fails is in the resource's log.
func TestDeployHistory(t *testing.T) {
	c := newCluster(t)
	c.cli("env", "settings", "set", "drift_policy", "heal")
	root := t.TempDir()
	// /opt/app is the host's, not the model's: without it, the file in it
	// cannot be written.
	appDir := filepath.Join(root, "opt", "app")
	if err := os.MkdirAll(appDir, 0o755); err != nil {
		t.Fatal(err)
	}
	model := fileModel(t, 2, func(i int) string { return fmt.Sprintf("f %d\n", i) }, map[string]string{
		"web": "  file \"app\" {\n    path    = \"/opt/app/x\"\n    content = \"app\\n\"\n  }\n",
		"db":  "",
	})
	c.startAgent("web", agentOpts{stateDir: t.TempDir(), root: root})
	db := c.startAgent("db", agentOpts{stateDir: t.TempDir(), root: t.TempDir()})
	waitFor(t, 60*time.Second, "both agents accepted and online", func() bool {
		w, d := c.agent("web"), c.agent("db")
		return w.State == record.AgentAccepted && w.Online && d.State == record.AgentAccepted && d.Online
	})

	code, out, errs := c.run("export", "--release", "--wait", "--timeout", "60s", model)
	if code != 0 {
		t.Fatalf("export --release --wait: exit %d\n%s\n%s", code, out, errs)
	}
	m := regexp.MustCompile(`release ([0-9a-f-]{36}): `).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("export --release printed %q; want the release id", out)
	}
	releaseID := m[1]
	c.converged(1, 5, 60*time.Second)

	// The release's deploy: its id is the release's, asked by the admin's
	// token, both agents answered ok.
	var rel record.Deploy
	waitFor(t, 60*time.Second, "the release's deploy answered by both agents", func() bool {
		var ds []record.Deploy
		c.cliJSON(&ds, "env", "deploys", "--kind", "deploy")
		i := slices.IndexFunc(ds, func(d record.Deploy) bool { return d.ID == releaseID })
		if i < 0 {
			return false
		}
		rel = ds[i]
		return rel.Outcome != record.DeployRunning
	})
	if rel.Trigger != record.DeployByRelease || rel.Who == "" || rel.Who == record.WhoServer || rel.Version != 1 ||
		rel.Asked != 2 || rel.OK != 2 || rel.Outcome != record.DeployOK {
		t.Fatalf("the release's deploy: %+v; want the release, by the admin, 2 agents ok", rel)
	}

	// A repair and a dry run, waited for: each agent's outcome.
	for _, op := range []record.Operation{record.OpRepair, record.OpDryRun} {
		var rep api.Report
		c.cliJSON(&rep, "env", string(op), "--wait", "--timeout", "60s")
		d := rep.Deploy
		if d == nil || d.Kind != op || d.Trigger != record.DeployByOperator || d.Who != rel.Who || d.Outcome != record.DeployOK ||
			len(d.Agents) != 2 || d.Agents[0].Agent != "db" || d.Agents[0].Outcome != record.AgentOK || d.Agents[1].Outcome != record.AgentOK || len(rep.Waiting) != 0 {
			t.Fatalf("env %s --wait: %+v, deploy %+v; want both agents ok, asked by %s", op, rep, d, rel.Who)
		}
	}
	list := c.cli("env", "deploys")
	for _, want := range []string{"TRIGGER", "WHO", releaseID, "repair", "dryrun", "operator", rel.Who, "2/2"} {
		if !strings.Contains(list, want) {
			t.Fatalf("env deploys printed\n%s\nwant %q in it", list, want)
		}
	}
	if strings.Contains(list, "\x1b[") {
		t.Fatalf("env deploys piped printed escape codes:\n%q", list)
	}

	// db stops: a deploy waits for it, names it, and its report says it
	// has not answered.
	db.stop()
	code, out, errs = c.run("env", "deploy", "--full", "--wait", "--timeout", "5s")
	if code == 0 || !strings.Contains(errs, "have not answered") || !strings.Contains(errs, "db") {
		t.Fatalf("env deploy --wait with db stopped: exit %d\n%s\n%s\nwant a timeout naming db", code, out, errs)
	}
	m = regexp.MustCompile(`deploy ([0-9a-f-]{36}) of version`).FindStringSubmatch(errs)
	if m == nil {
		t.Fatalf("env deploy --wait said %q; want the deploy's id", errs)
	}
	var rep api.Report
	waitFor(t, 60*time.Second, "web's answer to the deploy", func() bool {
		c.cliJSON(&rep, "env", "report", m[1])
		return rep.Deploy != nil && rep.Deploy.Answered == 1
	})
	if !slices.Equal(rep.Waiting, []string{"db"}) || rep.Deploy.Outcome != record.DeployRunning || rep.Deploy.Agents[1].Agent != "web" || rep.Deploy.Agents[1].Outcome != record.AgentOK {
		t.Fatalf("report with db stopped: waiting %v, deploy %+v; want db not answered, web ok", rep.Waiting, rep.Deploy)
	}
	if out := c.cli("env", "report", m[1]); !strings.Contains(out, "not answered yet: db") || !regexp.MustCompile(`(?m)^web\s+ok\s`).MatchString(out) {
		t.Fatalf("env report %s printed\n%s\nwant db named as not answered and web ok", m[1], out)
	}

	// The directory of a managed file goes: the heal cannot write it, and
	// the failed heal is in the file's log.
	// A heal may write the file back while the directory is being
	// removed ("directory not empty"): remove it again.
	removeDir := func() {
		t.Helper()
		for i := 0; ; i++ {
			err := os.RemoveAll(appDir)
			if err == nil {
				return
			}
			if i == 50 {
				t.Fatal(err)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	removeDir()
	id := fileID("web", "/opt/app/x")
	waitFor(t, 60*time.Second, "the failed heal in the resource log", func() bool {
		// Should a heal have run between the file's removal and its
		// directory's, the directory goes again.
		if _, err := os.Stat(appDir); err == nil {
			removeDir()
		}
		code, out, _ := c.run("resource", "log", id)
		return code == 0 && regexp.MustCompile(`(?m)\sheal\s+failed\s+1\s.*heal failed: `).MatchString(out)
	})
	var acts []record.Action
	c.cliJSON(&acts, "resource", "log", id)
	if i := slices.IndexFunc(acts, func(a record.Action) bool { return a.Kind == record.ActionHeal }); i < 0 ||
		acts[i].State != "failed" || !strings.Contains(acts[i].Message, "does not exist") {
		t.Fatalf("resource log %s: %+v; want a failed heal saying the directory does not exist", id, acts)
	}
}
