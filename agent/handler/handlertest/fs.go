package handlertest

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tetherhq/tether/agent/handler"
)

// RunFS checks the file system of target (handler.FS) against the contract
// the path-based handlers rely on: atomic replaces that never follow a
// final link, exact modes and owners, the standard errors. Each check works
// below a fresh root, which it prepares and inspects with the os package.
func RunFS(t *testing.T, target Target) {
	type check struct {
		name string
		run  func(t *testing.T, fsys fsUnderTest)
	}
	checks := []check{
		{"lstat", checkLstat},
		{"write file", checkWriteFile},
		{"write file over a link", checkWriteOverLink},
		{"write file without a parent", checkWriteNoParent},
		{"same content", checkSameContent},
		{"symlink", checkSymlink},
		{"mkdir", checkMkdir},
		{"remove", checkRemove},
		{"remove all", checkRemoveAll},
		{"ownership and mode", checkMeta},
	}
	for _, c := range checks {
		t.Run(c.name, func(t *testing.T) {
			root := t.TempDir()
			rt := target.Runtime(t, root).WithFS()
			c.run(t, fsUnderTest{FS: rt.FS, root: root, timeResolution: target.TimeResolution})
		})
	}
}

// fsUnderTest is a target's FS and the root its check works below.
type fsUnderTest struct {
	handler.FS
	root           string
	timeResolution time.Duration
}

// at is name below the root.
func (f fsUnderTest) at(name string) string { return filepath.Join(f.root, name) }

// mustWrite writes a file below the root with the os package.
func mustWrite(t *testing.T, p, content string) {
	t.Helper()
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func checkLstat(t *testing.T, f fsUnderTest) {
	if _, err := f.Lstat(f.at("missing")); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("Lstat of nothing: got %v, want fs.ErrNotExist", err)
	}
	p := f.at("f")
	mustWrite(t, p, "hello")
	if err := os.Chmod(p, 0o640|fs.ModeSetgid); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("f", f.at("l")); err != nil {
		t.Fatal(err)
	}
	info, err := f.Lstat(p)
	if err != nil {
		t.Fatal(err)
	}
	st, err := os.Lstat(p)
	if err != nil {
		t.Fatal(err)
	}
	sys := st.Sys().(*syscall.Stat_t)
	want := handler.Info{Mode: st.Mode(), Size: 5, UID: sys.Uid, GID: sys.Gid, ModTime: st.ModTime().Truncate(f.timeResolution)}
	if !info.ModTime.Equal(want.ModTime) || info.Mode != want.Mode || info.Size != want.Size || info.UID != want.UID || info.GID != want.GID {
		t.Fatalf("Lstat: got %+v, want %+v", info, want)
	}
	if got := info.Perm(); got != 0o2640 {
		t.Fatalf("Perm: got %#o, want 0o2640", got)
	}
	if info, err := f.Lstat(f.at("l")); err != nil || info.Mode.Type() != fs.ModeSymlink {
		t.Fatalf("Lstat of a link: got %v, %v, want the link itself", info.Mode, err)
	}
	if info, err := f.Lstat(f.root); err != nil || !info.IsDir() {
		t.Fatalf("Lstat of a directory: got %v, %v", info.Mode, err)
	}
}

func checkWriteFile(t *testing.T, f fsUnderTest) {
	p := f.at("f")
	for i, content := range []string{"first", "second, longer"} {
		mode := fs.FileMode(0o600)
		if i == 1 {
			mode = 0o755 | fs.ModeSetuid // exact, whatever the umask
		}
		if err := f.WriteFile(p, strings.NewReader(content), mode, -1, -1); err != nil {
			t.Fatalf("WriteFile %d: %v", i, err)
		}
		b, err := f.ReadFile(p)
		if err != nil || string(b) != content {
			t.Fatalf("ReadFile after WriteFile %d: got %q, %v, want %q", i, b, err, content)
		}
		st, err := os.Lstat(p)
		if err != nil {
			t.Fatal(err)
		}
		if st.Mode() != mode {
			t.Fatalf("WriteFile %d: mode %v, want %v", i, st.Mode(), mode)
		}
		if sys := st.Sys().(*syscall.Stat_t); int(sys.Uid) != os.Geteuid() {
			t.Fatalf("WriteFile %d with uid -1: owner %d, want the process's %d", i, sys.Uid, os.Geteuid())
		}
	}
	if os.Geteuid() == 0 {
		if err := f.WriteFile(p, strings.NewReader("owned"), 0o644, 1, 2); err != nil {
			t.Fatal(err)
		}
		st, _ := os.Lstat(p)
		if sys := st.Sys().(*syscall.Stat_t); sys.Uid != 1 || sys.Gid != 2 {
			t.Fatalf("WriteFile with owner 1:2: got %d:%d", sys.Uid, sys.Gid)
		}
	}
	assertOnly(t, f.root, "f")
}

