package handler

import (
	"errors"
	"fmt"
	"io/fs"
	"os/user"
	"strconv"

	"github.com/tetherhq/tether/model"
)

// Mode, owner and group are shared by every path-based kind (file,
// directory, symlink, …); these helpers read and apply them once.

// ReadMeta adds the managed metadata of info to current, in the vocabulary of
// the desired attributes: the desired mode string when the bits match (so
// "644" and "0644" agree), the owner as a name when a name is desired and as
// a number when a number is desired.
func ReadMeta(info Info, desired, current model.Attributes) {
	if want, ok := desired.String("mode"); ok {
		have := info.Perm()
		if m, err := model.ParseMode(want); err == nil && m == have {
			current["mode"] = want
		} else {
			current["mode"] = model.FormatMode(have)
		}
	}
	if want, ok := desired.String("owner"); ok {
		current["owner"] = principalName(want, info.UID, lookupUserName)
	}
	if want, ok := desired.String("group"); ok {
		current["group"] = principalName(want, info.GID, lookupGroupName)
	}
}

func principalName(want string, id uint32, lookup func(uint32) (string, bool)) string {
	num := strconv.FormatUint(uint64(id), 10)
	if _, err := strconv.ParseUint(want, 10, 32); err == nil {
		return num
	}
	if name, ok := lookup(id); ok {
		return name
	}
	return num
}

func lookupUserName(uid uint32) (string, bool) {
	u, err := user.LookupId(strconv.FormatUint(uint64(uid), 10))
	if err != nil {
		return "", false
	}
	return u.Username, true
}

func lookupGroupName(gid uint32) (string, bool) {
	g, err := user.LookupGroupId(strconv.FormatUint(uint64(gid), 10))
	if err != nil {
		return "", false
	}
	return g.Name, true
}

// ErrUnknownPrincipal is returned when an owner or group does not exist.
var ErrUnknownPrincipal = errors.New("unknown user or group")

// LookupUID resolves a user name or numeric uid.
func LookupUID(s string) (int, error) {
	if n, err := strconv.ParseUint(s, 10, 32); err == nil {
		return int(n), nil
	}
	u, err := user.Lookup(s)
	if err != nil {
		return 0, fmt.Errorf("%w: user %q: %w", ErrUnknownPrincipal, s, err)
	}
	return strconv.Atoi(u.Uid)
}

// LookupGID resolves a group name or numeric gid.
func LookupGID(s string) (int, error) {
	if n, err := strconv.ParseUint(s, 10, 32); err == nil {
		return int(n), nil
	}
	g, err := user.LookupGroup(s)
	if err != nil {
		return 0, fmt.Errorf("%w: group %q: %w", ErrUnknownPrincipal, s, err)
	}
	return strconv.Atoi(g.Gid)
}

// Ownership returns the uid and gid to set from the desired attributes, -1
// for what is not managed (os.Chown leaves -1 unchanged).
func Ownership(desired model.Attributes) (uid, gid int, err error) {
	uid, gid = -1, -1
	if s, ok := desired.String("owner"); ok {
		if uid, err = LookupUID(s); err != nil {
			return -1, -1, err
		}
	}
	if s, ok := desired.String("group"); ok {
		if gid, err = LookupGID(s); err != nil {
			return -1, -1, err
		}
	}
	return uid, gid, nil
}

// ApplyMeta sets the mode, owner and group that changes name on the thing
// at host path p (FileMeta: a link is not followed). Ownership goes first:
// chown clears set-id bits, chmod then restores them.
func (rt Runtime) ApplyMeta(p string, desired model.Attributes, changes Changes) error {
	fsys := rt.fsys()
	if changes.Has("owner") || changes.Has("group") {
		uid, gid, err := Ownership(desired)
		if err != nil {
			return err
		}
		if err := fsys.Lchown(p, uid, gid); err != nil {
			return err
		}
	}
	if changes.Has("mode") {
		s, _ := desired.String("mode")
		m, err := model.ParseMode(s)
		if err != nil {
			return err
		}
		if err := fsys.Chmod(p, modeBits(m)); err != nil {
			return err
		}
	}
	return nil
}

// modeBits converts POSIX permission bits to an fs.FileMode, set-id and sticky
// bits included.
func modeBits(m uint32) fs.FileMode {
	out := fs.FileMode(m & 0o777)
	if m&0o4000 != 0 {
		out |= fs.ModeSetuid
	}
	if m&0o2000 != 0 {
		out |= fs.ModeSetgid
	}
	if m&0o1000 != 0 {
		out |= fs.ModeSticky
	}
	return out
}

// ModeOrDefault returns the desired mode, or def when the mode is unmanaged.
func ModeOrDefault(desired model.Attributes, def uint32) fs.FileMode {
	if s, ok := desired.String("mode"); ok {
		if m, err := model.ParseMode(s); err == nil {
			return modeBits(m)
		}
	}
	return modeBits(def)
}
