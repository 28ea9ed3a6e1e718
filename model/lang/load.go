package lang

import (
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/ext/typeexpr"
	"github.com/hashicorp/hcl/v2/hclsyntax"
	"github.com/zclconf/go-cty/cty"
	"github.com/zclconf/go-cty/cty/function"

	"github.com/tetherhq/tether/model"
)

// unit is the project directory or one module of it: its own variables,
// locals, applications and modules, evaluated in their own scope.
type unit struct {
	name   string // "" for the project, "db" or "db.replica" for modules
	dir    string // absolute
	tree   *tree  // what its files may read: the project, or a git module's checkout
	parent *unit
	block  *hcl.Block // the module block (nil for the project)

	variables []*hcl.Block
	locals    []*hcl.Attribute
	apps      map[string]*application
	children  map[string]*moduleUse

	// ctx holds var, local and the functions of the unit (whose files are
	// relative to its directory).
	ctx   *hcl.EvalContext
	funcs map[string]function.Function
}

// qualify names something declared in the unit: "web", or "db.web" in
// module db.
func (u *unit) qualify(name string) string {
	if u.name == "" {
		return name
	}
	return u.name + "." + name
}

// moduleUse is a module block: the unit it loads and the expression of its
// inputs, evaluated in the using unit.
type moduleUse struct {
	unit   *unit
	inputs *hcl.Attribute
}

// application is a reusable bundle of resources with typed parameters.
type application struct {
	name   string // qualified
	unit   *unit
	block  *hcl.Block
	params []*parameter
	body   *body
	// machineSettings: what the application says of the machines made
	// to run it (see machines.go).
	machineSettings *hcl.Attribute
}

func (a *application) param(name string) *parameter {
	for _, p := range a.params {
		if p.name == name {
			return p
		}
	}
	return nil
}

type parameter struct {
	name        string
	block       *hcl.Block
	typ         cty.Type
	def         *hcl.Attribute // nil: required
	sensitive   bool
	validations []validation
}

type validation struct {
	condition *hcl.Attribute
	message   *hcl.Attribute
}

// body is the content of a host, hostgroup or application block: resources
// and applications applied.
type body struct {
	unit      *unit
	resources []*resourceBlock
	applies   []*applyBlock
}

type hostDecl struct {
	name   string
	block  *hcl.Block
	agent  *hcl.Attribute
	labels *hcl.Attribute
	body   *body
	// blueprint holds platform, distribution, applications and settings
	// when the host is made from a blueprint (see machines.go).
	blueprint hcl.Attributes
}

type groupDecl struct {
	name  string
	block *hcl.Block
	match *hcl.Attribute
	body  *body
}

// applyBlock applies an application, with its settings.
type applyBlock struct {
	name     string
	block    *hcl.Block
	forEach  *hcl.Attribute
	settings hcl.Attributes
	app      *application // resolved after loading
}

// resourceBlock is the static shape of a resource block, decoded once.
type resourceBlock struct {
	kind    *model.KindSpec
	name    string // the label: title, or block name with for_each
	block   *hcl.Block
	attrs   []*hcl.Attribute // kind attributes, in name order
	forEach *hcl.Attribute
	purged  *hcl.Attribute
	// requires and subscribes.
	refs [2]refList
}

const (
	refRequires   = 0
	refSubscribes = 1
)

var refAttrNames = [2]string{"requires", "subscribes"}

// refList is a requires or subscribes list: static references to resources
// of the same host, and other expressions giving resource IDs as strings
// (any host's: "service[db-1,name=postgresql]").
type refList struct {
	attr    *hcl.Attribute
	static  []staticRef
	dynamic []hcl.Expression
}

// staticRef is kind.name, kind["name"] or kind.name["key"].
type staticRef struct {
	kind   string
	name   string
	key    string
	hasKey bool
	rng    hcl.Range
}

func (r staticRef) String() string {
	s := r.kind + "." + r.name
	if !hclsyntax.ValidIdentifier(r.name) {
		s = fmt.Sprintf("%s[%q]", r.kind, r.name)
	}
	if r.hasKey {
		s += fmt.Sprintf("[%q]", r.key)
	}
	return s
}

// Limits that keep a compile from running away on a hostile or broken
// model; each gives a diagnostic.
const (
	maxModuleDepth = 8
	maxApplyDepth  = 16
	maxForDepth    = 3
)

func kindBlocks() []hcl.BlockHeaderSchema {
	var out []hcl.BlockHeaderSchema
	for _, k := range model.Kinds() {
		out = append(out, hcl.BlockHeaderSchema{Type: k.Kind, LabelNames: []string{"title"}})
	}
	return out
}

