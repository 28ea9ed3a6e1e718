// Package lang is Tether's model language: HCL files describing hosts and the
// resources they must hold, compiled into a resource set (model.Resource).
//
// This is the first cut of the language: `variable` and `host` blocks, the
// resource kinds of the model catalogue inside hosts, `requires` and
// `subscribes` by reference, implicit edges to managed parent directories,
// cty's standard functions with `file` and `templatefile`, and diagnostics
// that name file:line:column. Every *.hcl file of the model directory is
// loaded, in name order.
package lang

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/hclparse"
	"github.com/zclconf/go-cty/cty"

	"github.com/tetherhq/tether/model"
	"github.com/tetherhq/tether/model/graph"
)

// Options are the inputs of a compile besides the model files.
type Options struct {
	// Vars are variable values given as text (--var name=value); values of
	// non-string variables are parsed as HCL expressions ("8080", "[1, 2]").
	Vars map[string]string
}

// Result is a compiled model.
type Result struct {
	// Resources, sorted by ID.
	Resources []model.Resource `json:"resources"`
	// Hosts lists the hosts the model declares (the agents it targets),
	// sorted, including hosts without resources.
	Hosts []string `json:"hosts"`
	// Warnings are diagnostics that did not stop the compile.
	Warnings []Diagnostic `json:"warnings,omitempty"`
	// Inputs are the files the compile read (model files, templates, files
	// read by file()), relative to the model directory, with their SHA-256.
	Inputs []Input `json:"inputs"`
}

// ErrNoModel is returned when the directory holds no model files.
var ErrNoModel = errors.New("no model files")

// Compile compiles the model in dir. A model that does not compile gives an
// *Error listing every diagnostic; other errors (an unreadable directory)
// are returned as they are.
func Compile(dir string, opts Options) (*Result, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, err
	}
	matches, err := filepath.Glob(filepath.Join(abs, "*.hcl"))
	if err != nil {
		return nil, err
	}
	if len(matches) == 0 {
		if _, statErr := os.Stat(abs); statErr != nil {
			return nil, fmt.Errorf("model directory %s: %w", dir, unwrapPathError(statErr))
		}
		return nil, fmt.Errorf("%w in %s: write a main.hcl (see examples/quickstart)", ErrNoModel, dir)
	}
	sort.Strings(matches)
	c := &compiler{
		dir:       abs,
		shown:     dir,
		parser:    hclparse.NewParser(),
		opts:      opts,
		templates: map[string]hcl.Expression{},
		read:      map[string]bool{},
	}
	return c.compile(matches)
}

type compiler struct {
	dir       string // absolute model directory
	shown     string // the directory as the user named it, for messages
	parser    *hclparse.Parser
	opts      Options
	templates map[string]hcl.Expression
	diags     hcl.Diagnostics
	ctx       *hcl.EvalContext
	inputs    []Input
	read      map[string]bool
}

// display names a model file relative to the directory the user gave.
func (c *compiler) display(p string) string {
	rel, err := filepath.Rel(c.dir, p)
	if err != nil {
		return p
	}
	return filepath.Join(c.shown, rel)
}

var rootSchema = func() *hcl.BodySchema {
	s := &hcl.BodySchema{Blocks: []hcl.BlockHeaderSchema{
		{Type: "variable", LabelNames: []string{"name"}},
		{Type: "host", LabelNames: []string{"name"}},
	}}
	// Resource blocks are recognised at the top level only to say where
	// they belong.
	for _, k := range model.Kinds() {
		s.Blocks = append(s.Blocks, hcl.BlockHeaderSchema{Type: k.Kind, LabelNames: []string{"title"}})
	}
	return s
}()

var hostSchema = func() *hcl.BodySchema {
	s := &hcl.BodySchema{}
	for _, k := range model.Kinds() {
		s.Blocks = append(s.Blocks, hcl.BlockHeaderSchema{Type: k.Kind, LabelNames: []string{"title"}})
	}
	return s
}()

