package lang

import (
	"encoding/json"
	"math/big"
	"strconv"
	"strings"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/ext/typeexpr"
	"github.com/hashicorp/hcl/v2/hclsyntax"
	"github.com/zclconf/go-cty/cty"
	"github.com/zclconf/go-cty/cty/convert"

	"github.com/tetherhq/tether/model"
)

var variableSchema = &hcl.BodySchema{Attributes: []hcl.AttributeSchema{
	{Name: "type"}, {Name: "default"}, {Name: "description"},
}}

// variables evaluates the variable blocks against --var values and defaults
// and returns the `var` object.
func (c *compiler) variables(blocks []*hcl.Block) cty.Value {
	vals := map[string]cty.Value{}
	declared := map[string]*hcl.Block{}
	for _, b := range blocks {
		name := b.Labels[0]
		if !hclsyntax.ValidIdentifier(name) {
			c.diags = append(c.diags, errorf(b.LabelRanges[0].Ptr(), "Invalid variable name",
				"%q is not an identifier: use letters, digits, '_' and '-', starting with a letter", name))
			continue
		}
		if prev, dup := declared[name]; dup {
			c.diags = append(c.diags, errorf(b.LabelRanges[0].Ptr(), "Duplicate variable",
				"variable %q is already declared at %s", name, where(prev.DefRange)))
			continue
		}
		declared[name] = b
		content, diags := b.Body.Content(variableSchema)
		c.diags = append(c.diags, diags...)
		if diags.HasErrors() {
			continue
		}
		ty := cty.DynamicPseudoType
		if a, ok := content.Attributes["type"]; ok {
			t, diags := typeexpr.TypeConstraint(a.Expr)
			c.diags = append(c.diags, diags...)
			if diags.HasErrors() {
				continue
			}
			ty = t
		}
		val, ok := c.variableValue(name, b, content, ty)
		if ok {
			vals[name] = val
		}
	}
	for name := range c.opts.Vars {
		if _, ok := declared[name]; !ok {
			c.diags = append(c.diags, errorf(nil, "Undeclared variable",
				"--var %s=… sets a variable the model does not declare; declare it with variable %q { … }", name, name))
		}
	}
	return cty.ObjectVal(vals)
}

func (c *compiler) variableValue(name string, b *hcl.Block, content *hcl.BodyContent, ty cty.Type) (cty.Value, bool) {
	if raw, ok := c.opts.Vars[name]; ok {
		var v cty.Value
		if ty == cty.String {
			v = cty.StringVal(raw)
		} else {
			expr, diags := hclsyntax.ParseExpression([]byte(raw), "--var "+name, hcl.Pos{Line: 1, Column: 1})
			if diags.HasErrors() {
				// Not an expression: take it as text, then convert.
				v = cty.StringVal(raw)
			} else if v, diags = expr.Value(nil); diags.HasErrors() {
				v = cty.StringVal(raw)
			}
		}
		out, err := convert.Convert(v, ty)
		if err != nil {
			c.diags = append(c.diags, errorf(b.DefRange.Ptr(), "Invalid value for variable",
				"--var %s=%q: %v (the variable's type is %s)", name, raw, err, typeexpr.TypeString(ty)))
			return cty.NilVal, false
		}
		return out, true
	}
	a, ok := content.Attributes["default"]
	if !ok {
		c.diags = append(c.diags, errorf(b.DefRange.Ptr(), "Variable without a value",
			"variable %q has no default: set it with --var %s=VALUE", name, name))
		return cty.NilVal, false
	}
	v, diags := a.Expr.Value(&hcl.EvalContext{Functions: c.functions()})
	c.diags = append(c.diags, diags...)
	if diags.HasErrors() {
		return cty.NilVal, false
	}
	out, err := convert.Convert(v, ty)
	if err != nil {
		c.diags = append(c.diags, errorf(a.Expr.Range().Ptr(), "Invalid default value",
			"%v (the variable's type is %s)", err, typeexpr.TypeString(ty)))
		return cty.NilVal, false
	}
	return out, true
}

// resourceDecl is a resource block being compiled.
type resourceDecl struct {
	res   model.Resource
	block *hcl.Block
	attrs hcl.Attributes
	// titles of the host, for references: kind → title → ID.
	titles map[string]map[string]model.ID
}

// metaAttrs are the attributes every resource block takes besides its kind's.
var metaAttrs = []hcl.AttributeSchema{{Name: "requires"}, {Name: "subscribes"}, {Name: "purged"}}

