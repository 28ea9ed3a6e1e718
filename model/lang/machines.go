package lang

import (
	"fmt"
	"math/big"
	"path/filepath"
	"slices"
	"strings"

	"github.com/hashicorp/hcl/v2"
	"github.com/zclconf/go-cty/cty"
	"github.com/zclconf/go-cty/cty/convert"

	"github.com/tetherhq/tether/model"
)

// Machines a model declares for the server to make: platforms
// (`platform "NAME" { driver agent settings templates }`), distributions
// (`distribution "NAME" { kind kernel initrd cmdline install_format install
// params settings images }`) and hosts made from blueprints (a host block
// with `platform`, `distribution`, `applications` and `settings`). The
// compiler checks their shape and types; what they mean (a driver's
// settings, a template's variables, a platform a host names but the model
// does not declare) is the server's to judge, as for an operator's.

// machineBlock is a platform or distribution block and the unit whose
// scope its attributes are evaluated in.
type machineBlock struct {
	name  string
	block *hcl.Block
	unit  *unit
	attrs hcl.Attributes
}

var platformSchema = &hcl.BodySchema{Attributes: []hcl.AttributeSchema{
	{Name: "driver", Required: true}, {Name: "agent", Required: true}, {Name: "settings"}, {Name: "templates"},
}}

var distributionSchema = &hcl.BodySchema{Attributes: []hcl.AttributeSchema{
	{Name: "kind", Required: true}, {Name: "kernel"}, {Name: "initrd"}, {Name: "cmdline"},
	{Name: "install_format"}, {Name: "install"}, {Name: "params"}, {Name: "settings"}, {Name: "images"},
}}

// blueprintAttrs are the attributes a host block has when it is made from
// a blueprint.
var blueprintAttrs = []hcl.AttributeSchema{{Name: "platform"}, {Name: "distribution"}, {Name: "applications"}, {Name: "settings"}}

// paramAttrs are the attributes of an element of a distribution's params.
var paramAttrs = []string{"name", "type", "default", "required", "doc", "min", "max"}

func (c *compiler) platform(u *unit, b *hcl.Block) {
	if mb := c.machineBlock(u, b, platformSchema, c.platforms); mb != nil {
		c.platforms = append(c.platforms, mb)
	}
}

func (c *compiler) distribution(u *unit, b *hcl.Block) {
	if mb := c.machineBlock(u, b, distributionSchema, c.distributions); mb != nil {
		c.distributions = append(c.distributions, mb)
	}
}

// machineBlock decodes a platform or distribution block: its name is
// what an agent's name may be, unique in the model (modules included).
func (c *compiler) machineBlock(u *unit, b *hcl.Block, schema *hcl.BodySchema, seen []*machineBlock) *machineBlock {
	name := b.Labels[0]
	if err := model.ValidateAgentName(name); err != nil {
		c.diags = append(c.diags, errorf(b.LabelRanges[0].Ptr(), "Invalid "+b.Type+" name",
			"%s (a %s's name follows the rules of agents' names)", strings.TrimPrefix(err.Error(), model.ErrInvalidName.Error()+": "), b.Type))
		return nil
	}
	for _, prev := range seen {
		if prev.name == name {
			c.diags = append(c.diags, errorf(b.LabelRanges[0].Ptr(), "Duplicate "+b.Type,
				"%s %q is already declared at %s", b.Type, name, where(prev.block.DefRange)))
			return nil
		}
	}
	// Kept even with errors (the compile fails anyway): a second block
	// of its name is then said to be one.
	content, diags := b.Body.Content(schema)
	c.diags = append(c.diags, diags...)
	return &machineBlock{name: name, block: b, unit: u, attrs: content.Attributes}
}

// blueprint returns the blueprint attributes of a host block, checking
// they come together: a platform and a distribution make a blueprint,
// applications and settings belong to one, and a blueprint's machine
// enrolls under the host's name (so no other agent).
func (c *compiler) blueprint(b *hcl.Block, content *hcl.BodyContent) hcl.Attributes {
	out := hcl.Attributes{}
	for _, a := range blueprintAttrs {
		if attr, ok := content.Attributes[a.Name]; ok {
			out[a.Name] = attr
		}
	}
	if len(out) == 0 {
		return nil
	}
	name := b.Labels[0]
	platform, hasPlatform := out["platform"]
	if !hasPlatform {
		for _, n := range []string{"distribution", "applications", "settings"} {
			if a, ok := out[n]; ok {
				c.diags = append(c.diags, errorf(a.NameRange.Ptr(), "Host without a platform",
					"%s belongs to a host made from a blueprint: set its platform too (platform = \"NAME\"), or remove %s", n, n))
				return nil
			}
		}
	}
	if _, ok := out["distribution"]; !ok {
		c.diags = append(c.diags, errorf(platform.NameRange.Ptr(), "Host without a distribution",
			"host %q names its platform but not what to install on it: add distribution = \"NAME\"", name))
		return nil
	}
	if a, ok := content.Attributes["agent"]; ok {
		c.diags = append(c.diags, errorf(a.NameRange.Ptr(), "Agent of a host made from a blueprint",
			"the machine of host %q enrolls as agent %q, with the host's token: remove agent", name, name))
		return nil
	}
	return out
}