var unitSchema = &hcl.BodySchema{Blocks: append([]hcl.BlockHeaderSchema{
	{Type: "variable", LabelNames: []string{"name"}},
	{Type: "locals"},
	{Type: "application", LabelNames: []string{"name"}},
	{Type: "host", LabelNames: []string{"name"}},
	{Type: "hostgroup", LabelNames: []string{"name"}},
	{Type: "module", LabelNames: []string{"name"}},
	{Type: "platform", LabelNames: []string{"name"}},
	{Type: "distribution", LabelNames: []string{"name"}},
}, kindBlocks()...)}

var hostSchema = &hcl.BodySchema{
	Attributes: append([]hcl.AttributeSchema{{Name: "agent"}, {Name: "labels"}}, blueprintAttrs...),
	Blocks:     append([]hcl.BlockHeaderSchema{{Type: "apply", LabelNames: []string{"application"}}}, kindBlocks()...),
}

var groupSchema = &hcl.BodySchema{
	Attributes: []hcl.AttributeSchema{{Name: "match", Required: true}},
	Blocks:     append([]hcl.BlockHeaderSchema{{Type: "apply", LabelNames: []string{"application"}}}, kindBlocks()...),
}

var appSchema = &hcl.BodySchema{
	Attributes: []hcl.AttributeSchema{{Name: "machine_settings"}},
	Blocks: append([]hcl.BlockHeaderSchema{
		{Type: "parameter", LabelNames: []string{"name"}},
		{Type: "apply", LabelNames: []string{"application"}},
	}, kindBlocks()...),
}

var parameterSchema = &hcl.BodySchema{
	Attributes: []hcl.AttributeSchema{{Name: "type"}, {Name: "default"}, {Name: "description"}, {Name: "sensitive"}},
	Blocks:     []hcl.BlockHeaderSchema{{Type: "validation"}},
}

var validationSchema = &hcl.BodySchema{Attributes: []hcl.AttributeSchema{
	{Name: "condition", Required: true}, {Name: "error_message", Required: true},
}}

var moduleSchema = &hcl.BodySchema{Attributes: []hcl.AttributeSchema{
	{Name: "source", Required: true}, {Name: "ref"}, {Name: "inputs"},
}}

var metaAttrs = []hcl.AttributeSchema{{Name: "for_each"}, {Name: "requires"}, {Name: "subscribes"}, {Name: "purged"}}

// resourceSchemas holds the body schema of each kind's resource blocks.
var resourceSchemas = func() map[string]*hcl.BodySchema {
	out := map[string]*hcl.BodySchema{}
	for _, k := range model.Kinds() {
		s := &hcl.BodySchema{Attributes: slices.Clone(metaAttrs)}
		for _, a := range k.Attrs {
			s.Attributes = append(s.Attributes, hcl.AttributeSchema{Name: a.Name})
		}
		out[k.Kind] = s
	}
	return out
}()

func resourceSchema(k *model.KindSpec) *hcl.BodySchema { return resourceSchemas[k.Kind] }

// load parses the project and its modules and decodes their static shape.
func (c *compiler) load() (*unit, error) {
	root, err := c.loadUnit("", c.root, c.project, nil, nil, nil)
	if err != nil {
		return nil, err
	}
	if c.diags.HasErrors() || c.ctx.Err() != nil {
		return root, nil
	}
	c.resolveApplies()
	c.checkHosts()
	return root, nil
}

// loadUnit parses the *.hcl files of dir, in tree t, as one unit. stack
// holds the directories of the modules being loaded, to refuse cycles.
func (c *compiler) loadUnit(name, dir string, t *tree, parent *unit, block *hcl.Block, stack []string) (*unit, error) {
	u := &unit{name: name, dir: dir, tree: t, parent: parent, block: block, apps: map[string]*application{}, children: map[string]*moduleUse{}}
	c.units = append(c.units, u)
	rel, _ := t.rel(dir)
	names, err := t.modelFiles(rel, maxFiles)
	if err != nil {
		if errors.Is(err, errTooManyFiles) {
			c.diags = append(c.diags, errorf(nil, "Model too large", "%s holds more than %d model files", c.display(dir), maxFiles))
			return u, nil
		}
		return nil, fmt.Errorf("read %s: %w", c.display(dir), err)
	}
	if len(names) == 0 && block != nil {
		c.diags = append(c.diags, errorf(block.DefRange.Ptr(), "Empty module",
			"module %q has no *.hcl files in %s", name, c.display(dir)))
		return u, nil
	}
	var modules []*hcl.Block
	for _, n := range names {
		if c.ctx.Err() != nil {
			return u, nil
		}
		p := filepath.Join(dir, n)
		f, ok := c.parseModelFile(t, p)
		if !ok {
			continue
		}
		content, diags := f.Body.Content(unitSchema)
		c.diags = append(c.diags, diags...)
		for _, b := range content.Blocks {
			switch b.Type {
			case "variable":
				u.variables = append(u.variables, b)
			case "locals":
				attrs, diags := b.Body.JustAttributes()
				c.diags = append(c.diags, diags...)
				for _, a := range attrs {
					u.locals = append(u.locals, a)
				}
			case "application":
				c.application(u, b)
			case "host":
				c.host(u, b)
			case "hostgroup":
				c.hostgroup(u, b)
			case "module":
				modules = append(modules, b)
			case "platform":
				c.platform(u, b)
			case "distribution":
				c.distribution(u, b)
			default:
				c.diags = append(c.diags, errorf(b.DefRange.Ptr(), "Resource outside a host",
					"%s blocks belong inside a host, hostgroup or application block: host \"NAME\" { %s %q { … } }", b.Type, b.Type, b.Labels[0]))
			}
		}
	}
	slices.SortFunc(u.locals, func(a, b *hcl.Attribute) int { return strings.Compare(a.Name, b.Name) })
	for _, b := range modules {
		if err := c.module(u, b, append(stack, dir)); err != nil {
			return nil, err
		}
	}
	return u, nil
}

