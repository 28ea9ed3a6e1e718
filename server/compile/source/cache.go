package source

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sync"

	"github.com/tetherhq/tether/model/durable"
	"github.com/tetherhq/tether/model/gitfetch"
)

// ErrCache: the cache's directory cannot be used (made, written, cleared).
// What it wraps says why; the source itself may be fine.
var ErrCache = errors.New("source cache")

// Cache keeps on disk, between compiles, what was fetched of each source:
// a git repository's clone (gitfetch.Clone: a fetch downloads only what is
// new, nothing when the revision is the same) and the work tree of the
// revision checked out last, reused as long as the source names that
// revision and the tree is as it was written. Everything in it can be
// fetched again: an entry that cannot be read, or a work tree changed or
// removed behind its back, is fetched or written afresh.
//
// Each key (an environment) has an entry of its own; Checkout holds the
// key's lock until Release, so one key is used by one compile at a time,
// in this process or another given the same directory.
type Cache struct {
	dir string

	mu    sync.Mutex
	locks map[string]*sync.Mutex
}

// NewCache returns the cache kept in dir, made when first used.
func NewCache(dir string) *Cache {
	return &Cache{dir: dir, locks: map[string]*sync.Mutex{}}
}

// Dir is the cache's directory.
func (c *Cache) Dir() string { return c.dir }

// Tree is a model's files, checked out by a Cache.
type Tree struct {
	// Dir holds the files. The compile reads them (and may write its
	// module cache there: the next Checkout then writes the tree
	// afresh); nothing else changes them until Release.
	Dir      string
	Revision Revision
	// Downloaded: objects were fetched from the repository (git only).
	// Reused: the work tree was the one kept from before.
	Downloaded, Reused bool

	release func()
}

// Release lets the next Checkout of the key go on. It may be called more
// than once.
func (t *Tree) Release() {
	if t.release != nil {
		t.release()
		t.release = nil
	}
}

// Entry layout, below the key's directory.
const (
	sourceFile   = "source"    // which source the entry holds (see sourceID)
	cloneDir     = "git"       // a git source's clone
	treeDir      = "tree"      // the work tree
	manifestFile = "tree.json" // what the work tree holds, written after it
	newTreeDir   = "tree.new"  // a work tree being written
)

// Checkout brings key's work tree to the revision spec names now and
// returns it; the caller releases it when done with its files. A git
// source is fetched into the key's clone (only what is new); an archive
// is unpacked when its digest differs from the work tree's. The files are
// held to limits and the rules of Fetch (no link out, no name out). On
// error nothing is held.
func (c *Cache) Checkout(ctx context.Context, key string, spec Spec, limits Limits) (*Tree, error) {
	if err := spec.Validate(); err != nil {
		return nil, err
	}
	if err := limits.Validate(); err != nil {
		return nil, err
	}
	unlock, err := c.lock(ctx, key)
	if err != nil {
		return nil, err
	}
	t, err := c.checkout(ctx, key, spec, limits)
	if err != nil {
		unlock()
		return nil, err
	}
	t.release = unlock
	return t, nil
}

// lock takes key's lock: this process's, then the lock file beside its
// entry (another process's), which is never removed.
func (c *Cache) lock(ctx context.Context, key string) (func(), error) {
	c.mu.Lock()
	l, ok := c.locks[key]
	if !ok {
		l = &sync.Mutex{}
		c.locks[key] = l
	}
	c.mu.Unlock()
	l.Lock()
	if err := os.MkdirAll(c.dir, 0o700); err != nil {
		l.Unlock()
		return nil, fmt.Errorf("%w: %w", ErrCache, err)
	}
	unlockFile, err := lockFile(ctx, c.entryDir(key)+".lock")
	if err != nil {
		l.Unlock()
		if ctx.Err() != nil {
			return nil, fmt.Errorf("wait for the source cache: %w", err)
		}
		return nil, fmt.Errorf("%w: %w", ErrCache, err)
	}
	return func() { unlockFile(); l.Unlock() }, nil
}

// entryDir is key's directory: a digest, so that any key makes one name.
func (c *Cache) entryDir(key string) string {
	sum := sha256.Sum256([]byte(key))
	return filepath.Join(c.dir, hex.EncodeToString(sum[:16]))
}

