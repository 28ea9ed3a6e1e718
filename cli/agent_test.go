package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/tetherhq/tether/bus"
	"github.com/tetherhq/tether/server"
	"github.com/tetherhq/tether/server/api"
	"github.com/tetherhq/tether/server/record"
	"github.com/tetherhq/tether/server/store/sqlite"
)

// `tether agent facts-refresh NAME` and `tether agent rotate-key NAME`
// against a real API (SQLite, the in-process bus): the agent's inbox gets
// the command; errors and -o json are those of the other agent commands.
func TestAgentFactsRefresh(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	st, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "t.db"), sqlite.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	b := bus.NewLocal(zerolog.Nop())
	t.Cleanup(b.Close)
	srv, err := server.New(server.Config{}, st, b, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(api.New(api.Config{}, server.APIServices(srv, nil), zerolog.Nop()).Handler())
	t.Cleanup(ts.Close)
	tok, secret, err := api.IssueToken("ops", record.RoleOperator, "", "test", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if err := st.CreateToken(ctx, tok); err != nil {
		t.Fatal(err)
	}
	if _, err := srv.EnsureEnv(ctx, "prod", record.DefaultEnvSettings()); err != nil {
		t.Fatal(err)
	}
	if err := st.UpsertAgent(ctx, record.Agent{Env: "prod", Name: "web-1", PublicKey: make([]byte, 32), LastSeen: time.Now()}); err != nil {
		t.Fatal(err)
	}
	t.Setenv("TETHER_SERVER", ts.URL)
	t.Setenv("TETHER_TOKEN", secret)
	t.Setenv("TETHER_ENV", "prod")

	if code, _, stderr := invoke(t, "agent", "facts-refresh", "web-1"); code != 1 || !strings.Contains(stderr, "accept it first") {
		t.Fatalf("refresh of a pending agent: exit %d, %q; want 1 and a hint to accept it", code, stderr)
	}
	if code, _, stderr := invoke(t, "agent", "rotate-key", "web-1"); code != 1 || !strings.Contains(stderr, "accept it first") {
		t.Fatalf("rotate-key of a pending agent: exit %d, %q; want 1 and a hint to accept it", code, stderr)
	}
	if code, _, stderr := invoke(t, "agent", "facts-refresh"); code != exitUsage {
		t.Fatalf("no agent name: exit %d, want %d: %q", code, exitUsage, stderr)
	}
	if _, err := srv.AgentAction(ctx, "prod", "web-1", record.AgentAccept); err != nil {
		t.Fatal(err)
	}
	if err := b.DeclareInbox(ctx, "prod", "web-1"); err != nil {
		t.Fatal(err)
	}
	if code, stdout, stderr := invoke(t, "agent", "facts-refresh", "web-1"); code != 0 || !strings.Contains(stdout, "agent web-1: asked to report its facts again") {
		t.Fatalf("facts-refresh: exit %d, %q / %q", code, stdout, stderr)
	}
	code, stdout, stderr := invoke(t, "agent", "facts-refresh", "web-1", "-o", "json")
	var view api.AgentView
	if code != 0 || json.Unmarshal([]byte(stdout), &view) != nil || view.Name != "web-1" || view.State != record.AgentAccepted {
		t.Fatalf("facts-refresh -o json: exit %d, %q / %q; want the agent as JSON", code, stdout, stderr)
	}

	if code, stdout, stderr := invoke(t, "agent", "rotate-key", "web-1"); code != 0 || !strings.Contains(stdout, "agent web-1: asked to replace its key") {
		t.Fatalf("rotate-key: exit %d, %q / %q", code, stdout, stderr)
	}

	refreshes, rotations := make(chan struct{}, 2), make(chan struct{}, 1)
	consumed := make(chan struct{})
	go func() {
		defer close(consumed)
		_ = b.ConsumeInbox(ctx, "prod", "web-1", func(_ context.Context, d bus.Delivery) error {
			switch d.Envelope.Kind {
			case bus.KindFactsRefresh:
				select {
				case refreshes <- struct{}{}:
				default: // more than asked for: the count below fails
				}
			case bus.KindRotateKey:
				rotations <- struct{}{}
			}
			return nil
		})
	}()
	for i := range 2 {
		select {
		case <-refreshes:
		case <-ctx.Done():
			t.Fatalf("%d facts.refresh in the agent's inbox, want 2", i)
		}
	}
	select {
	case <-rotations:
	case <-ctx.Done():
		t.Fatal("no key.rotate in the agent's inbox")
	}
	cancel()
	<-consumed
}

// `tether agent accept` takes several names, or --all-pending, and says
// which agents it accepted.
func TestAgentAcceptSeveral(t *testing.T) {
	a := newTestAPI(t)
	for _, n := range []string{"web-1", "web-2", "web-3"} {
		a.pendingAgent(t, n)
	}
	state := func(name string) record.AgentState {
		t.Helper()
		ag, err := a.st.GetAgent(context.Background(), "prod", name)
		if err != nil {
			t.Fatal(err)
		}
		return ag.State
	}

	code, out, errs := invoke(t, "agent", "accept", "web-1", "web-2")
	if code != 0 || !strings.Contains(out, "agent web-1: accepted") || !strings.Contains(out, "agent web-2: accepted") {
		t.Fatalf("accept web-1 web-2: exit %d\n%s%s", code, out, errs)
	}
	if s := state("web-3"); s != record.AgentPending {
		t.Fatalf("web-3 is %s after accepting web-1 and web-2, want pending", s)
	}

	code, out, errs = invoke(t, "agent", "accept", "--all-pending", "-o", "json")
	var views []api.AgentView
	if code != 0 || json.Unmarshal([]byte(out), &views) != nil || len(views) != 1 || views[0].Name != "web-3" || views[0].State != record.AgentAccepted {
		t.Fatalf("accept --all-pending: exit %d, %q / %q; want web-3 alone, accepted", code, out, errs)
	}
	if code, out, _ := invoke(t, "agent", "accept", "--all-pending"); code != 0 || !strings.Contains(out, "no agent is waiting for acceptance") {
		t.Fatalf("accept --all-pending with none pending: exit %d\n%s", code, out)
	}

	a.pendingAgent(t, "web-4")
	code, out, errs = invoke(t, "agent", "accept", "nope", "web-4")
	if code != 1 || !strings.Contains(errs, "agent nope") || !strings.Contains(errs, "1 of 2 agents not accepted: nope") || !strings.Contains(out, "agent web-4: accepted") {
		t.Fatalf("accept nope web-4: exit %d, want 1, web-4 accepted and nope named\n%s%s", code, out, errs)
	}
	if s := state("web-4"); s != record.AgentAccepted {
		t.Fatalf("web-4 is %s, want accepted", s)
	}

	for _, args := range [][]string{{"agent", "accept"}, {"agent", "accept", "--all-pending", "web-1"}} {
		if code, _, errs := invoke(t, args...); code != exitUsage {
			t.Fatalf("tether %s: exit %d, want %d\n%s", strings.Join(args, " "), code, exitUsage, errs)
		}
	}
}

// `tether agent token revoke` takes a token's ID or its name and says what
// it revoked; so does `tether token revoke`.
func TestTokenRevokeByName(t *testing.T) {
	newTestAPI(t)
	create := func(args ...string) string {
		t.Helper()
		code, out, errs := invoke(t, append(args, "-o", "json")...)
		var tok struct {
			ID string `json:"id"`
		}
		if code != 0 || json.Unmarshal([]byte(out), &tok) != nil || tok.ID == "" {
			t.Fatalf("tether %s: exit %d, %q / %q", strings.Join(args, " "), code, out, errs)
		}
		return tok.ID
	}
	listed := func(args ...string) string {
		t.Helper()
		code, out, errs := invoke(t, args...)
		if code != 0 {
			t.Fatalf("tether %s: exit %d: %s", strings.Join(args, " "), code, errs)
		}
		return out
	}

	id := create("agent", "token", "create", "rack-a")
	code, out, errs := invoke(t, "agent", "token", "revoke", "rack-a")
	if want := "enrollment token rack-a (" + id + ") of environment prod revoked"; code != 0 || !strings.Contains(out, want) {
		t.Fatalf("agent token revoke rack-a: exit %d, %q / %q; want %q", code, out, errs, want)
	}
	if out := listed("agent", "token", "list"); strings.Contains(out, "rack-a") {
		t.Fatalf("rack-a still listed after its revocation:\n%s", out)
	}

	first, second := create("agent", "token", "create", "dup"), create("agent", "token", "create", "dup")
	code, _, errs = invoke(t, "agent", "token", "revoke", "dup")
	if code != exitUsage || !strings.Contains(errs, first) || !strings.Contains(errs, second) {
		t.Fatalf("revoke of a shared name: exit %d, want %d and both IDs:\n%s", code, exitUsage, errs)
	}
	if out := listed("agent", "token", "list"); !strings.Contains(out, first) || !strings.Contains(out, second) {
		t.Fatalf("a refused revocation revoked something:\n%s", out)
	}
	if code, out, errs := invoke(t, "agent", "token", "revoke", first); code != 0 || !strings.Contains(out, "("+first+")") {
		t.Fatalf("revoke by ID: exit %d, %q / %q", code, out, errs)
	}
	if out := listed("agent", "token", "list"); strings.Contains(out, first) || !strings.Contains(out, second) {
		t.Fatalf("revoke by ID revoked the wrong token:\n%s", out)
	}
	if code, _, errs := invoke(t, "agent", "token", "revoke", "nope"); code != 1 || !strings.Contains(errs, `no token with ID or name "nope"`) {
		t.Fatalf("revoke of an unknown token: exit %d, want 1:\n%s", code, errs)
	}

	id = create("token", "create", "ci", "--role", "operator")
	if code, out, errs := invoke(t, "token", "revoke", "ci"); code != 0 || !strings.Contains(out, "token ci ("+id+", role operator) revoked") {
		t.Fatalf("token revoke ci: exit %d, %q / %q", code, out, errs)
	}
	if out := listed("token", "list"); strings.Contains(out, id) {
		t.Fatalf("token ci still listed after its revocation:\n%s", out)
	}
}

// In agent.toml, a key that takes a list of names (name, label) also takes
// one string.
func TestAgentConfigListOrOne(t *testing.T) {
	tests := []struct {
		name, config, want string
	}{
		// The label is read only once the names are: its error shows that
		// name = "web-1" was taken.
		{"one name, one bad label", "env = \"prod\"\nname = \"web-1\"\nlabel = \"nokv\"\n", `--label "nokv": want KEY=VALUE`},
		{"one bad name", "env = \"prod\"\nname = \"Web 1!\"\n", "--name"},
		{"a list with a bad label", "env = \"prod\"\nname = [\"web-1\", \"web-2\"]\nlabel = [\"role=web\", \"nokv\"]\n", `--label "nokv"`},
		{"a number", "env = \"prod\"\nname = 3\n", "want a string or a list of strings"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			config := filepath.Join(t.TempDir(), "agent.toml")
			if err := os.WriteFile(config, []byte(tt.config), 0o600); err != nil {
				t.Fatal(err)
			}
			code, _, errs := invoke(t, "agent", "run", "--config", config, "--state-dir", t.TempDir())
			if code != exitUsage || !strings.Contains(errs, tt.want) || strings.Contains(errs, "[]interface") {
				t.Fatalf("exit %d, want %d and %q:\n%s", code, exitUsage, tt.want, errs)
			}
		})
	}
}

