package gitfetch

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"path"
	"strings"

	"github.com/go-git/go-billy/v5/osfs"
	git "github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/config"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/cache"
	"github.com/go-git/go-git/v5/plumbing/filemode"
	"github.com/go-git/go-git/v5/plumbing/object"
	"github.com/go-git/go-git/v5/plumbing/transport"
	githttp "github.com/go-git/go-git/v5/plumbing/transport/http"
	gitssh "github.com/go-git/go-git/v5/plumbing/transport/ssh"
	"github.com/go-git/go-git/v5/storage/filesystem"
	"github.com/go-git/go-git/v5/storage/memory"
)

// Checkout says where Fetch writes the tree, and how much of it.
type Checkout struct {
	// Root is the destination; nothing is written outside it. It should
	// be empty: an entry never overwrites a file already there.
	Root *os.Root
	// Subdir is the directory of the repository to write, slash-separated;
	// "" writes the whole tree.
	Subdir string
	Limits Limits
}

// Resolve returns the commit id that ref names on the repository at url
// ("" names the remote's HEAD), listing the remote's refs only (as git
// ls-remote does): nothing is downloaded, so it is cheap enough to poll.
// A commit id that no ref points at is returned as it is, unchecked: only
// a fetch can tell whether the repository has it.
func Resolve(ctx context.Context, url, ref string, auth Auth) (string, error) {
	r, err := open(ctx, url, ref, auth)
	if err != nil {
		return "", err
	}
	defer r.close()
	return r.commit().String(), nil
}

// Fetch writes the tree of the repository at url, at ref ("" is the
// remote's HEAD: a branch, a tag, a full ref name refs/... or a commit id),
// into c.Root and returns the commit id. It fetches that commit alone when
// the server allows (depth 1); a commit id that no branch or tag points at
// may cost a fetch of every branch and tag. Objects are kept in a temporary
// directory, removed on return (a Clone keeps them between fetches).
// Limits are checked on the whole tree before anything is written; links
// are written as links only when they resolve inside c.Root, any other
// link refuses the whole tree. Submodules are not fetched, and .git is not
// written. On error, what was written is left for the caller to remove.
func Fetch(ctx context.Context, url, ref string, auth Auth, c Checkout) (string, error) {
	if err := c.Limits.Validate(); err != nil {
		return "", err
	}
	if c.Root == nil {
		return "", fmt.Errorf("fetch %s: no destination", redactURL(url))
	}
	r, err := open(ctx, url, ref, auth)
	if err != nil {
		return "", err
	}
	defer r.close()

	// Objects go to a temporary directory, not memory: a large repository
	// costs disk until the deadline, not the process's memory.
	tmp, err := os.MkdirTemp("", "tether-git-*")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(tmp)
	st := filesystem.NewStorage(osfs.New(tmp), cache.NewObjectLRUDefault())
	commit, _, err := fetchInto(ctx, st, url, r)
	if err != nil {
		return "", err
	}
	if err := checkoutCommit(ctx, st, commit, r.where, c); err != nil {
		return "", err
	}
	return commit.String(), nil
}

// fetchInto fetches what st lacks of the ref r resolved, and returns its
// commit and whether anything was fetched: nothing is when st holds the
// commit already.
func fetchInto(ctx context.Context, st *filesystem.Storage, url string, r *remoteRef) (plumbing.Hash, bool, error) {
	if st.HasEncodedObject(r.want) == nil {
		if commit, err := peel(st, r.want); err == nil {
			return commit.Hash, false, nil
		}
	}
	remote := git.NewRemote(st, &config.RemoteConfig{Name: "origin", URLs: []string{url}})
	fetch := func(spec config.RefSpec, depth int) error {
		err := remote.FetchContext(ctx, &git.FetchOptions{
			RefSpecs: []config.RefSpec{spec}, Depth: depth, Auth: r.auth, Tags: git.NoTags, CABundle: r.caBundle,
		})
		if errors.Is(err, git.NoErrAlreadyUpToDate) {
			return nil
		}
		return err
	}
	// The in-process file:// server does not do shallow fetches.
	depth := 1
	if strings.HasPrefix(url, "file://") {
		depth = 0
	}
	var err error
	// Forced ("+"): a ref rewritten by a force push is followed, as the
	// remote has it now.
	if r.name != "" {
		err = fetch(config.RefSpec("+"+r.name+":"+r.name), depth)
	} else {
		// A commit no ref points at: ask for it by id, else fetch every
		// branch and tag and look for it there.
		err = fetch(config.RefSpec("+"+r.want.String()+":refs/tether/want"), depth)
		if err != nil && ctx.Err() == nil {
			err = fetch(config.RefSpec("+refs/*:refs/*"), 0)
		}
	}
	if err != nil {
		return plumbing.ZeroHash, true, classify(ctx, r.where, err)
	}
	commit, err := peel(st, r.want)
	if err != nil {
		return plumbing.ZeroHash, true, fmt.Errorf("%s: %w", r.where, err)
	}
	return commit.Hash, true, nil
}

