package compile

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime/debug"
	"slices"
	"strings"
	"sync"

	"github.com/tetherhq/tether/model"
	"github.com/tetherhq/tether/server/record"
)

// compileInputs is what a compile's outcome depends on besides the
// model's files: equal inputs (and revision) make an equal outcome, so a
// compile whose inputs are those of the last one that succeeded is
// skipped. It is kept as a digest (record.Compile.Inputs).
type compileInputs struct {
	// Format changes when what is counted changes: every compile then
	// runs once more.
	Format int `json:"format"`
	// Compiler is the server's build.
	Compiler string `json:"compiler"`
	// Source and Revision: what the files are (Checkout).
	Source   string `json:"source"`
	Revision string `json:"revision"`
	// Env is the environment's incarnation, Settings its settings (which
	// decide a release, a candidate).
	Env      string             `json:"env"`
	Settings record.EnvSettings `json:"settings"`
	// Inventory is the live inventory: accepted agents, their labels
	// and facts, whichever the model reads.
	Inventory      model.Inventory   `json:"inventory"`
	Vars           map[string]string `json:"vars"`
	NoLocalModules bool              `json:"no_local_modules"`
	// Released is the version released after the compile (number and
	// resource set): another release since (a rollback, an export)
	// makes the next compile run, as it would have before.
	Released string `json:"released"`
}

// digest is the inputs' SHA-256, of their JSON (maps in key order).
func (in compileInputs) digest() string {
	in.Inventory.Agents = slices.Clone(in.Inventory.Agents)
	slices.SortFunc(in.Inventory.Agents, func(a, b model.InventoryAgent) int { return strings.Compare(a.Name, b.Name) })
	b, err := json.Marshal(in)
	if err != nil {
		return "" // never equal to another: the compile runs
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// releasedRef names env's released version for the inputs: its number and
// resource set; "" when none is released.
func (cc *Compiler) releasedRef(ctx context.Context, env string) (string, error) {
	v, err := cc.store.ReleasedVersion(ctx, env)
	switch {
	case errors.Is(err, model.ErrNotFound):
		return "", nil
	case err != nil:
		return "", err
	}
	return fmt.Sprintf("%d %s", v.Number, v.SetHash), nil
}

// skipUnchanged ends c as skipped when its revision and inputs are those
// of the newest compile of its environment that ended, and that one
// succeeded: the report names it and keeps what it found.
func (cc *Compiler) skipUnchanged(ctx context.Context, c *record.Compile, in compileInputs) (bool, error) {
	released, err := cc.releasedRef(ctx, c.Env)
	if err != nil {
		return false, fmt.Errorf("read the released version: %w", err)
	}
	in.Released = released
	digest := in.digest()
	cs, err := cc.store.ListCompiles(ctx, c.Env, 10)
	if err != nil {
		return false, fmt.Errorf("read the last compile: %w", err)
	}
	for _, p := range cs {
		if p.ID == c.ID || p.Outcome == record.CompileRunning {
			continue // this one, or one a stopped replica left
		}
		if !p.Outcome.Succeeded() || p.Inputs == "" || p.Inputs != digest || p.Revision != c.Revision {
			return false, nil
		}
		c.Outcome, c.Inputs, c.SameAs = record.CompileSkipped, digest, cmp.Or(p.SameAs, p.ID)
		c.ResourcesPerAgent, c.Undefined, c.UndefinedTotal = p.ResourcesPerAgent, p.Undefined, p.UndefinedTotal
		return true, nil
	}
	return false, nil
}

// compilerBuild names the server's build, which compiles: a compile by
// another build is never skipped for one by this one. It is the digest of
// the executable where it can be read (a development build changes
// without its version), else its version and commit.
var compilerBuild = sync.OnceValue(func() string {
	h := sha256.New()
	if bi, ok := debug.ReadBuildInfo(); ok {
		fmt.Fprintln(h, bi.Main.Path, bi.Main.Version, bi.GoVersion)
		for _, s := range bi.Settings {
			fmt.Fprintln(h, s.Key, s.Value)
		}
	}
	if exe, err := os.Executable(); err == nil {
		if f, err := os.Open(exe); err == nil {
			_, _ = io.Copy(h, f)
			f.Close()
		}
	}
	return hex.EncodeToString(h.Sum(nil))
})
