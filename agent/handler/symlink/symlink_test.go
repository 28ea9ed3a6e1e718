package symlink

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tetherhq/tether/agent/handler"
	"github.com/tetherhq/tether/agent/handler/handlertest"
	"github.com/tetherhq/tether/agent/target/ssh/sshtest"
	"github.com/tetherhq/tether/model"
)

func res(path, target string) model.Resource {
	return handlertest.PathResource(Kind, path, model.Attributes{"target": target})
}

// checkLink asserts the link exists and points where the resource says.
func checkLink(t *testing.T, root string, r *model.Resource) {
	t.Helper()
	got, err := os.Readlink(filepath.Join(root, r.ID.Value))
	if err != nil {
		t.Fatal(err)
	}
	if want := r.Attributes["target"].(string); got != want {
		t.Fatalf("%s points at %q, want %q", r.ID.Value, got, want)
	}
}

func TestConformance(t *testing.T) {
	handlertest.Run(t, handlertest.Suite{
		New: func(rt handler.Runtime) handler.Handler { return New(rt) },
		// The local host, and this machine reached over SSH (agentless).
		Targets: sshtest.Targets(t),
		Cases: []handlertest.Case{
			{
				Name:     "create, then point elsewhere",
				Resource: res("/current", "releases/1"),
				Update:   new(res("/current", "/opt/app/releases/2")),
				Check:    checkLink,
			},
			{
				Name: "existing link to another target",
				Setup: func(t *testing.T, root string) {
					if err := os.Symlink("old", filepath.Join(root, "link")); err != nil {
						t.Fatal(err)
					}
				},
				Resource: res("/link", "new"),
				Check:    checkLink,
			},
			{
				Name:     "dangling target is fine",
				Resource: res("/dangling", "/does/not/exist"),
				Check:    checkLink,
			},
		},
		Invalid: []handlertest.Invalid{
			{Name: "no target", Resource: handlertest.PathResource(Kind, "/x", nil)},
			{Name: "relative path", Resource: handlertest.PathResource(Kind, "x", model.Attributes{"target": "y"})},
		},
	})
}

// A regular file where the link should be is reported, not replaced; a
// purge removes the link and never what it points at.
func TestLeavesOtherThingsAlone(t *testing.T) {
	root := t.TempDir()
	h := New(handler.Runtime{Root: root})
	ctx := context.Background()
	if err := os.WriteFile(filepath.Join(root, "data"), []byte("keep"), 0o644); err != nil {
		t.Fatal(err)
	}
	r := res("/data", "elsewhere")
	if _, _, err := h.Read(ctx, &r); err == nil || !strings.Contains(err.Error(), "not a symbolic link") {
		t.Fatalf("Read over a regular file: %v", err)
	}
	if err := h.Apply(ctx, &r, nil, handler.ComputeChanges(&r, nil, false)); err == nil {
		t.Fatal("Apply replaced a regular file with a link")
	}
	if b, _ := os.ReadFile(filepath.Join(root, "data")); string(b) != "keep" {
		t.Fatalf("the file now holds %q", b)
	}

	link := res("/to-data", "data")
	if err := h.Apply(ctx, &link, nil, handler.ComputeChanges(&link, nil, false)); err != nil {
		t.Fatal(err)
	}
	purged := link
	purged.Purged = true
	cur, exists, err := h.Read(ctx, &purged)
	if err != nil || !exists {
		t.Fatalf("Read of the link: %v, %v", exists, err)
	}
	if err := h.Apply(ctx, &purged, cur, handler.ComputeChanges(&purged, cur, exists)); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(filepath.Join(root, "to-data")); !os.IsNotExist(err) {
		t.Fatalf("the link is still there: %v", err)
	}
	if b, _ := os.ReadFile(filepath.Join(root, "data")); string(b) != "keep" {
		t.Fatalf("purging the link touched its target: %q", b)
	}
}
