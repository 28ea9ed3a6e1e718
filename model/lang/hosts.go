package lang

import (
	"slices"
	"strings"

	"github.com/hashicorp/hcl/v2"
	"github.com/zclconf/go-cty/cty"
	"github.com/zclconf/go-cty/cty/convert"

	"github.com/tetherhq/tether/model"
)

// hostInfo is a host being compiled: a declared host, an agent of the
// inventory, or both.
type hostInfo struct {
	name  string
	agent string
	decl  *hostDecl             // nil: known from the inventory only
	inv   *model.InventoryAgent // nil: not in the inventory
	value cty.Value             // host.* (name, agent, labels, facts)

	groups        []string  // hostgroups it belongs to
	maybeGroups   []string  // hostgroups whose match is unknown for it
	unknownGroups []FactRef // facts that would decide those

	decls     []*decl
	undefined []Undefined
	// shared > 0 while a hostgroup or application body is expanded for the
	// host: diagnostics then say which host they were found for.
	shared int
	scopes int // body instances expanded so far
	ctxs   map[*unit]*hcl.EvalContext
}

// buildHosts makes the host list: declared hosts first (with their agent and
// labels), then the inventory's agents no host declares.
func (c *compiler) buildHosts() []*hostInfo {
	var hosts []*hostInfo
	byAgent := map[string]*hostInfo{}
	inv := map[string]*model.InventoryAgent{}
	if c.opts.Inventory != nil {
		for i := range c.opts.Inventory.Agents {
			a := &c.opts.Inventory.Agents[i]
			inv[a.Name] = a
		}
	}
	for _, d := range c.hosts {
		h := &hostInfo{name: d.name, agent: d.name, decl: d}
		labels := map[string]string{}
		u := d.body.unit
		if d.agent != nil {
			if s, ok := c.evalString(u.ctx, d.agent.Expr, "agent"); ok {
				if err := model.ValidateAgentName(s); err != nil {
					c.diags = append(c.diags, errorf(d.agent.Expr.Range().Ptr(), "Invalid agent name",
						"%s", strings.TrimPrefix(err.Error(), model.ErrInvalidName.Error()+": ")))
					continue
				}
				h.agent = s
			}
		}
		if prev, dup := byAgent[h.agent]; dup {
			c.diags = append(c.diags, errorf(d.block.DefRange.Ptr(), "Two hosts, one agent",
				"hosts %q and %q both name agent %q (declared at %s)", prev.name, h.name, h.agent, where(prev.decl.block.DefRange)))
			continue
		}
		h.inv = inv[h.agent]
		if h.inv != nil {
			for k, v := range h.inv.Labels {
				labels[k] = v
			}
		}
		if d.labels != nil {
			v, diags := d.labels.Expr.Value(u.ctx)
			c.diags = append(c.diags, diags...)
			if !diags.HasErrors() {
				m, err := convert.Convert(v, cty.Map(cty.String))
				if err != nil || m.IsNull() || !m.IsWhollyKnown() {
					c.diags = append(c.diags, errorf(d.labels.Expr.Range().Ptr(), "Invalid labels",
						"labels takes a map of strings, like labels = { role = \"web\" }"))
				} else {
					m, _ = m.UnmarkDeep()
					for it := m.ElementIterator(); it.Next(); {
						k, ev := it.Element()
						labels[k.AsString()] = ev.AsString()
					}
				}
			}
		}
		h.value = c.hostValue(h, labels)
		byAgent[h.agent] = h
		hosts = append(hosts, h)
	}
	if c.opts.Inventory != nil {
		for i := range c.opts.Inventory.Agents {
			a := &c.opts.Inventory.Agents[i]
			if _, declared := byAgent[a.Name]; declared {
				continue
			}
			h := &hostInfo{name: a.Name, agent: a.Name, inv: a}
			h.value = c.hostValue(h, a.Labels)
			byAgent[a.Name] = h
			hosts = append(hosts, h)
		}
	}
	slices.SortFunc(hosts, func(a, b *hostInfo) int { return strings.Compare(a.name, b.name) })
	return hosts
}

// hostValue builds host.*: labels the model reads are null when the host
// lacks them; facts it reads but the inventory lacks are unknown values
// marked with the missing fact.
func (c *compiler) hostValue(h *hostInfo, labels map[string]string) cty.Value {
	lv := make(map[string]cty.Value, len(labels)+len(c.labels))
	for k := range c.labels {
		lv[k] = cty.NullVal(cty.String)
	}
	for k, v := range labels {
		lv[k] = cty.StringVal(v)
	}
	var facts map[string]any
	if h.inv != nil {
		facts = h.inv.Facts
	}
	return cty.ObjectVal(map[string]cty.Value{
		"name":   cty.StringVal(h.name),
		"agent":  cty.StringVal(h.agent),
		"labels": cty.ObjectVal(lv),
		"facts":  c.factsValue(h.name, facts),
	})
}

// factsValue converts the reported facts and adds an unknown for every fact
// path the model reads that is missing.
func (c *compiler) factsValue(host string, facts map[string]any) cty.Value {
	tree := factNode{}
	for k, v := range facts {
		tree[k] = v
	}
	for _, key := range sortedKeys(c.factPaths) {
		path := c.factPaths[key]
		node := tree
		for i, step := range path {
			next, ok := node[step]
			if !ok {
				if i == len(path)-1 {
					node[step] = missingFact{host: host, fact: key}
				} else {
					child := factNode{}
					node[step] = child
					node = child
					continue
				}
				break
			}
			switch n := next.(type) {
			case factNode:
				node = n
			case map[string]any:
				child := factNode{}
				for k, v := range n {
					child[k] = v
				}
				node[step] = child
				node = child
			default:
				// a leaf (or a missing fact) where the model reads deeper:
				// evaluation reports it.
				node = nil
			}
			if node == nil {
				break
			}
		}
	}
	return tree.value()
}

