package gitfetch

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"

	"github.com/go-git/go-billy/v5/osfs"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/cache"
	"github.com/go-git/go-git/v5/storage/filesystem"
)

// ErrDamaged: a Clone could not be read (a pack or an object is missing or
// corrupt). Reset it and fetch again.
var ErrDamaged = errors.New("the local clone is damaged")

// errRead marks the errors of reading a repository's objects, apart from
// those of writing its tree: a Clone that cannot be read is damaged.
var errRead = errors.New("read")

// readErrors marks the errors of reading a blob as errRead.
type readErrors struct{ r io.Reader }

func (r readErrors) Read(p []byte) (int, error) {
	n, err := r.r.Read(p)
	if err != nil && err != io.EOF {
		err = fmt.Errorf("%w: %w", errRead, err)
	}
	return n, err
}

// maxPacks bounds the packs a Clone holds: each fetch that downloads
// something adds one, and every lookup reads their indexes. Past it the
// clone is fetched afresh, which also drops what a rewritten history left.
const maxPacks = 64

// Clone is a repository's objects kept in a directory between fetches (a
// bare repository without a work tree), so that a fetch downloads only
// what the clone lacks, and nothing when it holds the commit asked for. It
// is a cache: a clone that cannot be read is removed and fetched afresh.
// A Clone is not safe for concurrent use, nor is its directory: the
// caller gives each one a directory of its own and uses it from one
// goroutine at a time.
type Clone struct {
	dir string
}

// OpenClone returns the clone kept in dir; a directory that does not
// exist is made by the first fetch.
func OpenClone(dir string) *Clone { return &Clone{dir: dir} }

// Dir is the clone's directory.
func (c *Clone) Dir() string { return c.dir }

func (c *Clone) storage() (*filesystem.Storage, error) {
	if err := os.MkdirAll(c.dir, 0o700); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrDamaged, err)
	}
	return filesystem.NewStorage(osfs.New(c.dir), cache.NewObjectLRUDefault()), nil
}

// Reset removes what the clone holds: the next fetch downloads it all.
func (c *Clone) Reset() error {
	if err := os.RemoveAll(c.dir); err != nil {
		return fmt.Errorf("%w: remove %s: %w", ErrDamaged, c.dir, err)
	}
	return nil
}

// Fetch makes the clone hold ref ("" is the remote's HEAD: a branch, a
// tag, a full ref name or a commit id, as for Fetch) of the repository at
// url as the remote has it now, and returns its commit. Nothing is
// downloaded when the clone holds that commit; otherwise only what the
// clone lacks, that commit alone where the server allows (depth 1). A ref
// that moved to another history (a force push) is followed. When the
// fetch fails for a reason that may be the clone's (not the network's,
// the credentials' or the deadline's), the clone is fetched afresh, once.
// Downloaded says whether anything was fetched from the repository.
func (c *Clone) Fetch(ctx context.Context, url, ref string, auth Auth) (commit string, downloaded bool, err error) {
	r, err := open(ctx, url, ref, auth)
	if err != nil {
		return "", false, err
	}
	defer r.close()
	if n := c.packs(); n > maxPacks {
		if err := c.Reset(); err != nil {
			return "", false, err
		}
	}
	commit, downloaded, err = c.fetch(ctx, url, r)
	if err == nil || !c.mayBeDamaged(ctx, err) {
		return commit, downloaded, err
	}
	if rerr := c.Reset(); rerr != nil {
		return "", false, fmt.Errorf("%w (after: %w)", rerr, err)
	}
	return c.fetch(ctx, url, r)
}

func (c *Clone) fetch(ctx context.Context, url string, r *remoteRef) (string, bool, error) {
	st, err := c.storage()
	if err != nil {
		return "", false, err
	}
	h, fetched, err := fetchInto(ctx, st, url, r)
	if err != nil {
		return "", fetched, err
	}
	return h.String(), fetched, nil
}

// mayBeDamaged says whether a failed fetch could be the clone's fault:
// not the deadline's, the credentials', nor the network's.
func (c *Clone) mayBeDamaged(ctx context.Context, err error) bool {
	var op *net.OpError
	var dns *net.DNSError
	return ctx.Err() == nil && !errors.Is(err, ErrAuth) && !errors.Is(err, ErrInvalid) && !errors.As(err, &op) && !errors.As(err, &dns)
}

// packs counts the clone's packs.
func (c *Clone) packs() int {
	m, _ := filepath.Glob(filepath.Join(c.dir, "objects", "pack", "*.pack"))
	return len(m)
}

// Checkout writes the tree of commit, which a Fetch returned, below
// co.Subdir into co.Root, within co.Limits, as Fetch does. An object the
// clone cannot read is an ErrDamaged error: Reset the clone, fetch again
// and check out again.
func (c *Clone) Checkout(ctx context.Context, commit string, co Checkout) error {
	if err := co.Limits.Validate(); err != nil {
		return err
	}
	if co.Root == nil {
		return fmt.Errorf("check out %s: no destination", commit)
	}
	if !IsCommitID(commit) {
		return fmt.Errorf("%w: check out %q: not a commit id", ErrInvalid, commit)
	}
	st, err := c.storage()
	if err != nil {
		return err
	}
	err = checkoutCommit(ctx, st, plumbing.NewHash(commit), "clone", co)
	if errors.Is(err, errRead) && ctx.Err() == nil {
		return fmt.Errorf("%w: %w", ErrDamaged, err)
	}
	return err
}