// `tether agent delete` forgets the agent and removes its inbox, after a
// confirmation; other agents stay.
func TestAgentDelete(t *testing.T) {
	a := newTestAPI(t)
	ctx := context.Background()
	for _, n := range []string{"web-1", "web-2"} {
		if err := a.st.UpsertAgent(ctx, record.Agent{Env: "prod", Name: n, State: record.AgentAccepted, PublicKey: make([]byte, 32)}); err != nil {
			t.Fatal(err)
		}
		if err := a.bus.DeclareInbox(ctx, "prod", n); err != nil {
			t.Fatal(err)
		}
	}
	known := func(name string) bool {
		_, err := a.st.GetAgent(ctx, "prod", name)
		return err == nil
	}
	if code, _, errs := invokeOn(t, "", false, "agent", "delete", "web-1"); code != exitUsage || !strings.Contains(errs, "pass --yes") || !known("web-1") {
		t.Fatalf("without a terminal or --yes: exit %d, want 2 and kept\n%s", code, errs)
	}
	if code, _, errs := invokeOn(t, "no\n", true, "agent", "delete", "web-1"); code != exitFailed || !known("web-1") {
		t.Fatalf("not confirmed: exit %d, want 1 and kept\n%s", code, errs)
	}
	code, out, errs := invokeOn(t, "web-1\n", true, "agent", "delete", "web-1")
	if code != 0 || !strings.Contains(out, "agent web-1 deleted (it was accepted)") || known("web-1") {
		t.Fatalf("confirmed: exit %d, known %v\n%s%s", code, known("web-1"), out, errs)
	}
	if a.hasInbox(t, "prod", "web-1") {
		t.Fatal("the deleted agent's inbox is still on the bus")
	}
	if !known("web-2") || !a.hasInbox(t, "prod", "web-2") {
		t.Fatal("the other agent, or its inbox, went too")
	}
	if code, _, errs := invokeOn(t, "", false, "agent", "delete", "web-1", "--yes"); code != exitFailed || !strings.Contains(errs, "web-1") {
		t.Fatalf("delete an unknown agent: exit %d, want 1 naming it\n%s", code, errs)
	}
	var v api.AgentView
	code, out, errs = invokeOn(t, "", false, "agent", "delete", "web-2", "--yes", "-o", "json")
	if code != 0 || json.Unmarshal([]byte(out), &v) != nil || v.Name != "web-2" {
		t.Fatalf("--yes -o json: exit %d\n%s%s", code, out, errs)
	}
}

