package ssh

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path"
	"strconv"
	"syscall"

	"github.com/pkg/sftp"
	"github.com/tetherhq/tether/agent/handler"
	"github.com/tetherhq/tether/model/durable"
)

var (
	_ handler.FS       = (*Target)(nil)
	_ handler.Resolver = (*Target)(nil)
	_ handler.Runner   = (*Target)(nil)
)

// do runs one file operation on the live connection. Its error names op
// and name and wraps the standard error SFTP's status maps to; a dead
// connection is ErrConnectionLost, and dropped.
func (t *Target) do(op, name string, fn func(c *conn) error) error {
	c, err := t.get(ctxFS())
	if err != nil {
		return &fs.PathError{Op: op, Path: name, Err: err}
	}
	err = fn(c)
	if err == nil {
		return nil
	}
	var pe *fs.PathError
	if errors.As(err, &pe) && pe.Path == name {
		err = pe.Err // named once
	}
	if !errors.As(err, new(readError)) && lost(c, err) {
		return &fs.PathError{Op: op, Path: name, Err: t.lostError(c, err)}
	}
	return &fs.PathError{Op: op, Path: name, Err: err}
}

// readError is the error of a WriteFile's reader: not the connection's.
type readError struct{ err error }

func (e readError) Error() string { return e.err.Error() }
func (e readError) Unwrap() error { return e.err }

type reader struct{ r io.Reader }

func (r reader) Read(p []byte) (int, error) {
	n, err := r.r.Read(p)
	if err != nil && err != io.EOF {
		err = readError{err}
	}
	return n, err
}

// info converts what SFTP's lstat says.
func info(fi fs.FileInfo) handler.Info {
	out := handler.Info{Mode: fi.Mode(), Size: fi.Size(), ModTime: fi.ModTime()}
	if st, ok := fi.Sys().(*sftp.FileStat); ok {
		out.UID, out.GID = st.UID, st.GID
	}
	return out
}

// Lstat implements handler.FileReader. The modification time has SFTP's
// resolution: whole seconds.
func (t *Target) Lstat(name string) (handler.Info, error) {
	var out handler.Info
	err := t.do("lstat", name, func(c *conn) error {
		fi, err := c.sftp.Lstat(name)
		if err == nil {
			out = info(fi)
		}
		return err
	})
	return out, err
}

// Readlink implements handler.FileReader.
func (t *Target) Readlink(name string) (string, error) {
	var out string
	err := t.do("readlink", name, func(c *conn) (err error) {
		out, err = c.sftp.ReadLink(name)
		return err
	})
	return out, err
}

// ReadFile implements handler.FileReader.
func (t *Target) ReadFile(name string) ([]byte, error) {
	var out []byte
	err := t.do("read", name, func(c *conn) error {
		f, err := c.sftp.Open(name)
		if err != nil {
			return err
		}
		defer f.Close()
		out, err = io.ReadAll(f)
		return err
	})
	return out, err
}

// sameChunk is how much of a file SameContent asks for at once.
const sameChunk = 32 << 10

// SameContent implements handler.FileReader: an lstat (a file of another
// size differs, with no read at all; a link is refused), then the file
// read in chunks, each compared and dropped, stopping at the first
// difference. SFTP opens through links: a link replacing the file between
// the lstat and the open is read through (a race the local host closes
// with O_NOFOLLOW).
func (t *Target) SameContent(name, want string) (bool, error) {
	same := false
	err := t.do("compare", name, func(c *conn) error {
		// The lstat and the open travel together: one round trip
		// less on the common path, an unchanged file.
		type lstat struct {
			fi  fs.FileInfo
			err error
		}
		lc := make(chan lstat, 1)
		go func() {
			fi, err := c.sftp.Lstat(name)
			lc <- lstat{fi, err}
		}()
		f, err := c.sftp.Open(name)
		l := <-lc
		if err == nil {
			defer f.Close()
		}
		switch {
		case l.err != nil:
			return l.err
		case !l.fi.Mode().IsRegular():
			return fmt.Errorf("not a regular file (%s): %w", l.fi.Mode().Type(), syscall.ELOOP)
		case err != nil:
			return err
		case l.fi.Size() != int64(len(want)):
			return nil
		}
		buf := make([]byte, min(len(want)+1, sameChunk))
		off := 0
		for {
			n, err := f.Read(buf)
			if off+n > len(want) || string(buf[:n]) != want[off:off+n] {
				return nil
			}
			off += n
			if err == io.EOF {
				same = off == len(want)
				return nil
			}
			if err != nil {
				return err
			}
		}
	})
	return same, err
}