func (c *compiler) compile(files []string) (*Result, error) {
	var variables, hosts []*hcl.Block
	for _, p := range files {
		src, err := os.ReadFile(p)
		if err != nil {
			return nil, fmt.Errorf("read %s: %w", c.display(p), err)
		}
		c.record(p, src)
		f, diags := c.parser.ParseHCL(src, c.display(p))
		c.diags = append(c.diags, diags...)
		if f == nil || diags.HasErrors() {
			continue
		}
		content, diags := f.Body.Content(rootSchema)
		c.diags = append(c.diags, diags...)
		for _, b := range content.Blocks {
			switch b.Type {
			case "variable":
				variables = append(variables, b)
			case "host":
				hosts = append(hosts, b)
			default:
				c.diags = append(c.diags, errorf(b.DefRange.Ptr(), "Resource outside a host",
					"%s blocks belong inside a host block: host \"NAME\" { %s %q { … } }", b.Type, b.Type, b.Labels[0]))
			}
		}
	}
	if c.diags.HasErrors() {
		return nil, c.fail()
	}

	vars := c.variables(variables)
	if c.diags.HasErrors() {
		return nil, c.fail()
	}
	c.ctx = &hcl.EvalContext{Variables: map[string]cty.Value{"var": vars}, Functions: c.functions()}

	res := &Result{}
	var decls []*resourceDecl
	seenHost := map[string]*hcl.Block{}
	for _, h := range hosts {
		name := h.Labels[0]
		if err := model.ValidateAgentName(name); err != nil {
			c.diags = append(c.diags, errorf(h.LabelRanges[0].Ptr(), "Invalid host name",
				"%s", strings.TrimPrefix(err.Error(), model.ErrInvalidName.Error()+": ")))
			continue
		}
		if prev, dup := seenHost[name]; dup {
			c.diags = append(c.diags, errorf(h.LabelRanges[0].Ptr(), "Duplicate host",
				"host %q is already declared at %s", name, where(prev.DefRange)))
			continue
		}
		seenHost[name] = h
		res.Hosts = append(res.Hosts, name)
		decls = append(decls, c.host(name, h)...)
	}
	slices.Sort(res.Hosts)
	if c.diags.HasErrors() {
		return nil, c.fail()
	}

	res.Resources = c.link(decls)
	if c.diags.HasErrors() {
		return nil, c.fail()
	}
	res.Warnings = convertDiags(c.diags)
	res.Inputs = c.inputs
	slices.SortFunc(res.Inputs, func(a, b Input) int { return strings.Compare(a.Path, b.Path) })
	return res, nil
}

func (c *compiler) fail() error {
	return &Error{Diagnostics: convertDiags(c.diags), files: c.parser.Files()}
}

// link resolves references between resources, adds implicit edges, checks
// for duplicate IDs and cycles, and returns the resources sorted by ID.
func (c *compiler) link(decls []*resourceDecl) []model.Resource {
	byID := map[model.ID]*resourceDecl{}
	for _, d := range decls {
		if prev, dup := byID[d.res.ID]; dup {
			c.diags = append(c.diags, errorf(d.block.DefRange.Ptr(), "Duplicate resource",
				"%s is already declared at %s", d.res.ID, where(prev.block.DefRange)))
			continue
		}
		byID[d.res.ID] = d
	}
	for _, d := range decls {
		d.res.Requires = c.references(d, "requires")
		d.res.Subscribes = c.references(d, "subscribes")
		if parent := managedParent(d, byID); parent != nil && !slices.Contains(d.res.Requires, parent.res.ID) {
			d.res.Requires = append(d.res.Requires, parent.res.ID)
		}
	}
	out := make([]model.Resource, 0, len(byID))
	for _, d := range decls {
		if byID[d.res.ID] == d {
			out = append(out, d.res)
		}
	}
	if c.diags.HasErrors() {
		return nil
	}
	if _, err := graph.FromResources(out).Sort(); err != nil {
		var ce *graph.CycleError
		if errors.As(err, &ce) {
			first := byID[ce.Cycle[0]]
			c.diags = append(c.diags, errorf(first.block.DefRange.Ptr(), "Requirement cycle",
				"%s (each resource requires the next)", strings.TrimPrefix(err.Error(), "dependency cycle: ")))
			return nil
		}
		c.diags = append(c.diags, errorf(nil, "Invalid requirements", "%v", err))
		return nil
	}
	model.SortResources(out)
	return out
}

// managedParent returns the nearest managed directory above a path-based
// resource on the same agent: a file requires the directory it lives in.
func managedParent(d *resourceDecl, byID map[model.ID]*resourceDecl) *resourceDecl {
	if d.res.ID.Key != "path" || d.res.Purged {
		return nil
	}
	for p := filepath.Dir(d.res.ID.Value); p != "/" && p != "."; p = filepath.Dir(p) {
		id := model.ID{Type: "directory", Agent: d.res.ID.Agent, Key: "path", Value: p}
		if parent, ok := byID[id]; ok && !parent.res.Purged {
			return parent
		}
	}
	return nil
}