// checkoutCommit writes the tree of commit, below c.Subdir, into c.Root.
// An object st cannot read is an errRead.
func checkoutCommit(ctx context.Context, st *filesystem.Storage, h plumbing.Hash, where string, c Checkout) error {
	commit, err := object.GetCommit(st, h)
	if err != nil {
		return fmt.Errorf("%w %s: commit %s: %w", errRead, where, h, err)
	}
	tree, err := commit.Tree()
	if err != nil {
		return fmt.Errorf("%w %s: commit %s: %w", errRead, where, commit.Hash, err)
	}
	if dir := path.Clean(c.Subdir); c.Subdir != "" && dir != "." {
		sub, err := tree.Tree(dir)
		switch {
		case errors.Is(err, object.ErrDirectoryNotFound):
			return fmt.Errorf("%w: %s at %s has no sub-directory %s", ErrRefNotFound, where, commit.Hash, c.Subdir)
		case err != nil:
			return fmt.Errorf("%w %s: commit %s: %s: %w", errRead, where, commit.Hash, c.Subdir, err)
		}
		tree = sub
	}
	if err := checkout(ctx, tree, c.Root, c.Limits); err != nil {
		return fmt.Errorf("%s at %s: %w", where, commit.Hash, err)
	}
	return nil
}

// remoteRef is a ref resolved on a remote: what Fetch asks for.
type remoteRef struct {
	where    string // the URL without a user name, for messages
	auth     transport.AuthMethod
	caBundle []byte
	cleanup  func()

	want   plumbing.Hash          // the ref's object: a commit, or an annotated tag
	name   plumbing.ReferenceName // "" for a commit id no ref points at
	peeled plumbing.Hash          // the commit of an annotated tag, when the remote says
}

// open checks url and ref, lists the remote's refs and resolves ref.
func open(ctx context.Context, url, ref string, a Auth) (*remoteRef, error) {
	if err := ctx.Err(); err != nil {
		return nil, deadline(err)
	}
	scheme, err := CheckURL(url)
	if err != nil {
		return nil, err
	}
	if err := CheckRef(ref); err != nil {
		return nil, err
	}
	installFileTransport()
	r := &remoteRef{where: redactURL(url), caBundle: []byte(a.CABundle)}
	if r.auth, r.cleanup, err = a.method(url, scheme); err != nil {
		return nil, err
	}
	refs, err := git.NewRemote(memory.NewStorage(), &config.RemoteConfig{Name: "origin", URLs: []string{url}}).
		ListContext(ctx, &git.ListOptions{Auth: r.auth, CABundle: r.caBundle, PeelingOption: git.AppendPeeled})
	if err != nil {
		r.close()
		return nil, classify(ctx, r.where, err)
	}
	if r.want, r.name, r.peeled, err = resolveRef(refs, ref); err != nil {
		r.close()
		return nil, fmt.Errorf("%s: %w", r.where, err)
	}
	return r, nil
}

func (r *remoteRef) close() { r.cleanup() }

// commit is the commit the ref names, as far as the listing tells.
func (r *remoteRef) commit() plumbing.Hash {
	if !r.peeled.IsZero() {
		return r.peeled
	}
	return r.want
}

// peeledSuffix marks the listing's entries for the commits of annotated
// tags ("refs/tags/v1^{}").
const peeledSuffix = "^{}"

// resolveRef finds ref among the remote's refs: the hash to fetch, the
// ref name that leads to it ("" for a commit id no ref points at), and the
// commit an annotated tag points at when the listing says.
func resolveRef(refs []*plumbing.Reference, ref string) (plumbing.Hash, plumbing.ReferenceName, plumbing.Hash, error) {
	byName := map[plumbing.ReferenceName]*plumbing.Reference{}
	peeled := map[plumbing.ReferenceName]plumbing.Hash{}
	for _, r := range refs {
		if name, ok := strings.CutSuffix(r.Name().String(), peeledSuffix); ok {
			peeled[plumbing.ReferenceName(name)] = r.Hash()
			continue
		}
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
			return h, n, peeled[n], nil
		}
		return plumbing.ZeroHash, "", plumbing.ZeroHash, fmt.Errorf("%w: the repository has no HEAD (is it empty?)", ErrRefNotFound)
	}
	for _, n := range []plumbing.ReferenceName{plumbing.ReferenceName(ref), plumbing.NewBranchReferenceName(ref), plumbing.NewTagReferenceName(ref)} {
		if h, n, ok := hashOf(n); ok && strings.HasPrefix(n.String(), "refs/") {
			return h, n, peeled[n], nil
		}
	}
	if IsCommitID(ref) {
		h := plumbing.NewHash(ref)
		for _, r := range refs {
			if r.Type() == plumbing.HashReference && r.Hash() == h && strings.HasPrefix(r.Name().String(), "refs/") && !strings.HasSuffix(r.Name().String(), peeledSuffix) {
				return h, r.Name(), plumbing.ZeroHash, nil
			}
		}
		return h, "", plumbing.ZeroHash, nil
	}
	hint := ""
	if len(ref) >= 4 && strings.Trim(ref, "0123456789abcdef") == "" {
		hint = " (a commit id is written in full, 40 hex digits)"
	}
	return plumbing.ZeroHash, "", plumbing.ZeroHash, fmt.Errorf("%w: no branch, tag or commit %q%s", ErrRefNotFound, ref, hint)
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
				return fmt.Errorf("%w tree: %w", errRead, err)
			}
			switch e.Mode {
			case filemode.Regular, filemode.Executable, filemode.Deprecated, filemode.Symlink:
			default:
				continue // directories (made by their files) and submodules
			}
			f, err := tree.TreeEntryFile(&e)
			if err != nil {
				return fmt.Errorf("%w %s: %w", errRead, name, err)
			}
			if err := do(name, f); err != nil {
				return err
			}
		}
	}
	sizes := NewTree(ctx, nil, limits, "repository")
	if err := walk(func(_ string, f *object.File) error { return sizes.count(f.Size) }); err != nil {
		return err
	}
	t := NewTree(ctx, root, limits, "repository")
	err := walk(func(name string, f *object.File) error {
		r, err := f.Reader()
		if err != nil {
			return fmt.Errorf("%w %s: %w", errRead, name, err)
		}
		defer r.Close()
		if f.Mode == filemode.Symlink {
			target, err := io.ReadAll(io.LimitReader(r, 4096))
			if err != nil {
				return fmt.Errorf("%w %s: %w", errRead, name, err)
			}
			return t.Symlink(name, string(target))
		}
		return t.File(name, f.Mode == filemode.Executable, f.Size, readErrors{r})
	})
	if err != nil {
		return err
	}
	return t.Contained()
}

