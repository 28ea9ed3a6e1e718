// Package lang is Tether's model language: HCL files describing hosts, the
// applications they run and the resources those need, compiled against an
// inventory of agents into a resource set (model.Resource).
//
// A compile runs in stages, each on the whole model:
//
//  1. load: parse every *.hcl file of the project directory and of the
//     modules it uses, and decode the static shape of each block (which
//     happens once, however many hosts a block applies to);
//  2. values: evaluate variables, module inputs and locals;
//  3. hosts: build the hosts (declared ones and the inventory's agents) with
//     their labels and facts, and match hostgroups;
//  4. expand: for each host, evaluate its resources, applied applications and
//     the hostgroups it belongs to;
//  5. machines: evaluate the platforms, distributions and hosts made from
//     blueprints the model declares, for the server to make;
//  6. link: resolve requires and subscribes, add implicit edges, merge equal
//     duplicates, reject conflicting ones and cycles.
//
// A fact the inventory does not hold is an unknown value (cty's unknowns,
// marked with the fact it stands for): a resource whose attributes depend on
// one is exported undefined, and the result says which facts are missing.
package lang

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/hclparse"
	"github.com/zclconf/go-cty/cty"

	"github.com/tetherhq/tether/model"
)

// Options are the inputs of a compile besides the model files.
type Options struct {
	// Vars are variable values given as text (--var name=value); values of
	// non-string variables are parsed as HCL expressions ("8080", "[1, 2]").
	Vars map[string]string
	// Inventory lists the agents known to exist, with their labels and facts.
	// Nil means none: only declared hosts exist, and their facts are unknown.
	Inventory *model.Inventory
	// UpdateModules resolves the refs of git modules again instead of using
	// the commits recorded in the module cache.
	UpdateModules bool
	// NoLocalModules refuses git modules on this machine's disk (file://):
	// for a server compiling commits it does not trust, whose disk they
	// would read.
	NoLocalModules bool
	// MaxResources bounds the number of resources a compile may produce,
	// and of applications it may apply (0: DefaultMaxResources), so that a
	// runaway for_each ends with a diagnostic instead of exhausting memory.
	MaxResources int

	// The bounds below keep a hostile or broken model (say, from an
	// untrusted commit) from exhausting the machine: whatever the model,
	// a compile ends within them with a result or a diagnostic. Zero
	// means the default.

	// Timeout bounds the compile's time (DefaultTimeout). A compile past it
	// ends with a diagnostic saying so; the caller's own cancellation of
	// the context is returned as the context's error.
	Timeout time.Duration
	// MaxFileSize bounds each file the compile reads: model files,
	// templates, files of file() (DefaultMaxFileSize).
	MaxFileSize int64
	// MaxTotalSize bounds all the files the compile reads, together
	// (DefaultMaxTotalSize).
	MaxTotalSize int64
	// MaxTokens bounds the tokens of the model files and templates,
	// together (DefaultMaxTokens).
	MaxTokens int
	// MaxValueSize bounds every value the compile builds
	// (DefaultMaxValueSize).
	MaxValueSize int
	// MaxResultSize bounds the attributes of all compiled resources
	// together (DefaultMaxResultSize).
	MaxResultSize int64
	// MaxNesting bounds how deep expressions, templates and decoded
	// documents nest (DefaultMaxNesting).
	MaxNesting int
	// MaxModuleSize bounds the files of each git module's checkout,
	// together (DefaultMaxModuleSize); MaxModuleFiles their number
	// (DefaultMaxModuleFiles). A repository over either is refused before
	// anything is written.
	MaxModuleSize  int64
	MaxModuleFiles int
}

// DefaultMaxResources is the default bound of Options.MaxResources: a
// resource costs the compile about 2.5 KB, so this bounds its memory to
// about 1.2 GiB, 2.5 times the largest fleet Tether aims at (10,000 agents
// of 20 resources).
const DefaultMaxResources = 500_000

// Result is a compiled model.
type Result struct {
	// Resources, sorted by ID, including undefined ones. This is exactly the
	// resource set a deploy or an export uses.
	Resources []model.Resource `json:"resources"`
	// Hosts are the hosts the compile targeted, sorted by name: the hosts
	// the model declares and the agents of the inventory.
	Hosts []Host `json:"hosts"`
	// Undefined lists what could not be compiled for want of facts: the
	// undefined resources, and blocks whose for_each or identity is unknown.
	Undefined []Undefined `json:"undefined,omitempty"`
	// Warnings are diagnostics that did not stop the compile.
	Warnings []Diagnostic `json:"warnings,omitempty"`
	// Inputs are the files the compile read (model files, templates, files
	// read by file()), relative to the project directory, with their SHA-256.
	Inputs []Input `json:"inputs"`
	// Modules are the modules the model uses, with the exact revision of
	// each git module.
	Modules []Module `json:"modules,omitempty"`
	// Machines are the platforms, distributions and hosts made from
	// blueprints that the model declares (nil: none), for the server to
	// make; their positions are relative to the project directory.
	Machines *model.DeclaredMachines `json:"machines,omitempty"`
}

