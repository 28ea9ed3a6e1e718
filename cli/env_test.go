package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"os"
	"strings"
	"testing"

	"github.com/tetherhq/tether/bus"
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

// hasInbox reports whether env/agent's inbox is on the test API's bus.
func (a *testAPI) hasInbox(t *testing.T, env, agent string) bool {
	t.Helper()
	err := a.bus.Send(context.Background(), &bus.Envelope{Kind: bus.KindDeploy, Env: env, Agent: agent}, bus.SendOptions{})
	if err != nil && !errors.Is(err, bus.ErrNoInbox) {
		t.Fatal(err)
	}
	return err == nil
}

// invokeOn runs tether with stdin, as a terminal when tty is set.
func invokeOn(t *testing.T, stdin string, tty bool, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	was := isTerminalIn
	isTerminalIn = func(io.Reader) bool { return tty }
	t.Cleanup(func() { isTerminalIn = was })
	var out, errb bytes.Buffer
	code = run(context.Background(), append([]string{"tether"}, args...), strings.NewReader(stdin), &out, &errb)
	return code, out.String(), errb.String()
}

// `tether env delete` asks to type the name on a terminal, refuses without
// --yes elsewhere, and removes the environment's agents' inboxes.
func TestEnvDeleteConfirms(t *testing.T) {
	a := newTestAPI(t)
	ctx := context.Background()
	if _, err := a.srv.EnsureEnv(ctx, "staging", record.DefaultEnvSettings()); err != nil {
		t.Fatal(err)
	}
	if err := a.st.UpsertAgent(ctx, record.Agent{Env: "staging", Name: "web-1", State: record.AgentAccepted, PublicKey: make([]byte, 32)}); err != nil {
		t.Fatal(err)
	}
	if err := a.bus.DeclareInbox(ctx, "staging", "web-1"); err != nil {
		t.Fatal(err)
	}
	exists := func() bool {
		_, err := a.st.GetEnv(ctx, "staging")
		return err == nil
	}

	code, _, errs := invokeOn(t, "", false, "env", "delete", "staging")
	if code != exitUsage || !strings.Contains(errs, "pass --yes") || !exists() {
		t.Fatalf("without a terminal or --yes: exit %d, exists %v, want 2, kept and --yes named\n%s", code, exists(), errs)
	}
	code, _, errs = invokeOn(t, "stagin\n", true, "env", "delete", "staging")
	if code != exitFailed || !strings.Contains(errs, "Type staging to confirm") || !strings.Contains(errs, "not confirmed") || !exists() {
		t.Fatalf("mistyped name: exit %d, exists %v, want 1 and kept\n%s", code, exists(), errs)
	}
	code, _, errs = invokeOn(t, "staging\n", true, "env", "delete", "staging")
	if code != 0 || exists() {
		t.Fatalf("name typed: exit %d, exists %v, want 0 and gone\n%s", code, exists(), errs)
	}
	if a.hasInbox(t, "staging", "web-1") {
		t.Fatal("the deleted environment's agent's inbox is still on the bus")
	}

	if _, err := a.srv.EnsureEnv(ctx, "staging", record.DefaultEnvSettings()); err != nil {
		t.Fatal(err)
	}
	if code, out, errs := invokeOn(t, "", false, "env", "delete", "staging", "--yes", "-o", "json"); code != 0 || exists() || !strings.Contains(out, `"deleted": true`) {
		t.Fatalf("--yes: exit %d, exists %v\n%s%s", code, exists(), out, errs)
	}
}