// parseModelFile reads, checks and parses the model file at p (in tree t),
// or gives diagnostics. A file is parsed once, however many modules use
// its directory.
func (c *compiler) parseModelFile(t *tree, p string) (*hcl.File, bool) {
	shown := c.display(p)
	if f, seen := c.parser.Files()[shown]; seen {
		return f, f != nil && c.guarded[f]
	}
	src, err := c.readFile(t, p)
	if err != nil {
		if d := c.fileDiag(shown, err); d != nil {
			c.diags = append(c.diags, d)
			return nil, false
		}
		c.diags = append(c.diags, errorf(nil, "Model file not read", "read %s: %v", shown, err))
		return nil, false
	}
	if d := c.scanSource(src, shown, scanConfig); d != nil {
		c.diags = append(c.diags, d)
		return nil, false
	}
	f, diags := c.parser.ParseHCL(src, shown)
	c.diags = append(c.diags, diags...)
	if f == nil || diags.HasErrors() {
		return nil, false
	}
	if body, ok := f.Body.(*hclsyntax.Body); ok {
		diags := c.scan(body)
		c.diags = append(c.diags, diags...)
		if diags.HasErrors() {
			return nil, false
		}
	}
	c.guarded[f] = true
	return f, true
}

// scanSource checks a source before it is parsed (see nesting.go) and
// counts its tokens against Options.MaxTokens.
func (c *compiler) scanSource(src []byte, shown string, kind scanKind) *hcl.Diagnostic {
	r := scanSource(src, shown, kind, c.limits.nesting)
	if r.diag != nil {
		return r.diag
	}
	c.tokens += r.tokens
	if c.tokens > c.limits.tokens {
		return errorf(fileStart(shown), "Model too large",
			"with %s the model files and templates have more than %d tokens (Options.MaxTokens)", shown, c.limits.tokens)
	}
	return nil
}

// scan walks the expressions of a parsed file or template once: for the
// fact paths and label names it reads, refusing for expressions nested too
// deep to evaluate in bounded time, and installing the guards that bound
// what its expressions build (see guard.go).
func (c *compiler) scan(n hclsyntax.Node) hcl.Diagnostics {
	s := &scanner{c: c, guards: guards{c: c}}
	hclsyntax.Walk(n, s)
	return s.guards.diags
}

// scanner is the hclsyntax.Walker of scan; depth counts the for
// expressions around the node being visited.
type scanner struct {
	c      *compiler
	depth  int
	guards guards
}

func (s *scanner) Enter(n hclsyntax.Node) hcl.Diagnostics {
	switch e := n.(type) {
	case *hclsyntax.ScopeTraversalExpr:
		s.c.noteTraversal(e.Traversal)
	case *hclsyntax.RelativeTraversalExpr:
		s.c.noteTraversal(e.Traversal)
	case *hclsyntax.ForExpr:
		s.depth++
		if s.depth == maxForDepth+1 {
			s.c.diags = append(s.c.diags, errorf(e.SrcRange.Ptr(), "For expressions nested too deep",
				"for expressions nest at most %d deep; compute the inner part in a local", maxForDepth))
		}
	}
	return nil
}

func (s *scanner) Exit(n hclsyntax.Node) hcl.Diagnostics {
	if _, ok := n.(*hclsyntax.ForExpr); ok {
		s.depth--
	}
	// The node's children are walked: wrap them.
	s.guards.exit(n)
	return nil
}

// noteTraversal records `…facts.a.b` and `…labels.x` paths.
func (c *compiler) noteTraversal(tr hcl.Traversal) {
	for i := 0; i < len(tr); i++ {
		name, ok := stepName(tr[i])
		if !ok {
			continue
		}
		switch name {
		case "facts":
			var path []string
			for _, s := range tr[i+1:] {
				n, ok := stepName(s)
				if !ok {
					break
				}
				path = append(path, n)
			}
			if len(path) > 0 {
				key := strings.Join(path, ".")
				if _, seen := c.factPaths[key]; !seen {
					c.factPaths[key] = path
					c.grew = true
				}
			}
		case "labels":
			if i+1 < len(tr) {
				if n, ok := stepName(tr[i+1]); ok && !c.labels[n] {
					c.labels[n] = true
					c.grew = true
				}
			}
		}
	}
}