// Host is a host of the compile.
type Host struct {
	Name  string `json:"name"`
	Agent string `json:"agent"`
	// Declared: a host block names it (otherwise it comes from the
	// inventory). InInventory: the inventory lists its agent.
	Declared    bool `json:"declared"`
	InInventory bool `json:"in_inventory"`
	// Hostgroups the host belongs to.
	Hostgroups []string `json:"hostgroups,omitempty"`
	// Resources is how many resources the host's agent gets.
	Resources int `json:"resources"`
	// MissingFacts are the facts of this host the model needs but the
	// inventory does not hold, sorted.
	MissingFacts []string `json:"missing_facts,omitempty"`
}

// Undefined is a resource, or a block of resources, the compile could not
// define because it depends on facts that are not known.
type Undefined struct {
	// ID of the undefined resource; empty when not even its identity is
	// known (then nothing of the block was exported).
	ID string `json:"id,omitempty"`
	// Block is where the resource is declared (file:line:column).
	Block string `json:"block"`
	Agent string `json:"agent"`
	// Missing are the facts it waits for.
	Missing []FactRef `json:"missing"`
}

// FactRef names a fact of a host.
type FactRef struct {
	Host string `json:"host"`
	Fact string `json:"fact"`
}

func (f FactRef) String() string { return f.Host + ":" + f.Fact }

