package lang

import (
	"fmt"
	"slices"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/ext/typeexpr"
	"github.com/zclconf/go-cty/cty"
	"github.com/zclconf/go-cty/cty/convert"

	"github.com/tetherhq/tether/model"
)

// decl is a resource instance on a host, before linking.
type decl struct {
	res    model.Resource
	rb     *resourceBlock
	scope  int // the body instance (host, hostgroup or application applied) it was declared in
	key    string
	hasKey bool
	// dynamic holds the IDs requires and subscribes gave as strings.
	dynamic [2][]dynamicRef
}

type dynamicRef struct {
	id  model.ID
	rng hcl.Range
}

// expand evaluates, for each host, its own body and those of the hostgroups
// it belongs to, applying applications recursively.
func (c *compiler) expand(hosts []*hostInfo) {
	for _, h := range hosts {
		if c.halted() {
			return
		}
		if h.decl != nil {
			b := h.decl.body
			c.expandBody(h, b, c.hostCtx(h, b.unit))
		}
		for _, g := range c.groups {
			if slices.Contains(h.groups, g.name) {
				h.shared++
				c.expandBody(h, g.body, c.hostCtx(h, g.body.unit))
				h.shared--
			}
		}
		if c.count > c.limits.resources {
			c.diags = append(c.diags, errorf(nil, "Too many resources",
				"the model expands to more than %d resources (at host %s); check for_each expressions", c.limits.resources, h.name))
			return
		}
		h.ctxs = nil // the scopes are not needed after expansion
	}
}

func (c *compiler) expandBody(h *hostInfo, b *body, ctx *hcl.EvalContext) {
	scope := h.scopes
	h.scopes++
	for _, rb := range b.resources {
		if c.halted() {
			return
		}
		c.expandResource(h, rb, ctx, scope)
	}
	for _, ab := range b.applies {
		if c.halted() {
			return
		}
		c.expandApply(h, ab, ctx)
	}
}

// eachItem is one element of a for_each collection.
type eachItem struct {
	key   string
	value cty.Value
}

// forEach evaluates a for_each collection: a map, an object or a set of
// strings. ok is false after a diagnostic; missing is set (and items nil)
// when the collection is unknown.
func (c *compiler) forEach(h *hostInfo, ctx *hcl.EvalContext, a *hcl.Attribute) (items []eachItem, missing []FactRef, ok bool) {
	if !c.checkRefs(ctx, a.Expr) {
		return nil, nil, false
	}
	v, diags := a.Expr.Value(ctx)
	if diags.HasErrors() {
		c.diags = append(c.diags, forHost(diags, h)...)
		return nil, nil, false
	}
	v, marks := v.Unmark()
	if !v.IsKnown() || v.Type().IsSetType() && !v.IsWhollyKnown() {
		return nil, factsOf(marks, v), true
	}
	bad := func(why string) ([]eachItem, []FactRef, bool) {
		c.diags = append(c.diags, errorf(a.Expr.Range().Ptr(), "Invalid for_each", "%s%s", why, hostSuffix(h)))
		return nil, nil, false
	}
	ty := v.Type()
	switch {
	case v.IsNull():
		return bad("for_each is null; give a map or a set of strings")
	case ty.IsListType() || ty.IsTupleType():
		return bad("for_each takes a map or a set of strings, not a list (whose order would be the identity): convert it with toset(…)")
	case !ty.IsMapType() && !ty.IsObjectType() && !ty.IsSetType():
		return bad(fmt.Sprintf("for_each takes a map or a set of strings, got %s", ty.FriendlyName()))
	}
	if n := v.LengthInt(); n > c.limits.resources {
		return bad(fmt.Sprintf("for_each has %d elements, more than the %d resources a compile may have", n, c.limits.resources))
	}
	for it := v.ElementIterator(); it.Next(); {
		k, ev := it.Element()
		if ty.IsSetType() {
			sv, _ := ev.Unmark()
			if sv.IsNull() || !sv.Type().Equals(cty.String) {
				return bad("for_each takes a set of strings: convert other elements with tostring, or give a map")
			}
			items = append(items, eachItem{key: sv.AsString(), value: ev})
			continue
		}
		items = append(items, eachItem{key: k.AsString(), value: ev})
	}
	return items, nil, true
}