func stepName(s hcl.Traverser) (string, bool) {
	switch s := s.(type) {
	case hcl.TraverseAttr:
		return s.Name, true
	case hcl.TraverseRoot:
		return s.Name, true
	case hcl.TraverseIndex:
		if s.Key.Type() == cty.String && s.Key.IsKnown() && !s.Key.IsNull() {
			return s.Key.AsString(), true
		}
	}
	return "", false
}

// decodeBody decodes the resources and applies of a body.
func (c *compiler) decodeBody(u *unit, content *hcl.BodyContent, owner string) *body {
	b := &body{unit: u}
	seen := map[string]*hcl.Block{}
	for _, blk := range content.Blocks {
		switch blk.Type {
		case "apply":
			if ab := c.decodeApply(blk); ab != nil {
				b.applies = append(b.applies, ab)
			}
		case "parameter":
			// decoded by application
		default:
			key := blk.Type + "\x00" + blk.Labels[0]
			if prev, dup := seen[key]; dup {
				c.diags = append(c.diags, errorf(blk.LabelRanges[0].Ptr(), "Duplicate resource title",
					"%s %q is already declared in %s at %s", blk.Type, blk.Labels[0], owner, where(prev.DefRange)))
				continue
			}
			seen[key] = blk
			if rb := c.decodeResource(blk); rb != nil {
				b.resources = append(b.resources, rb)
			}
		}
	}
	return b
}

func (c *compiler) decodeApply(blk *hcl.Block) *applyBlock {
	attrs, diags := blk.Body.JustAttributes()
	c.diags = append(c.diags, diags...)
	if diags.HasErrors() {
		return nil
	}
	ab := &applyBlock{name: blk.Labels[0], block: blk, settings: attrs}
	if fe, ok := attrs["for_each"]; ok {
		ab.forEach = fe
		delete(attrs, "for_each")
	}
	return ab
}

func (c *compiler) decodeResource(blk *hcl.Block) *resourceBlock {
	kind, _ := model.LookupKind(blk.Type)
	content, diags := blk.Body.Content(resourceSchema(&kind))
	c.diags = append(c.diags, diags...)
	if diags.HasErrors() {
		return nil
	}
	rb := &resourceBlock{kind: &kind, name: blk.Labels[0], block: blk}
	for name, a := range content.Attributes {
		switch name {
		case "for_each":
			rb.forEach = a
		case "purged":
			rb.purged = a
		case "requires":
			rb.refs[refRequires] = c.decodeRefs(a)
		case "subscribes":
			rb.refs[refSubscribes] = c.decodeRefs(a)
		default:
			rb.attrs = append(rb.attrs, a)
		}
	}
	slices.SortFunc(rb.attrs, func(a, b *hcl.Attribute) int { return strings.Compare(a.Name, b.Name) })
	_, identitySet := content.Attributes[kind.Identity]
	// Without for_each and an identity attribute, the title is the identity:
	// check it once here rather than for every host.
	if rb.forEach == nil && !identitySet {
		spec, _ := kind.Attr(kind.Identity)
		if spec.Check != nil {
			if err := spec.Check(rb.name); err != nil {
				c.diags = append(c.diags, errorf(blk.LabelRanges[0].Ptr(), "Invalid title",
					"the title is this %s's %s unless %s is set: %v", kind.Kind, kind.Identity, kind.Identity, err))
				return nil
			}
		}
	}
	// A purged resource needs only its identity (its other attributes are
	// ignored, with a warning, when it is expanded); others need their
	// required attributes.
	if rb.purged == nil {
		if err := kind.CheckRequired(func(n string) bool { _, ok := content.Attributes[n]; return ok }); err != nil {
			c.diags = append(c.diags, errorf(blk.DefRange.Ptr(), "Missing required attribute", "%v", err))
			return nil
		}
	}
	return rb
}

