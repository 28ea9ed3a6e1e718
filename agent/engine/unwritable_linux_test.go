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
	"github.com/tetherhq/tether/model"

	"golang.org/x/sys/unix"
)

// fsImmutableFL is FS_IMMUTABLE_FL from linux/fs.h (chattr +i).
const fsImmutableFL = 0x00000010

type unwritable struct {
	name    string
	wantErr string
}

// makeUnwritable makes dir refuse new entries. Root ignores permission bits,
// so as root the directory is made immutable (chattr +i); otherwise it loses
// its write bits. The flag is cleared when the test ends.
func makeUnwritable(t *testing.T, dir string) unwritable {
	t.Helper()
	if os.Geteuid() != 0 {
		if err := os.Chmod(dir, 0o555); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.Chmod(dir, 0o755) })
		return unwritable{"read-only directory", "permission denied"}
	}
	f, err := os.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	flags, err := unix.IoctlGetUint32(int(f.Fd()), unix.FS_IOC_GETFLAGS)
	if err != nil {
		t.Fatalf("cannot read inode flags of %s (file system without chattr support?): %v", dir, err)
	}
	if err := unix.IoctlSetPointerInt(int(f.Fd()), unix.FS_IOC_SETFLAGS, int(flags|fsImmutableFL)); err != nil {
		t.Fatalf("cannot make %s immutable: %v", dir, err)
	}
	t.Cleanup(func() {
		g, err := os.Open(dir)
		if err != nil {
			return
		}
		defer g.Close()
		_ = unix.IoctlSetPointerInt(int(g.Fd()), unix.FS_IOC_SETFLAGS, int(flags))
	})
	return unwritable{"immutable directory", "operation not permitted"}
}

// TestUnwritableFile: a file the agent may not write fails with the OS error,
// its dependants are skipped, everything else is deployed.
func TestUnwritableFile(t *testing.T) {
	root := t.TempDir()
	locked := filepath.Join(root, "locked")
	if err := os.Mkdir(locked, 0o755); err != nil {
		t.Fatal(err)
	}
	how := makeUnwritable(t, locked)
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
	t.Logf("%s: %s", how.name, got[bad.ID].Message)
	if r := got[bad.ID]; r.State != model.StateFailed || !strings.Contains(r.Message, how.wantErr) || !strings.Contains(r.Message, "/locked/f") {
		t.Fatalf("unwritable file (%s): state %s message %q, want failed with %q", how.name, r.State, r.Message, how.wantErr)
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
