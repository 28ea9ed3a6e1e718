package source

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"strings"
	"sync"

	"github.com/go-git/go-billy/v5/osfs"
	git "github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/config"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/cache"
	"github.com/go-git/go-git/v5/plumbing/filemode"
	"github.com/go-git/go-git/v5/plumbing/object"
	"github.com/go-git/go-git/v5/plumbing/storer"
	"github.com/go-git/go-git/v5/plumbing/transport"
	"github.com/go-git/go-git/v5/plumbing/transport/client"
	githttp "github.com/go-git/go-git/v5/plumbing/transport/http"
	"github.com/go-git/go-git/v5/plumbing/transport/server"
	gitssh "github.com/go-git/go-git/v5/plumbing/transport/ssh"
	"github.com/go-git/go-git/v5/storage/filesystem"
	"github.com/go-git/go-git/v5/storage/memory"
)

var commitID = regexp.MustCompile(`^[0-9a-f]{40}$`)

// go-git's own file transport runs git-upload-pack; the server has no git
// binary, so file:// URLs are served in-process instead. The protocol table
// is go-git's global: set once, by this package only.
var inProcessFile sync.Once

// localRepos loads the repository of a file:// URL, bare or with a
// work tree.
type localRepos struct{}

func (localRepos) Load(ep *transport.Endpoint) (storer.Storer, error) {
	dir := ep.Path
	if st, err := os.Stat(filepath.Join(dir, ".git")); err == nil && st.IsDir() {
		dir = filepath.Join(dir, ".git")
	}
	if _, err := os.Stat(filepath.Join(dir, "HEAD")); err != nil {
		return nil, transport.ErrRepositoryNotFound
	}
	return filesystem.NewStorage(osfs.New(dir), cache.NewObjectLRUDefault()), nil
}

// fetchGit resolves g.Ref on the remote, fetches that commit alone when the
// server allows (depth 1), and writes its tree (below g.Subdir) into root.
func fetchGit(ctx context.Context, g *GitSpec, root *os.Root, limits Limits) (Revision, error) {
	if err := ctx.Err(); err != nil {
		return "", deadline(err)
	}
	inProcessFile.Do(func() { client.InstallProtocol("file", server.NewServer(localRepos{})) })
	auth, cleanup, err := g.auth()
	if err != nil {
		return "", err
	}
	defer cleanup()
	where := redactURL(g.URL)

	refs, err := git.NewRemote(memory.NewStorage(), &config.RemoteConfig{Name: "origin", URLs: []string{g.URL}}).
		ListContext(ctx, &git.ListOptions{Auth: auth, CABundle: []byte(g.CABundle)})
	if err != nil {
		return "", classify(ctx, where, err)
	}
	want, name, err := resolveRef(refs, g.Ref)
	if err != nil {
		return "", fmt.Errorf("%s: %w", where, err)
	}

	// Objects go to a temporary directory, not memory: a large repository
	// costs disk until the deadline, not the server's memory.
	tmp, err := os.MkdirTemp("", "tether-source-*")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(tmp)
	st := filesystem.NewStorage(osfs.New(tmp), cache.NewObjectLRUDefault())
	remote := git.NewRemote(st, &config.RemoteConfig{Name: "origin", URLs: []string{g.URL}})
	fetch := func(spec config.RefSpec, depth int) error {
		err := remote.FetchContext(ctx, &git.FetchOptions{
			RefSpecs: []config.RefSpec{spec}, Depth: depth, Auth: auth, Tags: git.NoTags, CABundle: []byte(g.CABundle),
		})
		if errors.Is(err, git.NoErrAlreadyUpToDate) {
			return nil
		}
		return err
	}
	// The in-process file:// server does not do shallow fetches.
	depth := 1
	if strings.HasPrefix(g.URL, "file://") {
		depth = 0
	}
	if name != "" {
		err = fetch(config.RefSpec("+"+name+":"+name), depth)
	} else {
		// A commit no ref points at: ask for it by id, else fetch every
		// branch and tag and look for it there.
		err = fetch(config.RefSpec(want.String()+":refs/tether/want"), depth)
		if err != nil && ctx.Err() == nil {
			err = fetch(config.RefSpec("+refs/*:refs/*"), 0)
		}
	}
	if err != nil {
		return "", classify(ctx, where, err)
	}
	commit, err := peel(st, want)
	if err != nil {
		return "", fmt.Errorf("%s: %w", where, err)
	}
	tree, err := commit.Tree()
	if err != nil {
		return "", fmt.Errorf("%s: commit %s: %w", where, commit.Hash, err)
	}
	if dir := path.Clean(g.Subdir); g.Subdir != "" && dir != "." {
		if tree, err = tree.Tree(dir); err != nil {
			return "", fmt.Errorf("%w: %s at %s has no sub-directory %s", ErrRefNotFound, where, commit.Hash, g.Subdir)
		}
	}
	if err := checkout(ctx, tree, root, limits); err != nil {
		return "", fmt.Errorf("%s at %s: %w", where, commit.Hash, err)
	}
	return Revision(commit.Hash.String()), nil
}

