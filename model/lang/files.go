package lang

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"

	"github.com/hashicorp/hcl/v2"
)

// tree is a directory tree a compile may read: the project, or the checkout
// of a git module. Every file is opened through its os.Root, so a path or a
// symbolic link may lead only to a file of the tree, even if a link is
// swapped between a check and an open.
type tree struct {
	dir  string // absolute, as opened
	real string // dir with its symbolic links resolved (for explanations)
	root *os.Root
}

func openTree(dir string) (*tree, error) {
	root, err := os.OpenRoot(dir)
	if err != nil {
		return nil, err
	}
	real, err := filepath.EvalSymlinks(dir)
	if err != nil {
		real = dir
	}
	return &tree{dir: dir, real: real, root: root}, nil
}

func (t *tree) close() {
	if t != nil && t.root != nil {
		t.root.Close()
	}
}

// rel is p relative to the tree, or false when p is not below it.
func (t *tree) rel(p string) (string, bool) {
	if !within(t.dir, p) {
		return "", false
	}
	rel, err := filepath.Rel(t.dir, p)
	return rel, err == nil
}

// Reasons a file of the model is not read. They name no content of the
// file: a diagnostic may be shown to whoever wrote the model.
var (
	errLeadsOutside = errors.New("leads outside the model directory")
	errNotRegular   = errors.New("not a regular file")
	errFileTooLarge = errors.New("file too large")
	errTooMuchRead  = errors.New("too much read")
	errTooManyFiles = errors.New("too many files")
)

// open opens the regular file rel of the tree for reading. The type is
// checked on the opened descriptor (fstat) and the open does not block
// (O_NONBLOCK), so a named pipe, a device or a socket is refused rather
// than read from.
func (t *tree) open(rel string) (*os.File, fs.FileInfo, error) {
	const flags = os.O_RDONLY | syscall.O_NONBLOCK
	f, err := t.root.OpenFile(rel, flags, 0)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		// The root refuses a link leading out of it, and an absolute link
		// even when it leads back inside: tell the two apart.
		target, inside := t.resolve(filepath.Join(t.dir, rel))
		if !inside {
			return nil, nil, errLeadsOutside
		}
		if r, rerr := filepath.Rel(t.real, target); target != "" && rerr == nil && r != rel {
			f, err = t.root.OpenFile(r, flags, 0)
		}
		if err != nil {
			// A socket cannot even be opened.
			if st, serr := t.root.Stat(rel); serr == nil && !st.Mode().IsRegular() {
				return nil, nil, fmt.Errorf("%w (%s)", errNotRegular, fileKind(st.Mode()))
			}
		}
	}
	if err != nil {
		return nil, nil, unwrapPathError(err)
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, nil, unwrapPathError(err)
	}
	if !st.Mode().IsRegular() {
		f.Close()
		return nil, nil, fmt.Errorf("%w (%s)", errNotRegular, fileKind(st.Mode()))
	}
	return f, st, nil
}

// read returns the content of the regular file rel, refusing one larger
// than max. The size is checked on the descriptor and enforced while
// reading (a file may grow, and a size may lie).
func (t *tree) read(rel string, max int64) ([]byte, error) {
	f, st, err := t.open(rel)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if st.Size() > max {
		return nil, errFileTooLarge
	}
	// Sized from fstat, read until the end or past max.
	b := make([]byte, 0, st.Size()+1)
	for {
		if len(b) == cap(b) {
			b = append(b, 0)[:len(b)]
		}
		n, err := f.Read(b[len(b):cap(b)])
		b = b[:len(b)+n]
		if int64(len(b)) > max {
			return nil, errFileTooLarge
		}
		if errors.Is(err, io.EOF) {
			return b, nil
		}
		if err != nil {
			return nil, unwrapPathError(err)
		}
	}
}

// modelFiles lists the names of the *.hcl entries of directory rel of the
// tree, sorted, reading the directory in batches and refusing more than
// max of them.
func (t *tree) modelFiles(rel string, max int) ([]string, error) {
	d, err := t.root.Open(rel)
	if err != nil {
		if _, inside := t.resolve(filepath.Join(t.dir, rel)); !inside {
			return nil, errLeadsOutside
		}
		return nil, unwrapPathError(err)
	}
	defer d.Close()
	var names []string
	for {
		batch, err := d.ReadDir(1024)
		for _, e := range batch {
			if strings.HasSuffix(e.Name(), ".hcl") {
				names = append(names, e.Name())
				if len(names) > max {
					return nil, errTooManyFiles
				}
			}
		}
		if errors.Is(err, io.EOF) || len(batch) == 0 {
			break
		}
		if err != nil {
			return nil, unwrapPathError(err)
		}
	}
	slices.Sort(names)
	return names, nil
}

// resolve follows the symbolic links of p as far as they exist and
// reports where they lead ("" if that cannot be told) and whether it is
// inside the tree. It only explains a refusal: the root enforces it.
func (t *tree) resolve(p string) (string, bool) {
	for hops := 0; hops < 40; hops++ {
		if real, err := filepath.EvalSymlinks(p); err == nil {
			return real, within(t.real, real)
		}
		// Some part is missing: resolve the directory, then the last step.
		dir, err := filepath.EvalSymlinks(filepath.Dir(p))
		if err != nil {
			return "", true
		}
		p = filepath.Join(dir, filepath.Base(p))
		if !within(t.real, p) {
			return p, false
		}
		target, err := os.Readlink(p)
		if err != nil {
			return p, true // a missing file inside the tree
		}
		if !filepath.IsAbs(target) {
			target = filepath.Join(dir, target)
		}
		p = filepath.Clean(target)
	}
	return "", true
}