// sourceID names what an entry holds: a new repository is a new clone.
func sourceID(spec Spec) string {
	if spec.Git != nil {
		return KindGit + " " + spec.Git.URL
	}
	return KindArchive
}

func (c *Cache) checkout(ctx context.Context, key string, spec Spec, limits Limits) (*Tree, error) {
	entry := c.entryDir(key)
	if err := c.prepare(entry, sourceID(spec)); err != nil {
		return nil, err
	}
	want := manifest{Subdir: spec.subdir(), Limits: limits}
	t := &Tree{Dir: filepath.Join(entry, treeDir)}
	var clone *gitfetch.Clone
	var auth gitfetch.Auth
	if spec.Git != nil {
		var err error
		if auth, err = spec.Git.auth(); err != nil {
			return nil, err
		}
		// The remote's listing says which commit the ref names: when the
		// work tree holds it, as written, neither the clone nor the tree
		// is touched.
		commit, err := gitfetch.Resolve(ctx, spec.Git.URL, spec.Git.Ref, auth)
		if err != nil {
			return nil, err
		}
		if want.Revision = Revision(commit); readManifest(entry).matches(want) && intact(t.Dir, entry) {
			t.Revision, t.Reused = want.Revision, true
			return t, nil
		}
		clone = gitfetch.OpenClone(filepath.Join(entry, cloneDir))
		commit, t.Downloaded, err = clone.Fetch(ctx, spec.Git.URL, spec.Git.Ref, auth)
		if err != nil {
			return nil, cacheError(err)
		}
		t.Revision = Revision(commit)
	} else {
		t.Revision = Digest(spec.Archive.Data)
	}
	want.Revision = t.Revision
	if readManifest(entry).matches(want) && intact(t.Dir, entry) {
		t.Reused = true
		return t, nil
	}
	write := func(root *os.Root) error {
		if clone == nil {
			_, err := extract(ctx, spec.Archive, root, limits)
			return err
		}
		return clone.Checkout(ctx, string(t.Revision), gitfetch.Checkout{Root: root, Subdir: spec.Git.Subdir, Limits: limits})
	}
	err := c.writeTree(entry, want, write)
	if errors.Is(err, gitfetch.ErrDamaged) {
		// The clone could not be read: fetch it afresh, once.
		if err := clone.Reset(); err != nil {
			return nil, cacheError(err)
		}
		commit, _, ferr := clone.Fetch(ctx, spec.Git.URL, spec.Git.Ref, auth)
		if ferr != nil {
			return nil, cacheError(ferr)
		}
		t.Revision, t.Downloaded, want.Revision = Revision(commit), true, Revision(commit)
		err = c.writeTree(entry, want, write)
	}
	if err != nil {
		return nil, cacheError(err)
	}
	return t, nil
}

// cacheError is err, an ErrCache when the clone could not be made or
// repaired: the cache's fault, not the source's.
func cacheError(err error) error {
	if errors.Is(err, gitfetch.ErrDamaged) && !errors.Is(err, ErrCache) {
		return fmt.Errorf("%w: %w", ErrCache, err)
	}
	return err
}

// prepare makes entry's directory, emptied first when it holds another
// source than id, or when what it holds cannot be told.
func (c *Cache) prepare(entry, id string) error {
	if b, err := os.ReadFile(filepath.Join(entry, sourceFile)); err == nil && string(b) == id {
		return nil
	}
	if err := os.RemoveAll(entry); err != nil {
		return fmt.Errorf("%w: clear %s: %w", ErrCache, entry, err)
	}
	if err := os.MkdirAll(entry, 0o700); err != nil {
		return fmt.Errorf("%w: %w", ErrCache, err)
	}
	if err := durable.WriteFile(filepath.Join(entry, sourceFile), []byte(id), 0o600, durable.NoSync()); err != nil {
		return fmt.Errorf("%w: %w", ErrCache, err)
	}
	return nil
}

