package cli

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/tetherhq/tether/server/record"
)

// `tether env show NAME` shows that environment; without NAME, the one of
// --env (TETHER_ENV).
func TestEnvShowByName(t *testing.T) {
	a := newTestAPI(t)
	if _, err := a.srv.EnsureEnv(context.Background(), "staging", record.DefaultEnvSettings()); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"env", "show", "staging"}, "staging"},
		{[]string{"env", "show"}, "prod"},
	} {
		code, out, errs := invoke(t, append(tt.args, "-o", "json")...)
		var env record.Environment
		if code != 0 || json.Unmarshal([]byte(out), &env) != nil || env.Name != tt.want {
			t.Fatalf("tether %s: exit %d, %q / %q; want environment %s", strings.Join(tt.args, " "), code, out, errs, tt.want)
		}
	}
	if code, out, errs := invoke(t, "env", "show", "staging"); code != 0 || !strings.Contains(out, "staging") || strings.Contains(out, "prod") {
		t.Fatalf("env show staging: exit %d\n%s%s", code, out, errs)
	}
	if code, _, errs := invoke(t, "env", "show", "staging", "prod"); code != exitUsage || !strings.Contains(errs, "tether env show takes [NAME]") {
		t.Fatalf("env show with two names: exit %d, want %d:\n%s", code, exitUsage, errs)
	}
}