// `tether agent list` and `agent show` say why an agent is not accepted
// (the note the server records on its hello).
func TestAgentListShowsNote(t *testing.T) {
	a := newTestAPI(t)
	const note = "enrollment token refused (unknown or revoked enrollment token): waiting for an operator to accept it"
	if err := a.st.UpsertAgent(context.Background(), record.Agent{Env: "prod", Name: "web-9", PublicKey: make([]byte, 32), Note: note}); err != nil {
		t.Fatal(err)
	}
	code, out, errs := invoke(t, "agent", "list")
	if code != 0 || !strings.Contains(out, "NOTE") || !strings.Contains(out, note) {
		t.Fatalf("agent list: exit %d, want the note\n%s%s", code, out, errs)
	}
	if code, out, _ := invoke(t, "agent", "show", "web-9"); code != 0 || !strings.Contains(out, "note        "+note) {
		t.Fatalf("agent show: exit %d, want the note\n%s", code, out)
	}
	var views []api.AgentView
	if code, out, _ := invoke(t, "agent", "list", "-o", "json"); code != 0 || json.Unmarshal([]byte(out), &views) != nil || len(views) != 1 || views[0].Note != note {
		t.Fatalf("agent list -o json: exit %d, %s", code, out)
	}
	if _, err := a.srv.AgentAction(context.Background(), "prod", "web-9", record.AgentAccept); err != nil {
		t.Fatal(err)
	}
	if code, out, _ := invoke(t, "agent", "list"); code != 0 || strings.Contains(out, "waiting for an operator") {
		t.Fatalf("an accepted agent still shows why it was not: %s", out)
	}
}