// factsOf lists the missing facts among marks (and those inside v).
func factsOf(marks cty.ValueMarks, v cty.Value) []FactRef {
	var out []FactRef
	add := func(ms cty.ValueMarks) {
		for m := range ms {
			if mf, ok := m.(missingFact); ok {
				f := FactRef{Host: mf.host, Fact: mf.fact}
				if !slices.Contains(out, f) {
					out = append(out, f)
				}
			}
		}
	}
	add(marks)
	if v != cty.NilVal {
		_, inner := v.UnmarkDeep()
		add(inner)
	}
	sortFacts(out)
	return out
}

func (c *compiler) expandApply(h *hostInfo, ab *applyBlock, ctx *hcl.EvalContext) {
	if ab.app == nil {
		return
	}
	instances := []eachInstance{{ctx: ctx}}
	if ab.forEach != nil {
		var ok bool
		if instances, ok = c.eachInstances(h, ctx, ab.forEach, ab.block); !ok {
			return
		}
	}
	app := ab.app
	h.shared++ // parameters' defaults and validations are the application's
	defer func() { h.shared-- }()
	for _, inst := range instances {
		if c.halted() {
			return
		}
		if c.instances++; c.instances > c.limits.resources {
			c.diags = append(c.diags, errorf(ab.block.DefRange.Ptr(), "Too many applications",
				"the model applies applications more than %d times (Options.MaxResources); check for_each expressions%s", c.limits.resources, hostSuffix(h)))
			c.halt = true
			return
		}
		ictx := inst.ctx
		hctx := c.hostCtx(h, app.unit)
		params := make(map[string]cty.Value, len(app.params))
		ok := true
		for _, p := range app.params {
			expr, ectx := hcl.Expression(nil), ictx
			if a, set := ab.settings[p.name]; set {
				expr = a.Expr
			} else {
				expr, ectx = p.def.Expr, hctx
			}
			if !c.checkRefs(ectx, expr) {
				ok = false
				continue
			}
			v, diags := expr.Value(ectx)
			if diags.HasErrors() {
				c.diags = append(c.diags, forHost(diags, h)...)
				ok = false
				continue
			}
			conv, err := c.convert(v, p.typ)
			if err != nil {
				c.diags = append(c.diags, errorf(expr.Range().Ptr(), "Invalid value for parameter "+p.name,
					"application %q takes %s as %s: %v%s", app.name, p.name, typeexpr.TypeString(p.typ), err, hostSuffix(h)))
				ok = false
				continue
			}
			if p.sensitive {
				conv = conv.Mark(sensitiveMark{})
			}
			params[p.name] = conv
		}
		if !ok {
			continue
		}
		actx := hctx.NewChild()
		actx.Variables = map[string]cty.Value{"param": cty.ObjectVal(params)}
		for _, p := range app.params {
			for _, v := range p.validations {
				before := len(c.diags)
				if !c.validate(actx, v, fmt.Sprintf("parameter %q of application %q", p.name, app.name)) {
					forHost(c.diags[before:], h)
					ok = false
				}
			}
		}
		if ok {
			c.expandBody(h, app.body, actx)
		}
	}
}

func eachValue(it eachItem) cty.Value {
	return cty.ObjectVal(map[string]cty.Value{"key": cty.StringVal(it.key), "value": it.value})
}