// WriteFile implements handler.FileWriter: a temporary file beside name
// (durable.TempName), made private before anything is written to it, then
// given its owner (which clears set-id bits) and mode, flushed with
// fsync@openssh.com where the server has it, and renamed over name with
// posix-rename@openssh.com (rename(2): atomic, and a link at name is
// replaced, not followed). On an error the temporary file is removed.
func (t *Target) WriteFile(name string, r io.Reader, perm fs.FileMode, uid, gid int) error {
	return t.do("write", name, func(c *conn) error {
		tmp, f, err := createTemp(c, name)
		if err != nil {
			return err
		}
		committed := false
		defer func() {
			if !committed {
				_ = f.Close()
				_ = c.sftp.Remove(tmp)
			}
		}()
		// The server creates files with 0666 less its umask: private
		// before any content arrives.
		if err := f.Chmod(0o600); err != nil {
			return err
		}
		if _, err := f.ReadFrom(reader{r}); err != nil {
			return err
		}
		if uid >= 0 || gid >= 0 {
			if err := f.Chown(uid, gid); err != nil { // -1 leaves one as it is (fchown)
				return err
			}
		}
		if err := f.Chmod(perm); err != nil {
			return err
		}
		if c.fsync {
			if err := f.Sync(); err != nil {
				return err
			}
		}
		if err := f.Close(); err != nil {
			return err
		}
		if err := c.sftp.PosixRename(tmp, name); err != nil {
			return err
		}
		committed = true
		return nil
	})
}

// createTemp creates a new, empty file beside name, exclusively.
func createTemp(c *conn, name string) (string, *sftp.File, error) {
	for range 10 {
		tmp := durable.TempName(name)
		f, err := c.sftp.OpenFile(tmp, osWriteExcl)
		if err == nil {
			return tmp, f, nil
		}
		if exists(c, tmp, err) {
			continue
		}
		return "", nil, err
	}
	return "", nil, fs.ErrExist
}

// exists reports whether a failed create or mkdir failed because path is
// already there (SFTP says only "failure").
func exists(c *conn, p string, err error) bool {
	var st *sftp.StatusError
	if !errors.As(err, &st) {
		return false
	}
	_, lerr := c.sftp.Lstat(p)
	return lerr == nil
}

// Symlink implements handler.FileWriter: a new link beside name, renamed
// over it.
func (t *Target) Symlink(target, name string) error {
	return t.do("symlink", name, func(c *conn) error {
		for range 10 {
			tmp := durable.TempName(name)
			err := c.sftp.Symlink(target, tmp)
			if err != nil && exists(c, tmp, err) {
				continue
			}
			if err != nil {
				return err
			}
			if err := c.sftp.PosixRename(tmp, name); err != nil {
				_ = c.sftp.Remove(tmp)
				return err
			}
			return nil
		}
		return fs.ErrExist
	})
}

// Mkdir implements handler.FileWriter. The directory gets perm less the
// server's umask (an extra lstat and chmod when perm is not 0777).
func (t *Target) Mkdir(name string, perm fs.FileMode) error {
	return t.do("mkdir", name, func(c *conn) error { return mkdir(c, name, perm) })
}

func mkdir(c *conn, name string, perm fs.FileMode) error {
	if err := c.sftp.Mkdir(name); err != nil {
		if exists(c, name, err) {
			return fs.ErrExist
		}
		return err
	}
	if perm.Perm() == 0o777 {
		return nil
	}
	fi, err := c.sftp.Lstat(name)
	if err != nil {
		return err
	}
	if got := fi.Mode().Perm(); got != perm.Perm()&got {
		return c.sftp.Chmod(name, perm.Perm()&got)
	}
	return nil
}

// MkdirAll implements handler.FileWriter.
func (t *Target) MkdirAll(name string, perm fs.FileMode) error {
	return t.do("mkdir", name, func(c *conn) error { return mkdirAll(c, name, perm) })
}