// `tether agent accept --all-pending` enrolls no flood: beyond 10 pending
// agents it wants --max, accepts none when more wait than --max says, and
// shows them; --dry-run shows them and accepts none.
func TestAcceptAllPendingIsBounded(t *testing.T) {
	a := newTestAPI(t)
	for i := range 12 {
		a.pendingAgent(t, fmt.Sprintf("ghost-%02d", i))
	}
	pending := func() int {
		t.Helper()
		n, err := a.st.CountAgents(context.Background(), "prod", record.AgentPending)
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	code, out, errs := invoke(t, "agent", "accept", "--all-pending")
	if code != 1 || !strings.Contains(errs, "12 agents wait for acceptance, none accepted") || !strings.Contains(errs, "pass --max 12") ||
		!strings.Contains(out, "ghost-00") || !strings.Contains(out, "ghost-11") || !strings.Contains(out, "FIRST SEEN") {
		t.Fatalf("accept --all-pending with 12 pending: exit %d, want 1, the agents shown and --max asked for\n%s%s", code, out, errs)
	}
	if n := pending(); n != 12 {
		t.Fatalf("%d pending after a refused --all-pending, want 12", n)
	}
	code, out, errs = invoke(t, "agent", "accept", "--all-pending", "--max", "11")
	if code != 1 || !strings.Contains(errs, "more than the 11 you expected") {
		t.Fatalf("accept --all-pending --max 11 with 12 pending: exit %d, want 1 and the count named\n%s%s", code, out, errs)
	}
	code, out, errs = invoke(t, "agent", "accept", "--all-pending", "--max", "20", "--dry-run", "-o", "json")
	var views []api.AgentView
	if code != 0 || json.Unmarshal([]byte(out), &views) != nil || len(views) != 12 || pending() != 12 {
		t.Fatalf("accept --all-pending --dry-run: exit %d, %d agents listed, %d pending; want 0, 12, 12\n%s%s", code, len(views), pending(), out, errs)
	}
	code, out, errs = invoke(t, "agent", "accept", "--all-pending", "--max", "12")
	if code != 0 || strings.Count(out, ": accepted") != 12 || pending() != 0 {
		t.Fatalf("accept --all-pending --max 12: exit %d, %d pending left\n%s%s", code, pending(), out, errs)
	}
	for _, args := range [][]string{{"agent", "accept", "web", "--max", "3"}, {"agent", "accept", "--all-pending", "--max", "0"}} {
		if code, _, errs := invoke(t, args...); code != exitUsage {
			t.Fatalf("tether %s: exit %d, want %d\n%s", strings.Join(args, " "), code, exitUsage, errs)
		}
	}
}
