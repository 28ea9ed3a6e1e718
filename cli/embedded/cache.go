package embedded

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"

	"github.com/tetherhq/tether/model"
	"github.com/tetherhq/tether/model/lang"
)

// Model is the model a run deploys: freshly compiled, or known from the
// compile cache of an earlier run.
type Model struct {
	res   *lang.Result
	cache *compileCache
	// compile compiles the model when the cached version is gone.
	compile func(context.Context) (*lang.Result, error)
	// hosts and count describe the model either way.
	hosts []string
	count int
}

// Compiled is a model just compiled.
func Compiled(res *lang.Result) *Model {
	m := &Model{}
	m.compiled(res)
	return m
}

// Cached returns the model as an earlier run with o.StateDir compiled it,
// if nothing that compile read changed since (files, variables, inventory,
// compile options, this tether binary: o.Salt), or nil. A run uses the
// cached version only if the store still holds it with the same resources;
// otherwise it compiles the model with compile, which must not be nil.
func Cached(o Options, compile func(context.Context) (*lang.Result, error)) *Model {
	c := loadCompileCache(o.StateDir, o.Dir, o.Compile, o.Salt)
	if c == nil {
		return nil
	}
	return &Model{cache: c, compile: compile, hosts: c.Hosts, count: c.Resources}
}

// Hosts are the agents the model has resources for.
func (m *Model) Hosts() []string { return m.hosts }

// Resources is how many resources the model has.
func (m *Model) Resources() int { return m.count }

// Warnings are the warnings of the compile a cached model comes from (a
// fresh compile's are the caller's to show).
func (m *Model) Warnings() []lang.Diagnostic {
	if m.cache == nil {
		return nil
	}
	return m.cache.Warnings
}

func (m *Model) compiled(res *lang.Result) {
	m.res, m.hosts, m.count = res, res.Agents(), len(res.Resources)
}

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

// loadCompileCache returns the cache of stateDir if it is valid for the
// model in dir compiled with opts by the binary salt names, or nil.
func loadCompileCache(stateDir, dir string, opts lang.Options, salt string) *compileCache {
	b, err := os.ReadFile(filepath.Join(stateDir, compileCacheFile))
	if err != nil {
		return nil
	}
	var c compileCache
	if json.Unmarshal(b, &c) != nil || c.Version <= 0 || len(c.Inputs) == 0 {
		return nil
	}
	if opts.UpdateModules || c.Fingerprint != lang.Fingerprint(c.Inputs, opts, salt) {
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