// writeTree writes a work tree with write into a new directory, then puts
// it in the old one's place with its manifest. The manifest goes first
// and comes back last: a tree without one (a crash between) is written
// again.
func (c *Cache) writeTree(entry string, m manifest, write func(*os.Root) error) error {
	tmp := filepath.Join(entry, newTreeDir)
	if err := os.RemoveAll(tmp); err != nil {
		return fmt.Errorf("%w: %w", ErrCache, err)
	}
	if err := os.Mkdir(tmp, 0o700); err != nil {
		return fmt.Errorf("%w: %w", ErrCache, err)
	}
	root, err := os.OpenRoot(tmp)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrCache, err)
	}
	err = write(root)
	root.Close()
	if err != nil {
		_ = os.RemoveAll(tmp)
		return err
	}
	if m.Entries, err = scan(tmp); err != nil {
		_ = os.RemoveAll(tmp)
		return fmt.Errorf("%w: %w", ErrCache, err)
	}
	tree := filepath.Join(entry, treeDir)
	b, err := json.Marshal(m)
	if err == nil {
		err = os.Remove(filepath.Join(entry, manifestFile))
		if errors.Is(err, fs.ErrNotExist) {
			err = nil
		}
	}
	if err == nil {
		err = os.RemoveAll(tree)
	}
	if err == nil {
		err = os.Rename(tmp, tree)
	}
	if err == nil {
		err = durable.WriteFile(filepath.Join(entry, manifestFile), b, 0o600, durable.NoSync())
	}
	if err != nil {
		return fmt.Errorf("%w: %w", ErrCache, err)
	}
	return nil
}

// Forget removes key's entry (its lock file stays). A key in use is
// removed once released.
func (c *Cache) Forget(ctx context.Context, key string) error {
	unlock, err := c.lock(ctx, key)
	if err != nil {
		return err
	}
	defer unlock()
	if err := os.RemoveAll(c.entryDir(key)); err != nil {
		return fmt.Errorf("%w: %w", ErrCache, err)
	}
	return nil
}

// subdir is the model's directory inside the source.
func (s Spec) subdir() string {
	if s.Git != nil {
		return s.Git.Subdir
	}
	return s.Archive.Subdir
}

// manifest is what a work tree holds, as it was written: the revision and
// how it was checked out, and every entry with what a change to it would
// change (as git's index tells a changed file by its size and time).
type manifest struct {
	Revision Revision   `json:"revision"`
	Subdir   string     `json:"subdir"`
	Limits   Limits     `json:"limits"`
	Entries  []treeItem `json:"entries"`
}

type treeItem struct {
	Name    string      `json:"name"`
	Mode    fs.FileMode `json:"mode"`
	Size    int64       `json:"size,omitempty"`
	ModTime int64       `json:"mtime,omitempty"` // Unix nanoseconds; files only
	Link    string      `json:"link,omitempty"`
}

// matches says whether m is a checkout of want's revision, as want asks.
func (m manifest) matches(want manifest) bool {
	return m.Revision != "" && m.Revision == want.Revision && m.Subdir == want.Subdir && m.Limits == want.Limits
}

// readManifest reads entry's manifest; a missing or unreadable one is the
// zero manifest, which matches nothing.
func readManifest(entry string) manifest {
	var m manifest
	b, err := os.ReadFile(filepath.Join(entry, manifestFile))
	if err != nil || json.Unmarshal(b, &m) != nil {
		return manifest{}
	}
	return m
}

// intact says whether the work tree holds exactly what its manifest says.
func intact(tree, entry string) bool {
	if fi, err := os.Lstat(tree); err != nil || !fi.IsDir() {
		return false
	}
	items, err := scan(tree)
	return err == nil && slices.Equal(items, readManifest(entry).Entries)
}

// scan lists what dir holds, without following links, sorted by name.
func scan(dir string) ([]treeItem, error) {
	var items []treeItem
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if p == dir {
			return nil
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		it := treeItem{Name: filepath.ToSlash(rel), Mode: info.Mode()}
		switch {
		case info.Mode().IsRegular():
			it.Size, it.ModTime = info.Size(), info.ModTime().UnixNano()
		case info.Mode()&fs.ModeSymlink != 0:
			if it.Link, err = os.Readlink(p); err != nil {
				return err
			}
		}
		items = append(items, it)
		return nil
	})
	return items, err
}
