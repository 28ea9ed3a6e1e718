package handlertest

import (
	"os"
	"testing"

	"golang.org/x/sys/unix"
)

// fsImmutableFL is FS_IMMUTABLE_FL from linux/fs.h (chattr +i).
const fsImmutableFL = 0x00000010

// Unwritable says how MakeUnwritable locked a directory and which OS error
// writing into it gives.
type Unwritable struct {
	How     string
	WantErr string
}

// MakeUnwritable makes dir refuse new entries until the test ends. Root
// ignores permission bits, so as root the directory is made immutable
// (chattr +i, ext4 and most local file systems); otherwise it loses its
// write bits.
func MakeUnwritable(t testing.TB, dir string) Unwritable {
	t.Helper()
	if os.Geteuid() != 0 {
		if err := os.Chmod(dir, 0o555); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = os.Chmod(dir, 0o755) })
		return Unwritable{How: "read-only directory", WantErr: "permission denied"}
	}
	f, err := os.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	flags, err := unix.IoctlGetUint32(int(f.Fd()), unix.FS_IOC_GETFLAGS)
	if err != nil {
		t.Fatalf("cannot read inode flags of %s (a file system without chattr support? set TMPDIR to an ext4 directory): %v", dir, err)
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
	return Unwritable{How: "immutable directory", WantErr: "operation not permitted"}
}
