package cli

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"

	"github.com/tetherhq/tether/model"
	"github.com/tetherhq/tether/model/lang"
)

// compileCache lets an embedded deploy skip compiling a model that did not
// change since the last deploy: same files read, same variables, same tether
// binary. It lives next to the embedded store and names the version that
// compile produced; a hit is used only if the store still holds that version
// with the same resource set. `--recompile` ignores it.
type compileCache struct {
	Fingerprint string            `json:"fingerprint"`
	Inputs      []lang.Input      `json:"inputs"`
	Version     int64             `json:"version"`
	SetHash     model.Hash        `json:"set_hash"`
	Hosts       []string          `json:"hosts"`
	Resources   int               `json:"resources"`
	Warnings    []lang.Diagnostic `json:"warnings,omitempty"`
}

const compileCacheFile = "compile.json"

// compilerSalt identifies this tether binary: a rebuild, even of the same
// version, may compile differently.
func compilerSalt() string {
	bi := readBuildInfo()
	salt := fmt.Sprintf("%s %s %v", bi.Version, bi.Commit, bi.Modified)
	if exe, err := os.Executable(); err == nil {
		if st, err := os.Stat(exe); err == nil {
			salt += fmt.Sprintf(" %d %d", st.Size(), st.ModTime().UnixNano())
		}
	}
	return salt
}

// loadCompileCache returns the cache of stateDir if it is valid for the
// model in dir compiled with opts, or nil.
func loadCompileCache(stateDir, dir string, opts lang.Options) *compileCache {
	b, err := os.ReadFile(filepath.Join(stateDir, compileCacheFile))
	if err != nil {
		return nil
	}
	var c compileCache
	if json.Unmarshal(b, &c) != nil || c.Version <= 0 || len(c.Inputs) == 0 {
		return nil
	}
	if opts.UpdateModules || c.Fingerprint != lang.Fingerprint(c.Inputs, opts, compilerSalt()) {
		return nil
	}
	if !lang.Unchanged(dir, c.Inputs) {
		return nil
	}
	return &c
}

// saveCompileCache writes the cache atomically.
func saveCompileCache(stateDir string, c *compileCache) error {
	b, err := json.Marshal(c)
	if err != nil {
		return err
	}
	tmp, err := os.CreateTemp(stateDir, ".compile-*.json")
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
	return os.Rename(tmp.Name(), filepath.Join(stateDir, compileCacheFile))
}
