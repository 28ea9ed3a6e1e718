package handler

import (
	"io"
	"io/fs"
	"time"
)

// FS is the file system of the host a path-based handler acts on (its
// target): the agent's own host (HostFS, the default) or a host reached
// over SSH (agent/target/ssh). Handlers never call os.* on a path; they map a
// resource path with Runtime.HostPath and hand the result to the FS, so the
// same handler runs on any target and passes the same conformance suite.
//
// Paths are absolute paths of the target, as HostPath returns them. Errors
// wrap the standard ones where they apply, so that errors.Is(err,
// fs.ErrNotExist) (a missing file or parent directory), fs.ErrExist and
// fs.ErrPermission mean the same on every target; an error names the path
// it is about.
//
// No method follows a final symbolic link unless it says so: a handler
// replaces or describes a link, never what it points at.
type FS interface {
	FileReader
	FileWriter
	FileRemover
	FileMeta
}

// FileReader is how a handler reads a target's files.
type FileReader interface {
	// Lstat describes what is at name, without following a final link.
	Lstat(name string) (Info, error)
	// Readlink returns the target of the symbolic link name.
	Readlink(name string) (string, error)
	// ReadFile returns the whole content of the file name.
	ReadFile(name string) ([]byte, error)
	// SameContent reports whether the regular file name holds exactly
	// want, reading no more of it than it must: it is how a deploy that
	// changes nothing verifies thousands of files, so it should not copy
	// the file whole. It fails rather than read through a link.
	SameContent(name, want string) (bool, error)
}

// FileWriter is how a handler creates files, links and directories.
type FileWriter interface {
	// WriteFile replaces the file name atomically with what r holds: a
	// reader, or the host after a crash, finds the old content or the new,
	// never a mix. The new file has exactly the mode perm (set-id and
	// sticky bits included, whatever the umask) and the owner uid and
	// group gid (-1: the target's user's), all set before it appears at
	// name. Whatever was at name (a file, a link) is replaced, not
	// followed. A missing parent directory is fs.ErrNotExist.
	WriteFile(name string, r io.Reader, perm fs.FileMode, uid, gid int) error
	// Symlink makes name a symbolic link to target, replacing a link
	// already there atomically (readers see the old target or the new,
	// never no link).
	Symlink(target, name string) error
	// Mkdir creates the directory name with mode perm (less the umask,
	// on the local host); its parent must exist.
	Mkdir(name string, perm fs.FileMode) error
	// MkdirAll creates name and its missing parents, each with mode perm
	// (less the umask); an existing directory is no error.
	MkdirAll(name string, perm fs.FileMode) error
}

// FileRemover is how a handler removes files.
type FileRemover interface {
	// Remove removes the file, link or empty directory name.
	Remove(name string) error
	// RemoveAll removes name and everything below it; links inside are
	// removed, never what they point at. A missing name is no error.
	RemoveAll(name string) error
}

// FileMeta is how a handler changes ownership and mode.
type FileMeta interface {
	// Lchown sets the owner and group of name (-1 leaves one as it is),
	// of a link itself rather than what it points at.
	Lchown(name string, uid, gid int) error
	// Chmod sets the mode of name exactly (set-id and sticky bits
	// included). It fails rather than follow a link.
	Chmod(name string, mode fs.FileMode) error
}

// Info describes what is at a path, as FileReader.Lstat finds it.
type Info struct {
	// Mode is the type and the permission bits, set-id and sticky bits
	// included (fs.ModeSetuid, fs.ModeSetgid, fs.ModeSticky).
	Mode fs.FileMode
	// Size is the length of a regular file, or what the system reports.
	Size int64
	// UID and GID own the thing.
	UID, GID uint32
	// ModTime is the time of the last change to the content.
	ModTime time.Time
}

// IsDir reports whether info describes a directory.
func (i Info) IsDir() bool { return i.Mode.IsDir() }

// Perm returns the POSIX permission bits (0o7777: set-id and sticky
// included) of the mode.
func (i Info) Perm() uint32 {
	p := uint32(i.Mode.Perm())
	if i.Mode&fs.ModeSetuid != 0 {
		p |= 0o4000
	}
	if i.Mode&fs.ModeSetgid != 0 {
		p |= 0o2000
	}
	if i.Mode&fs.ModeSticky != 0 {
		p |= 0o1000
	}
	return p
}

// What only some targets can do is in optional interfaces, found by type
// assertion on the runtime's FS. A target without one loses what it gives,
// and says so where a handler needs it.

// Resolver is implemented by an FS that resolves symbolic links the way
// the target's kernel would. Runtime.HostPath needs it to keep paths below
// a Root (other than /) when a parent directory there is a link: without
// it such a path is refused. HostFS implements it; the SSH target does (the
// SFTP realpath request).
type Resolver interface {
	// RealPath returns name with every symbolic link in it resolved.
	RealPath(name string) (string, error)
}

// OnHost is implemented by an FS whose paths are paths of the agent's own
// host (HostFS). Only such paths can be watched for drift between deploys
// (inotify: Runtime.WatchPath returns nothing on any other target, whose
// drift the agent finds by verifying on an interval) and handed as they are
// to the host's own tools.
type OnHost interface {
	// OnHost reports whether the paths are the agent host's own.
	OnHost() bool
}
