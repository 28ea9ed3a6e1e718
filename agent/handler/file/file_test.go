package file

import (
	"context"
	"errors"
	"os"
	"os/user"
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

func write(t *testing.T, p, content string, mode os.FileMode) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(p, mode); err != nil {
		t.Fatal(err)
	}
}

// checkFile asserts content and mode on disk, below the root.
func checkFile(t *testing.T, root string, r *model.Resource) {
	t.Helper()
	p := filepath.Join(root, r.ID.Value)
	info, err := os.Lstat(p)
	if err != nil {
		t.Fatal(err)
	}
	if !info.Mode().IsRegular() {
		t.Fatalf("%s is %v, want a regular file", p, info.Mode())
	}
	if want, ok := r.Attributes["content"].(string); ok {
		got, _ := os.ReadFile(p)
		if string(got) != want {
			t.Fatalf("content %q, want %q", got, want)
		}
	}
	if want, ok := r.Attributes["mode"].(string); ok {
		m, _ := model.ParseMode(want)
		if got := uint32(info.Mode().Perm()); got != m&0o777 {
			t.Fatalf("mode %o, want %o", got, m)
		}
	}
	leftovers, _ := filepath.Glob(filepath.Join(filepath.Dir(p), ".*.tether-*"))
	if len(leftovers) > 0 {
		t.Fatalf("temporary files left behind: %v", leftovers)
	}
}

func TestConformance(t *testing.T) {
	uid := strconv.Itoa(os.Getuid())
	gid := strconv.Itoa(os.Getgid())
	me, err := user.Current()
	if err != nil {
		t.Fatal(err)
	}
	handlertest.Run(t, handlertest.Suite{
		New: func(rt handler.Runtime) handler.Handler { return New(rt) },
		// The local host, and this machine reached over SSH (agentless).
		Targets: sshtest.Targets(t),
		Cases: []handlertest.Case{
			{
				Name:     "create",
				Resource: res("/motd", model.Attributes{"content": "hello\n", "mode": "0640"}),
				Update:   new(res("/motd", model.Attributes{"content": "bye\n", "mode": "0600"})),
				Check:    checkFile,
			},
			{
				Name:     "replace content keeps unmanaged mode",
				Setup:    func(t *testing.T, root string) { write(t, filepath.Join(root, "etc/x.conf"), "old", 0o600) },
				Resource: res("/etc/x.conf", model.Attributes{"content": "new"}),
				Check: func(t *testing.T, root string, r *model.Resource) {
					checkFile(t, root, r)
					info, _ := os.Stat(filepath.Join(root, "etc/x.conf"))
					if info.Mode().Perm() != 0o600 {
						t.Fatalf("mode %v, want the replaced file's 0600", info.Mode().Perm())
					}
				},
			},
			{
				Name:     "mode only, content unmanaged",
				Setup:    func(t *testing.T, root string) { write(t, filepath.Join(root, "x"), "keep me", 0o644) },
				Resource: res("/x", model.Attributes{"mode": "600"}),
				Check: func(t *testing.T, root string, r *model.Resource) {
					checkFile(t, root, r)
					if b, _ := os.ReadFile(filepath.Join(root, "x")); string(b) != "keep me" {
						t.Fatalf("unmanaged content changed to %q", b)
					}
				},
			},
			{
				Name:     "owner and group by number",
				Resource: res("/owned", model.Attributes{"content": "x", "owner": uid, "group": gid}),
				Check:    checkFile,
			},
			{
				Name:     "owner by name",
				Resource: res("/named", model.Attributes{"content": "x", "owner": me.Username}),
				Check:    checkFile,
			},
			{
				Name:     "empty content",
				Setup:    func(t *testing.T, root string) { write(t, filepath.Join(root, "e"), "not empty", 0o644) },
				Resource: res("/e", model.Attributes{"content": ""}),
				Check:    checkFile,
			},
			{
				Name: "symlink in the way is replaced, its target untouched",
				Setup: func(t *testing.T, root string) {
					write(t, filepath.Join(root, "target"), "target", 0o644)
					if err := os.Symlink(filepath.Join(root, "target"), filepath.Join(root, "link")); err != nil {
						t.Fatal(err)
					}
				},
				Resource: res("/link", model.Attributes{"content": "real file"}),
				Check: func(t *testing.T, root string, r *model.Resource) {
					checkFile(t, root, r)
					if b, _ := os.ReadFile(filepath.Join(root, "target")); string(b) != "target" {
						t.Fatalf("symlink target was written through: %q", b)
					}
				},
			},
			{
				Name:     "large content",
				Resource: res("/big", model.Attributes{"content": strings.Repeat("0123456789abcdef", 10000)}),
				Check:    checkFile,
			},
		},
		Invalid: []handlertest.Invalid{
			{Name: "relative path", Resource: model.Resource{ID: model.ID{Type: Kind, Agent: "a", Key: "path", Value: "etc/x"}, Attributes: model.Attributes{"path": "etc/x"}}},
			{Name: "dot-dot", Resource: res("/etc/../x", nil)},
			{Name: "unknown attribute", Resource: res("/x", model.Attributes{"colour": "red"})},
			{Name: "bad mode", Resource: res("/x", model.Attributes{"mode": "rwx"})},
			{Name: "numeric content", Resource: res("/x", model.Attributes{"content": 12})},
			{Name: "wrong identity key", Resource: model.Resource{ID: model.ID{Type: Kind, Agent: "a", Key: "name", Value: "/x"}, Attributes: model.Attributes{"name": "/x"}}},
			{Name: "wrong type", Resource: model.Resource{ID: model.ID{Type: "directory", Agent: "a", Key: "path", Value: "/x"}, Attributes: model.Attributes{"path": "/x"}}},
			{Name: "purged with content", Resource: func() model.Resource {
				r := res("/x", model.Attributes{"content": "x"})
				r.Purged = true
				return r
			}()},
		},
	})
}

