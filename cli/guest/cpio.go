package guest

import (
	"fmt"
	"io"
	"io/fs"
	"path"
	"strings"
)

// newc writes a cpio archive in the "new ASCII" format (newc, magic
// 070701), the one the kernel unpacks as an initramfs: each entry is a
// 110-byte header of hexadecimal fields, its NUL-terminated name padded to
// four bytes, then its data padded to four bytes; "TRAILER!!!" ends it.
// Entries are owned by root. The kernel makes no missing directory, so
// each entry's parents are written before it, once.
type newc struct {
	w    io.Writer
	ino  int
	dirs map[string]bool
	err  error
}

const trailer = "TRAILER!!!"

// Unix file type bits of a cpio mode.
const (
	modeDir  = 0o040000
	modeFile = 0o100000
	modeLink = 0o120000
	modeChar = 0o020000
)

func (c *newc) dir(name string, perm fs.FileMode) {
	name = strings.Trim(name, "/")
	if c.dirs[name] {
		return
	}
	c.parents(name)
	if c.dirs == nil {
		c.dirs = map[string]bool{}
	}
	c.dirs[name] = true
	c.entry(name, modeDir|uint32(perm.Perm()), 2, 0, 0, nil)
}

// parents writes the directories above name not written yet.
func (c *newc) parents(name string) {
	if d := path.Dir(strings.Trim(name, "/")); d != "." {
		c.dir(d, 0o755)
	}
}

func (c *newc) file(name string, perm fs.FileMode, data []byte) {
	c.entry(name, modeFile|uint32(perm.Perm()), 1, 0, 0, data)
}

func (c *newc) symlink(name, target string) {
	c.entry(name, modeLink|0o777, 1, 0, 0, []byte(target))
}

// charDev is a character device node, such as /dev/console: the kernel
// opens it as init's standard input and output before any file system
// with device nodes is mounted.
func (c *newc) charDev(name string, perm fs.FileMode, major, minor uint32) {
	c.entry(name, modeChar|uint32(perm.Perm()), 1, major, minor, nil)
}

func (c *newc) entry(name string, mode, nlink, rmajor, rminor uint32, data []byte) {
	if c.err != nil {
		return
	}
	name = strings.Trim(name, "/")
	if mode&modeDir == 0 && name != trailer {
		c.parents(name)
	}
	c.ino++
	hdr := fmt.Sprintf("070701%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X",
		c.ino, mode, 0, 0, nlink, 0, len(data), 0, 0, rmajor, rminor, len(name)+1, 0)
	c.write([]byte(hdr))
	c.write(append([]byte(name), 0))
	c.pad(len(hdr) + len(name) + 1)
	c.write(data)
	c.pad(len(data))
}

// close writes the trailer.
func (c *newc) close() error {
	c.entry(trailer, 0, 1, 0, 0, nil)
	return c.err
}

func (c *newc) pad(n int) {
	if r := n % 4; r != 0 {
		c.write(make([]byte, 4-r))
	}
}

func (c *newc) write(b []byte) {
	if c.err == nil && len(b) > 0 {
		_, c.err = c.w.Write(b)
	}
}
