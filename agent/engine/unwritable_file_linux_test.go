package engine

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rs/zerolog"

	"github.com/tetherhq/tether/agent/handler"
	"github.com/tetherhq/tether/agent/handler/builtin"
	"github.com/tetherhq/tether/agent/handler/handlertest"
	"github.com/tetherhq/tether/model"
)

// TestUnwritableFile: a file the agent may not write fails with the OS error,
// its dependants are skipped, everything else is deployed.
func TestUnwritableFile(t *testing.T) {
	root := t.TempDir()
	locked := filepath.Join(root, "locked")
	if err := os.Mkdir(locked, 0o755); err != nil {
		t.Fatal(err)
	}
	how := handlertest.MakeUnwritable(t, locked)
	reg, _ := builtin.Registry(handler.Runtime{Root: root})
	e := New(reg, zerolog.Nop())

	bad := model.Resource{ID: model.MustParseID("file[a,path=/locked/f]"), Attributes: model.Attributes{"path": "/locked/f", "content": "x"}}
	after := model.Resource{ID: model.MustParseID("file[a,path=/after]"), Attributes: model.Attributes{"path": "/after", "content": "x"}, Requires: []model.ID{bad.ID}}
	rs := append(sampleSite("a"), bad, after)
	results, err := e.Run(context.Background(), rs, Options{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	got := map[model.ID]Result{}
	for _, r := range results {
		got[r.ID] = r
	}
	t.Logf("%s: %s", how.How, got[bad.ID].Message)
	if r := got[bad.ID]; r.State != model.StateFailed || !strings.Contains(r.Message, how.WantErr) || !strings.Contains(r.Message, "/locked/f") {
		t.Fatalf("unwritable file (%s): state %s message %q, want failed with %q", how.How, r.State, r.Message, how.WantErr)
	}
	if r := got[after.ID]; r.State != model.StateSkipped || !strings.Contains(r.Message, bad.ID.String()) {
		t.Fatalf("dependant: state %s message %q, want skipped naming %s", r.State, r.Message, bad.ID)
	}
	for _, r := range sampleSite("a") {
		if got[r.ID].State != model.StateDeployed {
			t.Fatalf("%s: %s %s, want deployed", r.ID, got[r.ID].State, got[r.ID].Message)
		}
	}
}
