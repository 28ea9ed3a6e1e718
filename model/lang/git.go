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
	cache := filepath.Join(c.root, ModuleCacheDir)
	sum := sha256.Sum256([]byte(url))
	repoDir := filepath.Join(cache, hex.EncodeToString(sum[:8]))
	lockPath := filepath.Join(cache, "lock.json")
	lock := moduleLock{Refs: map[string]string{}}
	if b, err := os.ReadFile(lockPath); err == nil {
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
		if st, err := os.Stat(filepath.Join(repoDir, commit)); err == nil && st.IsDir() {
			return filepath.Join(repoDir, commit), commit, nil
		}
	}
	if err := os.MkdirAll(repoDir, 0o755); err != nil {
		return "", "", err
	}
	tmp, err := os.MkdirTemp(repoDir, ".fetch-*")
	if err != nil {
		return "", "", err
	}
	defer os.RemoveAll(tmp)
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
	if err := os.RemoveAll(filepath.Join(tmp, ".git")); err != nil {
		return "", "", err
	}
	dest := filepath.Join(repoDir, commit)
	if _, err := os.Stat(dest); err != nil {
		if err := os.Rename(tmp, dest); err != nil {
			return "", "", err
		}
	}
	lock.Refs[url+"@"+ref] = commit
	if b, err := json.MarshalIndent(lock, "", "  "); err == nil {
		_ = writeFileAtomic(lockPath, b)
	}
	return dest, commit, nil
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

func writeFileAtomic(p string, b []byte) error {
	tmp, err := os.CreateTemp(filepath.Dir(p), ".lock-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(b); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), p)
}
