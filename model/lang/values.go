package lang

import (
	"encoding/json"
	"fmt"
	"math/big"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/ext/typeexpr"
	"github.com/hashicorp/hcl/v2/hclsyntax"
	"github.com/zclconf/go-cty/cty"
	"github.com/zclconf/go-cty/cty/convert"

	"github.com/tetherhq/tether/model"
)

// Marks carried by values through expressions (cty marks survive
// operations and function calls).
type (
	// sensitiveMark marks a value from a sensitive variable or parameter: a
	// resource attribute holding one is listed in Resource.Sensitive.
	sensitiveMark struct{}
	// missingFact marks the unknown value standing for a fact a host has not
	// reported.
	missingFact struct{ host, fact string }
)

var variableSchema = &hcl.BodySchema{
	Attributes: []hcl.AttributeSchema{{Name: "type"}, {Name: "default"}, {Name: "description"}, {Name: "sensitive"}},
	Blocks:     []hcl.BlockHeaderSchema{{Type: "validation"}},
}

// values evaluates the variables, locals and modules of a unit, then of its
// modules. inputs are the values a module block gives (nil for the
// project, whose variables come from --var).
func (c *compiler) values(u *unit, inputs map[string]cty.Value) {
	vars := c.variables(u, inputs)
	u.ctx = &hcl.EvalContext{Variables: map[string]cty.Value{"var": vars}, Functions: c.functions(u)}
	c.locals(u)
	for _, name := range sortedKeys(u.children) {
		use := u.children[name]
		given := map[string]cty.Value{}
		if use.inputs != nil {
			v, diags := use.inputs.Expr.Value(u.ctx)
			c.diags = append(c.diags, diags...)
			if diags.HasErrors() {
				continue
			}
			if v.IsNull() || !v.Type().IsObjectType() && !v.Type().IsMapType() || !v.IsWhollyKnown() {
				c.diags = append(c.diags, errorf(use.inputs.Expr.Range().Ptr(), "Invalid inputs",
					"inputs takes an object of the module's variables, like inputs = { port = 8080 }"))
				continue
			}
			for it := v.ElementIterator(); it.Next(); {
				k, ev := it.Element()
				given[k.AsString()] = ev
			}
		}
		c.values(use.unit, given)
	}
}

// variables evaluates a unit's variable blocks against the values given
// (--var for the project, inputs for a module) and defaults, checks their
// validations, and returns the `var` object.
func (c *compiler) variables(u *unit, inputs map[string]cty.Value) cty.Value {
	vals := map[string]cty.Value{}
	declared := map[string]*hcl.Block{}
	type check struct {
		name string
		vs   []validation
	}
	var checks []check
	for _, b := range u.variables {
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
		sensitive := false
		if a, ok := content.Attributes["sensitive"]; ok {
			if sensitive, ok = c.literalBool(a); !ok {
				continue
			}
		}
		val, ok := c.variableValue(u, name, b, content, ty, inputs)
		if !ok {
			continue
		}
		if sensitive {
			val = val.Mark(sensitiveMark{})
		}
		vals[name] = val
		if vs := c.validations(content); len(vs) > 0 {
			checks = append(checks, check{name, vs})
		}
	}
	if u.parent == nil {
		for _, name := range sortedKeys(c.opts.Vars) {
			if _, ok := declared[name]; !ok {
				c.diags = append(c.diags, errorf(nil, "Undeclared variable",
					"--var %s=… sets a variable the model does not declare; declare it with variable %q { … }", name, name))
			}
		}
	} else {
		for _, name := range sortedKeys(inputs) {
			if _, ok := declared[name]; !ok {
				c.diags = append(c.diags, errorf(u.parent.children[lastName(u.name)].inputs.Expr.Range().Ptr(), "Unknown module input",
					"module %q declares no variable %q%s", u.name, name, suggest(name, sortedKeys(declared))))
			}
		}
	}
	obj := cty.ObjectVal(vals)
	ctx := &hcl.EvalContext{Variables: map[string]cty.Value{"var": obj}, Functions: c.functions(u)}
	for _, ch := range checks {
		for _, v := range ch.vs {
			c.validate(ctx, v, fmt.Sprintf("variable %q", ch.name))
		}
	}
	return obj
}

func lastName(qualified string) string {
	return qualified[strings.LastIndexByte(qualified, '.')+1:]
}