// resolveRef finds ref among the remote's refs: the hash to fetch and the
// ref name that leads to it ("" for a commit id no ref points at).
func resolveRef(refs []*plumbing.Reference, ref string) (plumbing.Hash, plumbing.ReferenceName, error) {
	byName := map[plumbing.ReferenceName]*plumbing.Reference{}
	for _, r := range refs {
		byName[r.Name()] = r
	}
	hashOf := func(n plumbing.ReferenceName) (plumbing.Hash, plumbing.ReferenceName, bool) {
		for range 5 {
			r, ok := byName[n]
			if !ok {
				return plumbing.ZeroHash, "", false
			}
			if r.Type() == plumbing.HashReference {
				return r.Hash(), r.Name(), true
			}
			n = r.Target()
		}
		return plumbing.ZeroHash, "", false
	}
	if ref == "" {
		if h, n, ok := hashOf(plumbing.HEAD); ok {
			return h, n, nil
		}
		return plumbing.ZeroHash, "", fmt.Errorf("%w: the repository has no HEAD (is it empty?)", ErrRefNotFound)
	}
	for _, n := range []plumbing.ReferenceName{plumbing.ReferenceName(ref), plumbing.NewBranchReferenceName(ref), plumbing.NewTagReferenceName(ref)} {
		if h, n, ok := hashOf(n); ok && strings.HasPrefix(n.String(), "refs/") {
			return h, n, nil
		}
	}
	if commitID.MatchString(ref) {
		h := plumbing.NewHash(ref)
		for _, r := range refs {
			if r.Type() == plumbing.HashReference && r.Hash() == h && strings.HasPrefix(r.Name().String(), "refs/") {
				return h, r.Name(), nil
			}
		}
		return h, "", nil
	}
	return plumbing.ZeroHash, "", fmt.Errorf("%w: no branch, tag or commit %q", ErrRefNotFound, ref)
}

// peel follows annotated tags to the commit.
func peel(st *filesystem.Storage, h plumbing.Hash) (*object.Commit, error) {
	for range 10 {
		if tag, err := object.GetTag(st, h); err == nil {
			h = tag.Target
			continue
		}
		c, err := object.GetCommit(st, h)
		if err != nil {
			return nil, fmt.Errorf("%w: commit %s: %v", ErrRefNotFound, h, err)
		}
		return c, nil
	}
	return nil, fmt.Errorf("%w: tag %s: too many tags of tags", ErrRefNotFound, h)
}