func checkWriteOverLink(t *testing.T, f fsUnderTest) {
	mustWrite(t, f.at("target"), "kept")
	if err := os.Symlink("target", f.at("l")); err != nil {
		t.Fatal(err)
	}
	if err := f.WriteFile(f.at("l"), strings.NewReader("new"), 0o644, -1, -1); err != nil {
		t.Fatal(err)
	}
	if st, err := os.Lstat(f.at("l")); err != nil || !st.Mode().IsRegular() {
		t.Fatalf("WriteFile over a link: got %v, %v, want a regular file", st.Mode(), err)
	}
	if b, _ := os.ReadFile(f.at("target")); string(b) != "kept" {
		t.Fatalf("WriteFile over a link wrote through it: the link's target holds %q", b)
	}
}

func checkWriteNoParent(t *testing.T, f fsUnderTest) {
	err := f.WriteFile(f.at("missing/f"), strings.NewReader("x"), 0o644, -1, -1)
	if !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("WriteFile without a parent: got %v, want fs.ErrNotExist", err)
	}
	if err := os.Mkdir(f.at("d"), 0o755); err != nil {
		t.Fatal(err)
	}
	MakeUnwritable(t, f.at("d"))
	if err := f.WriteFile(f.at("d/f"), strings.NewReader("x"), 0o644, -1, -1); err == nil {
		t.Fatal("WriteFile into an unwritable directory succeeded")
	}
	assertOnly(t, f.root, "d")
}

func checkSameContent(t *testing.T, f fsUnderTest) {
	p := f.at("f")
	mustWrite(t, p, "hello")
	for _, tt := range []struct {
		want string
		same bool
	}{{"hello", true}, {"hellO", false}, {"hell", false}, {"hello!", false}, {"", false}} {
		if same, err := f.SameContent(p, tt.want); err != nil || same != tt.same {
			t.Errorf("SameContent(%q) of %q: got %v, %v, want %v", tt.want, "hello", same, err, tt.same)
		}
	}
	if err := os.Symlink("f", f.at("l")); err != nil {
		t.Fatal(err)
	}
	if same, err := f.SameContent(f.at("l"), "hello"); err == nil {
		t.Fatalf("SameContent through a link: got %v, want an error", same)
	}
}

func checkSymlink(t *testing.T, f fsUnderTest) {
	p := f.at("l")
	for _, target := range []string{"/one", "two"} {
		if err := f.Symlink(target, p); err != nil {
			t.Fatalf("Symlink to %s: %v", target, err)
		}
		if got, err := f.Readlink(p); err != nil || got != target {
			t.Fatalf("Readlink: got %q, %v, want %q", got, err, target)
		}
	}
	if err := f.Symlink("x", f.at("missing/l")); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("Symlink without a parent: got %v, want fs.ErrNotExist", err)
	}
	assertOnly(t, f.root, "l")
}

