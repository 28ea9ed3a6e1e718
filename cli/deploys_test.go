package cli

import (
	"context"
	"encoding/json"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/google/uuid"

	"github.com/tetherhq/tether/model"
	"github.com/tetherhq/tether/server/api"
	"github.com/tetherhq/tether/server/record"
	"github.com/tetherhq/tether/server/store"
)

// `tether env deploys` lists deploys newest first, as a table and as JSON;
// `tether env report ID` shows each agent's outcome and names those that
// have not answered.
func TestEnvDeploysAndReport(t *testing.T) {
	a := newTestAPI(t)
	ctx := context.Background()
	rel, dry := uuid.NewString(), uuid.NewString()
	if err := a.st.RecordDeploy(ctx, record.Deploy{ID: rel, Env: "prod", Kind: record.OpDeploy, Trigger: record.DeployByRelease, Who: "alice", Version: 3}, []string{"web-1", "web-2"}); err != nil {
		t.Fatal(err)
	}
	if err := a.st.RecordDeploy(ctx, record.Deploy{ID: dry, Env: "prod", Kind: record.OpDryRun, Trigger: record.DeployByRepairInterval, Who: record.WhoServer, Version: 3}, []string{"web-1"}); err != nil {
		t.Fatal(err)
	}
	failed := model.Result{ID: model.ID{Type: "file", Agent: "web-1", Key: "path", Value: "/etc/motd"}, State: model.StateFailed, Message: "permission denied"}
	if _, err := a.st.RecordResults(ctx, []store.ResultBatch{{Env: "prod", Agent: "web-1", Version: 3, DeployID: rel, Results: []model.Result{failed}, Done: true}}); err != nil {
		t.Fatal(err)
	}

	code, out, errs := invoke(t, "env", "deploys")
	if code != 0 {
		t.Fatalf("env deploys: exit %d\n%s%s", code, out, errs)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 3 || !strings.HasPrefix(lines[0], "ID ") || !strings.HasPrefix(lines[1], dry) || !strings.HasPrefix(lines[2], rel) {
		t.Fatalf("env deploys printed\n%s\nwant a header, then the dry run, then the release", out)
	}
	if !regexp.MustCompile(`^` + rel + `\s+deploy\s+release\s+alice\s+3\s+1/2\s+0\s+1\s+running\s`).MatchString(lines[2]) {
		t.Fatalf("release row %q: want deploy, release, alice, version 3, 1/2 answered, 0 ok, 1 failed, running", lines[2])
	}
	if strings.Contains(out, "\x1b[") {
		t.Fatalf("env deploys, not on a terminal, printed escape codes: %q", out)
	}

	code, out, errs = invoke(t, "env", "deploys", "--kind", "dryrun", "-o", "json")
	var ds []record.Deploy
	if code != 0 || json.Unmarshal([]byte(out), &ds) != nil || len(ds) != 1 || ds[0].ID != dry || ds[0].Trigger != record.DeployByRepairInterval || ds[0].Who != record.WhoServer {
		t.Fatalf("env deploys --kind dryrun -o json: exit %d, %q %q; want the dry run alone", code, out, errs)
	}
	code, out, errs = invoke(t, "env", "deploys", "--agent", "web-2", "--limit", "1", "-o", "json")
	if code != 0 || json.Unmarshal([]byte(out), &ds) != nil || len(ds) != 1 || ds[0].ID != rel {
		t.Fatalf("env deploys --agent web-2 -o json: exit %d, %q %q; want the release alone", code, out, errs)
	}
	if code, _, errs := invoke(t, "env", "deploys", "--kind", "explode"); code != 1 || !strings.Contains(errs, `kind "explode": want deploy, repair or dryrun`) {
		t.Fatalf("env deploys --kind explode: exit %d, %q; want a clear refusal", code, errs)
	}

	code, out, errs = invoke(t, "env", "report", rel)
	if code != 0 || !strings.Contains(out, "deploy "+rel+" of version 3 (release, by alice)") || !strings.Contains(out, "not answered yet: web-2") ||
		!regexp.MustCompile(`(?m)^web-1\s+failed\s+1\s`).MatchString(out) || !regexp.MustCompile(`(?m)^web-2\s+waiting\s+0$`).MatchString(out) ||
		!strings.Contains(out, "permission denied") {
		t.Fatalf("env report: exit %d\n%s%s\nwant web-1 failed, web-2 not answered, and the failure", code, out, errs)
	}
	code, out, errs = invoke(t, "env", "report", rel, "-o", "json")
	var rep api.Report
	if code != 0 || json.Unmarshal([]byte(out), &rep) != nil || rep.Deploy == nil || !slices.Equal(rep.Waiting, []string{"web-2"}) ||
		len(rep.Deploy.Agents) != 2 || rep.Deploy.Agents[0].Outcome != record.AgentFailed || len(rep.Actions) != 1 {
		t.Fatalf("env report -o json: exit %d, %q %q; want web-2 waiting, web-1 failed, one action", code, out, errs)
	}
	if code, _, errs := invoke(t, "env", "report", uuid.NewString()); code != 1 || !strings.Contains(errs, "no deploy") {
		t.Fatalf("env report of an unknown deploy: exit %d, %q; want not found", code, errs)
	}
}

// A wait names at most namedAgents agents, and how many more.
func TestWaitingFor(t *testing.T) {
	for _, tt := range []struct {
		names []string
		want  string
	}{
		{nil, ""},
		{[]string{"db"}, "; waiting for db"},
		{[]string{"a", "b", "c", "d", "e", "f", "g", "h", "i", "j", "k", "l"}, "; waiting for a, b, c, d, e, f, g, h, i, j and 2 more"},
	} {
		if got := waitingFor(tt.names); got != tt.want {
			t.Errorf("waitingFor(%v) = %q, want %q", tt.names, got, tt.want)
		}
	}
}