// machines evaluates the machines the model declares, or nil when it
// declares none. Platforms and distributions are evaluated in their
// unit's scope (var, local, functions), a host's blueprint in the host's
// (host.* too); every value must be known.
func (c *compiler) machines(hosts []*hostInfo) *model.DeclaredMachines {
	out := &model.DeclaredMachines{}
	for _, mb := range c.platforms {
		if p, ok := c.declaredPlatform(mb); ok {
			out.Platforms = append(out.Platforms, p)
		}
	}
	for _, mb := range c.distributions {
		if d, ok := c.declaredDistribution(mb); ok {
			out.Distributions = append(out.Distributions, d)
		}
	}
	for _, h := range hosts {
		if h.decl == nil || h.decl.blueprint == nil {
			continue
		}
		if dh, ok := c.declaredHost(h); ok {
			out.Hosts = append(out.Hosts, dh)
		}
	}
	for _, name := range sortedKeys(c.apps) {
		app := c.apps[name]
		if app.machineSettings == nil {
			continue
		}
		da := model.DeclaredApplication{Name: app.name, Pos: c.sourcePos(app.block)}
		if c.settingsAttr(app.unit.ctx, app.machineSettings, &da.MachineSettings) {
			out.Applications = append(out.Applications, da)
		}
	}
	if out.Empty() {
		return nil
	}
	slices.SortFunc(out.Platforms, func(a, b model.DeclaredPlatform) int { return strings.Compare(a.Name, b.Name) })
	slices.SortFunc(out.Distributions, func(a, b model.DeclaredDistribution) int { return strings.Compare(a.Name, b.Name) })
	slices.SortFunc(out.Hosts, func(a, b model.DeclaredHost) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// sourcePos is where a block is declared, its file relative to the
// project directory.
func (c *compiler) sourcePos(b *hcl.Block) model.SourcePos {
	file := b.DefRange.Filename
	if rel, err := filepath.Rel(c.shown, file); err == nil && !strings.HasPrefix(rel, "..") {
		file = rel
	}
	return model.SourcePos{File: filepath.ToSlash(file), Line: b.DefRange.Start.Line}
}

func (c *compiler) declaredPlatform(mb *machineBlock) (model.DeclaredPlatform, bool) {
	ctx := mb.unit.ctx
	p := model.DeclaredPlatform{Name: mb.name, Pos: c.sourcePos(mb.block)}
	ok := c.stringAttr(ctx, mb.attrs["driver"], &p.Driver)
	if c.stringAttr(ctx, mb.attrs["agent"], &p.Agent) {
		if err := model.ValidateAgentName(p.Agent); err != nil {
			c.diags = append(c.diags, errorf(mb.attrs["agent"].Expr.Range().Ptr(), "Invalid agent name",
				"%s", strings.TrimPrefix(err.Error(), model.ErrInvalidName.Error()+": ")))
			ok = false
		}
	}
	ok = c.settingsAttr(ctx, mb.attrs["settings"], &p.Settings) && ok
	ok = c.stringMapAttr(ctx, mb.attrs["templates"], &p.Templates) && ok
	return p, ok
}

func (c *compiler) declaredDistribution(mb *machineBlock) (model.DeclaredDistribution, bool) {
	ctx := mb.unit.ctx
	d := model.DeclaredDistribution{Name: mb.name, Pos: c.sourcePos(mb.block)}
	ok := true
	for _, s := range []struct {
		name string
		to   *string
	}{{"kind", &d.Kind}, {"kernel", &d.Kernel}, {"initrd", &d.Initrd}, {"cmdline", &d.Cmdline}, {"install_format", &d.InstallFormat}, {"install", &d.Install}} {
		ok = c.stringAttr(ctx, mb.attrs[s.name], s.to) && ok
	}
	ok = c.stringMapAttr(ctx, mb.attrs["images"], &d.Images) && ok
	ok = c.settingsAttr(ctx, mb.attrs["settings"], &d.Settings) && ok
	ok = c.paramsAttr(ctx, mb.attrs["params"], &d.Params) && ok
	return d, ok
}

func (c *compiler) declaredHost(h *hostInfo) (model.DeclaredHost, bool) {
	bp := h.decl.blueprint
	ctx := c.hostCtx(h, h.decl.body.unit)
	dh := model.DeclaredHost{Name: h.name, Pos: c.sourcePos(h.decl.block)}
	ok := c.stringAttr(ctx, bp["platform"], &dh.Platform)
	ok = c.stringAttr(ctx, bp["distribution"], &dh.Distribution) && ok
	ok = c.settingsAttr(ctx, bp["settings"], &dh.Settings) && ok
	if a := bp["applications"]; a != nil {
		v, good := c.knownValue(ctx, a)
		if good {
			list, err := convert.Convert(v, cty.List(cty.String))
			if err != nil || list.IsNull() || slices.ContainsFunc(list.AsValueSlice(), cty.Value.IsNull) {
				c.diags = append(c.diags, errorf(a.Expr.Range().Ptr(), "Invalid applications",
					"applications takes a list of strings, like applications = [\"web\"]"))
				good = false
			} else {
				for _, e := range list.AsValueSlice() {
					dh.Applications = append(dh.Applications, e.AsString())
				}
			}
		}
		ok = good && ok
	} else {
		// Unsaid, a blueprint's applications are those its host block
		// applies.
		for _, ab := range h.decl.body.applies {
			if ab.app != nil && !slices.Contains(dh.Applications, ab.app.name) {
				dh.Applications = append(dh.Applications, ab.app.name)
			}
		}
	}
	// The host block's own labels (evaluated and checked already, for
	// host.labels) are the blueprint's.
	if a := h.decl.labels; a != nil {
		if v, diags := a.Expr.Value(h.decl.body.unit.ctx); !diags.HasErrors() {
			v, _ = v.UnmarkDeep()
			if m, err := convert.Convert(v, cty.Map(cty.String)); err == nil && !m.IsNull() && m.IsWhollyKnown() {
				dh.Labels = map[string]string{}
				for k, e := range m.AsValueMap() {
					dh.Labels[k] = e.AsString()
				}
			}
		}
	}
	return dh, ok
}

// knownValue evaluates an attribute to a known value without marks.
func (c *compiler) knownValue(ctx *hcl.EvalContext, a *hcl.Attribute) (cty.Value, bool) {
	if !c.checkRefs(ctx, a.Expr) {
		return cty.NilVal, false
	}
	v, diags := a.Expr.Value(ctx)
	c.diags = append(c.diags, diags...)
	if diags.HasErrors() {
		return cty.NilVal, false
	}
	if err := c.checkValue(v, a.Name); err != nil {
		c.diags = append(c.diags, errorf(a.Expr.Range().Ptr(), "Value too large", "%v", err))
		return cty.NilVal, false
	}
	v, marks := v.UnmarkDeep()
	if !v.IsWhollyKnown() {
		why := "it reads a value that is not known"
		if facts := factsOf(marks, cty.NilVal); len(facts) > 0 {
			why = "it needs facts the inventory lacks (" + factList(facts) + "), which a machine not made yet cannot report"
		}
		c.diags = append(c.diags, errorf(a.Expr.Range().Ptr(), "Unknown "+a.Name, "%s must be known when the model is compiled: %s", a.Name, why))
		return cty.NilVal, false
	}
	return v, true
}

// stringAttr sets *to from an optional string attribute (nil: unset).
func (c *compiler) stringAttr(ctx *hcl.EvalContext, a *hcl.Attribute, to *string) bool {
	if a == nil {
		return true
	}
	v, ok := c.knownValue(ctx, a)
	if !ok {
		return false
	}
	s, err := convert.Convert(v, cty.String)
	if err != nil || s.IsNull() {
		c.diags = append(c.diags, errorf(a.Expr.Range().Ptr(), "Invalid "+a.Name, "%s takes a string, not %s", a.Name, friendly(v)))
		return false
	}
	*to = s.AsString()
	return true
}

// stringMapAttr sets *to from an optional map of strings.
func (c *compiler) stringMapAttr(ctx *hcl.EvalContext, a *hcl.Attribute, to *map[string]string) bool {
	if a == nil {
		return true
	}
	v, ok := c.knownValue(ctx, a)
	if !ok {
		return false
	}
	m, err := convert.Convert(v, cty.Map(cty.String))
	if err != nil || m.IsNull() {
		c.diags = append(c.diags, errorf(a.Expr.Range().Ptr(), "Invalid "+a.Name,
			"%s takes a map of strings, like %s = { NAME = \"…\" }, not %s", a.Name, a.Name, friendly(v)))
		return false
	}
	out := map[string]string{}
	for k, e := range m.AsValueMap() {
		if e.IsNull() {
			c.diags = append(c.diags, errorf(a.Expr.Range().Ptr(), "Invalid "+a.Name, "%s.%s is null", a.Name, k))
			return false
		}
		out[k] = e.AsString()
	}
	*to = out
	return true
}

// settingsAttr sets *to from an optional object of settings: each a
// string, a bool or a number (int64 when whole, float64 otherwise).
func (c *compiler) settingsAttr(ctx *hcl.EvalContext, a *hcl.Attribute, to *map[string]any) bool {
	if a == nil {
		return true
	}
	v, ok := c.knownValue(ctx, a)
	if !ok {
		return false
	}
	if v.IsNull() || !v.Type().IsObjectType() && !v.Type().IsMapType() {
		c.diags = append(c.diags, errorf(a.Expr.Range().Ptr(), "Invalid "+a.Name,
			"%s takes an object, like %s = { memory_mib = 1024 }, not %s", a.Name, a.Name, friendly(v)))
		return false
	}
	out := map[string]any{}
	for k, e := range v.AsValueMap() {
		s, err := scalar(e)
		if err != nil {
			c.diags = append(c.diags, errorf(a.Expr.Range().Ptr(), "Invalid "+a.Name, "%s.%s: %v", a.Name, k, err))
			return false
		}
		out[k] = s
	}
	*to = out
	return true
}

// paramsAttr sets *to from an optional list of parameters, each an object
// of paramAttrs.
func (c *compiler) paramsAttr(ctx *hcl.EvalContext, a *hcl.Attribute, to *[]model.DeclaredParam) bool {
	if a == nil {
		return true
	}
	v, ok := c.knownValue(ctx, a)
	if !ok {
		return false
	}
	bad := func(format string, args ...any) bool {
		c.diags = append(c.diags, errorf(a.Expr.Range().Ptr(), "Invalid params", format, args...))
		return false
	}
	if v.IsNull() || !v.Type().IsListType() && !v.Type().IsTupleType() {
		return bad("params takes a list of parameters, like params = [{ name = \"locale\", type = \"string\", default = \"C\" }], not %s", friendly(v))
	}
	var out []model.DeclaredParam
	for i, e := range v.AsValueSlice() {
		if e.IsNull() || !e.Type().IsObjectType() && !e.Type().IsMapType() {
			return bad("params[%d]: a parameter is an object with %s, not %s", i, strings.Join(paramAttrs, ", "), friendly(e))
		}
		p := model.DeclaredParam{}
		fields := e.AsValueMap()
		for _, k := range sortedKeys(fields) {
			f := fields[k]
			if f.IsNull() {
				continue
			}
			var err error
			switch k {
			case "name", "type", "doc":
				var s cty.Value
				if s, err = convert.Convert(f, cty.String); err == nil {
					switch k {
					case "name":
						p.Name = s.AsString()
					case "type":
						p.Type = s.AsString()
					default:
						p.Doc = s.AsString()
					}
				}
			case "required":
				var b cty.Value
				if b, err = convert.Convert(f, cty.Bool); err == nil {
					p.Required = b.True()
				}
			case "min", "max":
				var n any
				if n, err = scalar(f); err == nil {
					w, whole := n.(int64)
					if !whole {
						return bad("params[%d].%s: want a whole number, not %s", i, k, friendly(f))
					}
					if k == "min" {
						p.Min = w
					} else {
						p.Max = w
					}
				}
			case "default":
				p.Default, err = scalar(f)
			default:
				return bad("params[%d]: unknown attribute %q: a parameter has %s%s", i, k, strings.Join(paramAttrs, ", "), suggest(k, paramAttrs))
			}
			if err != nil {
				return bad("params[%d].%s: %v", i, k, err)
			}
		}
		if p.Name == "" {
			return bad("params[%d]: a parameter needs its name", i)
		}
		if p.Type == "" {
			p.Type = "string"
		}
		out = append(out, p)
	}
	*to = out
	return true
}

// scalar converts a setting's value: a string, a bool, or a number (an
// int64 when whole and within range, else a float64).
func scalar(v cty.Value) (any, error) {
	switch {
	case v.IsNull():
		return nil, fmt.Errorf("null is not a value here: remove it to leave it unset")
	case v.Type() == cty.String:
		return v.AsString(), nil
	case v.Type() == cty.Bool:
		return v.True(), nil
	case v.Type() == cty.Number:
		f := v.AsBigFloat()
		if f.IsInt() {
			if i, acc := f.Int64(); acc == big.Exact {
				return i, nil
			}
		}
		x, _ := f.Float64()
		return x, nil
	}
	return nil, fmt.Errorf("want a string, a number or a bool, not %s", friendly(v))
}

// friendly names a value's type for a message.
func friendly(v cty.Value) string {
	if v.IsNull() {
		return "null"
	}
	return v.Type().FriendlyName()
}
