package directory

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/tetherhq/tether/agent/handler"
	"github.com/tetherhq/tether/agent/handler/handlertest"
	"github.com/tetherhq/tether/agent/target/ssh/sshtest"
	"github.com/tetherhq/tether/model"
)

func res(path string, attrs model.Attributes) model.Resource {
	return handlertest.PathResource(Kind, path, attrs)
}

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
		// The local host, and this machine reached over SSH (agentless).
		Targets: sshtest.Targets(t),
		Cases: []handlertest.Case{
			{
				Name:     "create",
				Resource: res("/srv", model.Attributes{"mode": "0750"}),
				Update:   new(res("/srv", model.Attributes{"mode": "0700"})),
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

// recurse = true removes the directory with what it holds; a link inside is
// removed, not followed.
func TestPurgeRecursive(t *testing.T) {
	root, outside := t.TempDir(), t.TempDir()
	mkdir(t, filepath.Join(root, "full"), 0o755)
	mkdir(t, filepath.Join(root, "full", "sub"), 0o700)
	keep := filepath.Join(outside, "keep")
	for _, f := range []string{filepath.Join(root, "full", "f"), filepath.Join(root, "full", "sub", "g"), keep} {
		if err := os.WriteFile(f, []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink(outside, filepath.Join(root, "full", "link")); err != nil {
		t.Fatal(err)
	}
	h := New(handler.Runtime{Root: root})
	r := res("/full", model.Attributes{"recurse": true})
	r.Purged = true
	if err := h.Validate(&r); err != nil {
		t.Fatalf("a purged directory with recurse is refused: %v", err)
	}
	ctx := context.Background()
	cur, exists, err := h.Read(ctx, &r)
	if err != nil || !exists {
		t.Fatalf("Read = %v, %v", exists, err)
	}
	if err := h.Apply(ctx, &r, cur, handler.ComputeChanges(&r, cur, exists)); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(filepath.Join(root, "full")); !os.IsNotExist(err) {
		t.Fatalf("the directory is still there: %v", err)
	}
	if _, err := os.Stat(keep); err != nil {
		t.Fatalf("purging followed a link out of the directory: %v", err)
	}
	if _, exists, err := h.Read(ctx, &r); err != nil || exists {
		t.Fatalf("after purge Read = %v, %v", exists, err)
	}

	// Managed (not purged) with recurse set, the directory converges: the
	// attribute says how to purge, it is no state to change.
	kept := res("/kept", model.Attributes{"recurse": true, "mode": "0755"})
	cur, exists, _ = h.Read(ctx, &kept)
	if err := h.Apply(ctx, &kept, cur, handler.ComputeChanges(&kept, cur, exists)); err != nil {
		t.Fatal(err)
	}
	cur, exists, _ = h.Read(ctx, &kept)
	if c := handler.ComputeChanges(&kept, cur, exists); len(c) > 0 {
		t.Fatalf("a created directory with recurse still differs: %v", c)
	}

	// Other attributes stay refused on a purged directory; / is never removed.
	bad := res("/full", model.Attributes{"recurse": true, "mode": "0755"})
	bad.Purged = true
	if err := h.Validate(&bad); err == nil || !strings.Contains(err.Error(), "remove mode") {
		t.Fatalf("purged directory with a mode: %v", err)
	}
	slash := res("/", model.Attributes{"recurse": true})
	slash.Purged = true
	if err := h.Apply(ctx, &slash, model.Attributes{"path": "/"}, handler.Changes{model.AttrPresent: {Current: true, Desired: false}}); !errors.Is(err, handler.ErrInvalid) {
		t.Fatalf("recursive purge of / (the root): %v", err)
	}
	if _, err := os.Stat(root); err != nil {
		t.Fatalf("the root is gone: %v", err)
	}
}

// A parent directory that is a link out of the root is refused; one inside
// the root is followed.
func TestParentLinkOutOfTheRoot(t *testing.T) {
	root, outside := t.TempDir(), t.TempDir()
	if err := os.Symlink(outside, filepath.Join(root, "away")); err != nil {
		t.Fatal(err)
	}
	mkdir(t, filepath.Join(root, "real"), 0o755)
	if err := os.Symlink("real", filepath.Join(root, "inside")); err != nil {
		t.Fatal(err)
	}
	h := New(handler.Runtime{Root: root})
	ctx := context.Background()
	r := res("/away/d", nil)
	if _, _, err := h.Read(ctx, &r); !errors.Is(err, handler.ErrOutsideRoot) {
		t.Fatalf("Read through a link out of the root: %v, want ErrOutsideRoot", err)
	}
	if err := h.Apply(ctx, &r, nil, handler.Changes{model.AttrPresent: {Current: false, Desired: true}}); !errors.Is(err, handler.ErrOutsideRoot) {
		t.Fatalf("Apply through a link out of the root: %v, want ErrOutsideRoot", err)
	}
	if _, err := os.Stat(filepath.Join(outside, "d")); !os.IsNotExist(err) {
		t.Fatalf("a directory was created outside the root: %v", err)
	}
	in := res("/inside/d", nil)
	cur, exists, err := h.Read(ctx, &in)
	if err != nil {
		t.Fatal(err)
	}
	if err := h.Apply(ctx, &in, cur, handler.ComputeChanges(&in, cur, exists)); err != nil {
		t.Fatalf("a link inside the root: %v", err)
	}
	if _, err := os.Stat(filepath.Join(root, "real", "d")); err != nil {
		t.Fatal(err)
	}
}
