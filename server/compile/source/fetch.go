package source

import (
	"archive/tar"
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"fmt"
	"io"
	"os"
	"path"
	"strings"

	"github.com/tetherhq/tether/model/gitfetch"
)

// The classes of fetch errors, for callers to report (errors.Is). They are
// gitfetch's, which writes both kinds of source.
var (
	// ErrUnreachable: the repository could not be reached or does not exist.
	ErrUnreachable = gitfetch.ErrUnreachable
	// ErrAuth: the server refused the credentials, or asked for some.
	ErrAuth = gitfetch.ErrAuth
	// ErrRefNotFound: no branch, tag or commit by that name, or no such
	// sub-directory at it.
	ErrRefNotFound = gitfetch.ErrRefNotFound
	// ErrLimit: the source is over one of the Limits, or past the deadline.
	ErrLimit = gitfetch.ErrLimit
	// ErrUnsafe: the source holds something that is not written: a path
	// leading out, a link pointing out, a device, a malformed archive.
	ErrUnsafe = gitfetch.ErrUnsafe
)

// Revision identifies what was fetched: a commit id (40 hex digits) for git,
// the SHA-256 of the archive (64 hex digits) for an archive.
type Revision string

// Limits bound what one fetch writes (MaxBytes, MaxFiles). The deadline is
// the context's.
type Limits = gitfetch.Limits

// DefaultLimits fits a large model with room to spare.
func DefaultLimits() Limits { return gitfetch.DefaultLimits() }

// Fetch writes the model's files (the sub-directory's, when there is one)
// into dst, which must be empty or not exist, and returns their revision.
// On error dst is left empty. Links are written as links only when they
// resolve inside dst; any other link refuses the whole source, as do
// hard links, devices, pipes and names leading out.
func Fetch(ctx context.Context, spec Spec, dst string, limits Limits) (Revision, error) {
	if err := spec.Validate(); err != nil {
		return "", err
	}
	if err := limits.Validate(); err != nil {
		return "", err
	}
	if err := os.MkdirAll(dst, 0o755); err != nil {
		return "", fmt.Errorf("source destination: %w", err)
	}
	if entries, err := os.ReadDir(dst); err != nil {
		return "", fmt.Errorf("source destination: %w", err)
	} else if len(entries) > 0 {
		return "", fmt.Errorf("source destination %s is not empty", dst)
	}
	root, err := os.OpenRoot(dst)
	if err != nil {
		return "", fmt.Errorf("source destination: %w", err)
	}
	defer root.Close()
	var rev Revision
	if spec.Git != nil {
		rev, err = fetchGit(ctx, spec.Git, root, limits)
	} else {
		rev, err = extract(ctx, spec.Archive, root, limits)
	}
	if err != nil {
		emptyDir(dst)
		return "", err
	}
	return rev, nil
}

// Resolve returns the revision spec names now, without fetching it: for
// git, the commit its ref names, from a listing of the remote's refs (as
// git ls-remote does), cheap enough to poll a repository for new commits;
// for an archive, its digest, as Fetch returns it. The sub-directory is
// not checked, and a commit id no ref points at is returned unchecked:
// only Fetch can tell whether the repository has it.
func Resolve(ctx context.Context, spec Spec) (Revision, error) {
	if err := spec.Validate(); err != nil {
		return "", err
	}
	if spec.Archive != nil {
		return Revision(archiveDigest(spec.Archive.Data)), nil
	}
	auth, err := spec.Git.auth()
	if err != nil {
		return "", err
	}
	commit, err := gitfetch.Resolve(ctx, spec.Git.URL, spec.Git.Ref, auth)
	if err != nil {
		return "", err
	}
	return Revision(commit), nil
}

// emptyDir empties dir after a failed fetch; what cannot be removed is left for
// the caller, who removes the directory anyway.
func emptyDir(dir string) {
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		_ = os.RemoveAll(dir + string(os.PathSeparator) + e.Name())
	}
}

// extract writes the archive's entries under its sub-directory.
func extract(ctx context.Context, a *ArchiveSpec, root *os.Root, limits Limits) (Revision, error) {
	var r io.Reader = bytes.NewReader(a.Data)
	if len(a.Data) >= 2 && a.Data[0] == 0x1f && a.Data[1] == 0x8b {
		zr, err := gzip.NewReader(r)
		if err != nil {
			return "", fmt.Errorf("%w: archive: gzip: %v", ErrUnsafe, err)
		}
		defer zr.Close()
		r = bufio.NewReader(zr)
	}
	t := gitfetch.NewTree(ctx, root, limits, "archive")
	prefix := ""
	if a.Subdir != "" && path.Clean(a.Subdir) != "." {
		prefix = path.Clean(a.Subdir) + "/"
	}
	tr := tar.NewReader(r)
	read, found := 0, prefix == ""
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return "", fmt.Errorf("%w: archive: %v", ErrUnsafe, err)
		}
		// Every entry read counts, kept or not: a bomb of skipped entries
		// costs as much to read.
		if read++; read > limits.MaxFiles {
			return "", fmt.Errorf("%w: the archive has more than %d entries (Limits.MaxFiles)", ErrLimit, limits.MaxFiles)
		}
		if h.Typeflag == tar.TypeXGlobalHeader {
			continue
		}
		name, err := t.Name(h.Name) // checked before the prefix is stripped
		if err != nil {
			return "", fmt.Errorf("archive: %w", err)
		}
		if prefix != "" {
			if name+"/" == prefix {
				found = true
				continue
			}
			rest, ok := strings.CutPrefix(name, prefix)
			if !ok {
				continue
			}
			found, name = true, rest
		}
		switch h.Typeflag {
		case tar.TypeDir:
			err = t.Dir(name)
		case tar.TypeReg:
			err = t.File(name, h.Mode&0o111 != 0, h.Size, tr)
		case tar.TypeSymlink:
			err = t.Symlink(name, h.Linkname)
		case tar.TypeLink:
			err = fmt.Errorf("%w: %s is a hard link; archives may hold files, directories and symbolic links", ErrUnsafe, h.Name)
		default:
			err = fmt.Errorf("%w: %s is a %s; archives may hold files, directories and symbolic links", ErrUnsafe, h.Name, typeName(h.Typeflag))
		}
		if err != nil {
			return "", fmt.Errorf("archive: %w", err)
		}
	}
	if !found {
		return "", fmt.Errorf("%w: the archive has no sub-directory %s", ErrRefNotFound, a.Subdir)
	}
	if err := t.Contained(); err != nil {
		return "", fmt.Errorf("archive: %w", err)
	}
	return Revision(archiveDigest(a.Data)), nil
}

func typeName(flag byte) string {
	switch flag {
	case tar.TypeChar:
		return "character device"
	case tar.TypeBlock:
		return "block device"
	case tar.TypeFifo:
		return "named pipe"
	}
	return fmt.Sprintf("tar entry of type %q", flag)
}