func checkMkdir(t *testing.T, f fsUnderTest) {
	if err := f.Mkdir(f.at("d"), 0o755); err != nil {
		t.Fatal(err)
	}
	if st, err := os.Lstat(f.at("d")); err != nil || !st.IsDir() {
		t.Fatalf("Mkdir: got %v, %v, want a directory", st, err)
	}
	if err := f.Mkdir(f.at("d"), 0o755); !errors.Is(err, fs.ErrExist) {
		t.Fatalf("Mkdir of an existing directory: got %v, want fs.ErrExist", err)
	}
	if err := f.Mkdir(f.at("missing/d"), 0o755); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("Mkdir without a parent: got %v, want fs.ErrNotExist", err)
	}
	for range 2 { // an existing tree is no error
		if err := f.MkdirAll(f.at("a/b/c"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if st, err := os.Lstat(f.at("a/b/c")); err != nil || !st.IsDir() {
		t.Fatalf("MkdirAll: got %v, %v, want a directory", st, err)
	}
}

func checkRemove(t *testing.T, f fsUnderTest) {
	mustWrite(t, f.at("f"), "x")
	if err := f.Remove(f.at("f")); err != nil {
		t.Fatal(err)
	}
	if err := f.Remove(f.at("f")); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("Remove of nothing: got %v, want fs.ErrNotExist", err)
	}
	if err := os.MkdirAll(f.at("d/sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	err := f.Remove(f.at("d"))
	if !errors.Is(err, syscall.ENOTEMPTY) && !errors.Is(err, syscall.EEXIST) {
		t.Fatalf("Remove of a directory that is not empty: got %v, want ENOTEMPTY (or EEXIST)", err)
	}
	if err := f.Remove(f.at("d/sub")); err != nil {
		t.Fatalf("Remove of an empty directory: %v", err)
	}
	assertOnly(t, f.root, "d")
}

func checkRemoveAll(t *testing.T, f fsUnderTest) {
	outside := t.TempDir()
	mustWrite(t, filepath.Join(outside, "kept"), "x")
	if err := os.MkdirAll(f.at("d/sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	mustWrite(t, f.at("d/sub/f"), "x")
	if err := os.Symlink(outside, f.at("d/out")); err != nil {
		t.Fatal(err)
	}
	if err := f.RemoveAll(f.at("d")); err != nil {
		t.Fatal(err)
	}
	if err := f.RemoveAll(f.at("d")); err != nil {
		t.Fatalf("RemoveAll of nothing: %v", err)
	}
	assertOnly(t, f.root)
	if _, err := os.Lstat(filepath.Join(outside, "kept")); err != nil {
		t.Fatalf("RemoveAll followed a link out of the tree: %v", err)
	}
}

func checkMeta(t *testing.T, f fsUnderTest) {
	if err := os.Mkdir(f.at("d"), 0o700); err != nil {
		t.Fatal(err)
	}
	mustWrite(t, f.at("target"), "x")
	if err := os.Symlink("target", f.at("l")); err != nil {
		t.Fatal(err)
	}
	want := 0o775 | fs.ModeSetgid | fs.ModeDir
	if err := f.Chmod(f.at("d"), want.Perm()|fs.ModeSetgid); err != nil {
		t.Fatal(err)
	}
	if st, _ := os.Lstat(f.at("d")); st.Mode() != want {
		t.Fatalf("Chmod: got %v, want %v", st.Mode(), want)
	}
	if err := f.Chmod(f.at("l"), 0o600); err == nil {
		t.Fatal("Chmod of a link succeeded, want an error rather than following it")
	}
	if st, _ := os.Lstat(f.at("target")); st.Mode() != 0o644 {
		t.Fatalf("Chmod of a link changed its target to %v", st.Mode())
	}
	uid, gid := -1, -1
	if os.Geteuid() == 0 {
		uid, gid = 1, 2
	}
	if err := f.Lchown(f.at("l"), uid, gid); err != nil {
		t.Fatal(err)
	}
	if uid < 0 {
		return
	}
	link, _ := os.Lstat(f.at("l"))
	target, _ := os.Lstat(f.at("target"))
	if st := link.Sys().(*syscall.Stat_t); st.Uid != 1 || st.Gid != 2 {
		t.Fatalf("Lchown of a link: got %d:%d, want 1:2", st.Uid, st.Gid)
	}
	if st := target.Sys().(*syscall.Stat_t); int(st.Uid) != os.Geteuid() {
		t.Fatalf("Lchown of a link changed its target's owner to %d", st.Uid)
	}
}

// assertOnly fails unless the root holds exactly names: no temporary file
// is left behind.
func assertOnly(t *testing.T, root string, names ...string) {
	t.Helper()
	entries, err := os.ReadDir(root)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range entries {
		got = append(got, e.Name())
	}
	if strings.Join(got, " ") != strings.Join(names, " ") {
		t.Fatalf("the root holds %q, want %q (a temporary file left behind?)", got, names)
	}
}
