package lang

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"maps"
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
	rel, err := filepath.Rel(c.root, abs)
	if err != nil || c.read[rel] {
		return
	}
	c.read[rel] = true
	sum := sha256.Sum256(content)
	c.inputs = append(c.inputs, Input{Path: rel, SHA256: hex.EncodeToString(sum[:])})
}

// Fingerprint identifies a compile by what went into it: the files it read
// (Result.Inputs), the variable values, the inventory, and salt (the
// compiler's identity).
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
	if opts.Inventory != nil {
		// encoding/json writes map keys sorted: the same inventory gives
		// the same bytes.
		b, err := json.Marshal(opts.Inventory)
		if err != nil {
			// Not canonical: never equal to another compile's.
			b = []byte(fmt.Sprintf("%p", opts.Inventory))
		}
		write("inventory", string(b))
	}
	if opts.UpdateModules {
		write("update-modules")
	}
	return hex.EncodeToString(h.Sum(nil))
}

// Unchanged reports whether the model in dir still consists of exactly the
// recorded inputs with the same content: the same *.hcl files in every
// directory a model file was read from (the project's and its modules'),
// and every file read unchanged. Files are read as a compile reads them
// (inside the directory, regular files, within DefaultMaxFileSize): one
// that no longer is, is a change.
func Unchanged(dir string, inputs []Input) bool {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return false
	}
	t, err := openTree(abs)
	if err != nil {
		return false
	}
	defer t.close()
	recorded := map[string]string{}
	dirs := map[string]bool{".": true}
	for _, in := range inputs {
		recorded[in.Path] = in.SHA256
		if strings.HasSuffix(in.Path, ".hcl") {
			dirs[filepath.Dir(in.Path)] = true
		}
	}
	models := 0
	for d := range dirs {
		found, err := t.modelFiles(d, maxFiles)
		if err != nil {
			return false
		}
		for _, name := range found {
			if _, ok := recorded[filepath.Join(d, name)]; !ok {
				return false // a model file was added
			}
		}
		models += len(found)
	}
	recordedModels := 0
	for _, in := range inputs {
		if strings.HasSuffix(in.Path, ".hcl") {
			recordedModels++
		}
		b, err := t.read(in.Path, DefaultMaxFileSize)
		if err != nil {
			return false // removed, or no longer a file to read
		}
		sum := sha256.Sum256(b)
		if hex.EncodeToString(sum[:]) != in.SHA256 {
			return false
		}
	}
	// A template named *.hcl is an input but not a model file: counts
	// differ only if a model file was removed, which read caught.
	return models <= recordedModels
}