// decodeRefs splits a requires/subscribes list into static references and
// expressions to evaluate.
func (c *compiler) decodeRefs(a *hcl.Attribute) refList {
	out := refList{attr: a}
	elems, diags := hcl.ExprList(a.Expr)
	if diags.HasErrors() {
		// Not a list literal (a function call, a for expression): evaluate.
		if c.mentionsKind(a.Expr) {
			c.diags = append(c.diags, errorf(a.Expr.Range().Ptr(), "Invalid "+a.Name,
				"write each resource reference as an element of the list, like %s = [package.nginx, file[\"/etc/motd\"]]", a.Name))
			return out
		}
		out.dynamic = append(out.dynamic, a.Expr)
		return out
	}
	for _, e := range elems {
		tr, diags := hcl.AbsTraversalForExpr(e)
		if diags.HasErrors() {
			if c.mentionsKind(e) {
				c.diags = append(c.diags, errorf(e.Range().Ptr(), "Invalid reference",
					"a resource reference is kind.title, kind[\"title\"] or kind.name[\"key\"], like package.nginx"))
				continue
			}
			out.dynamic = append(out.dynamic, e)
			continue
		}
		if _, isKind := model.LookupKind(tr.RootName()); !isKind {
			if len(tr) == 1 || tr.RootName() == "each" || tr.RootName() == "var" || tr.RootName() == "local" ||
				tr.RootName() == "param" || tr.RootName() == "host" || tr.RootName() == "hostgroup" {
				out.dynamic = append(out.dynamic, e)
				continue
			}
			c.diags = append(c.diags, errorf(e.Range().Ptr(), "Invalid reference",
				"%q is not a resource kind (kinds: %s)", tr.RootName(), kindNames()))
			continue
		}
		ref, ok := parseRef(tr)
		if !ok {
			c.diags = append(c.diags, errorf(e.Range().Ptr(), "Invalid reference",
				"a resource reference is kind.title, kind[\"title\"] or kind.name[\"key\"], like package.nginx"))
			continue
		}
		ref.rng = e.Range()
		out.static = append(out.static, ref)
	}
	return out
}

func parseRef(tr hcl.Traversal) (staticRef, bool) {
	if len(tr) < 2 || len(tr) > 3 {
		return staticRef{}, false
	}
	ref := staticRef{kind: tr.RootName()}
	name, ok := stepName(tr[1])
	if !ok {
		return staticRef{}, false
	}
	ref.name = name
	if len(tr) == 3 {
		idx, ok := tr[2].(hcl.TraverseIndex)
		if !ok || idx.Key.Type() != cty.String || idx.Key.IsNull() {
			return staticRef{}, false
		}
		ref.key, ref.hasKey = idx.Key.AsString(), true
	}
	return ref, true
}

// mentionsKind reports whether an expression refers to a resource kind as
// a variable (package.nginx inside a function call).
func (c *compiler) mentionsKind(e hcl.Expression) bool {
	for _, tr := range e.Variables() {
		if _, ok := model.LookupKind(tr.RootName()); ok {
			return true
		}
	}
	return false
}

func kindNames() string { return strings.Join(model.KindNames(), ", ") }

func (c *compiler) application(u *unit, b *hcl.Block) {
	name := b.Labels[0]
	if !hclsyntax.ValidIdentifier(name) {
		c.diags = append(c.diags, errorf(b.LabelRanges[0].Ptr(), "Invalid application name",
			"%q is not an identifier: use letters, digits, '_' and '-', starting with a letter", name))
		return
	}
	if prev, dup := u.apps[name]; dup {
		c.diags = append(c.diags, errorf(b.LabelRanges[0].Ptr(), "Duplicate application",
			"application %q is already declared at %s", name, where(prev.block.DefRange)))
		return
	}
	content, diags := b.Body.Content(appSchema)
	c.diags = append(c.diags, diags...)
	app := &application{name: u.qualify(name), unit: u, block: b, machineSettings: content.Attributes["machine_settings"]}
	for _, pb := range content.Blocks {
		if pb.Type != "parameter" {
			continue
		}
		if p := c.parameter(app, pb); p != nil {
			app.params = append(app.params, p)
		}
	}
	app.body = c.decodeBody(u, content, fmt.Sprintf("application %q", name))
	u.apps[name] = app
	c.apps[app.name] = app
}

func (c *compiler) parameter(app *application, b *hcl.Block) *parameter {
	name := b.Labels[0]
	if !hclsyntax.ValidIdentifier(name) {
		c.diags = append(c.diags, errorf(b.LabelRanges[0].Ptr(), "Invalid parameter name",
			"%q is not an identifier: use letters, digits, '_' and '-', starting with a letter", name))
		return nil
	}
	if name == "for_each" {
		c.diags = append(c.diags, errorf(b.LabelRanges[0].Ptr(), "Reserved parameter name",
			"for_each repeats an apply block; name the parameter otherwise"))
		return nil
	}
	if prev := app.param(name); prev != nil {
		c.diags = append(c.diags, errorf(b.LabelRanges[0].Ptr(), "Duplicate parameter",
			"parameter %q is already declared at %s", name, where(prev.block.DefRange)))
		return nil
	}
	content, diags := b.Body.Content(parameterSchema)
	c.diags = append(c.diags, diags...)
	if diags.HasErrors() {
		return nil
	}
	p := &parameter{name: name, block: b, typ: cty.DynamicPseudoType, def: content.Attributes["default"]}
	if a, ok := content.Attributes["type"]; ok {
		t, diags := typeexpr.TypeConstraint(a.Expr)
		c.diags = append(c.diags, diags...)
		if diags.HasErrors() {
			return nil
		}
		p.typ = t
	}
	if a, ok := content.Attributes["sensitive"]; ok {
		p.sensitive, ok = c.literalBool(a)
		if !ok {
			return nil
		}
	}
	p.validations = c.validations(content)
	return p
}