func resourceSchema(k *model.KindSpec) *hcl.BodySchema {
	s := &hcl.BodySchema{Attributes: append([]hcl.AttributeSchema(nil), metaAttrs...)}
	for _, a := range k.Attrs {
		s.Attributes = append(s.Attributes, hcl.AttributeSchema{Name: a.Name})
	}
	return s
}

// host compiles the resource blocks of one host.
func (c *compiler) host(agent string, b *hcl.Block) []*resourceDecl {
	content, diags := b.Body.Content(hostSchema)
	c.diags = append(c.diags, diags...)
	titles := map[string]map[string]model.ID{}
	titleBlock := map[string]*hcl.Block{}
	var out []*resourceDecl
	for _, rb := range content.Blocks {
		kind, _ := model.LookupKind(rb.Type)
		title := rb.Labels[0]
		key := rb.Type + "\x00" + title
		if prev, dup := titleBlock[key]; dup {
			c.diags = append(c.diags, errorf(rb.LabelRanges[0].Ptr(), "Duplicate resource title",
				"%s %q is already declared in host %q at %s", rb.Type, title, agent, where(prev.DefRange)))
			continue
		}
		titleBlock[key] = rb
		d := c.resource(agent, &kind, rb)
		if d == nil {
			continue
		}
		if titles[rb.Type] == nil {
			titles[rb.Type] = map[string]model.ID{}
		}
		titles[rb.Type][title] = d.res.ID
		d.titles = titles
		out = append(out, d)
	}
	return out
}

// resource compiles one resource block: its identity and attribute values.
func (c *compiler) resource(agent string, kind *model.KindSpec, b *hcl.Block) *resourceDecl {
	content, diags := b.Body.Content(resourceSchema(kind))
	c.diags = append(c.diags, diags...)
	if diags.HasErrors() {
		return nil
	}
	d := &resourceDecl{block: b, attrs: content.Attributes}
	d.res.Attributes = model.Attributes{}
	ok := true
	for name, a := range content.Attributes {
		if name == "requires" || name == "subscribes" {
			continue
		}
		if name == "purged" {
			v, good := c.eval(a, model.TypeBool)
			ok = ok && good
			if good && v != nil {
				d.res.Purged = v.(bool)
			}
			continue
		}
		spec, _ := kind.Attr(name)
		v, good := c.eval(a, spec.Type)
		if !good {
			ok = false
			continue
		}
		if v == nil { // null: unset
			continue
		}
		if spec.Check != nil { // eval converted the type already
			if err := spec.Check(v); err != nil {
				c.diags = append(c.diags, errorf(a.Expr.Range().Ptr(), "Invalid value for "+name, "%v", err))
				ok = false
				continue
			}
		}
		d.res.Attributes[name] = v
	}
	if !ok {
		return nil
	}
	// The title is the identity unless the identity attribute is set.
	identity, set := d.res.Attributes[kind.Identity].(string)
	if !set {
		identity = b.Labels[0]
		spec, _ := kind.Attr(kind.Identity)
		if spec.Check != nil {
			if err := spec.Check(identity); err != nil {
				c.diags = append(c.diags, errorf(b.LabelRanges[0].Ptr(), "Invalid title",
					"the title is this %s's %s unless %s is set: %v", kind.Kind, kind.Identity, kind.Identity, err))
				return nil
			}
		}
		d.res.Attributes[kind.Identity] = identity
	}
	d.res.ID = model.ID{Type: kind.Kind, Agent: agent, Key: kind.Identity, Value: identity}
	if err := d.res.ID.Validate(); err != nil {
		c.diags = append(c.diags, errorf(b.DefRange.Ptr(), "Invalid resource identity", "%v", err))
		return nil
	}
	if d.res.Purged && len(d.res.Attributes) > 1 {
		c.diags = append(c.diags, errorf(b.DefRange.Ptr(), "Purged resource with attributes",
			"a purged %s only needs its %s: remove the other attributes", kind.Kind, kind.Identity))
		return nil
	}
	return d
}