// Agents returns the agents of the hosts, sorted.
func (r *Result) Agents() []string {
	out := make([]string, 0, len(r.Hosts))
	for _, h := range r.Hosts {
		out = append(out, h.Agent)
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// ErrNoModel is returned when the directory holds no model files.
var ErrNoModel = errors.New("no model files")

// Compile compiles the model in dir. A model that does not compile gives an
// *Error listing every diagnostic; other errors (an unreadable directory, a
// cancelled context while fetching a module) are returned as they are.
func Compile(ctx context.Context, dir string, opts Options) (*Result, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, err
	}
	project, err := openTree(abs)
	if err != nil {
		return nil, fmt.Errorf("model directory %s: %w", dir, unwrapPathError(err))
	}
	defer project.close()
	if files, err := project.modelFiles(".", maxFiles); errors.Is(err, errTooManyFiles) {
		return nil, &Error{Diagnostics: []Diagnostic{{Severity: SeverityError, Summary: "Model too large",
			Detail: fmt.Sprintf("%s holds more than %d model files", dir, maxFiles)}}}
	} else if err != nil {
		return nil, fmt.Errorf("model directory %s: %w", dir, err)
	} else if len(files) == 0 {
		return nil, fmt.Errorf("%w in %s: write a main.hcl (see examples/quickstart)", ErrNoModel, dir)
	}
	lim := newLimits(opts)
	cctx, cancel := context.WithTimeout(ctx, lim.timeout)
	defer cancel()
	c := &compiler{
		ctx:       cctx,
		root:      abs,
		shown:     dir,
		project:   project,
		limits:    lim,
		parser:    hclparse.NewParser(),
		opts:      opts,
		templates: map[string]hcl.Expression{},
		read:      map[string]bool{},
		fileCache: map[string][]byte{},
		guarded:   map[*hcl.File]bool{},
		apps:      map[string]*application{},
		factPaths: map[string][]string{},
		labels:    map[string]bool{},
	}
	defer func() {
		for _, t := range c.trees {
			t.close()
		}
	}()
	res, err := c.compile()
	if ctx.Err() != nil {
		return nil, ctx.Err()
	}
	return res, err
}

type compiler struct {
	ctx     context.Context // the caller's, with the compile's deadline
	root    string          // absolute project directory
	shown   string          // the directory as the user named it, for messages
	project *tree
	trees   []*tree // of git modules, closed with the compile
	parser  *hclparse.Parser
	opts    Options
	limits  limits
	diags   hcl.Diagnostics

	inputs    []Input
	read      map[string]bool
	fileCache map[string][]byte // the files read, by absolute path
	totalRead int64
	tokens    int
	guarded   map[*hcl.File]bool
	templates map[string]hcl.Expression
	modules   []Module

	units  []*unit // root first, then modules depth first
	apps   map[string]*application
	hosts  []*hostDecl
	groups []*groupDecl

	platforms     []*machineBlock
	distributions []*machineBlock

	// factPaths are the fact paths the model reads (after any `.facts`),
	// keyed by their dotted form; labels the label names it reads. Hosts
	// get an unknown or null for each they lack. A template read during
	// expansion may add paths: then expansion runs again (grew).
	factPaths map[string][]string
	labels    map[string]bool
	grew      bool

	// groupsValue is hostgroup.* once hostgroups are matched.
	groupsValue cty.Value

	count     int   // resources expanded so far
	instances int   // applications applied so far
	attrSize  int64 // the size of the resources' attributes so far
	// halt stops the expansion after a bound was passed: the rest would
	// only repeat the diagnostic.
	halt bool

	traversals map[hcl.Expression][]hcl.Traversal // see variablesOf
}

// display names a file relative to the directory the user gave.
func (c *compiler) display(p string) string {
	rel, err := filepath.Rel(c.root, p)
	if err != nil {
		return p
	}
	return filepath.Join(c.shown, rel)
}

func (c *compiler) compile() (*Result, error) {
	root, err := c.load()
	if err != nil {
		return nil, err
	}
	if c.diags.HasErrors() || c.ctx.Err() != nil {
		return nil, c.fail()
	}
	c.values(root, nil)
	if c.diags.HasErrors() || c.ctx.Err() != nil {
		return nil, c.fail()
	}
	marked := len(c.diags)
	var hosts []*hostInfo
	for attempt := 0; ; attempt++ {
		c.grew = false
		c.count, c.instances, c.attrSize = 0, 0, 0
		c.groupsValue = cty.NilVal
		hosts = c.buildHosts()
		if !c.diags.HasErrors() {
			c.matchGroups(hosts)
		}
		if !c.diags.HasErrors() {
			c.expand(hosts)
		}
		// A template revealed fact or label names the hosts were built
		// without: build them again (the set only grows, so this ends).
		if !c.grew || attempt > 8 || c.halted() {
			break
		}
		c.diags = c.diags[:marked]
	}
	var machines *model.DeclaredMachines
	if !c.diags.HasErrors() && c.ctx.Err() == nil {
		machines = c.machines(hosts)
	}
	if c.diags.HasErrors() || c.ctx.Err() != nil {
		return nil, c.fail()
	}
	c.traversals = nil // expansion is over
	res := &Result{}
	res.Resources = c.link(hosts)
	if c.diags.HasErrors() || c.ctx.Err() != nil {
		return nil, c.fail()
	}
	res.Hosts, res.Undefined = c.report(hosts, res.Resources)
	res.Warnings = convertDiags(dedupe(c.diags))
	res.Inputs = c.inputs
	slices.SortFunc(res.Inputs, func(a, b Input) int { return strings.Compare(a.Path, b.Path) })
	res.Modules = c.modules
	res.Machines = machines
	return res, nil
}

// fail is the compile's *Error. Past the deadline it is the one
// diagnostic saying so, where it was noticed: the others may be the
// deadline's consequences.
func (c *compiler) fail() error {
	if c.ctx.Err() != nil {
		d := c.timedOut(nil)
		for _, e := range c.diags {
			if e.Summary == d.Summary {
				d = e
				break
			}
		}
		return &Error{Diagnostics: convertDiags(hcl.Diagnostics{d})}
	}
	return &Error{Diagnostics: convertDiags(dedupe(c.diags)), files: c.parser.Files()}
}

// report summarises the hosts and the undefined resources.
func (c *compiler) report(hosts []*hostInfo, resources []model.Resource) ([]Host, []Undefined) {
	count := map[string]int{}
	for i := range resources {
		count[resources[i].ID.Agent]++
	}
	missing := map[string]map[string]bool{} // host → facts
	note := func(f FactRef) {
		if missing[f.Host] == nil {
			missing[f.Host] = map[string]bool{}
		}
		missing[f.Host][f.Fact] = true
	}
	var undefined []Undefined
	for _, h := range hosts {
		for _, u := range h.undefined {
			for _, f := range u.Missing {
				note(f)
			}
			undefined = append(undefined, u)
		}
		for _, f := range h.unknownGroups {
			note(f)
		}
	}
	out := make([]Host, 0, len(hosts))
	for _, h := range hosts {
		out = append(out, Host{
			Name: h.name, Agent: h.agent, Declared: h.decl != nil, InInventory: h.inv != nil,
			Hostgroups: h.groups, Resources: count[h.agent],
			MissingFacts: slices.Sorted(maps.Keys(missing[h.name])),
		})
	}
	slices.SortFunc(out, func(a, b Host) int { return strings.Compare(a.Name, b.Name) })
	slices.SortFunc(undefined, func(a, b Undefined) int {
		return strings.Compare(a.Agent+"\x00"+a.ID+"\x00"+a.Block, b.Agent+"\x00"+b.ID+"\x00"+b.Block)
	})
	return out, undefined
}
