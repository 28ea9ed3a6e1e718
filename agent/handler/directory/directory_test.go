package directory

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/tetherhq/tether/agent/handler"
	"github.com/tetherhq/tether/agent/handler/handlertest"
	"github.com/tetherhq/tether/model"
)

func res(path string, attrs model.Attributes) model.Resource {
	return handlertest.PathResource(Kind, path, attrs)
}

func ptr(r model.Resource) *model.Resource { return &r }

func checkDir(t *testing.T, root string, r *model.Resource) {
	t.Helper()
	info, err := os.Lstat(filepath.Join(root, r.ID.Value))
	if err != nil {
		t.Fatal(err)
	}
	if !info.IsDir() {
		t.Fatalf("%s is %v, want a directory", r.ID.Value, info.Mode())
	}
	if want, ok := r.Attributes["mode"].(string); ok {
		m, _ := model.ParseMode(want)
		if got := uint32(info.Mode().Perm()); got != m&0o777 {
			t.Fatalf("mode %o, want %o", got, m)
		}
	}
}

func TestConformance(t *testing.T) {
	handlertest.Run(t, handlertest.Suite{
		New: func(rt handler.Runtime) handler.Handler { return New(rt) },
		Cases: []handlertest.Case{
			{
				Name:     "create",
				Resource: res("/srv", model.Attributes{"mode": "0750"}),
				Update:   ptr(res("/srv", model.Attributes{"mode": "0700"})),
				Check:    checkDir,
			},
			{
				Name:     "create with unmanaged mode",
				Resource: res("/plain", nil),
				Check:    checkDir,
			},
			{
				Name:     "existing with other mode",
				Setup:    func(t *testing.T, root string) { mkdir(t, filepath.Join(root, "www"), 0o700) },
				Resource: res("/www", model.Attributes{"mode": "0755"}),
				Check:    checkDir,
			},
			{
				Name:     "sticky bit",
				Resource: res("/shared", model.Attributes{"mode": "1777"}),
				Check: func(t *testing.T, root string, r *model.Resource) {
					info, _ := os.Stat(filepath.Join(root, "shared"))
					if info.Mode()&os.ModeSticky == 0 {
						t.Fatalf("mode %v lacks the sticky bit", info.Mode())
					}
				},
			},
			{
				Name:     "owner",
				Resource: res("/owned", model.Attributes{"owner": strconv.Itoa(os.Getuid()), "group": strconv.Itoa(os.Getgid())}),
				Check:    checkDir,
			},
		},
		Invalid: []handlertest.Invalid{
			{Name: "relative", Resource: model.Resource{ID: model.ID{Type: Kind, Agent: "a", Key: "path", Value: "x"}, Attributes: model.Attributes{"path": "x"}}},
			{Name: "content is a file attribute", Resource: res("/x", model.Attributes{"content": "x"})},
			{Name: "bad mode", Resource: res("/x", model.Attributes{"mode": "0999"})},
		},
	})
}

func mkdir(t *testing.T, p string, mode os.FileMode) {
	t.Helper()
	if err := os.Mkdir(p, mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(p, mode); err != nil {
		t.Fatal(err)
	}
}

func TestPurgeNonEmpty(t *testing.T) {
	root := t.TempDir()
	mkdir(t, filepath.Join(root, "full"), 0o755)
	if err := os.WriteFile(filepath.Join(root, "full", "f"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	h := New(handler.Runtime{Root: root})
	r := res("/full", nil)
	r.Purged = true
	ctx := context.Background()
	cur, exists, err := h.Read(ctx, &r)
	if err != nil || !exists {
		t.Fatalf("Read = %v, %v", exists, err)
	}
	err = h.Apply(ctx, &r, cur, handler.ComputeChanges(&r, cur, exists))
	if err == nil || !strings.Contains(err.Error(), "not empty") {
		t.Fatalf("got %v, want a not-empty error", err)
	}
	if _, err := os.Stat(filepath.Join(root, "full", "f")); err != nil {
		t.Fatalf("purge of a non-empty directory removed its content: %v", err)
	}
}

func TestFileInTheWay(t *testing.T) {
	root := t.TempDir()
	if err := os.WriteFile(filepath.Join(root, "f"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	h := New(handler.Runtime{Root: root})
	r := res("/f", nil)
	if _, _, err := h.Read(context.Background(), &r); err == nil || !strings.Contains(err.Error(), "not a directory") {
		t.Fatalf("got %v, want a not-a-directory error", err)
	}
}

func TestMissingParent(t *testing.T) {
	h := New(handler.Runtime{Root: t.TempDir()})
	r := res("/a/b", nil)
	ctx := context.Background()
	cur, exists, _ := h.Read(ctx, &r)
	err := h.Apply(ctx, &r, cur, handler.ComputeChanges(&r, cur, exists))
	if err == nil || !strings.Contains(err.Error(), "parent directory") {
		t.Fatalf("got %v, want a parent-directory error", err)
	}
}