// method returns the go-git credentials of a for url, and a cleanup.
func (a Auth) method(rawURL, scheme string) (transport.AuthMethod, func(), error) {
	none := func() {}
	user := a.Username
	if user == "" {
		user = "git"
	}
	switch {
	case a.Token != "":
		return &githttp.BasicAuth{Username: user, Password: a.Token}, none, nil
	case a.SSHKey != "" || scheme == "ssh":
		if u, err := url.Parse(rawURL); err == nil && u.User != nil && u.User.Username() != "" {
			user = u.User.Username()
		} else if at := strings.Index(rawURL, "@"); at > 0 && !strings.Contains(rawURL, "://") {
			user = rawURL[:at]
		}
		if a.SSHKey != "" && a.KnownHosts == "" {
			return nil, none, fmt.Errorf("%w: an SSH key needs known hosts to check the server's key", ErrInvalid)
		}
		var keys *gitssh.PublicKeys
		if a.SSHKey != "" {
			var err error
			if keys, err = gitssh.NewPublicKeys(user, []byte(a.SSHKey), ""); err != nil {
				return nil, none, fmt.Errorf("%w: SSH key: %v", ErrInvalid, err)
			}
		}
		hostKey, cleanup, err := a.hostKeys()
		if err != nil {
			return nil, none, err
		}
		if keys != nil {
			keys.HostKeyCallbackHelper = hostKey
			return keys, cleanup, nil
		}
		agent, err := gitssh.NewSSHAgentAuth(user)
		if err != nil {
			cleanup()
			return nil, none, fmt.Errorf("%w: ssh without a key uses the SSH agent (SSH_AUTH_SOCK): %v", ErrAuth, err)
		}
		agent.HostKeyCallbackHelper = hostKey
		return agent, cleanup, nil
	}
	return nil, none, nil
}

// hostKeys returns the check of an SSH server's key: against KnownHosts,
// or without them the user's known_hosts files (SSH_KNOWN_HOSTS,
// ~/.ssh/known_hosts, /etc/ssh/ssh_known_hosts). The cleanup removes the
// temporary file go-git reads KnownHosts from.
func (a Auth) hostKeys() (gitssh.HostKeyCallbackHelper, func(), error) {
	none := func() {}
	if a.KnownHosts == "" {
		cb, err := gitssh.NewKnownHostsCallback()
		if err != nil {
			return gitssh.HostKeyCallbackHelper{}, none, fmt.Errorf("%w: no known hosts to check the server's key: %v", ErrAuth, err)
		}
		return gitssh.HostKeyCallbackHelper{HostKeyCallback: cb}, none, nil
	}
	f, err := os.CreateTemp("", "tether-known-hosts-*")
	if err != nil {
		return gitssh.HostKeyCallbackHelper{}, none, err
	}
	cleanup := func() { os.Remove(f.Name()) }
	_, err = f.WriteString(a.KnownHosts)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		cleanup()
		return gitssh.HostKeyCallbackHelper{}, none, err
	}
	cb, err := gitssh.NewKnownHostsCallback(f.Name())
	if err != nil {
		cleanup()
		return gitssh.HostKeyCallbackHelper{}, none, fmt.Errorf("%w: known hosts: %v", ErrInvalid, err)
	}
	return gitssh.HostKeyCallbackHelper{HostKeyCallback: cb}, cleanup, nil
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

// deadline classifies a context error: a deadline is a limit.
func deadline(err error) error {
	if errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("%w: the fetch ran past its deadline: %w", ErrLimit, err)
	}
	return err
}