func mkdirAll(c *conn, name string, perm fs.FileMode) error {
	fi, err := c.sftp.Stat(name) // a link to a directory will do, as for os.MkdirAll
	switch {
	case err == nil && fi.IsDir():
		return nil
	case err == nil:
		return syscall.ENOTDIR
	case !errors.Is(err, fs.ErrNotExist):
		return err
	}
	if parent := path.Dir(name); parent != name {
		if err := mkdirAll(c, parent, perm); err != nil {
			return err
		}
	}
	if err := mkdir(c, name, perm); err != nil && !errors.Is(err, fs.ErrExist) {
		return err
	}
	return nil
}

// Remove implements handler.FileRemover: a directory that is not empty is
// syscall.ENOTEMPTY (SFTP says only "failure"; its entries are looked at).
func (t *Target) Remove(name string) error {
	return t.do("remove", name, func(c *conn) error { return remove(c, name) })
}

func remove(c *conn, name string) error {
	fi, err := c.sftp.Lstat(name)
	if err != nil {
		return err
	}
	if !fi.IsDir() {
		return unwrapPath(c.sftp.Remove(name))
	}
	err = unwrapPath(c.sftp.RemoveDirectory(name))
	var st *sftp.StatusError
	if errors.As(err, &st) {
		if entries, rerr := c.sftp.ReadDir(name); rerr == nil && len(entries) > 0 {
			return syscall.ENOTEMPTY
		}
	}
	return err
}

// unwrapPath drops the *os.PathError pkg/sftp adds, which names the path
// again.
func unwrapPath(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}

// RemoveAll implements handler.FileRemover: entries are listed with
// lstat's view, so a link inside is removed, never followed.
func (t *Target) RemoveAll(name string) error {
	return t.do("remove", name, func(c *conn) error {
		err := removeAll(c, name)
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		return err
	})
}

func removeAll(c *conn, name string) error {
	fi, err := c.sftp.Lstat(name)
	if err != nil {
		return err
	}
	if fi.IsDir() {
		entries, err := c.sftp.ReadDir(name)
		if err != nil {
			return err
		}
		for _, e := range entries {
			if err := removeAll(c, path.Join(name, e.Name())); err != nil && !errors.Is(err, fs.ErrNotExist) {
				return err
			}
		}
		return unwrapPath(c.sftp.RemoveDirectory(name))
	}
	return unwrapPath(c.sftp.Remove(name))
}

// Lchown implements handler.FileMeta with `chown -h` in a session: SFTP's
// setstat follows links, and OpenSSH's lsetstat@openssh.com is not in the
// SFTP library. A session per call: slower than a request, and needed
// only where a managed owner differs.
func (t *Target) Lchown(name string, uid, gid int) error {
	if uid < 0 && gid < 0 {
		_, err := t.Lstat(name)
		return err
	}
	owner := ""
	if uid >= 0 {
		owner = strconv.Itoa(uid)
	}
	if gid >= 0 {
		owner += ":" + strconv.Itoa(gid)
	}
	out, err := t.Run(ctxFS(), handler.Command{Args: []string{"chown", "-h", owner, "--", name}, Env: []string{"LC_ALL=C"}})
	if err != nil {
		return &fs.PathError{Op: "lchown", Path: name, Err: err}
	}
	if out.ExitCode != 0 {
		if _, lerr := t.Lstat(name); errors.Is(lerr, fs.ErrNotExist) {
			return lerr
		}
		return &fs.PathError{Op: "lchown", Path: name, Err: handler.CommandError(handler.Command{Args: []string{"chown", "-h", owner}}, out)}
	}
	return nil
}

// Chmod implements handler.FileMeta. SFTP's setstat follows links, so the
// thing is looked at first and a link refused (ELOOP, as the local host
// gives): a link put in place between the two is followed.
func (t *Target) Chmod(name string, mode fs.FileMode) error {
	return t.do("chmod", name, func(c *conn) error {
		fi, err := c.sftp.Lstat(name)
		if err != nil {
			return err
		}
		if fi.Mode()&fs.ModeSymlink != 0 {
			return syscall.ELOOP
		}
		return c.sftp.Chmod(name, mode)
	})
}

// RealPath implements handler.Resolver with SFTP's realpath, which
// resolves every link as the host's kernel does.
func (t *Target) RealPath(name string) (string, error) {
	var out string
	err := t.do("realpath", name, func(c *conn) (err error) {
		out, err = c.sftp.RealPath(name)
		return err
	})
	return out, err
}
