package lang

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	"github.com/tetherhq/tether/model/durable"
)

// ModuleCacheDir is where git modules are cached, relative to the project.
const ModuleCacheDir = ".tether/modules"

// gitTimeout bounds one git command (a clone of a large repository).
const gitTimeout = 5 * time.Minute

var commitRE = regexp.MustCompile(`^[0-9a-f]{40}$`)

// moduleLock records which commit each (url, ref) resolved to, so that a
// compile is repeatable and works offline once a module is cached.
type moduleLock struct {
	Refs map[string]string `json:"refs"` // url + "@" + ref → commit
}

// fetchGit returns the directory holding url at ref, and the commit. A
// commit is cached in ModuleCacheDir/<hash of url>/<commit> once; a tag or
// branch is resolved once and recorded in ModuleCacheDir/lock.json, then
// reused until Options.UpdateModules.
func (c *compiler) fetchGit(url, ref string) (string, string, error) {
	if strings.HasPrefix(ref, "-") || strings.ContainsAny(ref, " \t\n") || strings.HasPrefix(url, "-") {
		return "", "", fmt.Errorf("invalid url or ref")
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
	commit := ""
	if commitRE.MatchString(ref) {
		commit = ref
	} else if !c.opts.UpdateModules {
		commit = lock.Refs[url+"@"+ref]
	}
	if commit != "" {
		if st, err := root.Stat(filepath.Join(repoRel, commit)); err == nil && st.IsDir() {
			return filepath.Join(c.root, repoRel, commit), commit, nil
		}
	}
	repoDir := filepath.Join(c.root, repoRel)
	tmp, err := os.MkdirTemp(repoDir, ".fetch-*")
	if err != nil {
		return "", "", err
	}
	defer os.RemoveAll(tmp)
	tmpRel := filepath.Join(repoRel, filepath.Base(tmp))
	ctx, cancel := context.WithTimeout(c.ctx, gitTimeout)
	defer cancel()
	if err := git(ctx, "", "clone", "--quiet", "--no-checkout", "--", url, tmp); err != nil {
		return "", "", fmt.Errorf("git clone %s: %w", url, err)
	}
	if err := git(ctx, tmp, "-c", "advice.detachedHead=false", "checkout", "--quiet", ref, "--"); err != nil {
		return "", "", fmt.Errorf("ref %q of %s: %w", ref, url, err)
	}
	out, err := exec.CommandContext(ctx, "git", "-C", tmp, "rev-parse", "HEAD").Output()
	if err != nil {
		return "", "", fmt.Errorf("git rev-parse: %w", err)
	}
	commit = strings.TrimSpace(string(out))
	if !commitRE.MatchString(commit) {
		return "", "", fmt.Errorf("git rev-parse: %q is not a commit", commit)
	}
	if err := root.RemoveAll(filepath.Join(tmpRel, ".git")); err != nil {
		return "", "", err
	}
	destRel := filepath.Join(repoRel, commit)
	if _, err := root.Stat(destRel); err != nil {
		if err := root.Rename(tmpRel, destRel); err != nil {
			return "", "", err
		}
	}
	lock.Refs[url+"@"+ref] = commit
	if b, err := json.MarshalIndent(lock, "", "  "); err == nil {
		// Unsynced: a lock file lost in a crash costs one resolution.
		_ = durable.WriteFile(lockRel, b, 0o644, durable.In(root), durable.NoSync())
	}
	return filepath.Join(c.root, destRel), commit, nil
}

// cacheError explains a module cache that cannot be created.
func (c *compiler) cacheError(err error) error {
	if _, inside := c.project.resolve(filepath.Join(c.root, ModuleCacheDir)); !inside {
		return fmt.Errorf("the module cache %s leads outside the model directory (a symbolic link); remove it", ModuleCacheDir)
	}
	return fmt.Errorf("module cache %s: %w", ModuleCacheDir, unwrapPathError(err))
}

func git(ctx context.Context, dir string, args ...string) error {
	if dir != "" {
		args = append([]string{"-C", dir}, args...)
	}
	cmd := exec.CommandContext(ctx, "git", args...)
	cmd.Env = append(os.Environ(), "GIT_TERMINAL_PROMPT=0")
	out, err := cmd.CombinedOutput()
	if err != nil {
		msg := strings.TrimSpace(string(out))
		if msg == "" {
			return err
		}
		return fmt.Errorf("%w: %s", err, msg)
	}
	return nil
}
