package gitfetch

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"github.com/go-git/go-billy/v5/osfs"
	"github.com/go-git/go-git/v5/plumbing/cache"
	"github.com/go-git/go-git/v5/plumbing/object"
	"github.com/go-git/go-git/v5/plumbing/protocol/packp"
	"github.com/go-git/go-git/v5/plumbing/storer"
	"github.com/go-git/go-git/v5/plumbing/transport"
	"github.com/go-git/go-git/v5/plumbing/transport/client"
	"github.com/go-git/go-git/v5/plumbing/transport/server"
	"github.com/go-git/go-git/v5/storage/filesystem"
)

// go-git's own file transport runs git-upload-pack, and neither the server
// nor the compiler may count on a git binary: file:// URLs are served
// in-process instead. The protocol table is go-git's global: set once, by
// this package only.
var fileTransport sync.Once

func installFileTransport() {
	fileTransport.Do(func() {
		client.InstallProtocol("file", peelingTransport{server.NewServer(localRepos{})})
	})
}

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

// peelingTransport is go-git's in-process server, whose listing also
// gives the commit of each annotated tag ("refs/tags/v1^{}") as git's
// upload-pack does: Resolve needs it to name a tag's commit without
// fetching. go-git's server leaves them out.
type peelingTransport struct{ transport.Transport }

func (t peelingTransport) NewUploadPackSession(ep *transport.Endpoint, auth transport.AuthMethod) (transport.UploadPackSession, error) {
	s, err := t.Transport.NewUploadPackSession(ep, auth)
	if err != nil {
		return nil, err
	}
	return peelingSession{UploadPackSession: s, ep: ep}, nil
}

type peelingSession struct {
	transport.UploadPackSession
	ep *transport.Endpoint
}

func (s peelingSession) AdvertisedReferences() (*packp.AdvRefs, error) {
	return s.AdvertisedReferencesContext(context.Background())
}

func (s peelingSession) AdvertisedReferencesContext(ctx context.Context) (*packp.AdvRefs, error) {
	ar, err := s.UploadPackSession.AdvertisedReferencesContext(ctx)
	if err != nil {
		return nil, err
	}
	st, err := localRepos{}.Load(s.ep)
	if err != nil {
		return nil, err
	}
	for name, h := range ar.References {
		if !strings.HasPrefix(name, "refs/tags/") {
			continue
		}
		target := h
		for range 10 {
			tag, err := object.GetTag(st, target)
			if err != nil {
				break
			}
			target = tag.Target
		}
		if target != h {
			ar.Peeled[name] = target
		}
	}
	return ar, nil
}

var (
	_ transport.Transport         = peelingTransport{}
	_ transport.UploadPackSession = peelingSession{}
)