// checkout writes the tree. Limits are checked on the whole tree first, so
// a repository over them is refused before anything is written. Submodules
// are not fetched.
func checkout(ctx context.Context, tree *object.Tree, root *os.Root, limits Limits) error {
	walk := func(do func(name string, f *object.File) error) error {
		w := object.NewTreeWalker(tree, true, nil)
		defer w.Close()
		for {
			name, e, err := w.Next()
			if err == io.EOF {
				return nil
			}
			if err != nil {
				return fmt.Errorf("read tree: %w", err)
			}
			switch e.Mode {
			case filemode.Regular, filemode.Executable, filemode.Deprecated, filemode.Symlink:
			default:
				continue // directories (made by their files) and submodules
			}
			f, err := tree.TreeEntryFile(&e)
			if err != nil {
				return fmt.Errorf("read %s: %w", name, err)
			}
			if err := do(name, f); err != nil {
				return err
			}
		}
	}
	sizes := newTree(ctx, nil, limits, "repository")
	if err := walk(func(_ string, f *object.File) error { return sizes.count(f.Size) }); err != nil {
		return err
	}
	t := newTree(ctx, root, limits, "repository")
	err := walk(func(name string, f *object.File) error {
		r, err := f.Reader()
		if err != nil {
			return fmt.Errorf("read %s: %w", name, err)
		}
		defer r.Close()
		if f.Mode == filemode.Symlink {
			target, err := io.ReadAll(io.LimitReader(r, 4096))
			if err != nil {
				return fmt.Errorf("read %s: %w", name, err)
			}
			return t.symlink(name, string(target))
		}
		return t.file(name, f.Mode == filemode.Executable, f.Size, r)
	})
	if err != nil {
		return err
	}
	return t.contained()
}

// auth returns the go-git credentials of g, and a cleanup.
func (g *GitSpec) auth() (transport.AuthMethod, func(), error) {
	none := func() {}
	user := g.Username
	if user == "" {
		user = "git"
	}
	switch {
	case g.Token.IsSet():
		return &githttp.BasicAuth{Username: user, Password: g.Token.Reveal()}, none, nil
	case g.SSHKey.IsSet() || strings.HasPrefix(g.URL, "ssh://") || !strings.Contains(g.URL, "://"):
		if u, err := url.Parse(g.URL); err == nil && u.User != nil && u.User.Username() != "" {
			user = u.User.Username()
		} else if at := strings.Index(g.URL, "@"); at > 0 && !strings.Contains(g.URL, "://") {
			user = g.URL[:at]
		}
		f, err := os.CreateTemp("", "tether-known-hosts-*")
		if err != nil {
			return nil, none, err
		}
		cleanup := func() { os.Remove(f.Name()) }
		_, err = f.WriteString(g.KnownHosts)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			cleanup()
			return nil, none, err
		}
		hostKey, err := gitssh.NewKnownHostsCallback(f.Name())
		if err != nil {
			cleanup()
			return nil, none, fmt.Errorf("%w: known hosts: %v", ErrInvalid, err)
		}
		if !g.SSHKey.IsSet() {
			return nil, cleanup, fmt.Errorf("%w: an ssh URL needs an SSH key", ErrInvalid)
		}
		keys, err := gitssh.NewPublicKeys(user, []byte(g.SSHKey.Reveal()), "")
		if err != nil {
			cleanup()
			return nil, none, fmt.Errorf("%w: SSH key: %v", ErrInvalid, err)
		}
		keys.HostKeyCallback = hostKey
		return keys, cleanup, nil
	}
	return nil, none, nil
}

// classify wraps a go-git error with the class callers report.
func classify(ctx context.Context, where string, err error) error {
	if ctx.Err() != nil {
		return fmt.Errorf("%s: %w", where, deadline(ctx.Err()))
	}
	var netErr net.Error
	switch {
	case errors.Is(err, transport.ErrAuthenticationRequired), errors.Is(err, transport.ErrAuthorizationFailed),
		errors.Is(err, transport.ErrInvalidAuthMethod), strings.Contains(err.Error(), "unable to authenticate"),
		strings.Contains(err.Error(), "knownhosts:"):
		return fmt.Errorf("%w: %s: %v", ErrAuth, where, err)
	case errors.Is(err, transport.ErrEmptyRemoteRepository):
		return fmt.Errorf("%w: %s is empty", ErrRefNotFound, where)
	case errors.Is(err, transport.ErrRepositoryNotFound), errors.As(err, &netErr):
		return fmt.Errorf("%w: %s: %v", ErrUnreachable, where, err)
	}
	return fmt.Errorf("%w: %s: %v", ErrUnreachable, where, err)
}

// redactURL drops a user name from a URL for messages.
func redactURL(raw string) string {
	if u, err := url.Parse(raw); err == nil && u.User != nil {
		u.User = nil
		return u.String()
	}
	return raw
}
