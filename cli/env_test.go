package cli

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"os"
	"strings"
	"testing"

	"github.com/tetherhq/tether/server/api"
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

// Creating an environment that exists is refused with the API's code
// env_exists and a message that names it, never the database's words.
func TestEnvCreateExisting(t *testing.T) {
	newTestAPI(t)
	code, out, errs := invoke(t, "env", "create", "prod")
	if code != 1 || !strings.Contains(errs, "environment prod already exists") || !strings.Contains(errs, "tether env show prod") {
		t.Fatalf("env create of an existing environment: exit %d, want 1 and a clear message:\n%s%s", code, out, errs)
	}
	for _, w := range []string{"constraint", "UNIQUE", "sql", "duplicate key"} {
		if strings.Contains(strings.ToLower(errs), strings.ToLower(w)) {
			t.Fatalf("the message leaks %q:\n%s", w, errs)
		}
	}
	var apiErr *apiError
	cl := &client{base: os.Getenv("TETHER_SERVER"), token: os.Getenv("TETHER_TOKEN"), http: http.DefaultClient}
	err := cl.call(context.Background(), "POST", "/envs", api.EnvRequest{Name: "prod"}, nil)
	if !errors.As(err, &apiErr) || apiErr.status != http.StatusConflict || apiErr.body.Code != "env_exists" {
		t.Fatalf("POST /envs of an existing environment: %v, want 409 env_exists", err)
	}
}
