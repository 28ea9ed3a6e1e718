package lang

import (
	"crypto/sha256"
	"encoding/hex"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// Input is a file a compile read, relative to the model directory.
type Input struct {
	Path   string `json:"path"`
	SHA256 string `json:"sha256"`
}

// record notes a file the compile read.
func (c *compiler) record(abs string, content []byte) {
	rel, err := filepath.Rel(c.dir, abs)
	if err != nil || c.read[rel] {
		return
	}
	c.read[rel] = true
	sum := sha256.Sum256(content)
	c.inputs = append(c.inputs, Input{Path: rel, SHA256: hex.EncodeToString(sum[:])})
}

// Fingerprint identifies a compile by what went into it: the files it read
// (Result.Inputs), the variable values, and salt (the compiler's identity).
// Two compiles with the same fingerprint produce the same result, so a
// caller may reuse a result whose inputs are Unchanged.
func Fingerprint(inputs []Input, opts Options, salt string) string {
	h := sha256.New()
	write := func(parts ...string) {
		for _, p := range parts {
			h.Write([]byte(p))
			h.Write([]byte{0})
		}
	}
	write("tether.compile.v1", salt)
	sorted := slices.Clone(inputs)
	slices.SortFunc(sorted, func(a, b Input) int { return strings.Compare(a.Path, b.Path) })
	for _, in := range sorted {
		write("input", in.Path, in.SHA256)
	}
	for _, k := range slices.Sorted(maps.Keys(opts.Vars)) {
		write("var", k, opts.Vars[k])
	}
	return hex.EncodeToString(h.Sum(nil))
}

// Unchanged reports whether the model in dir still consists of exactly the
// recorded inputs with the same content: the same set of *.hcl files, and
// every file read unchanged.
func Unchanged(dir string, inputs []Input) bool {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return false
	}
	models, err := filepath.Glob(filepath.Join(abs, "*.hcl"))
	if err != nil {
		return false
	}
	recorded := map[string]string{}
	for _, in := range inputs {
		recorded[in.Path] = in.SHA256
	}
	for _, m := range models {
		if _, ok := recorded[filepath.Base(m)]; !ok {
			return false // a model file was added
		}
	}
	for _, in := range inputs {
		if !strings.Contains(in.Path, string(filepath.Separator)) && strings.HasSuffix(in.Path, ".hcl") &&
			!slices.Contains(models, filepath.Join(abs, in.Path)) {
			return false // a model file was removed
		}
		b, err := os.ReadFile(filepath.Join(abs, in.Path))
		if err != nil {
			return false
		}
		sum := sha256.Sum256(b)
		if hex.EncodeToString(sum[:]) != in.SHA256 {
			return false
		}
	}
	return true
}
