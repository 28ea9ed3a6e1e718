package cron

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tetherhq/tether/agent/handler"
	"github.com/tetherhq/tether/agent/handler/handlertest"
	"github.com/tetherhq/tether/agent/target/ssh/sshtest"
	"github.com/tetherhq/tether/model"
)

func res(name string, attrs model.Attributes) model.Resource {
	return handlertest.NamedResource(Kind, name, attrs)
}

func cronDir(t *testing.T, root string) {
	if err := os.MkdirAll(filepath.Join(root, Dir), 0o755); err != nil {
		t.Fatal(err)
	}
}

func TestConformance(t *testing.T) {
	entryIs := func(want string) func(t *testing.T, root string, r *model.Resource) {
		return func(t *testing.T, root string, r *model.Resource) {
			b, err := os.ReadFile(filepath.Join(root, Path(r.ID.Value)))
			if err != nil {
				t.Fatal(err)
			}
			lines := strings.Split(strings.TrimSpace(string(b)), "\n")
			if last := lines[len(lines)-1]; last != want {
				t.Fatalf("entry line %q, want %q", last, want)
			}
			if info, _ := os.Stat(filepath.Join(root, Path(r.ID.Value))); info.Mode().Perm() != 0o644 {
				t.Fatalf("mode %v: cron skips group- or world-writable files", info.Mode())
			}
		}
	}
	handlertest.Run(t, handlertest.Suite{
		New: func(rt handler.Runtime) handler.Handler { return New(rt) },
		// The local host, and this machine reached over SSH (agentless).
		Targets: sshtest.Targets(t),
		Cases: []handlertest.Case{
			{
				Name:     "an entry, then another schedule and user",
				Setup:    cronDir,
				Resource: res("backup", model.Attributes{"command": "/usr/local/bin/backup --all", "schedule": "*/15 2-4 * * *", "env": map[string]any{"MAILTO": "", "PATH": "/usr/bin:/bin"}}),
				Update:   new(res("backup", model.Attributes{"command": "/usr/local/bin/backup --all", "schedule": "@daily", "user": "nobody", "env": map[string]any{"MAILTO": "ops@example.com", "PATH": "/usr/bin:/bin"}})),
				Check: func(t *testing.T, root string, r *model.Resource) {
					want := "*/15 2-4 * * * root /usr/local/bin/backup --all"
					if r.Attributes["schedule"] == "@daily" {
						want = "@daily nobody /usr/local/bin/backup --all"
					}
					entryIs(want)(t, root, r)
				},
			},
			{
				Name: "a hand-edited file is rewritten",
				Setup: func(t *testing.T, root string) {
					cronDir(t, root)
					if err := os.WriteFile(filepath.Join(root, Path("rotate")), []byte("# mine\n0 1 * * * root /bin/rotate\n5 1 * * * root /bin/extra\n"), 0o666); err != nil {
						t.Fatal(err)
					}
				},
				Resource: res("rotate", model.Attributes{"command": "/bin/rotate", "schedule": "0 1 * * *"}),
				Check:    entryIs("0 1 * * * root /bin/rotate"),
			},
		},
		Invalid: []handlertest.Invalid{
			{Name: "four fields", Resource: res("x", model.Attributes{"command": "true", "schedule": "* * * *"})},
			{Name: "dotted name", Resource: res(".x", model.Attributes{"command": "true", "schedule": "@daily"})},
			{Name: "two-line command", Resource: res("x", model.Attributes{"command": "a\nb", "schedule": "@daily"})},
			{Name: "no schedule", Resource: res("x", model.Attributes{"command": "true"})},
		},
	})
}

// A drifted file names what drifted.
func TestReadNamesTheDrift(t *testing.T) {
	root := t.TempDir()
	cronDir(t, root)
	h := New(handler.Runtime{Root: root})
	r := res("job", model.Attributes{"command": "/bin/job", "schedule": "@hourly"})
	if err := os.WriteFile(filepath.Join(root, Path("job")), []byte("@hourly root /bin/other\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cur, exists, err := h.Read(t.Context(), &r)
	if err != nil || !exists {
		t.Fatal(exists, err)
	}
	ch := handler.ComputeChanges(&r, cur, exists)
	if len(ch) != 1 || ch["command"].Current != "/bin/other" {
		t.Fatalf("changes %v, want the command only", ch)
	}
}