// fileKind names a file type for a refusal.
func fileKind(m fs.FileMode) string {
	switch {
	case m&fs.ModeNamedPipe != 0:
		return "a named pipe"
	case m&fs.ModeSocket != 0:
		return "a socket"
	case m&fs.ModeDevice != 0:
		return "a device"
	case m.IsDir():
		return "a directory"
	case m&fs.ModeSymlink != 0:
		return "a symbolic link"
	}
	return "not a regular file"
}

// readModelFile reads a file named relative to a unit's directory, for
// file() and templatefile(): inside the unit's tree, a regular file within
// the size limits. A file is read once per compile.
func (c *compiler) readModelFile(u *unit, name string) (string, string, error) {
	if filepath.IsAbs(name) {
		return "", "", fmt.Errorf("%q is absolute; name files relative to the model directory", name)
	}
	p := filepath.Join(u.dir, name)
	if _, ok := u.tree.rel(p); !ok {
		return "", "", fmt.Errorf("%q is outside the model directory", name)
	}
	b, err := c.readFile(u.tree, p)
	if err != nil {
		return "", "", c.fileError(name, err)
	}
	return p, string(b), nil
}

// fileError explains why a file named by the model was not read, naming
// the file as the model does and never its target or content.
func (c *compiler) fileError(name string, err error) error {
	switch {
	case errors.Is(err, errLeadsOutside):
		return fmt.Errorf("%q leads outside the model directory (a symbolic link); it was not read", name)
	case errors.Is(err, errNotRegular):
		return fmt.Errorf("read %s: %w", name, err)
	case errors.Is(err, errFileTooLarge):
		return fmt.Errorf("%s is larger than %s, the largest file a compile reads (Options.MaxFileSize)", name, bytesText(c.limits.fileSize))
	case errors.Is(err, errTooMuchRead):
		return fmt.Errorf("reading %s takes the compile past %s of files read (Options.MaxTotalSize)", name, bytesText(c.limits.totalSize))
	case errors.Is(err, errTooManyFiles):
		return fmt.Errorf("reading %s takes the compile past %d files read", name, maxFiles)
	}
	return fmt.Errorf("read %s: %w", name, err)
}

// readFile reads the file at p (absolute, below t) once per compile,
// counting it against the limits, and records it as an input.
func (c *compiler) readFile(t *tree, p string) ([]byte, error) {
	if b, ok := c.fileCache[p]; ok {
		return b, nil
	}
	rel, ok := t.rel(p)
	if !ok {
		return nil, errLeadsOutside
	}
	if len(c.fileCache) >= maxFiles {
		return nil, errTooManyFiles
	}
	max := min(c.limits.fileSize, c.limits.totalSize-c.totalRead)
	b, err := t.read(rel, max)
	if errors.Is(err, errFileTooLarge) && max < c.limits.fileSize {
		return nil, errTooMuchRead
	}
	if err != nil {
		return nil, err
	}
	c.totalRead += int64(len(b))
	c.fileCache[p] = b
	c.record(p, b)
	return b, nil
}

func unwrapPathError(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}

// within reports whether p is dir or below it.
func within(dir, p string) bool {
	rel, err := filepath.Rel(dir, p)
	return err == nil && rel != ".." && !strings.HasPrefix(rel, ".."+string(filepath.Separator))
}

// fileStart is the start of a file, for a diagnostic about the file as a
// whole.
func fileStart(shown string) *hcl.Range {
	return &hcl.Range{Filename: shown, Start: hcl.Pos{Line: 1, Column: 1}, End: hcl.Pos{Line: 1, Column: 1}}
}

// fileDiag is the diagnostic of a model file that was not read for one of
// the sandbox's reasons (nil for an ordinary I/O error). It names the file
// and never its target or content.
func (c *compiler) fileDiag(shown string, err error) *hcl.Diagnostic {
	switch {
	case errors.Is(err, errLeadsOutside):
		return errorf(fileStart(shown), "Model file outside the model",
			"%s is a symbolic link leading outside the model directory; it was not read", shown)
	case errors.Is(err, errNotRegular):
		return errorf(fileStart(shown), "Model file not read", "%s is %v", shown, err)
	case errors.Is(err, errFileTooLarge):
		return errorf(fileStart(shown), "Model file too large",
			"%s is larger than %s, the largest file a compile reads (Options.MaxFileSize)", shown, bytesText(c.limits.fileSize))
	case errors.Is(err, errTooMuchRead):
		return errorf(fileStart(shown), "Model too large",
			"reading %s takes the compile past %s of files read (Options.MaxTotalSize)", shown, bytesText(c.limits.totalSize))
	case errors.Is(err, errTooManyFiles):
		return errorf(fileStart(shown), "Model too large", "reading %s takes the compile past %d files read", shown, maxFiles)
	}
	return nil
}
