package handler

import (
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"github.com/tetherhq/tether/model/durable"
)

// HostFS is the agent's own host's file system: plain system calls on the
// paths as given. Files are replaced with durable.WriteFrom, made durable
// through Sync (a SyncGroup: one syncfs(2) shared by concurrent writers;
// nil: an fsync per file) with the directory left unsynced (a rename lost
// in a crash leaves the complete old file, which the next deploy repairs),
// at most Files at once.
type HostFS struct {
	Sync  *SyncGroup
	Files *FileLimit
}

var (
	_ FS       = (*HostFS)(nil)
	_ Resolver = (*HostFS)(nil)
	_ OnHost   = (*HostFS)(nil)
)

// bareHost is the HostFS of a runtime without Sync or Files, and the one
// that reads for HostPath: reading needs neither.
var bareHost = &HostFS{}

// Lstat implements FileReader.
func (h *HostFS) Lstat(name string) (Info, error) {
	fi, err := os.Lstat(name)
	if err != nil {
		return Info{}, err
	}
	info := Info{Mode: fi.Mode(), Size: fi.Size(), ModTime: fi.ModTime()}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		info.UID, info.GID = st.Uid, st.Gid
	}
	return info, nil
}

// Readlink implements FileReader.
func (h *HostFS) Readlink(name string) (string, error) { return os.Readlink(name) }

// ReadFile implements FileReader.
func (h *HostFS) ReadFile(name string) ([]byte, error) { return os.ReadFile(name) }

// SameContent implements FileReader. It reads with plain system calls:
// os.Open would also try (and fail) to register a regular file with the
// network poller, several wasted calls per file, which add up over
// thousands of files verified on every deploy. O_NOFOLLOW: the caller saw a
// regular file; if a link replaced it meanwhile, fail rather than read
// through it.
func (h *HostFS) SameContent(name, want string) (bool, error) {
	fd, err := syscall.Open(name, syscall.O_RDONLY|syscall.O_CLOEXEC|syscall.O_NOFOLLOW, 0)
	if err != nil {
		return false, &fs.PathError{Op: "open", Path: name, Err: err}
	}
	defer syscall.Close(fd)
	buf := make([]byte, min(len(want)+1, 64<<10))
	off := 0
	for {
		n, err := syscall.Read(fd, buf)
		if err == syscall.EINTR {
			continue
		}
		if err != nil {
			return false, &fs.PathError{Op: "read", Path: name, Err: err}
		}
		if n == 0 {
			return off == len(want), nil
		}
		if off+n > len(want) || string(buf[:n]) != want[off:off+n] {
			return false, nil
		}
		off += n
	}
}

// WriteFile implements FileWriter with durable.WriteFrom, holding one of
// Files while the file is open.
func (h *HostFS) WriteFile(name string, r io.Reader, perm fs.FileMode, uid, gid int) error {
	release := h.Files.hold()
	err := durable.WriteFrom(name, r, perm, durable.SyncWith(h.syncFile), durable.NoDirSync(), durable.Owner(uid, gid))
	release()
	return err
}

// syncFile makes f's data durable, sharing the flush with concurrent
// writers when a SyncGroup is configured.
func (h *HostFS) syncFile(f *os.File) error {
	if h.Sync == nil {
		return f.Sync()
	}
	return h.Sync.Sync(f)
}

// Symlink implements FileWriter: a new link beside name, renamed over it.
func (h *HostFS) Symlink(target, name string) error {
	tmp := filepath.Join(filepath.Dir(name), ".tether-"+filepath.Base(name)+"."+strconv.FormatInt(time.Now().UnixNano(), 36))
	if err := os.Symlink(target, tmp); err != nil {
		return err
	}
	if err := os.Rename(tmp, name); err != nil {
		_ = os.Remove(tmp)
		return err
	}
	return nil
}

// Mkdir implements FileWriter.
func (h *HostFS) Mkdir(name string, perm fs.FileMode) error { return os.Mkdir(name, perm) }

// MkdirAll implements FileWriter.
func (h *HostFS) MkdirAll(name string, perm fs.FileMode) error { return os.MkdirAll(name, perm) }

// Remove implements FileRemover.
func (h *HostFS) Remove(name string) error { return os.Remove(name) }

// RemoveAll implements FileRemover.
func (h *HostFS) RemoveAll(name string) error { return os.RemoveAll(name) }

// Lchown implements FileMeta.
func (h *HostFS) Lchown(name string, uid, gid int) error { return os.Lchown(name, uid, gid) }

// Chmod implements FileMeta on the thing opened without following a link
// (Linux has no lchmod).
func (h *HostFS) Chmod(name string, mode fs.FileMode) error {
	f, err := os.OpenFile(name, os.O_RDONLY|syscall.O_NOFOLLOW, 0)
	if err != nil {
		return err
	}
	err = f.Chmod(mode)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// RealPath implements Resolver.
func (h *HostFS) RealPath(name string) (string, error) { return filepath.EvalSymlinks(name) }

// OnHost implements OnHost.
func (h *HostFS) OnHost() bool { return true }

// errNoResolver is returned by HostPath for a link below a Root on a
// target that cannot resolve links.
var errNoResolver = errors.New("this target cannot resolve symbolic links (its file system has no RealPath)")