// eval evaluates an attribute to a JSON value of type t; nil for null.
func (c *compiler) eval(a *hcl.Attribute, t model.AttrType) (any, bool) {
	if !c.checkVarRefs(a.Expr) {
		return nil, false
	}
	v, diags := a.Expr.Value(c.ctx)
	c.diags = append(c.diags, diags...)
	if diags.HasErrors() {
		return nil, false
	}
	if v.IsNull() {
		return nil, true
	}
	want := map[model.AttrType]cty.Type{model.TypeString: cty.String, model.TypeNumber: cty.Number, model.TypeBool: cty.Bool}[t]
	conv, err := convert.Convert(v, want)
	if err != nil {
		c.diags = append(c.diags, errorf(a.Expr.Range().Ptr(), "Invalid value",
			"%s must be a %s: %v", a.Name, t, err))
		return nil, false
	}
	if !conv.IsWhollyKnown() {
		c.diags = append(c.diags, errorf(a.Expr.Range().Ptr(), "Unknown value",
			"%s depends on a value that is not known at compile time", a.Name))
		return nil, false
	}
	switch t {
	case model.TypeString:
		return conv.AsString(), true
	case model.TypeBool:
		return conv.True(), true
	default:
		return numberJSON(conv.AsBigFloat()), true
	}
}

// checkVarRefs reports references to undeclared variables with a message
// that says how to declare them.
func (c *compiler) checkVarRefs(expr hcl.Expression) bool {
	ok := true
	vars := c.ctx.Variables["var"]
	for _, tr := range expr.Variables() {
		if tr.RootName() != "var" || len(tr) < 2 {
			continue
		}
		step, isAttr := tr[1].(hcl.TraverseAttr)
		if !isAttr || vars.Type().HasAttribute(step.Name) {
			continue
		}
		c.diags = append(c.diags, errorf(tr.SourceRange().Ptr(), "Reference to undeclared variable",
			"no variable %q is declared: add variable %q { default = … }", step.Name, step.Name))
		ok = false
	}
	return ok
}

func numberJSON(f *big.Float) json.Number {
	if f.IsInt() {
		if i, acc := f.Int64(); acc == big.Exact {
			return json.Number(strconv.FormatInt(i, 10))
		}
	}
	x, _ := f.Float64()
	return json.Number(strconv.FormatFloat(x, 'g', -1, 64))
}

// references resolves a requires or subscribes list: each element a
// reference to a resource of the same host by kind and title, as
// `kind.title` or `kind["title"]`.
func (c *compiler) references(d *resourceDecl, attr string) []model.ID {
	a, ok := d.attrs[attr]
	if !ok {
		return nil
	}
	elems, diags := hcl.ExprList(a.Expr)
	if diags.HasErrors() {
		c.diags = append(c.diags, errorf(a.Expr.Range().Ptr(), "Invalid "+attr,
			"%s takes a list of resource references, like [directory.site, file[\"/etc/motd\"]]", attr))
		return nil
	}
	var out []model.ID
	for _, e := range elems {
		id, ok := c.reference(d, e, attr)
		if ok && id == d.res.ID {
			c.diags = append(c.diags, errorf(e.Range().Ptr(), "Self reference", "a resource cannot %s itself", verb(attr)))
			continue
		}
		if ok {
			out = append(out, id)
		}
	}
	return out
}

func verb(attr string) string {
	if attr == "requires" {
		return "require"
	}
	return "subscribe to"
}

func (c *compiler) reference(d *resourceDecl, e hcl.Expression, attr string) (model.ID, bool) {
	bad := func() (model.ID, bool) {
		c.diags = append(c.diags, errorf(e.Range().Ptr(), "Invalid reference",
			"each element of %s must name a resource, like directory.site or file[\"/etc/motd\"]", attr))
		return model.ID{}, false
	}
	tr, diags := hcl.AbsTraversalForExpr(e)
	if diags.HasErrors() || len(tr) != 2 {
		return bad()
	}
	kind := tr.RootName()
	if _, ok := model.LookupKind(kind); !ok {
		c.diags = append(c.diags, errorf(e.Range().Ptr(), "Invalid reference",
			"%q is not a resource kind (kinds: %s)", kind, kindNames()))
		return model.ID{}, false
	}
	var title string
	switch step := tr[1].(type) {
	case hcl.TraverseAttr:
		title = step.Name
	case hcl.TraverseIndex:
		if step.Key.Type() != cty.String {
			return bad()
		}
		title = step.Key.AsString()
	default:
		return bad()
	}
	id, ok := d.titles[kind][title]
	if !ok {
		c.diags = append(c.diags, errorf(e.Range().Ptr(), "Reference to undeclared resource",
			"host %q declares no %s titled %q", d.res.ID.Agent, kind, title))
		return model.ID{}, false
	}
	return id, true
}

func kindNames() string {
	var names []string
	for _, k := range model.Kinds() {
		names = append(names, k.Kind)
	}
	return strings.Join(names, ", ")
}