// factNode is a facts object being completed with missing facts.
type factNode map[string]any

func (n factNode) value() cty.Value {
	if len(n) == 0 {
		return cty.EmptyObjectVal
	}
	attrs := make(map[string]cty.Value, len(n))
	for k, v := range n {
		switch x := v.(type) {
		case factNode:
			attrs[k] = x.value()
		case missingFact:
			attrs[k] = cty.DynamicVal.Mark(x)
		default:
			attrs[k] = jsonToCty(v)
		}
	}
	return cty.ObjectVal(attrs)
}

// hostCtx is the scope of a body of unit u evaluated for host h: the unit's
// var and local, with host and hostgroup.
func (c *compiler) hostCtx(h *hostInfo, u *unit) *hcl.EvalContext {
	if ctx, ok := h.ctxs[u]; ok {
		return ctx
	}
	if h.ctxs == nil {
		h.ctxs = map[*unit]*hcl.EvalContext{}
	}
	ctx := u.ctx.NewChild()
	ctx.Variables = map[string]cty.Value{"host": h.value}
	if c.groupsValue != cty.NilVal {
		ctx.Variables["hostgroup"] = c.groupsValue
	}
	h.ctxs[u] = ctx
	return ctx
}

// matchGroups evaluates each hostgroup's match for each host. A match that
// depends on a missing fact is unknown: the host does not get the group
// (an unknown never expands), and the group's host list is unknown.
func (c *compiler) matchGroups(hosts []*hostInfo) {
	for _, g := range c.groups {
		for _, h := range hosts {
			ctx := c.hostCtx(h, g.body.unit)
			if !c.checkRefs(ctx, g.match.Expr) {
				break
			}
			v, diags := g.match.Expr.Value(ctx)
			if diags.HasErrors() {
				c.diags = append(c.diags, forHost(diags, h)...)
				break
			}
			v, marks := v.UnmarkDeep()
			if !v.IsKnown() {
				facts := factsOf(marks, cty.NilVal)
				h.unknownGroups = append(h.unknownGroups, facts...)
				why := "its match reads a value that is not known yet"
				if len(facts) > 0 {
					why = "its match needs facts the inventory lacks (" + factList(facts) + ")"
				}
				c.diags = append(c.diags, &hcl.Diagnostic{Severity: hcl.DiagWarning, Summary: "Unknown hostgroup membership",
					Detail: "host " + h.name + " may belong to hostgroup " + g.name + ": " + why, Subject: g.match.Expr.Range().Ptr()})
				h.maybeGroups = append(h.maybeGroups, g.name)
				continue
			}
			b, err := convert.Convert(v, cty.Bool)
			if err != nil || b.IsNull() {
				c.diags = append(c.diags, errorf(g.match.Expr.Range().Ptr(), "Invalid match",
					"match must be true or false for each host, like host.labels.role == \"web\""))
				break
			}
			if b.True() {
				h.groups = append(h.groups, g.name)
			}
		}
	}
	// hostgroup.<name>.hosts lists the members (as host.* objects) in name
	// order; it is unknown while a membership is.
	groups := map[string]cty.Value{}
	for _, g := range c.groups {
		var members []cty.Value
		var names []cty.Value
		unknown := false
		var marks []cty.ValueMarks
		for _, h := range hosts {
			switch {
			case slices.Contains(h.groups, g.name):
				members = append(members, h.value)
				names = append(names, cty.StringVal(h.name))
			case slices.Contains(h.maybeGroups, g.name):
				unknown = true
				for _, f := range h.unknownGroups {
					marks = append(marks, cty.NewValueMarks(missingFact{host: f.Host, fact: f.Fact}))
				}
			}
		}
		var hv, nv cty.Value
		switch {
		case unknown:
			hv, nv = cty.DynamicVal.WithMarks(marks...), cty.UnknownVal(cty.List(cty.String)).WithMarks(marks...)
		case len(members) == 0:
			hv, nv = cty.EmptyTupleVal, cty.ListValEmpty(cty.String)
		default:
			hv, nv = cty.TupleVal(members), cty.ListVal(names)
		}
		groups[g.name] = cty.ObjectVal(map[string]cty.Value{"hosts": hv, "names": nv})
	}
	// From here on, bodies see hostgroup.*: scopes are made anew.
	c.groupsValue = cty.ObjectVal(groups)
	for _, h := range hosts {
		h.ctxs = nil
	}
}

func factList(fs []FactRef) string {
	seen := map[string]bool{}
	var out []string
	for _, f := range fs {
		if !seen[f.Fact] {
			seen[f.Fact] = true
			out = append(out, f.Fact)
		}
	}
	slices.Sort(out)
	return strings.Join(out, ", ")
}

// forHost adds the host a diagnostic was found for, when it comes from a
// block evaluated for many hosts.
func forHost(diags hcl.Diagnostics, h *hostInfo) hcl.Diagnostics {
	if h.shared == 0 {
		return diags
	}
	for _, d := range diags {
		if d.Detail != "" && !strings.Contains(d.Detail, "(for host ") {
			d.Detail += " (for host " + h.name + ")"
		}
	}
	return diags
}