// validate evaluates one validation block; a false condition is an error at
// the condition with the block's message. An unknown condition passes: it
// is checked again when the facts it needs are known.
func (c *compiler) validate(ctx *hcl.EvalContext, v validation, what string) bool {
	cond, diags := v.condition.Expr.Value(ctx)
	c.diags = append(c.diags, diags...)
	if diags.HasErrors() {
		return false
	}
	cond, _ = cond.UnmarkDeep()
	if !cond.IsKnown() {
		return true
	}
	cond, err := convert.Convert(cond, cty.Bool)
	if err != nil || cond.IsNull() {
		c.diags = append(c.diags, errorf(v.condition.Expr.Range().Ptr(), "Invalid validation condition",
			"the condition must be true or false"))
		return false
	}
	if cond.True() {
		return true
	}
	msg, diags := v.message.Expr.Value(ctx)
	text := "the value is not valid"
	if !diags.HasErrors() {
		msg, _ = msg.UnmarkDeep()
		if msg.Type() == cty.String && msg.IsKnown() && !msg.IsNull() {
			text = msg.AsString()
		}
	}
	c.diags = append(c.diags, errorf(v.condition.Expr.Range().Ptr(), "Invalid value for "+what, "%s", text))
	return false
}

func (c *compiler) variableValue(u *unit, name string, b *hcl.Block, content *hcl.BodyContent, ty cty.Type, inputs map[string]cty.Value) (cty.Value, bool) {
	if u.parent == nil {
		if raw, ok := c.opts.Vars[name]; ok {
			var v cty.Value
			if ty == cty.String {
				v = cty.StringVal(raw)
			} else if d := scanSource([]byte(raw), "--var "+name, scanExpression, c.limits.nesting).diag; d != nil {
				c.diags = append(c.diags, d)
				return cty.NilVal, false
			} else {
				expr, diags := hclsyntax.ParseExpression([]byte(raw), "--var "+name, hcl.Pos{Line: 1, Column: 1})
				if diags.HasErrors() {
					// Not an expression: take it as text, then convert.
					v = cty.StringVal(raw)
				} else if v, diags = expr.Value(nil); diags.HasErrors() {
					v = cty.StringVal(raw)
				}
			}
			out, err := c.convert(v, ty)
			if err != nil {
				c.diags = append(c.diags, errorf(b.DefRange.Ptr(), "Invalid value for variable",
					"--var %s=%q: %v (the variable's type is %s)", name, raw, err, typeexpr.TypeString(ty)))
				return cty.NilVal, false
			}
			return out, true
		}
	} else if v, ok := inputs[name]; ok {
		out, err := c.convert(v, ty)
		if err != nil {
			c.diags = append(c.diags, errorf(u.parent.children[lastName(u.name)].inputs.Expr.Range().Ptr(), "Invalid module input",
				"input %s of module %q: %v (the variable's type is %s)", name, u.name, err, typeexpr.TypeString(ty)))
			return cty.NilVal, false
		}
		return out, true
	}
	a, ok := content.Attributes["default"]
	if !ok {
		if u.parent == nil {
			c.diags = append(c.diags, errorf(b.DefRange.Ptr(), "Variable without a value",
				"variable %q has no default: set it with --var %s=VALUE", name, name))
		} else {
			c.diags = append(c.diags, errorf(u.block.DefRange.Ptr(), "Missing module input",
				"module %q needs input %q (its variable has no default): inputs = { %s = … }", u.name, name, name))
		}
		return cty.NilVal, false
	}
	v, diags := a.Expr.Value(&hcl.EvalContext{Functions: c.functions(u)})
	c.diags = append(c.diags, diags...)
	if diags.HasErrors() {
		return cty.NilVal, false
	}
	out, err := c.convert(v, ty)
	if err != nil {
		c.diags = append(c.diags, errorf(a.Expr.Range().Ptr(), "Invalid default value",
			"%v (the variable's type is %s)", err, typeexpr.TypeString(ty)))
		return cty.NilVal, false
	}
	return out, true
}

// locals evaluates a unit's locals in dependency order: a local may use
// variables and other locals, not hosts.
func (c *compiler) locals(u *unit) {
	byName := map[string]*hcl.Attribute{}
	for _, a := range u.locals {
		if prev, dup := byName[a.Name]; dup {
			c.diags = append(c.diags, errorf(a.NameRange.Ptr(), "Duplicate local",
				"local %q is already declared at %s", a.Name, where(prev.NameRange)))
			continue
		}
		byName[a.Name] = a
	}
	vals := map[string]cty.Value{}
	state := map[string]int{} // 1: evaluating, 2: done
	var eval func(name string, path []string) bool
	eval = func(name string, path []string) bool {
		a := byName[name]
		switch state[name] {
		case 1:
			c.diags = append(c.diags, errorf(a.NameRange.Ptr(), "Local refers to itself",
				"%s", strings.Join(append(path, "local."+name), " -> ")))
			return false
		case 2:
			_, ok := vals[name]
			return ok
		}
		state[name] = 1
		ok := true
		for _, tr := range a.Expr.Variables() {
			if tr.RootName() != "local" || len(tr) < 2 {
				continue
			}
			dep, isAttr := tr[1].(hcl.TraverseAttr)
			if !isAttr {
				continue
			}
			if _, exists := byName[dep.Name]; !exists {
				c.diags = append(c.diags, errorf(tr.SourceRange().Ptr(), "Reference to undeclared local",
					"no local %q is declared%s", dep.Name, suggest(dep.Name, sortedKeys(byName))))
				ok = false
				continue
			}
			if !eval(dep.Name, append(path, "local."+name)) {
				ok = false
			}
		}
		state[name] = 2
		if !ok {
			return false
		}
		ctx := u.ctx.NewChild()
		ctx.Variables = map[string]cty.Value{"local": cty.ObjectVal(vals)}
		v, diags := a.Expr.Value(ctx)
		c.diags = append(c.diags, diags...)
		if diags.HasErrors() {
			return false
		}
		vals[name] = v
		return true
	}
	for _, name := range sortedKeys(byName) {
		if c.ctx.Err() != nil {
			break
		}
		eval(name, nil)
	}
	u.ctx.Variables["local"] = cty.ObjectVal(vals)
}