func (c *compiler) expandResource(h *hostInfo, rb *resourceBlock, ctx *hcl.EvalContext, scope int) {
	purged := false
	if rb.purged != nil {
		av, ok := c.evalAttr(h, ctx, rb.purged, model.TypeBool)
		if !ok {
			return
		}
		if av.unknown {
			h.undefined = append(h.undefined, Undefined{Block: where(rb.block.DefRange), Agent: h.agent, Missing: av.missing})
			return
		}
		purged = av.json == true
	}
	if rb.forEach == nil {
		c.instance(h, rb, ctx, scope, eachItem{}, false, purged)
		return
	}
	instances, _ := c.eachInstances(h, ctx, rb.forEach, rb.block)
	for _, inst := range instances {
		if c.halted() {
			return
		}
		c.instance(h, rb, inst.ctx, scope, inst.item, true, purged)
	}
}

// eachInstance is one element of a for_each with the scope that sees it as
// each.
type eachInstance struct {
	item eachItem
	ctx  *hcl.EvalContext
}

// eachInstances evaluates a block's for_each and gives a scope per element.
// An unknown collection expands to nothing and records the block as
// undefined for the host; ok is false after a diagnostic.
func (c *compiler) eachInstances(h *hostInfo, ctx *hcl.EvalContext, forEach *hcl.Attribute, block *hcl.Block) ([]eachInstance, bool) {
	items, missing, ok := c.forEach(h, ctx, forEach)
	if !ok {
		return nil, false
	}
	if missing != nil {
		h.undefined = append(h.undefined, Undefined{Block: where(block.DefRange), Agent: h.agent, Missing: missing})
		return nil, true
	}
	out := make([]eachInstance, len(items))
	for i, it := range items {
		ictx := ctx.NewChild()
		ictx.Variables = map[string]cty.Value{"each": eachValue(it)}
		out[i] = eachInstance{item: it, ctx: ictx}
	}
	return out, true
}

// evalAttr evaluates an attribute to a value of type t.
func (c *compiler) evalAttr(h *hostInfo, ctx *hcl.EvalContext, a *hcl.Attribute, t model.AttrType) (attrValue, bool) {
	if !c.checkRefs(ctx, a.Expr) {
		return attrValue{}, false
	}
	v, diags := a.Expr.Value(ctx)
	if diags.HasErrors() {
		c.diags = append(c.diags, forHost(diags, h)...)
		return attrValue{}, false
	}
	if err := c.checkValue(v, a.Name); err != nil {
		c.diags = append(c.diags, errorf(a.Expr.Range().Ptr(), "Value too large", "%v%s", err, hostSuffix(h)))
		return attrValue{}, false
	}
	size, _ := c.sizeOf(v)
	if c.attrSize += int64(size); c.attrSize > c.limits.resultSize {
		c.diags = append(c.diags, errorf(a.Expr.Range().Ptr(), "Compiled model too large",
			"the resources' attributes add up to more than %s (Options.MaxResultSize)%s", bytesText(c.limits.resultSize), hostSuffix(h)))
		c.halt = true
		return attrValue{}, false
	}
	av, err := c.toAttr(v, t)
	if err != nil {
		c.diags = append(c.diags, errorf(a.Expr.Range().Ptr(), "Invalid value",
			"%s must be a %s: %v%s", a.Name, t, err, hostSuffix(h)))
		return attrValue{}, false
	}
	return av, true
}

// hostSuffix says which host a diagnostic of a shared body was found for.
func hostSuffix(h *hostInfo) string {
	if h.shared == 0 {
		return ""
	}
	return " (for host " + h.name + ")"
}

