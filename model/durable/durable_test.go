package durable

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/tetherhq/tether/model/testenv"
)

// leftovers returns the temporary files left in dir.
func leftovers(t *testing.T, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range entries {
		if IsTemp(e.Name()) {
			out = append(out, e.Name())
		}
	}
	return out
}

func readFile(t *testing.T, p string) string {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestWriteFileReplaces(t *testing.T) {
	tests := []struct {
		name string
		old  bool // a file is there before
		perm fs.FileMode
		opts []Option
	}{
		{name: "new file", perm: 0o644},
		{name: "replaced", old: true, perm: 0o600},
		// The mode is exact: the umask (022 or more) would clear these bits.
		{name: "mode beyond the umask", old: true, perm: 0o666},
		{name: "set-user-ID", perm: fs.ModeSetuid | 0o755},
		{name: "unsynced", old: true, perm: 0o640, opts: []Option{NoSync()}},
		{name: "directory unsynced", old: true, perm: 0o640, opts: []Option{NoDirSync()}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			p := filepath.Join(dir, "motd")
			if tt.old {
				if err := os.WriteFile(p, []byte("old content, longer than the new"), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			if err := WriteFile(p, []byte("new"), tt.perm, tt.opts...); err != nil {
				t.Fatal(err)
			}
			if got := readFile(t, p); got != "new" {
				t.Errorf("content: got %q, want %q", got, "new")
			}
			info, err := os.Stat(p)
			if err != nil {
				t.Fatal(err)
			}
			want := tt.perm&fs.ModePerm | tt.perm&fs.ModeSetuid
			if got := info.Mode() & (fs.ModePerm | fs.ModeSetuid); got != want {
				t.Errorf("mode: got %v, want %v", got, want)
			}
			if l := leftovers(t, dir); len(l) > 0 {
				t.Errorf("temporary files left: %v", l)
			}
		})
	}
}

func TestWriteFromReader(t *testing.T) {
	p := filepath.Join(t.TempDir(), "f")
	content := strings.Repeat("x", 100<<10)
	if err := WriteFrom(p, strings.NewReader(content), 0o644); err != nil {
		t.Fatal(err)
	}
	if got := readFile(t, p); got != content {
		t.Errorf("content: got %d bytes, want %d", len(got), len(content))
	}
}

// failingReader yields some bytes, then an error: a write that fails half
// way.
type failingReader struct{ sent bool }

var errRead = errors.New("source went away")

func (r *failingReader) Read(b []byte) (int, error) {
	if r.sent {
		return 0, errRead
	}
	r.sent = true
	return copy(b, "half of the new"), nil
}

// A failed write leaves the old file as it was and no temporary file.
func TestFailedWriteKeepsOldFile(t *testing.T) {
	errSync := errors.New("device gone")
	tests := []struct {
		name  string
		write func(p string) error
		want  error
	}{
		{name: "reader fails", want: errRead, write: func(p string) error {
			return WriteFrom(p, &failingReader{}, 0o644)
		}},
		{name: "sync fails", want: errSync, write: func(p string) error {
			return WriteFile(p, []byte("new"), 0o644, SyncWith(func(*os.File) error { return errSync }))
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			p := filepath.Join(dir, "motd")
			if err := os.WriteFile(p, []byte("old"), 0o600); err != nil {
				t.Fatal(err)
			}
			err := tt.write(p)
			if !errors.Is(err, tt.want) {
				t.Fatalf("error: got %v, want %v", err, tt.want)
			}
			if !strings.Contains(err.Error(), p) || strings.Contains(err.Error(), tempMark) {
				t.Errorf("error %q: want it to name %s, not the temporary file", err, p)
			}
			if got := readFile(t, p); got != "old" {
				t.Errorf("content after a failed write: got %q, want %q", got, "old")
			}
			if l := leftovers(t, dir); len(l) > 0 {
				t.Errorf("temporary files left: %v", l)
			}
		})
	}
}

func TestWriteOverDirectoryFails(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "d")
	if err := os.Mkdir(p, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := WriteFile(p, []byte("new"), 0o644); err == nil {
		t.Fatal("a file replaced a directory")
	}
	if info, err := os.Stat(p); err != nil || !info.IsDir() {
		t.Errorf("the directory after a failed write: %v, %v", info, err)
	}
	if l := leftovers(t, dir); len(l) > 0 {
		t.Errorf("temporary files left: %v", l)
	}
}

func TestMissingDirectory(t *testing.T) {
	p := filepath.Join(t.TempDir(), "missing", "f")
	err := WriteFile(p, []byte("x"), 0o644)
	if !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("error: got %v, want one matching fs.ErrNotExist", err)
	}
	var pe *fs.PathError
	if !errors.As(err, &pe) || pe.Path != p {
		t.Errorf("error %v: want a *fs.PathError naming %s", err, p)
	}
}

func TestSyncWith(t *testing.T) {
	dir := t.TempDir()
	var synced []string
	sync := SyncWith(func(f *os.File) error {
		synced = append(synced, filepath.Base(f.Name()))
		return nil
	})
	if err := WriteFile(filepath.Join(dir, "a"), []byte("x"), 0o644, sync); err != nil {
		t.Fatal(err)
	}
	if len(synced) != 1 || !IsTemp(synced[0]) {
		t.Errorf("synced: got %v, want the one temporary file", synced)
	}
	synced = nil
	if err := WriteFile(filepath.Join(dir, "b"), []byte("x"), 0o644, sync, NoSync()); err != nil {
		t.Fatal(err)
	}
	if len(synced) != 0 {
		t.Errorf("synced under NoSync: %v", synced)
	}
}

func TestOwner(t *testing.T) {
	testenv.Need(t, os.Geteuid() == 0, "giving a file away needs root")
	p := filepath.Join(t.TempDir(), "f")
	if err := WriteFile(p, []byte("x"), fs.ModeSetuid|0o750, Owner(1234, 5678)); err != nil {
		t.Fatal(err)
	}
	info, err := os.Stat(p)
	if err != nil {
		t.Fatal(err)
	}
	st := info.Sys().(*syscall.Stat_t)
	if st.Uid != 1234 || st.Gid != 5678 {
		t.Errorf("owner: got %d:%d, want 1234:5678", st.Uid, st.Gid)
	}
	// chown clears set-user-ID: the mode must be set after it.
	if got := info.Mode() & (fs.ModePerm | fs.ModeSetuid); got != 0o750|fs.ModeSetuid {
		t.Errorf("mode: got %v, want %v", got, 0o750|fs.ModeSetuid)
	}
}

func TestIn(t *testing.T) {
	base := t.TempDir()
	project := filepath.Join(base, "project")
	outside := filepath.Join(base, "outside")
	for _, d := range []string{filepath.Join(project, "cache"), outside} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink(outside, filepath.Join(project, "out")); err != nil {
		t.Fatal(err)
	}
	root, err := os.OpenRoot(project)
	if err != nil {
		t.Fatal(err)
	}
	defer root.Close()

	if err := WriteFile(filepath.Join("cache", "lock.json"), []byte("{}"), 0o644, In(root)); err != nil {
		t.Fatal(err)
	}
	if got := readFile(t, filepath.Join(project, "cache", "lock.json")); got != "{}" {
		t.Errorf("content: got %q, want %q", got, "{}")
	}
	if l := leftovers(t, filepath.Join(project, "cache")); len(l) > 0 {
		t.Errorf("temporary files left: %v", l)
	}
	if err := WriteFile(filepath.Join("out", "x"), []byte("escaped"), 0o644, In(root)); err == nil {
		t.Error("a write through a link out of the root succeeded")
	}
	entries, err := os.ReadDir(outside)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) > 0 {
		t.Errorf("files written outside the root: %v", entries)
	}
}

func TestIsTemp(t *testing.T) {
	for _, tt := range []struct {
		name string
		want bool
	}{
		{".motd.tether-1x2y", true},
		{".identity.tether-abc", true},
		{"motd", false},
		{"motd.tether-1", false}, // not hidden: not ours
		{".motd", false},
	} {
		if got := IsTemp(tt.name); got != tt.want {
			t.Errorf("IsTemp(%q): got %v, want %v", tt.name, got, tt.want)
		}
	}
}
