package handler

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"testing"
)

func TestInfoPerm(t *testing.T) {
	tests := []struct {
		mode fs.FileMode
		want uint32
	}{
		{0o644, 0o644},
		{fs.ModeDir | 0o755, 0o755},
		{0o755 | fs.ModeSetuid, 0o4755},
		{fs.ModeDir | 0o775 | fs.ModeSetgid, 0o2775},
		{fs.ModeDir | 0o777 | fs.ModeSticky, 0o1777},
	}
	for _, tt := range tests {
		if got := (Info{Mode: tt.mode}).Perm(); got != tt.want {
			t.Errorf("Info{Mode: %v}.Perm() = %#o, want %#o", tt.mode, got, tt.want)
		}
	}
}

// remoteFS is an FS with none of the optional interfaces, as a target other
// than the agent's host may be.
type remoteFS struct{ FS }

func TestWithFS(t *testing.T) {
	sync, files := NewSyncGroup(), NewFileLimit(2)
	rt := Runtime{Sync: sync, Files: files}.WithFS()
	host, ok := rt.FS.(*HostFS)
	if !ok || host.Sync != sync || host.Files != files {
		t.Fatalf("WithFS of no FS: got %#v, want a HostFS with the runtime's Sync and Files", rt.FS)
	}
	other := remoteFS{bareHost}
	if got := (Runtime{FS: other}).WithFS().FS; got != FS(other) {
		t.Fatalf("WithFS replaced the runtime's FS: got %#v", got)
	}
}

// TestConfineNeedsResolver: below a root, a parent that is a link is
// followed on a target that resolves links and refused on one that cannot.
func TestConfineNeedsResolver(t *testing.T) {
	root := t.TempDir()
	if err := os.Mkdir(filepath.Join(root, "real"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("real", filepath.Join(root, "link")); err != nil {
		t.Fatal(err)
	}
	if _, err := (Runtime{Root: root}).HostPath("/link/f"); err != nil {
		t.Fatalf("host: a link inside the root was refused: %v", err)
	}
	remote := Runtime{Root: root, FS: remoteFS{bareHost}}
	if _, err := remote.HostPath("/link/f"); !errors.Is(err, errNoResolver) {
		t.Fatalf("target without RealPath: got %v, want an error saying it cannot resolve links", err)
	}
	if p, err := remote.HostPath("/real/f"); err != nil || p != filepath.Join(root, "real", "f") {
		t.Fatalf("target without RealPath, no link: got %q, %v", p, err)
	}

	// A target that resolves links itself is confined like the host.
	if err := os.Symlink(t.TempDir(), filepath.Join(root, "away")); err != nil {
		t.Fatal(err)
	}
	resolving := Runtime{Root: root, FS: resolvingFS{remoteFS{bareHost}, []string{"not comparable"}}}
	if _, err := resolving.HostPath("/link/f"); err != nil {
		t.Fatalf("target with RealPath: a link inside the root was refused: %v", err)
	}
	if _, err := resolving.HostPath("/away/f"); !errors.Is(err, ErrOutsideRoot) {
		t.Fatalf("target with RealPath: a link out of the root: got %v, want ErrOutsideRoot", err)
	}
}

// resolvingFS is a target's FS that resolves links (Resolver); its slice
// makes it unusable as a map key.
type resolvingFS struct {
	remoteFS
	_ []string
}

func (resolvingFS) RealPath(name string) (string, error) { return filepath.EvalSymlinks(name) }

func TestWatchPathOnHostOnly(t *testing.T) {
	if got := (Runtime{Root: "/sandbox"}).WatchPath("/etc/motd"); len(got) != 1 || got[0] != "/sandbox/etc/motd" {
		t.Fatalf("host: got %q, want [/sandbox/etc/motd]", got)
	}
	if got := (Runtime{FS: remoteFS{bareHost}}).WatchPath("/etc/motd"); got != nil {
		t.Fatalf("a target that is not the agent's host: got %q, want nothing to watch", got)
	}
}