func (c *compiler) validations(content *hcl.BodyContent) []validation {
	var out []validation
	for _, vb := range content.Blocks {
		if vb.Type != "validation" {
			continue
		}
		vc, diags := vb.Body.Content(validationSchema)
		c.diags = append(c.diags, diags...)
		if diags.HasErrors() {
			continue
		}
		out = append(out, validation{condition: vc.Attributes["condition"], message: vc.Attributes["error_message"]})
	}
	return out
}

func (c *compiler) literalBool(a *hcl.Attribute) (bool, bool) {
	v, diags := a.Expr.Value(nil)
	if diags.HasErrors() || v.Type() != cty.Bool || v.IsNull() {
		c.diags = append(c.diags, errorf(a.Expr.Range().Ptr(), "Invalid "+a.Name, "%s takes true or false", a.Name))
		return false, false
	}
	return v.True(), true
}

func (c *compiler) host(u *unit, b *hcl.Block) {
	content, diags := b.Body.Content(hostSchema)
	c.diags = append(c.diags, diags...)
	name := b.Labels[0]
	if err := model.ValidateAgentName(name); err != nil {
		c.diags = append(c.diags, errorf(b.LabelRanges[0].Ptr(), "Invalid host name",
			"%s", strings.TrimPrefix(err.Error(), model.ErrInvalidName.Error()+": ")))
		return
	}
	c.hosts = append(c.hosts, &hostDecl{
		name: name, block: b, agent: content.Attributes["agent"], labels: content.Attributes["labels"],
		body:      c.decodeBody(u, content, fmt.Sprintf("host %q", name)),
		blueprint: c.blueprint(b, content),
	})
}

func (c *compiler) hostgroup(u *unit, b *hcl.Block) {
	name := b.Labels[0]
	if !hclsyntax.ValidIdentifier(name) {
		c.diags = append(c.diags, errorf(b.LabelRanges[0].Ptr(), "Invalid hostgroup name",
			"%q is not an identifier: use letters, digits, '_' and '-', starting with a letter (it is read as hostgroup.%s)", name, name))
		return
	}
	content, diags := b.Body.Content(groupSchema)
	c.diags = append(c.diags, diags...)
	if diags.HasErrors() {
		return
	}
	for _, prev := range c.groups {
		if prev.name == name {
			c.diags = append(c.diags, errorf(b.LabelRanges[0].Ptr(), "Duplicate hostgroup",
				"hostgroup %q is already declared at %s", name, where(prev.block.DefRange)))
			return
		}
	}
	c.groups = append(c.groups, &groupDecl{
		name: name, block: b, match: content.Attributes["match"],
		body: c.decodeBody(u, content, fmt.Sprintf("hostgroup %q", name)),
	})
}

// checkHosts refuses a host declared twice.
func (c *compiler) checkHosts() {
	seen := map[string]*hostDecl{}
	for _, h := range c.hosts {
		if prev, dup := seen[h.name]; dup {
			c.diags = append(c.diags, errorf(h.block.LabelRanges[0].Ptr(), "Duplicate host",
				"host %q is already declared at %s", h.name, where(prev.block.DefRange)))
			continue
		}
		seen[h.name] = h
	}
}

