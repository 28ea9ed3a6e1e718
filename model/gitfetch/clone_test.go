package gitfetch

import (
	"context"
	"errors"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tetherhq/tether/model/gitfetch/gittest"
)

// checkoutOf writes commit of c into a new directory and returns it.
func checkoutOf(t *testing.T, c *Clone, commit, subdir string) (string, error) {
	t.Helper()
	dst := t.TempDir()
	root, err := os.OpenRoot(dst)
	if err != nil {
		t.Fatal(err)
	}
	defer root.Close()
	return dst, c.Checkout(context.Background(), commit, Checkout{Root: root, Subdir: subdir, Limits: DefaultLimits()})
}

func readFile(t *testing.T, dir, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, name))
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return string(b)
}

// packs lists the sizes of a clone's packs.
func packSizes(t *testing.T, c *Clone) []int64 {
	t.Helper()
	m, _ := filepath.Glob(filepath.Join(c.Dir(), "objects", "pack", "*.pack"))
	var sizes []int64
	for _, p := range m {
		fi, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		sizes = append(sizes, fi.Size())
	}
	return sizes
}

// noise is n bytes that do not compress.
func noise(n int) string {
	b := make([]byte, n)
	_, _ = rand.NewChaCha8([32]byte{7}).Read(b)
	return string(b)
}

// A clone downloads a commit once: a fetch of the same revision downloads
// nothing, a new commit only what it adds (not the large file it left
// alone).
func TestCloneFetchesWhatIsNew(t *testing.T) {
	ctx := context.Background()
	r := gittest.New(t)
	first := r.Commit(map[string]string{"main.hcl": "one", "data/big.bin": noise(256 << 10)})
	c := OpenClone(filepath.Join(t.TempDir(), "clone"))

	got, _, err := c.Fetch(ctx, r.URL(), "main", Auth{})
	if err != nil || got != first {
		t.Fatalf("first fetch: got %s (%v), want %s", got, err, first)
	}
	if n := len(packSizes(t, c)); n != 1 {
		t.Fatalf("after the first fetch: %d packs, want 1", n)
	}
	if got, downloaded, err := c.Fetch(ctx, r.URL(), "main", Auth{}); err != nil || got != first || downloaded {
		t.Fatalf("same revision: got %s, downloaded %v (%v), want %s, nothing downloaded", got, downloaded, err, first)
	}
	if n := len(packSizes(t, c)); n != 1 {
		t.Fatalf("a fetch of the same revision downloaded something: %d packs, want 1", n)
	}

	second := r.Commit(map[string]string{"main.hcl": "two"})
	if got, downloaded, err := c.Fetch(ctx, r.URL(), "main", Auth{}); err != nil || got != second || !downloaded {
		t.Fatalf("new commit: got %s, downloaded %v (%v), want %s downloaded", got, downloaded, err, second)
	}
	sizes := packSizes(t, c)
	if len(sizes) != 2 {
		t.Fatalf("after a new commit: %d packs, want 2", len(sizes))
	}
	if small := min(sizes[0], sizes[1]); small > 16<<10 {
		t.Fatalf("the new commit's pack is %d bytes, want only what it adds (the 256 KiB file is in the clone)", small)
	}
	dir, err := checkoutOf(t, c, second, "")
	if err != nil {
		t.Fatal(err)
	}
	if s := readFile(t, dir, "main.hcl"); s != "two" {
		t.Fatalf("main.hcl at the new commit: %q, want two", s)
	}
	if s := readFile(t, dir, "data/big.bin"); len(s) != 256<<10 {
		t.Fatalf("data/big.bin at the new commit: %d bytes, want %d", len(s), 256<<10)
	}
}

// A branch rewritten (a force push: the new commit is not a descendant of
// the one the clone holds) is followed, as is one moved back to a commit
// the clone has.
func TestCloneFollowsForcePush(t *testing.T) {
	ctx := context.Background()
	r := gittest.New(t)
	first := r.Commit(map[string]string{"main.hcl": "one"})
	second := r.Commit(map[string]string{"main.hcl": "two"})
	c := OpenClone(filepath.Join(t.TempDir(), "clone"))
	if got, _, err := c.Fetch(ctx, r.URL(), "main", Auth{}); err != nil || got != second {
		t.Fatalf("fetch: got %s (%v), want %s", got, err, second)
	}
	rewritten := r.Rewrite(map[string]string{"main.hcl": "rewritten"})
	got, _, err := c.Fetch(ctx, r.URL(), "main", Auth{})
	if err != nil || got != rewritten {
		t.Fatalf("after a force push: got %s (%v), want %s", got, err, rewritten)
	}
	dir, err := checkoutOf(t, c, got, "")
	if err != nil {
		t.Fatal(err)
	}
	if s := readFile(t, dir, "main.hcl"); s != "rewritten" {
		t.Fatalf("main.hcl after a force push: %q, want rewritten", s)
	}
	r.Reset(first)
	if got, _, err := c.Fetch(ctx, r.URL(), "main", Auth{}); err != nil || got != first {
		t.Fatalf("after a reset to an older commit: got %s (%v), want %s", got, err, first)
	}
}

