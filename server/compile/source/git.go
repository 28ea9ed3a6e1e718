package source

import (
	"context"
	"fmt"
	"os"

	"github.com/tetherhq/tether/model/gitfetch"
)

// fetchGit resolves g.Ref on the remote, fetches that commit alone when the
// server allows (depth 1), and writes its tree (below g.Subdir) into root.
func fetchGit(ctx context.Context, g *GitSpec, root *os.Root, limits Limits) (Revision, error) {
	auth, err := g.auth()
	if err != nil {
		return "", err
	}
	commit, err := gitfetch.Fetch(ctx, g.URL, g.Ref, auth, gitfetch.Checkout{Root: root, Subdir: g.Subdir, Limits: limits})
	if err != nil {
		return "", err
	}
	return Revision(commit), nil
}

// auth returns the credentials of g. The server has no SSH agent to fall
// back on: an ssh URL needs its key.
func (g *GitSpec) auth() (gitfetch.Auth, error) {
	if scheme, _ := g.scheme(); scheme == "ssh" && !g.SSHKey.IsSet() {
		return gitfetch.Auth{}, fmt.Errorf("%w: an ssh URL needs an SSH key", ErrInvalid)
	}
	return gitfetch.Auth{Username: g.Username, Token: g.Token.Reveal(), SSHKey: g.SSHKey.Reveal(), KnownHosts: g.KnownHosts, CABundle: g.CABundle}, nil
}
