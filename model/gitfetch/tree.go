package gitfetch

import (
	"context"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"slices"
	"strings"
)

// Tree writes a tree of files from an untrusted source into a destination
// through an os.Root, so that no write lands outside it, and keeps the
// running totals that Limits bound. Fetch writes a checkout with it; other
// sources (an archive) write theirs entry by entry with the same checks.
// Names are slash-separated and relative to the destination. After the
// last entry, Contained checks the links together.
type Tree struct {
	ctx    context.Context
	root   *os.Root
	limits Limits
	what   string // "repository" or "archive", for messages

	entries int
	bytes   int64
	links   map[string]string // name → target
	written map[string]bool
}

// NewTree starts a tree written into root; what names the source in
// messages ("repository", "archive").
func NewTree(ctx context.Context, root *os.Root, limits Limits, what string) *Tree {
	return &Tree{ctx: ctx, root: root, limits: limits, what: what, links: map[string]string{}, written: map[string]bool{}}
}

// Name checks an entry name and returns it cleaned: relative, without "..",
// and not below a symbolic link of the source (which could lead the write
// elsewhere). "" is the root itself.
func (t *Tree) Name(raw string) (string, error) {
	name := strings.TrimSuffix(strings.TrimPrefix(raw, "./"), "/")
	switch {
	case strings.HasPrefix(raw, "/"):
		return "", fmt.Errorf("%w: %q is an absolute path", ErrUnsafe, raw)
	case strings.ContainsRune(raw, 0):
		return "", fmt.Errorf("%w: %q has a NUL byte", ErrUnsafe, raw)
	case name == "" || name == ".":
		return "", nil // the root itself
	case slices.Contains(strings.Split(name, "/"), ".."):
		return "", fmt.Errorf("%w: %q has a .. component, which leads out", ErrUnsafe, raw)
	case path.Clean(name) != name:
		return "", fmt.Errorf("%w: %q is not a clean path", ErrUnsafe, raw)
	}
	for dir := path.Dir(name); dir != "."; dir = path.Dir(dir) {
		if _, ok := t.links[dir]; ok {
			return "", fmt.Errorf("%w: %q is below the symbolic link %s", ErrUnsafe, raw, dir)
		}
	}
	return name, nil
}

// count adds one entry of size bytes, refusing the source over a limit.
func (t *Tree) count(size int64) error {
	if err := t.ctx.Err(); err != nil {
		return deadline(err)
	}
	t.entries++
	if t.entries > t.limits.MaxFiles {
		return fmt.Errorf("%w: the %s has more than %d files (Limits.MaxFiles)", ErrLimit, t.what, t.limits.MaxFiles)
	}
	if size < 0 || size > t.limits.MaxBytes-t.bytes {
		return fmt.Errorf("%w: the %s's files add up to more than %d bytes (Limits.MaxBytes)", ErrLimit, t.what, t.limits.MaxBytes)
	}
	t.bytes += size
	return nil
}

// Dir makes a directory; it counts as an entry.
func (t *Tree) Dir(raw string) error {
	name, err := t.Name(raw)
	if err != nil || name == "" {
		return err
	}
	if err := t.count(0); err != nil {
		return err
	}
	if err := t.root.MkdirAll(name, 0o755); err != nil {
		return fmt.Errorf("%w: directory %s: %v", ErrUnsafe, name, err)
	}
	return nil
}

// File writes r, which must hold size bytes, as a new file.
func (t *Tree) File(raw string, executable bool, size int64, r io.Reader) error {
	name, err := t.Name(raw)
	if err != nil {
		return err
	}
	if name == "" {
		return fmt.Errorf("%w: a file named %q", ErrUnsafe, raw)
	}
	if err := t.count(size); err != nil {
		return err
	}
	if err := t.claim(name); err != nil {
		return err
	}
	if err := t.parent(name); err != nil {
		return err
	}
	perm := fs.FileMode(0o644)
	if executable {
		perm = 0o755
	}
	// O_EXCL: an entry never overwrites another, nor follows a link.
	f, err := t.root.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL, perm)
	if err != nil {
		return fmt.Errorf("%w: %s: %v", ErrUnsafe, name, err)
	}
	n, err := io.Copy(f, io.LimitReader(r, size+1))
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	switch {
	case err != nil:
		return fmt.Errorf("write %s: %w", name, err)
	case n != size:
		return fmt.Errorf("%w: %s holds %d bytes, not the %d its header says", ErrUnsafe, name, n, size)
	}
	return nil
}

// Symlink writes a link whose target stays inside the destination; the
// final check (Contained) follows chains of links.
func (t *Tree) Symlink(raw, target string) error {
	name, err := t.Name(raw)
	if err != nil {
		return err
	}
	if name == "" {
		return fmt.Errorf("%w: a link named %q", ErrUnsafe, raw)
	}
	if target == "" || strings.HasPrefix(target, "/") || strings.ContainsRune(target, 0) {
		return fmt.Errorf("%w: symbolic link %s points to %q, outside the source", ErrUnsafe, name, target)
	}
	if j := path.Join(path.Dir(name), target); j == ".." || strings.HasPrefix(j, "../") {
		return fmt.Errorf("%w: symbolic link %s points to %q, outside the source", ErrUnsafe, name, target)
	}
	if err := t.count(int64(len(target))); err != nil {
		return err
	}
	if err := t.claim(name); err != nil {
		return err
	}
	if err := t.parent(name); err != nil {
		return err
	}
	if err := t.root.Symlink(target, name); err != nil {
		return fmt.Errorf("%w: symbolic link %s: %v", ErrUnsafe, name, err)
	}
	t.links[name] = target
	return nil
}

func (t *Tree) parent(name string) error {
	if dir := path.Dir(name); dir != "." {
		if err := t.root.MkdirAll(dir, 0o755); err != nil {
			return fmt.Errorf("%w: directory %s: %v", ErrUnsafe, dir, err)
		}
	}
	return nil
}

func (t *Tree) claim(name string) error {
	if t.written[name] {
		return fmt.Errorf("%w: %s appears twice", ErrUnsafe, name)
	}
	t.written[name] = true
	return nil
}

// Contained refuses the tree if a chain of its links leads outside: each
// link is fine on its own, but "a -> ." then "b -> a/../x" climbs out.
func (t *Tree) Contained() error {
	for name, target := range t.links {
		if !resolvesInside(t.links, name) {
			return fmt.Errorf("%w: symbolic link %s points to %q, which leads outside the source", ErrUnsafe, name, target)
		}
	}
	return nil
}

// resolvesInside follows name through links (as the kernel would, over the
// links of this tree only) and says whether it stays inside the root.
func resolvesInside(links map[string]string, name string) bool {
	todo := strings.Split(name, "/")
	var cur []string
	for hops := 0; len(todo) > 0; {
		c := todo[0]
		todo = todo[1:]
		switch c {
		case "", ".":
			continue
		case "..":
			if len(cur) == 0 {
				return false
			}
			cur = cur[:len(cur)-1]
			continue
		}
		if target, ok := links[strings.Join(append(cur[:len(cur):len(cur)], c), "/")]; ok {
			if hops++; hops > 40 || strings.HasPrefix(target, "/") {
				return false
			}
			todo = append(strings.Split(target, "/"), todo...)
			continue
		}
		cur = append(cur, c)
	}
	return true
}