// checkKind judges a resource's evaluated attributes by the catalogue's
// rules (model.KindSpec.Problems, the rules the server and the handlers
// apply) and reports each problem at its place: a value at its expression,
// what is missing or too much at the block. Types are already right (the
// values were converted to them) and unknown attributes cannot be written
// (the block's schema refuses them).
func (c *compiler) checkKind(h *hostInfo, rb *resourceBlock, attrs model.Attributes, purged, undefined bool) bool {
	kind := rb.kind
	problems := kind.Problems(attrs, purged, undefined)
	for _, p := range problems {
		rng := rb.block.DefRange.Ptr()
		switch p.Rule {
		case model.RuleValue, model.RuleType, model.RuleUnknown:
			if i := slices.IndexFunc(rb.attrs, func(a *hcl.Attribute) bool { return a.Name == p.Attr }); i >= 0 {
				rng = rb.attrs[i].Expr.Range().Ptr()
			}
			c.diags = append(c.diags, errorf(rng, "Invalid value for "+p.Attr, "%v%s", p.Err, hostSuffix(h)))
		case model.RulePurged:
			c.diags = append(c.diags, errorf(rng, "Purged resource with attributes",
				"a purged %s only needs its %s: %s is set%s", kind.Kind, kind.Identity, p.Attr, hostSuffix(h)))
		case model.RuleRequired:
			c.diags = append(c.diags, errorf(rng, "Missing required attribute", "%v (it is null)%s", p.Err, hostSuffix(h)))
		default:
			c.diags = append(c.diags, errorf(rng, "Invalid resource", "%v%s", &p, hostSuffix(h)))
		}
	}
	return len(problems) == 0
}

// warnOnce adds a warning unless the same one (summary, detail and place)
// was given already: a block expands once per host and per instance.
func (c *compiler) warnOnce(d *hcl.Diagnostic) {
	for _, o := range c.diags {
		if o.Severity == d.Severity && o.Summary == d.Summary && o.Detail == d.Detail &&
			o.Subject != nil && d.Subject != nil && *o.Subject == *d.Subject {
			return
		}
	}
	c.diags = append(c.diags, d)
}

// instance evaluates one resource: its attributes, identity and the
// requires/subscribes given as strings.
func (c *compiler) instance(h *hostInfo, rb *resourceBlock, ctx *hcl.EvalContext, scope int, it eachItem, hasKey, purged bool) {
	kind := rb.kind
	d := &decl{rb: rb, scope: scope, key: it.key, hasKey: hasKey}
	d.res.Purged = purged
	attrs := make(model.Attributes, len(rb.attrs)+1)
	var missing []FactRef
	undefined, identityUnknown, ok := false, false, true
	for _, a := range rb.attrs {
		if purged && kind.NotWhenPurged([]string{a.Name}) != "" {
			// What a resource that goes should have been does not
			// matter: ignored, as other tools do, but said.
			c.warnOnce(&hcl.Diagnostic{Severity: hcl.DiagWarning, Subject: a.NameRange.Ptr(),
				Summary: "Purged resource with attributes",
				Detail: fmt.Sprintf("a purged %s needs only its %s: %s is ignored (remove it)",
					kind.Kind, kind.Identity, a.Name)})
			continue
		}
		spec, _ := kind.Attr(a.Name)
		av, good := c.evalAttr(h, ctx, a, spec.Type)
		if !good {
			ok = false
			continue
		}
		if av.sensitive || spec.Sensitive {
			d.res.Sensitive = append(d.res.Sensitive, a.Name)
		}
		if av.unknown {
			undefined = true
			missing = append(missing, av.missing...)
			if a.Name == kind.Identity {
				identityUnknown = true
			}
			continue
		}
		if av.null {
			continue
		}
		attrs[a.Name] = av.json
	}
	if !ok || !c.checkKind(h, rb, attrs, purged, undefined) {
		return
	}
	if identityUnknown {
		sortFacts(missing)
		h.undefined = append(h.undefined, Undefined{Block: where(rb.block.DefRange), Agent: h.agent, Missing: slices.Compact(missing)})
		return
	}
	identity, set := attrs[kind.Identity].(string)
	if !set {
		identity = rb.name
		if hasKey {
			identity = it.key
			spec, _ := kind.Attr(kind.Identity)
			if spec.Check != nil {
				if err := spec.Check(identity); err != nil {
					c.diags = append(c.diags, errorf(rb.forEach.Expr.Range().Ptr(), "Invalid for_each key",
						"each key is the %s of a %s unless %s is set: %v%s", kind.Identity, kind.Kind, kind.Identity, err, hostSuffix(h)))
					return
				}
			}
		}
		attrs[kind.Identity] = identity
	}
	d.res.ID = model.ID{Type: kind.Kind, Agent: h.agent, Key: kind.Identity, Value: identity}
	if err := d.res.ID.Validate(); err != nil {
		c.diags = append(c.diags, errorf(rb.block.DefRange.Ptr(), "Invalid resource identity", "%v", err))
		return
	}
	for i := range rb.refs {
		for _, e := range rb.refs[i].dynamic {
			refs, miss, good := c.dynamicRefs(h, ctx, e, refAttrNames[i])
			if !good {
				return
			}
			if miss != nil {
				undefined = true
				missing = append(missing, miss...)
			}
			d.dynamic[i] = append(d.dynamic[i], refs...)
		}
	}
	d.res.Attributes = attrs
	if undefined {
		d.res.Undefined = true
		sortFacts(missing)
		h.undefined = append(h.undefined, Undefined{ID: d.res.ID.String(), Block: where(rb.block.DefRange), Agent: h.agent, Missing: slices.Compact(missing)})
	}
	h.decls = append(h.decls, d)
	if c.count++; c.count > c.limits.resources {
		c.diags = append(c.diags, errorf(rb.block.DefRange.Ptr(), "Too many resources",
			"the model expands to more than %d resources (Options.MaxResources); check for_each expressions%s", c.limits.resources, hostSuffix(h)))
		c.halt = true
	}
}

