package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/tetherhq/tether/model"
	"github.com/tetherhq/tether/server/record"
)

func motd(agent, path string) model.Resource {
	return model.Resource{ID: model.ID{Type: "file", Agent: agent, Key: "path", Value: path}, Attributes: model.Attributes{"path": path, "content": "hi"}}
}

// `tether version release` of a version that takes resources away from
// agents lists them, per agent, and asks to confirm by typing the
// version; without a terminal it refuses unless --yes. -o json carries
// the same facts: the preview when refused, "leaving" beside the release
// when released. A release that takes nothing away is not asked about.
func TestVersionReleaseConfirmsWhatItTakesAway(t *testing.T) {
	a := newTestAPI(t)
	ctx := context.Background()
	put := func(rs ...model.Resource) int64 {
		v, _, err := a.srv.Export(ctx, "prod", rs, model.VersionMeta{Compiler: "test"})
		if err != nil {
			t.Fatal(err)
		}
		return v.Number
	}
	release := func(n int64) {
		if _, err := a.srv.Release(ctx, "prod", n); err != nil {
			t.Fatal(err)
		}
	}
	released := func() int64 {
		v, err := a.st.ReleasedVersion(ctx, "prod")
		if err != nil {
			t.Fatal(err)
		}
		return v.Number
	}
	// Version 1 was made before web-2 joined; both hold version 2.
	v1 := put(motd("web-1", "/etc/motd"))
	release(v1)
	v2 := put(motd("web-1", "/etc/motd"), motd("web-2", "/etc/motd"), motd("web-2", "/srv/site"))
	release(v2)
	for _, name := range []string{"web-1", "web-2"} {
		if err := a.st.UpsertAgent(ctx, record.Agent{Env: "prod", Name: name, State: record.AgentAccepted, PublicKey: make([]byte, 32), LastSeen: time.Now(), Generation: v2}); err != nil {
			t.Fatal(err)
		}
	}

	code, out, errs := invokeOn(t, "", false, "version", "release", "1")
	if code != exitUsage || !strings.Contains(out, "agent web-2\n  leaves the model: version 1 has nothing for it; a release takes away everything it holds (2 resources, of version 2):") ||
		!strings.Contains(out, "- orphaned file[web-2,path=/srv/site]") || strings.Contains(out, "agent web-1") ||
		!strings.Contains(errs, "releasing version 1 takes 2 resources away from 1 agent (web-2 leaves the model): nothing was released") || !strings.Contains(errs, "pass --yes") || released() != v2 {
		t.Fatalf("without a terminal: exit %d, released %d; want 2, %d still, web-2's resources listed\n%s%s", code, released(), v2, out, errs)
	}
	if code, _, errs := invokeOn(t, "2\n", true, "version", "release", "1"); code != exitFailed || !strings.Contains(errs, "Type 1 to release it") ||
		!strings.Contains(errs, "not confirmed: nothing was released") || released() != v2 {
		t.Fatalf("not confirmed: exit %d, released %d; want 1, %d still\n%s", code, released(), v2, errs)
	}
	code, out, _ = invokeOn(t, "", false, "version", "release", "1", "-o", "json")
	var pv record.ReleasePreview
	if code != exitUsage || json.Unmarshal([]byte(out), &pv) != nil || !pv.Rollback || len(pv.Leaving) != 1 || pv.Leaving[0].Agent != "web-2" ||
		!pv.Leaving[0].LeavesModel || pv.Leaving[0].Orphaned != 2 || released() != v2 {
		t.Fatalf("-o json without a terminal: exit %d, %s; want 2 and the preview: web-2 leaving the model with 2 resources", code, out)
	}
	code, out, errs = invokeOn(t, "", false, "version", "release", "1", "--yes", "-o", "json")
	var rel releasedOutput
	if code != 0 || json.Unmarshal([]byte(out), &rel) != nil || rel.Meta.RollbackOf != v1 || len(rel.Leaving) != 1 || rel.Leaving[0].Agent != "web-2" ||
		len(rel.Leaving[0].Resources) != 2 || rel.Leaving[0].Resources[0].Fate != record.FateOrphaned || released() != rel.Number {
		t.Fatalf("--yes -o json: exit %d, %s%s; want version 1 released again, with web-2's resources leaving", code, out, errs)
	}
	// The agents still hold version 2 (none runs): a release of 1 again
	// takes the same away; typed, it goes.
	code, out, errs = invokeOn(t, "1\n", true, "version", "release", "1")
	if code != 0 || !strings.Contains(out, "rolling back to version 1 takes 2 resources away from 1 agent (web-2 leaves the model)") ||
		!strings.Contains(out, "version 1 released again as version") {
		t.Fatalf("confirmed: exit %d; want released\n%s%s", code, out, errs)
	}
	// Version 2 takes nothing away from agents holding it: no question.
	if code, out, errs := invokeOn(t, "", false, "version", "release", "2"); code != 0 || !strings.Contains(out, "version 2 released again") || strings.Contains(out+errs, "takes") {
		t.Fatalf("a release taking nothing away: exit %d; want released without a question\n%s%s", code, out, errs)
	}
}

// A plan says, per agent, what a release would take away, beside what
// the agent answered about its part of the version.
func TestPrintPlanNamesWhatLeaves(t *testing.T) {
	var out bytes.Buffer
	term := &terminal{stdout: &out, stderr: &out}
	gone := motd("web-2", "/etc/motd").ID
	p := record.Plan{ID: "p1", Version: 3, Released: 4, Timeout: time.Second, Agents: []record.PlanAgent{
		{Name: "web-1", Outcome: record.PlanAnswered, Online: true, Unchanged: 2},
		{Name: "web-2", Outcome: record.PlanAnswered, Online: true, Leaving: &record.Leaving{Agent: "web-2", From: 4, LeavesModel: true, Orphaned: 1,
			Resources: []record.LeavingResource{{ID: gone, Fate: record.FateOrphaned}}}},
	}}
	printPlan(term, p)
	for _, want := range []string{
		"agent web-1 (online): answered, 0 to change, 2 unchanged\n",
		"agent web-2 (online): answered, 0 to change, 0 unchanged, 1 to take away: leaves the model\n" +
			"  leaves the model: version 3 has nothing for it; a release takes away everything it holds (1 resource, of version 4):\n" +
			"  - orphaned file[web-2,path=/etc/motd]\n",
		"releasing version 3 takes 1 resource away from 1 agent (web-2 leaves the model): tether version release 3 lists it again and asks before it does\n",
		"orphaned: left on the host as it is, no longer managed",
	} {
		if !strings.Contains(out.String(), want) {
			t.Fatalf("plan output lacks %q:\n%s", want, out.String())
		}
	}
}