// resolveApplies links every apply block to its application, checks its
// settings against the parameters, and refuses applications that apply
// themselves.
func (c *compiler) resolveApplies() {
	var bodies []*body
	for _, h := range c.hosts {
		bodies = append(bodies, h.body)
	}
	for _, g := range c.groups {
		bodies = append(bodies, g.body)
	}
	for _, u := range c.units {
		for _, name := range sortedKeys(u.apps) {
			bodies = append(bodies, u.apps[name].body)
		}
	}
	for _, b := range bodies {
		for _, ab := range b.applies {
			ab.app = c.lookupApp(b.unit, ab)
			if ab.app == nil {
				continue
			}
			for _, name := range sortedKeys(ab.settings) {
				if ab.app.param(name) == nil {
					a := ab.settings[name]
					c.diags = append(c.diags, errorf(a.NameRange.Ptr(), "Unknown parameter",
						"application %q has no parameter %q%s", ab.app.name, name, suggest(name, paramNames(ab.app))))
				}
			}
			for _, p := range ab.app.params {
				if _, set := ab.settings[p.name]; !set && p.def == nil {
					c.diags = append(c.diags, errorf(ab.block.DefRange.Ptr(), "Missing parameter",
						"application %q needs parameter %q (it has no default): apply %q { %s = … }", ab.app.name, p.name, ab.name, p.name))
				}
			}
		}
	}
	if c.diags.HasErrors() {
		return
	}
	// Applications applying each other in a circle would never end.
	state := map[*application]int{} // 1: visiting, 2: done
	var visit func(a *application, path []string) bool
	visit = func(a *application, path []string) bool {
		switch state[a] {
		case 1:
			c.diags = append(c.diags, errorf(a.block.DefRange.Ptr(), "Application cycle",
				"applications apply each other in a circle: %s", strings.Join(append(path, a.name), " -> ")))
			return false
		case 2:
			return true
		}
		if len(path) >= maxApplyDepth {
			c.diags = append(c.diags, errorf(a.block.DefRange.Ptr(), "Applications nested too deep",
				"applications apply each other more than %d deep: %s", maxApplyDepth, strings.Join(path, " -> ")))
			return false
		}
		state[a] = 1
		for _, ab := range a.body.applies {
			if ab.app != nil && !visit(ab.app, append(path, a.name)) {
				return false
			}
		}
		state[a] = 2
		return true
	}
	for _, name := range sortedKeys(c.apps) {
		if !visit(c.apps[name], nil) {
			return
		}
	}
}

func (c *compiler) lookupApp(u *unit, ab *applyBlock) *application {
	parts := strings.Split(ab.name, ".")
	scope := u
	for _, m := range parts[:len(parts)-1] {
		use, ok := scope.children[m]
		if !ok {
			c.diags = append(c.diags, errorf(ab.block.LabelRanges[0].Ptr(), "Unknown application",
				"no module %q here to take application %q from", m, ab.name))
			return nil
		}
		scope = use.unit
	}
	app, ok := scope.apps[parts[len(parts)-1]]
	if !ok {
		var names []string
		for n := range scope.apps {
			names = append(names, n)
		}
		c.diags = append(c.diags, errorf(ab.block.LabelRanges[0].Ptr(), "Unknown application",
			"no application %q is declared%s", ab.name, suggest(parts[len(parts)-1], names)))
		return nil
	}
	return app
}

func paramNames(a *application) []string {
	out := make([]string, len(a.params))
	for i, p := range a.params {
		out[i] = p.name
	}
	return out
}

// suggest returns `; did you mean "x"?` for the closest name, if close.
func suggest(name string, names []string) string {
	best, bestD := "", 3
	for _, n := range names {
		if d := editDistance(name, n); d < bestD {
			best, bestD = n, d
		}
	}
	if best == "" {
		return ""
	}
	return fmt.Sprintf("; did you mean %q?", best)
}