// dynamicRefs evaluates an element of requires or subscribes that is not a
// static reference: it must give resource IDs as strings (one, a list or a
// map of them).
func (c *compiler) dynamicRefs(h *hostInfo, ctx *hcl.EvalContext, e hcl.Expression, attr string) ([]dynamicRef, []FactRef, bool) {
	if !c.checkRefs(ctx, e) {
		return nil, nil, false
	}
	v, diags := e.Value(ctx)
	if diags.HasErrors() {
		c.diags = append(c.diags, forHost(diags, h)...)
		return nil, nil, false
	}
	v, marks := v.UnmarkDeep()
	if !v.IsWhollyKnown() {
		return nil, factsOf(marks, cty.NilVal), true
	}
	var strs []string
	var collect func(v cty.Value) bool
	collect = func(v cty.Value) bool {
		switch {
		case v.IsNull():
			return true
		case v.Type() == cty.String:
			strs = append(strs, v.AsString())
			return true
		case v.Type().IsListType() || v.Type().IsSetType() || v.Type().IsTupleType() || v.Type().IsMapType() || v.Type().IsObjectType():
			for it := v.ElementIterator(); it.Next(); {
				_, ev := it.Element()
				if !collect(ev) {
					return false
				}
			}
			return true
		}
		return false
	}
	if !collect(v) {
		c.diags = append(c.diags, errorf(e.Range().Ptr(), "Invalid "+attr,
			"%s takes resource references (package.nginx) or resource IDs as strings (\"service[db-1,name=postgresql]\"); this is a %s", attr, v.Type().FriendlyName()))
		return nil, nil, false
	}
	out := make([]dynamicRef, 0, len(strs))
	for _, s := range strs {
		id, err := model.ParseID(s)
		if err != nil {
			c.diags = append(c.diags, errorf(e.Range().Ptr(), "Invalid "+attr,
				"%q is not a resource ID like \"service[db-1,name=postgresql]\": %v%s", s, err, hostSuffix(h)))
			return nil, nil, false
		}
		out = append(out, dynamicRef{id: id, rng: e.Range()})
	}
	return out, nil, true
}