// attrValue is an evaluated resource attribute.
type attrValue struct {
	json      any // nil when unknown or null
	null      bool
	unknown   bool
	sensitive bool
	missing   []FactRef
}

// toAttr converts a value to the JSON of an attribute type, collecting its
// marks. It returns an error message for a value of the wrong type.
func (c *compiler) toAttr(v cty.Value, t model.AttrType) (attrValue, error) {
	v, marks := v.UnmarkDeep()
	out := attrValue{}
	for m := range marks {
		switch m := m.(type) {
		case sensitiveMark:
			out.sensitive = true
		case missingFact:
			out.missing = append(out.missing, FactRef{Host: m.host, Fact: m.fact})
		}
	}
	sortFacts(out.missing)
	if v.IsNull() {
		out.null = true
		return out, nil
	}
	conv, err := c.convert(v, ctyType(t))
	if err != nil {
		return out, err
	}
	if !conv.IsWhollyKnown() {
		out.unknown = true
		return out, nil
	}
	out.json, err = ctyToJSON(conv)
	return out, err
}

func sortFacts(fs []FactRef) {
	slices.SortFunc(fs, func(a, b FactRef) int { return strings.Compare(a.String(), b.String()) })
}

func ctyType(t model.AttrType) cty.Type {
	switch t {
	case model.TypeString:
		return cty.String
	case model.TypeNumber:
		return cty.Number
	case model.TypeBool:
		return cty.Bool
	case model.TypeStringList:
		return cty.List(cty.String)
	case model.TypeStringMap:
		return cty.Map(cty.String)
	}
	return cty.DynamicPseudoType
}

// ctyToJSON converts a known value to a JSON value (strings, json.Number,
// bool, []any, map[string]any). Null elements are refused.
func ctyToJSON(v cty.Value) (any, error) {
	if v.IsNull() {
		return nil, fmt.Errorf("null is not allowed inside a value")
	}
	t := v.Type()
	switch {
	case t == cty.String:
		return v.AsString(), nil
	case t == cty.Bool:
		return v.True(), nil
	case t == cty.Number:
		return numberJSON(v.AsBigFloat()), nil
	case t.IsListType() || t.IsSetType() || t.IsTupleType():
		out := make([]any, 0, v.LengthInt())
		for it := v.ElementIterator(); it.Next(); {
			_, e := it.Element()
			j, err := ctyToJSON(e)
			if err != nil {
				return nil, err
			}
			out = append(out, j)
		}
		return out, nil
	case t.IsMapType() || t.IsObjectType():
		out := make(map[string]any, v.LengthInt())
		for it := v.ElementIterator(); it.Next(); {
			k, e := it.Element()
			j, err := ctyToJSON(e)
			if err != nil {
				return nil, err
			}
			out[k.AsString()] = j
		}
		return out, nil
	}
	return nil, fmt.Errorf("cannot use a %s here", t.FriendlyName())
}

// jsonToCty converts a JSON value (from an inventory) to a cty value.
func jsonToCty(v any) cty.Value {
	switch x := v.(type) {
	case nil:
		return cty.NullVal(cty.DynamicPseudoType)
	case string:
		return cty.StringVal(x)
	case bool:
		return cty.BoolVal(x)
	case json.Number:
		if f, ok := new(big.Float).SetString(string(x)); ok {
			return cty.NumberVal(f)
		}
		return cty.StringVal(string(x))
	case float64:
		return cty.NumberFloatVal(x)
	case int:
		return cty.NumberIntVal(int64(x))
	case int64:
		return cty.NumberIntVal(x)
	case []any:
		if len(x) == 0 {
			return cty.EmptyTupleVal
		}
		elems := make([]cty.Value, len(x))
		for i, e := range x {
			elems[i] = jsonToCty(e)
		}
		return cty.TupleVal(elems)
	case map[string]any:
		if len(x) == 0 {
			return cty.EmptyObjectVal
		}
		attrs := make(map[string]cty.Value, len(x))
		for k, e := range x {
			attrs[k] = jsonToCty(e)
		}
		return cty.ObjectVal(attrs)
	}
	return cty.StringVal(fmt.Sprint(v))
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

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
