package cli

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/tetherhq/tether/model/lang"
	"github.com/tetherhq/tether/server/record"
)

// An agent labelled role=web that the server accepted is in what `tether
// compile --server` and `tether export` compile against, without an
// inventory file; a pending one is not. The output of `tether agent list
// -o json` reads back as an inventory and compiles the same.
func TestCompileAgainstTheLiveInventory(t *testing.T) {
	ctx := context.Background()
	st, url, secret := apiServer(t, nil)
	for _, ag := range []record.Agent{
		{Env: "prod", Name: "web-1", State: record.AgentAccepted, Labels: map[string]string{"role": "web", "zone": "eu-1"},
			Facts: map[string]any{"ipv4": "10.0.1.11", "os": map[string]any{"family": "debian"}}},
		{Env: "prod", Name: "web-2", State: record.AgentPending, Labels: map[string]string{"role": "web", "zone": "eu-2"}},
		{Env: "prod", Name: "lb-1", State: record.AgentAccepted, Facts: map[string]any{"ipv4": "10.0.0.2"}},
	} {
		ag.LastSeen = time.Now()
		if err := st.UpsertAgent(ctx, ag); err != nil {
			t.Fatal(err)
		}
	}
	t.Setenv("TETHER_TOKEN", secret)
	t.Setenv("TETHER_ENV", "prod")
	webfarm := filepath.Join("..", "examples", "webfarm")
	agentsOf := func(t *testing.T, args ...string) []string {
		t.Helper()
		code, stdout, stderr := invoke(t, append([]string{"compile", webfarm, "-o", "json"}, args...)...)
		if code != 0 {
			t.Fatalf("compile %v: exit %d: %s", args, code, stderr)
		}
		var res lang.Result
		if err := json.Unmarshal([]byte(stdout), &res); err != nil {
			t.Fatal(err)
		}
		var agents []string
		for _, r := range res.Resources {
			if !slices.Contains(agents, r.ID.Agent) {
				agents = append(agents, r.ID.Agent)
			}
		}
		slices.Sort(agents)
		return agents
	}
	want := []string{"lb-1", "web-1"}
	if got := agentsOf(t, "--server", url); !slices.Equal(got, want) {
		t.Fatalf("compile --server: resources for %v, want %v", got, want)
	}
	// Without --server (nor TETHER_SERVER) compile stays local: no agent.
	if got := agentsOf(t); slices.Contains(got, "web-1") {
		t.Fatalf("compile without --server compiled for %v", got)
	}

	t.Setenv("TETHER_SERVER", url)
	code, stdout, stderr := invoke(t, "agent", "list", "-o", "json")
	if code != 0 {
		t.Fatalf("agent list: exit %d: %s", code, stderr)
	}
	list := filepath.Join(t.TempDir(), "agents.json")
	if err := os.WriteFile(list, []byte(stdout), 0o600); err != nil {
		t.Fatal(err)
	}
	if got := agentsOf(t, "--inventory", list); !slices.Equal(got, want) {
		t.Fatalf("compile --inventory (agent list -o json): resources for %v, want %v", got, want)
	}

	if code, _, stderr := invoke(t, "export", webfarm); code != 0 {
		t.Fatalf("export: exit %d: %s", code, stderr)
	}
	v, err := st.LatestVersion(ctx, "prod")
	if err != nil {
		t.Fatal(err)
	}
	slice, err := st.AgentSlice(ctx, "prod", v.Number, "web-1")
	if err != nil || len(slice.Resources) == 0 {
		t.Fatalf("the exported version holds %d resources for web-1 (%v), want the web farm's", len(slice.Resources), err)
	}
	if s, err := st.AgentSlice(ctx, "prod", v.Number, "web-2"); err != nil || len(s.Resources) != 0 {
		t.Fatalf("the exported version holds %d resources for the pending web-2 (%v)", len(s.Resources), err)
	}
}