// checkRefs gives clear diagnostics for references HCL would report
// tersely: undeclared variables, locals and parameters, scopes used where
// they do not exist, and resources used as values.
func (c *compiler) checkRefs(ctx *hcl.EvalContext, expr hcl.Expression) bool {
	ok := true
	for _, tr := range c.variablesOf(expr) {
		root := tr.RootName()
		val, found := lookupVar(ctx, root)
		if !found {
			var why string
			switch root {
			case "param":
				why = "param.* is available inside application blocks only"
			case "each":
				why = "each.* is available in blocks with for_each only"
			case "host":
				why = "host.* is available inside host, hostgroup and application blocks only"
			case "hostgroup":
				why = "hostgroup.* is not available here: a hostgroup's match, locals and variables cannot use it"
			case "local":
				why = "no locals are declared"
			default:
				if _, isKind := model.LookupKind(root); isKind {
					why = fmt.Sprintf("%s is a resource kind: resources are referenced in requires and subscribes only", root)
				}
			}
			if why != "" {
				c.diags = append(c.diags, errorf(tr.SourceRange().Ptr(), "Invalid reference", "%s", why))
				ok = false
			}
			continue
		}
		if len(tr) < 2 || (root != "var" && root != "local" && root != "param" && root != "hostgroup") {
			continue
		}
		step, isAttr := tr[1].(hcl.TraverseAttr)
		if !isAttr || !val.Type().IsObjectType() || val.Type().HasAttribute(step.Name) {
			continue
		}
		names := make([]string, 0, len(val.Type().AttributeTypes()))
		for n := range val.Type().AttributeTypes() {
			names = append(names, n)
		}
		hint := suggest(step.Name, names)
		switch root {
		case "var":
			c.diags = append(c.diags, errorf(tr.SourceRange().Ptr(), "Reference to undeclared variable",
				"no variable %q is declared%s: add variable %q { default = … }", step.Name, hint, step.Name))
		case "local":
			c.diags = append(c.diags, errorf(tr.SourceRange().Ptr(), "Reference to undeclared local",
				"no local %q is declared%s", step.Name, hint))
		case "param":
			c.diags = append(c.diags, errorf(tr.SourceRange().Ptr(), "Reference to undeclared parameter",
				"the application has no parameter %q%s: add parameter %q { … }", step.Name, hint, step.Name))
		case "hostgroup":
			c.diags = append(c.diags, errorf(tr.SourceRange().Ptr(), "Reference to undeclared hostgroup",
				"no hostgroup %q is declared%s", step.Name, hint))
		}
		ok = false
	}
	return ok
}

func lookupVar(ctx *hcl.EvalContext, name string) (cty.Value, bool) {
	for ; ctx != nil; ctx = ctx.Parent() {
		if v, ok := ctx.Variables[name]; ok {
			return v, true
		}
	}
	return cty.NilVal, false
}

// evalString evaluates an expression to a known string.
func (c *compiler) evalString(ctx *hcl.EvalContext, e hcl.Expression, what string) (string, bool) {
	if !c.checkRefs(ctx, e) {
		return "", false
	}
	v, diags := e.Value(ctx)
	c.diags = append(c.diags, diags...)
	if diags.HasErrors() {
		return "", false
	}
	v, _ = v.UnmarkDeep()
	s, err := convert.Convert(v, cty.String)
	if err != nil || s.IsNull() || !s.IsKnown() {
		c.diags = append(c.diags, errorf(e.Range().Ptr(), "Invalid "+what, "%s takes a known string", what))
		return "", false
	}
	return s.AsString(), true
}

// variablesOf returns expr.Variables(), computed once per expression: the
// same expression is evaluated for every host a block applies to.
func (c *compiler) variablesOf(expr hcl.Expression) []hcl.Traversal {
	if trs, ok := c.traversals[expr]; ok {
		return trs
	}
	trs := expr.Variables()
	if c.traversals == nil {
		c.traversals = map[hcl.Expression][]hcl.Traversal{}
	}
	c.traversals[expr] = trs
	return trs
}
