// Package gittest makes git repositories for tests, with go-git: no git
// binary. A repository is reached as file://DIR (Repo.URL).
package gittest

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/object"
)

// Repo is a repository with a work tree, on branch main at first.
type Repo struct {
	t   testing.TB
	Dir string
	Git *git.Repository
}

var author = object.Signature{Name: "test", Email: "test@example.com"}

// New makes an empty repository in a directory of t's.
func New(t testing.TB) *Repo {
	t.Helper()
	dir := t.TempDir()
	r, err := git.PlainInitWithOptions(dir, &git.PlainInitOptions{InitOptions: git.InitOptions{DefaultBranch: plumbing.NewBranchReferenceName("main")}})
	if err != nil {
		t.Fatal(err)
	}
	return &Repo{t: t, Dir: dir, Git: r}
}

// T is the test the repository is for.
func (r *Repo) T() testing.TB { return r.t }

// URL is the repository's file:// URL.
func (r *Repo) URL() string { return "file://" + r.Dir }

// Commit writes files (a content starting with "->" is a symbolic link to
// the rest), replacing what was there, commits them on the current branch
// and returns the commit id.
func (r *Repo) Commit(files map[string]string) string {
	r.t.Helper()
	wt, err := r.Git.Worktree()
	if err != nil {
		r.t.Fatal(err)
	}
	for name, content := range files {
		p := filepath.Join(r.Dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			r.t.Fatal(err)
		}
		_ = os.Remove(p)
		if target, ok := strings.CutPrefix(content, "->"); ok {
			err = os.Symlink(target, p)
		} else {
			err = os.WriteFile(p, []byte(content), 0o644)
		}
		if err != nil {
			r.t.Fatal(err)
		}
		if _, err := wt.Add(name); err != nil {
			r.t.Fatal(err)
		}
	}
	sig := author
	sig.When = time.Now()
	h, err := wt.Commit("change", &git.CommitOptions{Author: &sig})
	if err != nil {
		r.t.Fatal(err)
	}
	return h.String()
}

// Branch makes branch name at the current commit and checks it out.
func (r *Repo) Branch(name string) {
	r.t.Helper()
	wt, err := r.Git.Worktree()
	if err != nil {
		r.t.Fatal(err)
	}
	if err := wt.Checkout(&git.CheckoutOptions{Branch: plumbing.NewBranchReferenceName(name), Create: true}); err != nil {
		r.t.Fatal(err)
	}
}

// Tag points the lightweight tag name at commit, moving it if it exists.
func (r *Repo) Tag(name, commit string) {
	r.t.Helper()
	ref := plumbing.NewHashReference(plumbing.NewTagReferenceName(name), plumbing.NewHash(commit))
	if err := r.Git.Storer.SetReference(ref); err != nil {
		r.t.Fatal(err)
	}
}

// AnnotatedTag makes the annotated tag name of commit.
func (r *Repo) AnnotatedTag(name, commit string) {
	r.t.Helper()
	sig := author
	sig.When = time.Now()
	if _, err := r.Git.CreateTag(name, plumbing.NewHash(commit), &git.CreateTagOptions{Message: name, Tagger: &sig}); err != nil {
		r.t.Fatal(err)
	}
}

// Rewrite commits files, as Commit does, then points the current branch
// at a commit of the same tree without a parent: the history is rewritten
// (a force push), and the commits before are reachable no more. It
// returns the new commit's id.
func (r *Repo) Rewrite(files map[string]string) string {
	r.t.Helper()
	c, err := r.Git.CommitObject(plumbing.NewHash(r.Commit(files)))
	if err != nil {
		r.t.Fatal(err)
	}
	orphan := &object.Commit{Author: c.Author, Committer: c.Committer, Message: "rewritten", TreeHash: c.TreeHash}
	obj := r.Git.Storer.NewEncodedObject()
	if err := orphan.Encode(obj); err != nil {
		r.t.Fatal(err)
	}
	h, err := r.Git.Storer.SetEncodedObject(obj)
	if err != nil {
		r.t.Fatal(err)
	}
	r.Reset(h.String())
	return h.String()
}

// Reset points the current branch at commit (as git reset --soft: the
// work tree stays), a commit of its history or not.
func (r *Repo) Reset(commit string) {
	r.t.Helper()
	head, err := r.Git.Head()
	if err != nil {
		r.t.Fatal(err)
	}
	if err := r.Git.Storer.SetReference(plumbing.NewHashReference(head.Name(), plumbing.NewHash(commit))); err != nil {
		r.t.Fatal(err)
	}
}