// A clone damaged on disk (its packs overwritten, or gone) is fetched
// afresh: the fetch and the checkout still give the commit's files.
func TestCloneRepairsItself(t *testing.T) {
	ctx := context.Background()
	r := gittest.New(t)
	first := r.Commit(map[string]string{"main.hcl": "one", "data/big.bin": noise(64 << 10)})
	damages := []struct {
		name   string
		damage func(t *testing.T, c *Clone)
	}{
		{"packs overwritten", func(t *testing.T, c *Clone) {
			m, _ := filepath.Glob(filepath.Join(c.Dir(), "objects", "pack", "*.pack"))
			for _, p := range m {
				fi, err := os.Stat(p)
				if err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(p, []byte(strings.Repeat("x", int(fi.Size()))), 0o644); err != nil {
					t.Fatal(err)
				}
			}
		}},
		{"objects gone", func(t *testing.T, c *Clone) {
			if err := os.RemoveAll(filepath.Join(c.Dir(), "objects")); err != nil {
				t.Fatal(err)
			}
		}},
		{"clone gone", func(t *testing.T, c *Clone) {
			if err := os.RemoveAll(c.Dir()); err != nil {
				t.Fatal(err)
			}
		}},
		{"clone a file", func(t *testing.T, c *Clone) {
			if err := os.RemoveAll(c.Dir()); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(c.Dir(), []byte("not a clone"), 0o644); err != nil {
				t.Fatal(err)
			}
		}},
	}
	for _, d := range damages {
		t.Run(d.name, func(t *testing.T) {
			c := OpenClone(filepath.Join(t.TempDir(), "clone"))
			if _, _, err := c.Fetch(ctx, r.URL(), "main", Auth{}); err != nil {
				t.Fatal(err)
			}
			d.damage(t, c)
			got, _, err := c.Fetch(ctx, r.URL(), "main", Auth{})
			if err != nil || got != first {
				t.Fatalf("fetch of the damaged clone: got %s (%v), want %s", got, err, first)
			}
			dir, err := checkoutOf(t, c, got, "")
			if errors.Is(err, ErrDamaged) {
				// What the fetch could not see, the checkout does: the
				// caller resets and fetches again.
				if err := c.Reset(); err != nil {
					t.Fatal(err)
				}
				if got, _, err = c.Fetch(ctx, r.URL(), "main", Auth{}); err != nil {
					t.Fatal(err)
				}
				dir, err = checkoutOf(t, c, got, "")
			}
			if err != nil {
				t.Fatalf("checkout after the repair: %v", err)
			}
			if s := readFile(t, dir, "main.hcl"); s != "one" {
				t.Fatalf("main.hcl: %q, want one", s)
			}
		})
	}
}

// A checkout from a clone whose objects cannot be read says the clone is
// damaged (ErrDamaged), not that the repository is unsafe or missing a
// commit; a sub-directory that does not exist is the ref's fault.
func TestCloneCheckoutDamaged(t *testing.T) {
	ctx := context.Background()
	r := gittest.New(t)
	commit := r.Commit(map[string]string{"main.hcl": "one", "data/big.bin": noise(64 << 10)})
	c := OpenClone(filepath.Join(t.TempDir(), "clone"))
	if _, _, err := c.Fetch(ctx, r.URL(), "main", Auth{}); err != nil {
		t.Fatal(err)
	}
	if _, err := checkoutOf(t, c, commit, "nope"); !errors.Is(err, ErrRefNotFound) || errors.Is(err, ErrDamaged) {
		t.Fatalf("missing sub-directory: %v, want ErrRefNotFound", err)
	}
	m, _ := filepath.Glob(filepath.Join(c.Dir(), "objects", "pack", "*.pack"))
	for _, p := range m {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		// The header and the index stay: the objects are found, and
		// cannot be read.
		for i := 12; i < len(b)-20; i++ {
			b[i] ^= 0x5a
		}
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := checkoutOf(t, c, commit, ""); !errors.Is(err, ErrDamaged) {
		t.Fatalf("checkout of a damaged clone: %v, want ErrDamaged", err)
	}
}