func TestFailures(t *testing.T) {
	ctx := context.Background()
	root := t.TempDir()
	h := New(handler.Runtime{Root: root})

	t.Run("missing parent", func(t *testing.T) {
		r := res("/no/such/dir/f", model.Attributes{"content": "x"})
		cur, exists, err := h.Read(ctx, &r)
		if err != nil || exists {
			t.Fatalf("Read = %v, %v", exists, err)
		}
		err = h.Apply(ctx, &r, cur, handler.ComputeChanges(&r, cur, exists))
		if err == nil || !strings.Contains(err.Error(), "parent directory") || !strings.Contains(err.Error(), "directory resource") {
			t.Fatalf("got %v, want an error naming the missing parent and what to do", err)
		}
	})

	t.Run("directory in the way", func(t *testing.T) {
		if err := os.Mkdir(filepath.Join(root, "d"), 0o755); err != nil {
			t.Fatal(err)
		}
		r := res("/d", model.Attributes{"content": "x"})
		if _, _, err := h.Read(ctx, &r); err == nil || !strings.Contains(err.Error(), "is a directory") {
			t.Fatalf("got %v, want an is-a-directory error", err)
		}
	})

	t.Run("unknown owner", func(t *testing.T) {
		r := res("/o", model.Attributes{"content": "x", "owner": "no-such-user-tether"})
		cur, exists, _ := h.Read(ctx, &r)
		err := h.Apply(ctx, &r, cur, handler.ComputeChanges(&r, cur, exists))
		if err == nil || !strings.Contains(err.Error(), "no-such-user-tether") {
			t.Fatalf("got %v, want an error naming the user", err)
		}
		if _, err := os.Lstat(filepath.Join(root, "o")); !os.IsNotExist(err) {
			t.Fatalf("a failed apply left a file behind: %v", err)
		}
	})
}

func TestRootPrefix(t *testing.T) {
	root := t.TempDir()
	h := New(handler.Runtime{Root: root})
	r := res("/inside", model.Attributes{"content": "x"})
	cur, exists, _ := h.Read(context.Background(), &r)
	if err := h.Apply(context.Background(), &r, cur, handler.ComputeChanges(&r, cur, exists)); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "inside")); err != nil {
		t.Fatalf("file not written below the root: %v", err)
	}
	if _, err := os.Stat("/inside"); err == nil {
		t.Fatal("file written outside the root")
	}
}

// A parent directory that is a symbolic link out of the root (absolute, or
// relative and climbing) is refused for reading and writing, and nothing is
// written where it points; a link that stays inside the root is followed.
func TestParentLinkOutOfTheRoot(t *testing.T) {
	root, outside := t.TempDir(), t.TempDir()
	secret := filepath.Join(outside, "secret")
	if err := os.WriteFile(secret, []byte("outside"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(root, "etc"), 0o755); err != nil {
		t.Fatal(err)
	}
	rel, err := filepath.Rel(filepath.Join(root, "etc"), outside)
	if err != nil {
		t.Fatal(err)
	}
	for name, target := range map[string]string{"abs": outside, "rel": rel} {
		if err := os.Symlink(target, filepath.Join(root, "etc", name)); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink("etc", filepath.Join(root, "alias")); err != nil {
		t.Fatal(err)
	}
	h := New(handler.Runtime{Root: root})
	ctx := context.Background()
	for _, p := range []string{"/etc/abs/secret", "/etc/rel/secret", "/alias/abs/secret", "/etc/abs/new/deeper"} {
		r := res(p, model.Attributes{"content": "overwritten", "mode": "0644"})
		if _, _, err := h.Read(ctx, &r); !errors.Is(err, handler.ErrOutsideRoot) {
			t.Fatalf("Read %s: %v, want ErrOutsideRoot", p, err)
		}
		err := h.Apply(ctx, &r, nil, handler.ComputeChanges(&r, nil, false))
		if !errors.Is(err, handler.ErrOutsideRoot) || !strings.Contains(err.Error(), "remove the link") {
			t.Fatalf("Apply %s: %v, want ErrOutsideRoot telling what to do", p, err)
		}
	}
	if b, _ := os.ReadFile(secret); string(b) != "outside" {
		t.Fatalf("a file outside the root was written: %q", b)
	}
	in := res("/alias/f", model.Attributes{"content": "inside"})
	if err := h.Apply(ctx, &in, nil, handler.ComputeChanges(&in, nil, false)); err != nil {
		t.Fatalf("a link inside the root: %v", err)
	}
	if b, err := os.ReadFile(filepath.Join(root, "etc", "f")); err != nil || string(b) != "inside" {
		t.Fatalf("through a link inside the root: %q, %v", b, err)
	}
}