func editDistance(a, b string) int {
	ra, rb := []rune(a), []rune(b)
	prev := make([]int, len(rb)+1)
	cur := make([]int, len(rb)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(ra); i++ {
		cur[0] = i
		for j := 1; j <= len(rb); j++ {
			cost := 1
			if ra[i-1] == rb[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(rb)]
}

// module loads the unit a module block names.
func (c *compiler) module(u *unit, b *hcl.Block, stack []string) error {
	name := b.Labels[0]
	if !hclsyntax.ValidIdentifier(name) {
		c.diags = append(c.diags, errorf(b.LabelRanges[0].Ptr(), "Invalid module name",
			"%q is not an identifier: use letters, digits, '_' and '-', starting with a letter (its applications are applied as %s.NAME)", name, name))
		return nil
	}
	if _, dup := u.children[name]; dup {
		c.diags = append(c.diags, errorf(b.LabelRanges[0].Ptr(), "Duplicate module", "module %q is already declared", name))
		return nil
	}
	if len(stack) > maxModuleDepth {
		c.diags = append(c.diags, errorf(b.DefRange.Ptr(), "Modules nested too deep", "modules use each other more than %d deep", maxModuleDepth))
		return nil
	}
	if len(c.units) > maxModuleInstances {
		c.diags = append(c.diags, errorf(b.DefRange.Ptr(), "Too many modules", "the model loads more than %d modules (counting each module block of each module)", maxModuleInstances))
		return nil
	}
	content, diags := b.Body.Content(moduleSchema)
	c.diags = append(c.diags, diags...)
	if diags.HasErrors() {
		return nil
	}
	source, ok := c.literalString(content.Attributes["source"])
	if !ok {
		return nil
	}
	ref := ""
	if a, set := content.Attributes["ref"]; set {
		if ref, ok = c.literalString(a); !ok {
			return nil
		}
	}
	dir, t, mod, err := c.moduleDir(u, u.qualify(name), source, ref, content.Attributes["source"])
	if err != nil {
		return err
	}
	if dir == "" {
		return nil
	}
	if slices.Contains(stack, dir) {
		c.diags = append(c.diags, errorf(content.Attributes["source"].Expr.Range().Ptr(), "Module cycle",
			"module %q uses a module that uses it (%s)", name, c.display(dir)))
		return nil
	}
	c.modules = append(c.modules, mod)
	child, err := c.loadUnit(u.qualify(name), dir, t, u, b, stack)
	if err != nil {
		return err
	}
	u.children[name] = &moduleUse{unit: child, inputs: content.Attributes["inputs"]}
	return nil
}

func (c *compiler) literalString(a *hcl.Attribute) (string, bool) {
	v, diags := a.Expr.Value(nil)
	if diags.HasErrors() || v.Type() != cty.String || v.IsNull() || !v.IsKnown() {
		c.diags = append(c.diags, errorf(a.Expr.Range().Ptr(), "Invalid "+a.Name,
			"%s takes a literal string (it is read before any variable is known)", a.Name))
		return "", false
	}
	return v.AsString(), true
}

// Module is a module of the model, as the compile used it.
type Module struct {
	// Name is the module's qualified name ("db", "db.replica").
	Name   string `json:"name"`
	Source string `json:"source"`
	Ref    string `json:"ref,omitempty"`
	// Commit is the exact git revision used (git modules only).
	Commit string `json:"commit,omitempty"`
	// Dir is where its files were read, relative to the project directory.
	Dir string `json:"dir"`
}

// moduleDir resolves a module source to a directory and the tree its
// files may read: a local path (relative to the using unit, inside its
// tree) or a git repository at a ref, fetched into the module cache (its
// own tree).
func (c *compiler) moduleDir(u *unit, name, source, ref string, a *hcl.Attribute) (string, *tree, Module, error) {
	mod := Module{Name: name, Source: source, Ref: ref}
	if rest, isGit := strings.CutPrefix(source, "git::"); isGit {
		if ref == "" {
			c.diags = append(c.diags, errorf(a.Expr.Range().Ptr(), "Git module without a ref",
				"pin the module to a tag or commit: ref = \"v1.2.0\" (a compile must be repeatable)"))
			return "", nil, mod, nil
		}
		dir, commit, err := c.fetchGit(rest, ref)
		if err != nil {
			if c.ctx.Err() != nil {
				if d := c.timedOut(a.Expr.Range().Ptr()); d != nil {
					c.diags = append(c.diags, d)
					return "", nil, mod, nil
				}
				return "", nil, mod, c.ctx.Err()
			}
			detail := err.Error()
			if advice := c.fetchAdvice(err); advice != "" {
				detail += "; " + advice
			}
			c.diags = append(c.diags, errorf(a.Expr.Range().Ptr(), "Cannot fetch module", "%s", detail))
			return "", nil, mod, nil
		}
		t, err := openTree(dir)
		if err != nil {
			c.diags = append(c.diags, errorf(a.Expr.Range().Ptr(), "Cannot fetch module", "%v", unwrapPathError(err)))
			return "", nil, mod, nil
		}
		c.trees = append(c.trees, t)
		mod.Commit = commit
		mod.Dir, _ = filepath.Rel(c.root, dir)
		return dir, t, mod, nil
	}
	if ref != "" {
		c.diags = append(c.diags, errorf(a.Expr.Range().Ptr(), "Ref of a local module",
			"ref pins git modules only (source = \"git::URL\"); remove it"))
		return "", nil, mod, nil
	}
	if !strings.HasPrefix(source, "./") && !strings.HasPrefix(source, "../") {
		c.diags = append(c.diags, errorf(a.Expr.Range().Ptr(), "Invalid module source",
			"%q: a local module starts with ./ or ../ (a path inside the project); a git module with git:: (git::https://host/repo.git)", source))
		return "", nil, mod, nil
	}
	dir := filepath.Join(u.dir, filepath.FromSlash(source))
	rel, inside := u.tree.rel(dir)
	if !inside {
		c.diags = append(c.diags, errorf(a.Expr.Range().Ptr(), "Module outside the project",
			"%q leads outside the project directory %s; shared modules come from git (source = \"git::URL\", ref = …)", source, c.shown))
		return "", nil, mod, nil
	}
	// Through the tree: a directory linked out of the project is refused.
	st, err := u.tree.root.Stat(rel)
	if err != nil {
		if _, in := u.tree.resolve(dir); !in {
			c.diags = append(c.diags, errorf(a.Expr.Range().Ptr(), "Module outside the project",
				"%q leads outside the project directory %s (a symbolic link); it was not read", source, c.shown))
			return "", nil, mod, nil
		}
	}
	if err != nil || !st.IsDir() {
		c.diags = append(c.diags, errorf(a.Expr.Range().Ptr(), "Module not found",
			"%s is not a directory", c.display(dir)))
		return "", nil, mod, nil
	}
	mod.Dir, _ = filepath.Rel(c.root, dir)
	return dir, u.tree, mod, nil
}
