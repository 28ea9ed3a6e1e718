package console_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/tetherhq/tether/model"
	"github.com/tetherhq/tether/server/record"
)

// seedCompiles records a failed compile and its recovery, their alerts,
// and a compile skipped for nothing changed.
func (r *rig) seedCompiles() {
	r.t.Helper()
	ctx := context.Background()
	at := time.Now().Add(-time.Minute)
	if err := r.st.RecordAlerts(ctx, []record.Alert{
		{At: at, Env: "prod", Kind: record.AlertCompileFailed, Compliance: model.NonCompliant,
			Message: `compile 1c0ffee0 of revision "9f2e4c1" failed: main.hcl:3:15: Unknown variable`},
		{At: at.Add(30 * time.Second), Env: "prod", Kind: record.AlertCompileRecovered, Compliance: model.Compliant, Version: 2,
			Message: `compile 2badc0de of revision "a41d07e" succeeded (released): compiles fail no more`},
	}); err != nil {
		r.t.Fatal(err)
	}
	ran, err := r.st.StartCompile(ctx, record.Compile{Env: "prod", Triggers: record.Triggers{{Kind: record.TriggerWebhook, Count: 1}}})
	if err != nil {
		r.t.Fatal(err)
	}
	ran.Outcome, ran.Revision, ran.Version, ran.Inputs = record.CompileReleased, strings.Repeat("a4", 20), 2, strings.Repeat("0f", 32)
	ran.ResourcesPerAgent = map[string]int{"web-1": 2}
	if _, err := r.st.FinishCompile(ctx, ran); err != nil {
		r.t.Fatal(err)
	}
	skipped, err := r.st.StartCompile(ctx, record.Compile{Env: "prod", Triggers: record.Triggers{{Kind: record.TriggerFacts, Count: 3, By: "web-2"}}})
	if err != nil {
		r.t.Fatal(err)
	}
	skipped.Outcome, skipped.Revision, skipped.Inputs, skipped.SameAs = record.CompileSkipped, ran.Revision, ran.Inputs, ran.ID
	skipped.ResourcesPerAgent = ran.ResourcesPerAgent
	if _, err := r.st.FinishCompile(ctx, skipped); err != nil {
		r.t.Fatal(err)
	}
}

// A compile that recovered is good news on the alerts page (✔, the good
// class), apart from the failure (✖, bad); the kind filter offers every
// compile kind; a skipped compile says what it is the same as, and is no
// warning.
func TestCompileAlertsAndSkips(t *testing.T) {
	r := newRig(t, openSQLite(t))
	r.seed()
	r.seedCompiles()
	b := r.browser().login("", "ada", r.user("ada", record.RoleAdmin))

	good := `<span class="state good"><span aria-hidden="true">✔</span> compile.recovered</span>`
	bad := `<span class="state bad"><span aria-hidden="true">✖</span> compile.failed</span>`
	if b.get("/envs/prod/alerts"); b.code != http.StatusOK {
		t.Fatalf("alerts: %d", b.code)
	}
	b.has("alerts", good, bad, "compiles fail no more", `<option>compile</option>`, `<option>compile.recovered</option>`)
	b.get("/envs/prod/alerts?kind=compile")
	b.has("compile alerts", good, bad, `<option selected>compile</option>`)
	b.hasNot("compile alerts", "edited by hand")
	b.get("/envs/prod/alerts?kind=compile.recovered")
	b.has("recoveries", good)
	b.hasNot("recoveries", bad)
	b.get("/envs/prod")
	b.has("overview", `<span class="state muted"><span aria-hidden="true">=</span> skipped</span>`)

	if b.get("/envs/prod/compiles"); b.code != http.StatusOK {
		t.Fatalf("compiles: %d", b.code)
	}
	b.has("compiles", `<span class="state muted"><span aria-hidden="true">=</span> skipped</span>`, "Nothing changed since", "not compiled again")
	b.hasNot("compiles", `<span class="state warn"><span aria-hidden="true">↷</span> skipped</span>`)
}
