package source

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tetherhq/tether/model/gitfetch"
	"github.com/tetherhq/tether/model/gitfetch/gittest"
)

// checkout checks out spec for key, reads what the test needs and
// releases it.
func checkout(t *testing.T, c *Cache, key string, spec Spec) (Tree, map[string]string) {
	t.Helper()
	tr, err := c.Checkout(context.Background(), key, spec, DefaultLimits())
	if err != nil {
		t.Fatalf("checkout: %v", err)
	}
	defer tr.Release()
	files := map[string]string{}
	items, err := scan(tr.Dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, it := range items {
		switch {
		case it.Mode.IsRegular():
			files[it.Name] = read(t, tr.Dir, it.Name)
		case it.Link != "":
			files[it.Name] = "->" + it.Link
		}
	}
	return *tr, files
}

// A git source is cloned once: the same revision again reuses the work
// tree and downloads nothing; a new commit is fetched and checked out; a
// branch rewritten by a force push is followed.
func TestCacheGit(t *testing.T) {
	r := gittest.New(t)
	first := r.Commit(map[string]string{"model/main.hcl": "one", "model/web.hcl": "web", "model/link.hcl": "->web.hcl", "README": "x"})
	c := NewCache(t.TempDir())
	spec := Spec{Git: &GitSpec{URL: r.URL(), Ref: "main", Subdir: "model"}}

	tr, files := checkout(t, c, "prod", spec)
	if tr.Revision != Revision(first) || !tr.Downloaded || tr.Reused || files["main.hcl"] != "one" || files["link.hcl"] != "->web.hcl" || files["README"] != "" {
		t.Fatalf("first checkout: %+v %v, want %s downloaded, the sub-directory's files", tr, files, first)
	}
	again, _ := checkout(t, c, "prod", spec)
	if again.Revision != Revision(first) || again.Downloaded || !again.Reused || again.Dir != tr.Dir {
		t.Fatalf("same revision: %+v, want the work tree reused, nothing downloaded", again)
	}

	second := r.Commit(map[string]string{"model/main.hcl": "two"})
	tr, files = checkout(t, c, "prod", spec)
	if tr.Revision != Revision(second) || !tr.Downloaded || tr.Reused || files["main.hcl"] != "two" || files["web.hcl"] != "web" {
		t.Fatalf("new commit: %+v %v, want %s fetched and checked out", tr, files, second)
	}

	rewritten := r.Rewrite(map[string]string{"model/main.hcl": "rewritten"})
	tr, files = checkout(t, c, "prod", spec)
	if tr.Revision != Revision(rewritten) || files["main.hcl"] != "rewritten" {
		t.Fatalf("after a force push: %+v %v, want %s", tr, files, rewritten)
	}

	// Another key has its own clone and tree; the same key with another
	// repository starts afresh.
	other := gittest.New(t)
	otherRev := other.Commit(map[string]string{"main.hcl": "other"})
	tr, files = checkout(t, c, "prod", Spec{Git: &GitSpec{URL: other.URL()}})
	if tr.Revision != Revision(otherRev) || files["main.hcl"] != "other" || len(files) != 1 {
		t.Fatalf("another repository: %+v %v, want %s alone", tr, files, otherRev)
	}
	dev, _ := checkout(t, c, "dev", spec)
	if dev.Dir == tr.Dir || dev.Revision != Revision(rewritten) {
		t.Fatalf("another key: %+v, want a tree of its own at %s", dev, rewritten)
	}
}

// What the cache keeps may be damaged or removed between checkouts: the
// next checkout gives the revision's files all the same, fetching or
// writing afresh what it must, and never reuses a changed work tree.
func TestCacheRepairs(t *testing.T) {
	r := gittest.New(t)
	commit := r.Commit(map[string]string{"main.hcl": "one", "sub/b.hcl": "b", "link.hcl": "->sub/b.hcl"})
	spec := Spec{Git: &GitSpec{URL: r.URL()}}
	want := map[string]string{"main.hcl": "one", "sub/b.hcl": "b", "link.hcl": "->sub/b.hcl"}
	outside := t.TempDir()
	if err := os.WriteFile(filepath.Join(outside, "main.hcl"), []byte("TOP-SECRET"), 0o644); err != nil {
		t.Fatal(err)
	}
	damages := []struct {
		name     string
		damage   func(t *testing.T, entry string)
		download bool // the clone must be fetched again
		reused   bool // the tree is as it was written: reused
	}{
		{"cache gone", func(t *testing.T, entry string) { mustRemove(t, filepath.Dir(entry)) }, true, false},
		{"entry gone", func(t *testing.T, entry string) { mustRemove(t, entry) }, true, false},
		// The work tree is as written: the clone is not needed until
		// the next revision.
		{"clone gone", func(t *testing.T, entry string) { mustRemove(t, filepath.Join(entry, cloneDir)) }, false, true},
		{"work tree gone", func(t *testing.T, entry string) { mustRemove(t, filepath.Join(entry, treeDir)) }, false, false},
		{"manifest gone", func(t *testing.T, entry string) { mustRemove(t, filepath.Join(entry, manifestFile)) }, false, false},
		{"manifest garbled", func(t *testing.T, entry string) { mustWrite(t, filepath.Join(entry, manifestFile), "{not json") }, false, false},
		{"source file garbled", func(t *testing.T, entry string) { mustWrite(t, filepath.Join(entry, sourceFile), "garbage") }, true, false},
		{"file edited", func(t *testing.T, entry string) {
			mustWrite(t, filepath.Join(entry, treeDir, "main.hcl"), "edited by hand")
		}, false, false},
		{"file removed", func(t *testing.T, entry string) { mustRemove(t, filepath.Join(entry, treeDir, "sub", "b.hcl")) }, false, false},
		{"file added", func(t *testing.T, entry string) { mustWrite(t, filepath.Join(entry, treeDir, "extra.hcl"), "extra") }, false, false},
		{"module cache written", func(t *testing.T, entry string) {
			mustWrite(t, filepath.Join(entry, treeDir, ".tether", "modules", "lock.json"), "{}")
		}, false, false},
		{"link retargeted out", func(t *testing.T, entry string) {
			p := filepath.Join(entry, treeDir, "link.hcl")
			mustRemove(t, p)
			if err := os.Symlink(filepath.Join(outside, "main.hcl"), p); err != nil {
				t.Fatal(err)
			}
		}, false, false},
		{"work tree a link out", func(t *testing.T, entry string) {
			mustRemove(t, filepath.Join(entry, treeDir))
			if err := os.Symlink(outside, filepath.Join(entry, treeDir)); err != nil {
				t.Fatal(err)
			}
		}, false, false},
		{"packs garbled", func(t *testing.T, entry string) {
			m, _ := filepath.Glob(filepath.Join(entry, cloneDir, "objects", "pack", "*.pack"))
			if len(m) == 0 {
				t.Fatal("no pack to damage")
			}
			for _, p := range m {
				mustWrite(t, p, strings.Repeat("x", 64))
			}
			// The work tree must be written again from the clone.
			mustRemove(t, filepath.Join(entry, treeDir))
		}, true, false},
	}
	for _, d := range damages {
		t.Run(d.name, func(t *testing.T) {
			c := NewCache(filepath.Join(t.TempDir(), "cache"))
			first, _ := checkout(t, c, "prod", spec)
			d.damage(t, c.entryDir("prod"))
			tr, files := checkout(t, c, "prod", spec)
			if tr.Revision != Revision(commit) || tr.Dir != first.Dir {
				t.Fatalf("after the damage: %+v, want %s in %s", tr, commit, first.Dir)
			}
			if len(files) != len(want) {
				t.Errorf("after the damage the tree holds %v, want %v", files, want)
			}
			for name, content := range want {
				if files[name] != content {
					t.Errorf("%s: %q, want %q", name, files[name], content)
				}
			}
			if tr.Reused != d.reused || tr.Downloaded != d.download {
				t.Errorf("reused %v, downloaded %v; want reused %v, downloaded %v", tr.Reused, tr.Downloaded, d.reused, d.download)
			}
			if fi, err := os.Lstat(tr.Dir); err != nil || !fi.IsDir() {
				t.Errorf("the work tree is not a directory: %v %v", fi, err)
			}
			if again, _ := checkout(t, c, "prod", spec); !again.Reused || again.Downloaded {
				t.Errorf("the checkout after the repair: %+v, want the repaired tree reused", again)
			}
		})
	}
}

func mustRemove(t *testing.T, p string) {
	t.Helper()
	if err := os.RemoveAll(p); err != nil {
		t.Fatal(err)
	}
}

func mustWrite(t *testing.T, p, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

// An archive is unpacked once per digest; a new one replaces the tree.
func TestCacheArchive(t *testing.T) {
	c := NewCache(t.TempDir())
	one := Spec{Archive: &ArchiveSpec{Data: tarOf(t, map[string]string{"m/main.hcl": "one"}), Subdir: "m"}}
	tr, files := checkout(t, c, "prod", one)
	if tr.Revision != Digest(one.Archive.Data) || tr.Reused || files["main.hcl"] != "one" {
		t.Fatalf("first checkout: %+v %v", tr, files)
	}
	if again, _ := checkout(t, c, "prod", one); !again.Reused {
		t.Fatalf("same archive: %+v, want the tree reused", again)
	}
	two := Spec{Archive: &ArchiveSpec{Data: tarOf(t, map[string]string{"m/main.hcl": "two"}), Subdir: "m"}}
	if tr, files = checkout(t, c, "prod", two); tr.Reused || files["main.hcl"] != "two" {
		t.Fatalf("new archive: %+v %v", tr, files)
	}
}

// A source refused (over the limits, a link out) leaves the cache without
// a tree to reuse, and the cache's directory unusable is ErrCache, for
// the caller to fetch without it.
func TestCacheRefusals(t *testing.T) {
	out := gittest.New(t)
	out.Commit(map[string]string{"main.hcl": "ok", "d/evil.hcl": "->../../x"})
	c := NewCache(t.TempDir())
	if _, err := c.Checkout(context.Background(), "prod", Spec{Git: &GitSpec{URL: out.URL()}}, DefaultLimits()); !errors.Is(err, ErrUnsafe) {
		t.Fatalf("a link out: %v, want ErrUnsafe", err)
	}
	if _, err := os.Stat(filepath.Join(c.entryDir("prod"), treeDir)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a refused source left a work tree: %v", err)
	}
	// The lock was released: the next checkout goes on.
	ok := gittest.New(t)
	ok.Commit(map[string]string{"main.hcl": "ok"})
	if _, files := checkout(t, c, "prod", Spec{Git: &GitSpec{URL: ok.URL()}}); files["main.hcl"] != "ok" {
		t.Fatalf("after a refusal: %v", files)
	}

	file := filepath.Join(t.TempDir(), "cache")
	mustWrite(t, file, "a file where the cache should be")
	_, err := NewCache(file).Checkout(context.Background(), "prod", Spec{Git: &GitSpec{URL: ok.URL()}}, DefaultLimits())
	if !errors.Is(err, ErrCache) {
		t.Fatalf("cache directory unusable: %v, want ErrCache", err)
	}
	if errors.Is(err, gitfetch.ErrUnreachable) {
		t.Fatalf("cache directory unusable: %v, blames the repository", err)
	}
}

// tarOf packs files as a tar archive.
func tarOf(t *testing.T, files map[string]string) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for name, content := range files {
		if err := tw.WriteHeader(&tar.Header{Name: name, Mode: 0o644, Size: int64(len(content)), Typeflag: tar.TypeReg}); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write([]byte(content)); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// Two caches on one directory (two processes, two servers of a host
// given one state directory) use an entry in turn: the second waits
// until the first releases it.
func TestCacheSharedDirectory(t *testing.T) {
	r := gittest.New(t)
	r.Commit(map[string]string{"main.hcl": "one"})
	spec := Spec{Git: &GitSpec{URL: r.URL()}}
	dir := t.TempDir()
	a, b := NewCache(dir), NewCache(dir)
	held, err := a.Checkout(context.Background(), "prod", spec, DefaultLimits())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	if _, err := b.Checkout(ctx, "prod", spec, DefaultLimits()); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("checkout of an entry another holds: %v, want to wait (until the deadline)", err)
	}
	if tr, files := checkout(t, b, "dev", spec); files["main.hcl"] != "one" || tr.Dir == held.Dir {
		t.Fatalf("another key meanwhile: %+v %v", tr, files)
	}
	held.Release()
	held.Release() // twice is fine
	if tr, _ := checkout(t, b, "prod", spec); !tr.Reused {
		t.Fatalf("after the release: %+v, want the tree the other wrote, reused", tr)
	}
}

// A clone whose commit reads but whose files do not (a pack damaged past
// its commit) is found out when the work tree is written: fetched afresh,
// and the tree written from the new clone.
func TestCacheCloneDamagedBelowTheCommit(t *testing.T) {
	r := gittest.New(t)
	noise := make([]byte, 64<<10)
	_, _ = rand.NewChaCha8([32]byte{3}).Read(noise)
	big := string(noise)
	commit := r.Commit(map[string]string{"main.hcl": "one", "data.txt": big})
	c := NewCache(t.TempDir())
	spec := Spec{Git: &GitSpec{URL: r.URL()}}
	checkout(t, c, "prod", spec)
	entry := c.entryDir("prod")
	packs, _ := filepath.Glob(filepath.Join(entry, cloneDir, "objects", "pack", "*.pack"))
	if len(packs) != 1 {
		t.Fatalf("packs %v, want one", packs)
	}
	b, err := os.ReadFile(packs[0])
	if err != nil {
		t.Fatal(err)
	}
	// The large file's blob comes first in the pack, the commit last:
	// garble the blob's middle, then ask for a new work tree.
	for i := 1000; i < 2000; i++ {
		b[i] ^= 0x5a
	}
	mustWrite(t, packs[0], string(b))
	mustRemove(t, filepath.Join(entry, treeDir))
	damaged := gitfetch.OpenClone(filepath.Join(entry, cloneDir))
	if got, downloaded, err := damaged.Fetch(context.Background(), r.URL(), "", gitfetch.Auth{}); err != nil || got != commit || downloaded {
		t.Fatalf("fetch of the damaged clone: %s, downloaded %v (%v); want the commit read from it, nothing downloaded", got, downloaded, err)
	}
	tr, files := checkout(t, c, "prod", spec)
	if tr.Revision != Revision(commit) || !tr.Downloaded || files["data.txt"] != big || files["main.hcl"] != "one" {
		t.Fatalf("checkout after the damage: %+v (data.txt %d bytes), want the clone fetched again and the files", tr, len(files["data.txt"]))
	}
}
