package api_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/tetherhq/tether/model"
	"github.com/tetherhq/tether/server/api"
	"github.com/tetherhq/tether/server/record"
)

// An alert listing filters by kind, or by family: compile is every
// compile kind. Any other kind is refused, naming those there are.
func TestAlertKindFilter(t *testing.T) {
	r := newRig(t, openSQLite(t))
	if err := r.st.CreateEnv(context.Background(), record.Environment{Name: "prod", Settings: record.DefaultEnvSettings()}); err != nil {
		t.Fatal(err)
	}
	if err := r.st.RecordAlerts(context.Background(), []record.Alert{
		{Env: "prod", Kind: record.AlertSecurity, Message: "forged"},
		{Env: "prod", Kind: record.AlertCompileFailed, Compliance: model.NonCompliant, Message: "failed"},
		{Env: "prod", Kind: record.AlertCompileRecovered, Compliance: model.Compliant, Message: "succeeded again"},
	}); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct{ kind, want string }{
		{"", "[compile.recovered compile.failed security]"},
		{"compile", "[compile.recovered compile.failed]"},
		{"compile.recovered", "[compile.recovered]"},
		{"compile.failed", "[compile.failed]"},
		{"security", "[security]"},
		{"drift", "[]"},
	} {
		var as []record.Alert
		r.must(r.admin, "GET", "/api/v1/envs/prod/alerts?kind="+tt.kind, nil, &as, 200)
		kinds := []record.AlertKind{}
		for _, a := range as {
			kinds = append(kinds, a.Kind)
		}
		if got := fmt.Sprint(kinds); got != tt.want {
			t.Errorf("kind=%s: got %s, want %s", tt.kind, got, tt.want)
		}
	}
	for _, kind := range []string{"compiles", "compile.", "recovered", "compile.alert"} {
		var e api.Body
		got, code := r.do(r.admin, "GET", "/api/v1/envs/prod/alerts?kind="+kind, nil, &e)
		if got != 400 || code != "bad_request" || !strings.Contains(e.Error.Message, record.AlertKindsHelp) {
			t.Errorf("kind=%s: status %d %+v, want 400 bad_request naming the kinds", kind, got, e.Error)
		}
	}
}
