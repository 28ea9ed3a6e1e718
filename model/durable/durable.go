// Package durable replaces files atomically: the new content is written to
// a temporary file beside the old one, made durable, and renamed over it,
// so a reader, or the system after a crash, finds the old content or the
// new one, never a mix. It is the one way the agent, its handlers, its
// journal, the compiler and the command line replace a file.
//
// By default the file is synced before the rename and its directory after
// it, so the new content survives a crash once WriteFile returns. Options
// relax that where a caller can afford less (a cache, a file the next
// deploy rewrites anyway), change how the file is synced, give the file an
// owner, or confine the write to an os.Root.
package durable

import (
	"errors"
	"io"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// Option changes how a file is written.
type Option func(*options)

type options struct {
	root    *os.Root
	sync    func(*os.File) error // nil: the file is not synced
	syncDir bool
	uid     int
	gid     int
}

// NoSync syncs neither the file nor its directory: a crash may leave the
// old content, the new, or, on some file systems, an empty file. For
// caches, which are checked when read and rebuilt when wrong.
func NoSync() Option {
	return func(o *options) { o.sync, o.syncDir = nil, false }
}

// NoDirSync leaves the directory unsynced after the rename: a crash may
// then lose the rename and leave the complete old file, never a mix. For
// files that are written again until they are right (a handler's, which
// the next deploy repairs).
func NoDirSync() Option {
	return func(o *options) { o.syncDir = false }
}

// SyncWith makes the new file durable with sync instead of fsync, for
// instance with a flush that concurrent writers share.
func SyncWith(sync func(*os.File) error) Option {
	return func(o *options) { o.sync = sync }
}

// Owner gives the new file the user uid and the group gid; -1 leaves one
// as the process creates it.
func Owner(uid, gid int) Option {
	return func(o *options) { o.uid, o.gid = uid, gid }
}

// In confines the write to root: the path is then relative to root, and
// no step of the write leaves it, even through a symbolic link.
func In(root *os.Root) Option {
	return func(o *options) { o.root = root }
}

// WriteFile replaces the file at path with data. The new file has exactly
// the mode perm (special bits included, whatever the umask), which is set
// before it becomes visible at path. On an error, the file at path is as
// it was and no temporary file is left, unless the error is from syncing
// the directory, after the rename: the new content is then in place but
// may not survive a crash. Errors are *fs.PathError values naming path
// (not the temporary file) with the operating system's error, so
// errors.Is(err, fs.ErrNotExist) says that the directory is missing.
func WriteFile(path string, data []byte, perm fs.FileMode, opts ...Option) error {
	return write(path, perm, opts, func(f *os.File) error {
		_, err := f.Write(data)
		return err
	})
}

// WriteFrom is WriteFile with the content read from r until io.EOF: a
// string's content through strings.NewReader is written without a copy.
// An error of r fails the write like any other.
func WriteFrom(path string, r io.Reader, perm fs.FileMode, opts ...Option) error {
	return write(path, perm, opts, func(f *os.File) error {
		_, err := io.Copy(f, r)
		return err
	})
}

// SyncDir makes the entries of the directory dir durable: a file created,
// renamed or removed in it before survives a crash.
func SyncDir(dir string) error {
	return syncDir(osDir{}, dir)
}

// tempMark sits between the name of the file replaced and the random part
// of its temporary file's name: ".motd.tether-1x2y3z".
const tempMark = ".tether-"

// IsTemp reports whether name (a base name) is that of a temporary file
// of this package, which a crash during a write may leave behind. Only
// the owner of a directory that no one else writes in may remove them
// there: a temporary file may belong to a write in progress.
func IsTemp(name string) bool {
	return strings.HasPrefix(name, ".") && strings.Contains(name, tempMark)
}

// TempName returns a new name for a temporary file beside path, one that
// IsTemp recognises (".motd.tether-1x2y3z"): where a write that replaces
// path, on this host or another, prepares the new file before renaming it
// over path. The random part makes a clash unlikely; create it exclusively.
func TempName(path string) string {
	return filepath.Join(filepath.Dir(path), "."+filepath.Base(path)+tempMark+strconv.FormatUint(rand.Uint64(), 36))
}

// dir is what a write needs of the file system: *os.Root, or osDir for
// paths as they are.
type dir interface {
	OpenFile(name string, flag int, perm fs.FileMode) (*os.File, error)
	Open(name string) (*os.File, error)
	Rename(oldpath, newpath string) error
	Remove(name string) error
}

type osDir struct{}

func (osDir) OpenFile(name string, flag int, perm fs.FileMode) (*os.File, error) {
	return os.OpenFile(name, flag, perm)
}
func (osDir) Open(name string) (*os.File, error)   { return os.Open(name) }
func (osDir) Rename(oldpath, newpath string) error { return os.Rename(oldpath, newpath) }
func (osDir) Remove(name string) error             { return os.Remove(name) }

func write(path string, perm fs.FileMode, opts []Option, fill func(*os.File) error) error {
	o := options{sync: (*os.File).Sync, syncDir: true, uid: -1, gid: -1}
	for _, opt := range opts {
		opt(&o)
	}
	var d dir = osDir{}
	if o.root != nil {
		d = o.root
	}
	fail := func(op string, err error) error {
		return &fs.PathError{Op: op, Path: path, Err: osError(err)}
	}
	f, tmp, err := createTemp(d, path)
	if err != nil {
		return fail("write", err)
	}
	committed := false
	defer func() {
		if !committed {
			_ = f.Close() // after a successful Close, a harmless error
			_ = d.Remove(tmp)
		}
	}()
	if err := fill(f); err != nil {
		return fail("write", err)
	}
	// Ownership first: chown clears the set-user-ID and set-group-ID bits.
	if o.uid >= 0 || o.gid >= 0 {
		if err := f.Chown(o.uid, o.gid); err != nil {
			return fail("chown", err)
		}
	}
	if err := f.Chmod(perm); err != nil {
		return fail("chmod", err)
	}
	if o.sync != nil {
		if err := o.sync(f); err != nil {
			return fail("sync", err)
		}
	}
	if err := f.Close(); err != nil {
		return fail("write", err)
	}
	if err := d.Rename(tmp, path); err != nil {
		return fail("write", err)
	}
	committed = true
	if o.syncDir {
		if err := syncDir(d, filepath.Dir(path)); err != nil {
			return err
		}
	}
	return nil
}

// createTemp creates a new file beside path that only the owner can read,
// with a name IsTemp recognises.
func createTemp(d dir, path string) (*os.File, string, error) {
	for range 100 {
		name := TempName(path)
		f, err := d.OpenFile(name, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
		if errors.Is(err, fs.ErrExist) {
			continue
		}
		return f, name, err
	}
	return nil, "", fs.ErrExist
}

func syncDir(d dir, name string) error {
	f, err := d.Open(name)
	if err == nil {
		err = f.Sync()
		if cerr := f.Close(); err == nil {
			err = cerr
		}
	}
	if err != nil {
		return &fs.PathError{Op: "sync directory", Path: name, Err: osError(err)}
	}
	return nil
}

// osError is the operating system's error inside err, which names the
// temporary file (or is the error of a reader or a sync function, kept
// whole when it carries none).
func osError(err error) error {
	var errno syscall.Errno
	if errors.As(err, &errno) {
		return errno
	}
	return err
}
