// Package account holds the handlers for `user` and `group` resources. They
// read the account database (/etc/passwd, /etc/group, /etc/shadow below the
// agent's root) directly, which is fast and changes nothing, and change it
// only through shadow-utils (useradd, usermod, userdel, chpasswd, groupadd,
// groupmod, groupdel), which lock the files and keep them consistent. Below
// a root prefix the tools get --prefix (chpasswd: --root), so a sandboxed
// agent edits its own copy. A password hash reaches chpasswd on its
// standard input, never on a command line.
package account

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"slices"
	"strconv"
	"strings"

	"github.com/tetherhq/tether/agent/handler"
	"github.com/tetherhq/tether/model"
)

// The account files, as resource paths (below the runtime's root).
const (
	PasswdFile = "/etc/passwd"
	GroupFile  = "/etc/group"
	ShadowFile = "/etc/shadow"
)

type passwdEntry struct {
	name          string
	uid, gid      uint64
	comment, home string
	shell         string
}

type groupEntry struct {
	name    string
	gid     uint64
	members []string
}

// readFields returns the colon-separated lines of an account file with at
// least n fields; a missing file is empty.
func readFields(rt handler.Runtime, path string, n int) ([][]string, error) {
	p, err := rt.HostPath(path)
	if err != nil {
		return nil, err
	}
	b, err := rt.WithFS().FS.ReadFile(p)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out [][]string
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 0, 64*1024), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || strings.HasPrefix(line, "#") || strings.HasPrefix(line, "+") || strings.HasPrefix(line, "-") {
			continue // comments and NIS compat entries are not local accounts
		}
		f := strings.Split(line, ":")
		if len(f) < n {
			continue
		}
		out = append(out, f)
	}
	return out, sc.Err()
}

func lookupUser(rt handler.Runtime, name string) (passwdEntry, bool, error) {
	rows, err := readFields(rt, PasswdFile, 7)
	if err != nil {
		return passwdEntry{}, false, err
	}
	for _, f := range rows {
		if f[0] != name {
			continue
		}
		uid, err1 := strconv.ParseUint(f[2], 10, 32)
		gid, err2 := strconv.ParseUint(f[3], 10, 32)
		if err1 != nil || err2 != nil {
			return passwdEntry{}, false, fmt.Errorf("%s: the entry of %s has a malformed uid or gid", PasswdFile, name)
		}
		return passwdEntry{name: f[0], uid: uid, gid: gid, comment: f[4], home: f[5], shell: f[6]}, true, nil
	}
	return passwdEntry{}, false, nil
}

func readGroups(rt handler.Runtime) ([]groupEntry, error) {
	rows, err := readFields(rt, GroupFile, 4)
	if err != nil {
		return nil, err
	}
	out := make([]groupEntry, 0, len(rows))
	for _, f := range rows {
		gid, err := strconv.ParseUint(f[2], 10, 32)
		if err != nil {
			return nil, fmt.Errorf("%s: the entry of %s has a malformed gid", GroupFile, f[0])
		}
		g := groupEntry{name: f[0], gid: gid}
		if f[3] != "" {
			g.members = strings.Split(f[3], ",")
		}
		out = append(out, g)
	}
	return out, nil
}

// shadowHash returns the password field of name in the shadow file.
func shadowHash(rt handler.Runtime, name string) (string, error) {
	rows, err := readFields(rt, ShadowFile, 2)
	if err != nil {
		return "", err
	}
	for _, f := range rows {
		if f[0] == name {
			return f[1], nil
		}
	}
	return "", nil
}

// groupName resolves a group name or numeric gid to a group, by the
// vocabulary of want: a number when want is a number, else the name (the
// number when no group has that gid).
func groupName(groups []groupEntry, want string, gid uint64) string {
	num := strconv.FormatUint(gid, 10)
	if _, err := strconv.ParseUint(want, 10, 32); err == nil {
		return num
	}
	for _, g := range groups {
		if g.gid == gid {
			return g.name
		}
	}
	return num
}

// sameSet reports whether two lists hold the same names, in any order.
func sameSet(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	a, b = slices.Clone(a), slices.Clone(b)
	slices.Sort(a)
	slices.Sort(b)
	return slices.Equal(a, b)
}

// integer reads a uid or gid attribute as its decimal text for the
// shadow-utils.
func integer(a model.Attributes, name string) string {
	n, _ := a.Int(name)
	return strconv.FormatInt(n, 10)
}

// prefixArgs returns the shadow-utils arguments that point the tools at the
// runtime's root.
func prefixArgs(rt handler.Runtime) []string {
	if rt.Root == "" || rt.Root == "/" {
		return nil
	}
	return []string{"--prefix", rt.Root}
}

// watchPaths are the account files a user or group is read from.
func watchPaths(rt handler.Runtime) []string {
	var out []string
	for _, p := range []string{PasswdFile, GroupFile, ShadowFile} {
		out = append(out, rt.WatchPath(p)...)
	}
	return out
}

// WatchPaths implements handler.Watcher.
func (h *User) WatchPaths(*model.Resource) ([]string, bool) { return watchPaths(h.rt), false }

// WatchPaths implements handler.Watcher.
func (h *Group) WatchPaths(*model.Resource) ([]string, bool) { return watchPaths(h.rt), false }
