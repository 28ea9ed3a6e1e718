package lang

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"time"

	"github.com/tetherhq/tether/model/durable"
	"github.com/tetherhq/tether/model/gitfetch"
)

// ModuleCacheDir is where git modules are cached, relative to the project.
const ModuleCacheDir = ".tether/modules"

// fetchTimeout bounds the fetch of one module, within the compile's own
// deadline (which a caller may set far longer).
const fetchTimeout = 5 * time.Minute

// moduleLock records which commit each (url, ref) resolved to, so that a
// compile is repeatable and works offline once a module is cached.
type moduleLock struct {
	Refs map[string]string `json:"refs"` // url + "@" + ref → commit
}

// fetchGit returns the directory holding url at ref, and the commit. A
// commit is cached in ModuleCacheDir/<hash of url>/<commit> once; a tag or
// branch is resolved once and recorded in ModuleCacheDir/lock.json, then
// reused until Options.UpdateModules. Repositories are fetched in-process
// (gitfetch: no git binary), each within the module limits and the
// compile's deadline, and written through the project's root.
func (c *compiler) fetchGit(url, ref string) (string, string, error) {
	scheme, err := gitfetch.CheckURL(url)
	if err != nil {
		return "", "", err
	}
	if scheme == "file" && c.opts.NoLocalModules {
		return "", "", fmt.Errorf("%s is on this machine's disk: this compile takes git modules from remote repositories only (https, ssh)", url)
	}
	if err := gitfetch.CheckRef(ref); err != nil {
		return "", "", err
	}
	// The cache is written through the project's root, so a .tether
	// committed as a link out of the project does not lead the writes out.
	root := c.project.root
	sum := sha256.Sum256([]byte(url))
	repoRel := filepath.Join(ModuleCacheDir, hex.EncodeToString(sum[:8]))
	lockRel := filepath.Join(ModuleCacheDir, "lock.json")
	if err := root.MkdirAll(repoRel, 0o755); err != nil {
		return "", "", c.cacheError(err)
	}
	lock := moduleLock{Refs: map[string]string{}}
	if b, err := c.project.read(lockRel, c.limits.fileSize); err == nil {
		_ = json.Unmarshal(b, &lock)
		if lock.Refs == nil {
			lock.Refs = map[string]string{}
		}
	}
	cached := func(commit string) (string, string, bool) {
		if !gitfetch.IsCommitID(commit) {
			return "", "", false // a lock.json edited by hand
		}
		st, err := root.Stat(filepath.Join(repoRel, commit))
		return filepath.Join(c.root, repoRel, commit), commit, err == nil && st.IsDir()
	}
	record := func(commit string) {
		lock.Refs[url+"@"+ref] = commit
		if b, err := json.MarshalIndent(lock, "", "  "); err == nil {
			// Unsynced: a lock file lost in a crash costs one resolution.
			_ = durable.WriteFile(lockRel, b, 0o644, durable.In(root), durable.NoSync())
		}
	}

	commit := ""
	if gitfetch.IsCommitID(ref) {
		commit = ref
	} else if !c.opts.UpdateModules {
		commit = lock.Refs[url+"@"+ref]
	}
	if dir, commit, ok := cached(commit); ok {
		return dir, commit, nil
	}
	ctx, cancel := context.WithTimeout(c.ctx, fetchTimeout)
	defer cancel()
	if commit == "" {
		// Listing the remote's refs is cheap, and the commit may be cached
		// already: --update-modules with nothing new, or another ref of it.
		resolved, err := gitfetch.Resolve(ctx, url, ref, gitfetch.Auth{})
		if err != nil {
			return "", "", err
		}
		if dir, commit, ok := cached(resolved); ok {
			record(commit)
			return dir, commit, nil
		}
	}

	tmpRel := filepath.Join(repoRel, ".fetch-"+rand.Text())
	if err := root.Mkdir(tmpRel, 0o755); err != nil {
		return "", "", c.cacheError(err)
	}
	defer root.RemoveAll(tmpRel)
	dst, err := root.OpenRoot(tmpRel)
	if err != nil {
		return "", "", c.cacheError(err)
	}
	// A commit recorded in the lock is fetched as it is, even if the ref
	// has moved since: the compile stays repeatable with the cache gone.
	want := ref
	if commit != "" {
		want = commit
	}
	commit, err = gitfetch.Fetch(ctx, url, want, gitfetch.Auth{}, gitfetch.Checkout{
		Root:   dst,
		Limits: gitfetch.Limits{MaxBytes: c.limits.moduleSize, MaxFiles: c.limits.moduleFiles},
	})
	dst.Close()
	if err != nil {
		return "", "", err
	}
	destRel := filepath.Join(repoRel, commit)
	if err := root.Rename(tmpRel, destRel); err != nil {
		// Another compile may have cached the same commit meanwhile.
		if st, serr := root.Stat(destRel); serr != nil || !st.IsDir() {
			return "", "", c.cacheError(err)
		}
	}
	record(commit)
	return filepath.Join(c.root, destRel), commit, nil
}

// fetchAdvice says what to do about a module that could not be fetched.
func (c *compiler) fetchAdvice(err error) string {
	switch {
	case errors.Is(err, gitfetch.ErrInvalid):
		return `write the source as git::https://host/repo.git (or git::ssh://host/repo.git, git::git@host:repo.git, git::file:///path/to/repo) and the ref as a branch, a tag or a commit id`
	case errors.Is(err, gitfetch.ErrUnreachable):
		return "check the URL and that this machine can reach the repository; a module fetched before is used offline from " + ModuleCacheDir + " while its ref is recorded there"
	case errors.Is(err, gitfetch.ErrAuth):
		return "modules are fetched without credentials over https; fetch a private repository over ssh (git::ssh://… or git::git@host:repo), through the SSH agent, with the server's key in ~/.ssh/known_hosts"
	case errors.Is(err, gitfetch.ErrRefNotFound):
		return "check the module's ref: a branch or a tag of the repository, or a full commit id it holds (a commit recorded in " + ModuleCacheDir + "/lock.json that the repository no longer has is resolved again with --update-modules)"
	case errors.Is(err, context.DeadlineExceeded):
		return fmt.Sprintf("the fetch of one module may take %s; try again, or vendor the module into the project", fetchTimeout)
	case errors.Is(err, gitfetch.ErrLimit):
		return fmt.Sprintf("a module's checkout may hold %s in %d files (Options.MaxModuleSize, Options.MaxModuleFiles): make the module's repository smaller",
			bytesText(c.limits.moduleSize), c.limits.moduleFiles)
	case errors.Is(err, gitfetch.ErrUnsafe):
		return "a module's checkout may hold no name or symbolic link leading outside it; fix the module's repository"
	}
	return ""
}

// cacheError explains a module cache that cannot be created.
func (c *compiler) cacheError(err error) error {
	if _, inside := c.project.resolve(filepath.Join(c.root, ModuleCacheDir)); !inside {
		return fmt.Errorf("the module cache %s leads outside the model directory (a symbolic link); remove it", ModuleCacheDir)
	}
	return fmt.Errorf("module cache %s: %w", ModuleCacheDir, unwrapPathError(err))
}
