package lang

import (
	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/hclsyntax"
	"github.com/zclconf/go-cty/cty"
)

// HCL evaluates a template, a list, an object or a for expression by
// building each part and then putting them together: a template
// repeating a 16 MiB local a thousand times, or a for expression over a
// million elements each building a string, would allocate gigabytes before
// anything could look at the result. So once a file is parsed, the parts
// of these containers are wrapped in guards that add up what the parts
// build, refuse the part that takes the container past the value limit, and
// check the compile's deadline. Operands of arithmetic are checked too (a
// number like 1e999999999 is small, its decimal text is not). Function
// calls are bounded by the functions themselves (see bounded in funcs.go).

// guardRole is what a guard checks.
type guardRole int

const (
	roleNumber guardRole = iota // an operand: the deadline and the number's size
	rolePart                    // a part of a template, list or object: adds up
	roleColl                    // the collection of a for expression: starts the count
	roleCond                    // the condition of a for expression: the deadline
	roleElem                    // the key or value of a for expression: adds up
)

// tally adds up the parts of one container while it is evaluated. HCL
// evaluates parts in order, so a part whose index is not past the last
// one seen starts a new evaluation of the container; a for expression's
// collection starts one explicitly.
type tally struct {
	size int
	last int
	over bool
}

// guard wraps an expression of the model. It embeds a ParenthesesExpr
// holding the wrapped expression, so that HCL's walks (references,
// variables) still find it, and UnwrapExpression lets HCL's static
// analysis (keywords, lists, traversals) see through it.
type guard struct {
	*hclsyntax.ParenthesesExpr
	c     *compiler
	role  guardRole
	tally *tally
	idx   int
	what  string // "this string template", for the diagnostic
}

func (g *guard) UnwrapExpression() hcl.Expression { return g.Expression }

func (g *guard) StartRange() hcl.Range { return g.Expression.StartRange() }

func (g *guard) Value(ctx *hcl.EvalContext) (cty.Value, hcl.Diagnostics) {
	if g.c.ctx.Err() != nil {
		return cty.DynamicVal, hcl.Diagnostics{g.c.timedOut(g.Expression.Range().Ptr())}
	}
	t := g.tally
	switch g.role {
	case roleColl:
		*t = tally{}
	case rolePart:
		if g.idx <= t.last {
			*t = tally{}
		}
		t.last = g.idx
	}
	if t != nil && t.over {
		// The container is already refused: build nothing more of it.
		return cty.DynamicVal, nil
	}
	v, diags := g.Expression.Value(ctx)
	if diags.HasErrors() {
		if t != nil && isLimit(diags) {
			t.over = true
		}
		return v, diags
	}
	var err error
	switch g.role {
	case roleNumber:
		err = g.c.checkNumber(v)
	case rolePart, roleElem:
		size, deep := g.c.sizeOf(v)
		t.size += size + elementSize
		switch {
		case deep:
			t.over = true
			err = g.c.tooDeep(g.what)
		case t.size > g.c.limits.valueSize:
			t.over = true
			err = g.c.tooLarge(g.what)
		}
	case roleColl:
		err = g.c.checkValue(v, "the collection of this for expression")
	}
	if err != nil {
		return cty.DynamicVal, append(diags, limitDiag(g.Expression.Range().Ptr(), "Value too large", err))
	}
	return v, diags
}

// guards installs guards in a parsed file or template, and checks its
// number literals, as scan walks it: a node's children are rewritten once
// they are walked themselves.
type guards struct {
	c     *compiler
	diags hcl.Diagnostics
}

func (g *guards) exit(n hclsyntax.Node) {
	c := g.c
	wrap := func(e hclsyntax.Expression, role guardRole, t *tally, idx int, what string) hclsyntax.Expression {
		if _, literal := e.(*hclsyntax.LiteralValueExpr); literal || e == nil {
			return e
		}
		return &guard{ParenthesesExpr: &hclsyntax.ParenthesesExpr{Expression: e, SrcRange: e.Range()},
			c: c, role: role, tally: t, idx: idx, what: what}
	}
	switch e := n.(type) {
	case *hclsyntax.LiteralValueExpr:
		if err := c.checkNumber(e.Val); err != nil {
			g.diags = append(g.diags, limitDiag(e.SrcRange.Ptr(), "Number too large", err))
		}
	case *hclsyntax.TemplateExpr:
		t := &tally{last: -1}
		for i, p := range e.Parts {
			e.Parts[i] = wrap(p, rolePart, t, i, "this string template")
		}
	case *hclsyntax.TupleConsExpr:
		t := &tally{last: -1}
		for i, x := range e.Exprs {
			e.Exprs[i] = wrap(x, rolePart, t, i, "this list")
		}
	case *hclsyntax.ObjectConsExpr:
		t := &tally{last: -1}
		for i := range e.Items {
			item := &e.Items[i]
			if k, ok := item.KeyExpr.(*hclsyntax.ObjectConsKeyExpr); ok {
				// A bare name is a keyword, not a reference: leave it be.
				if _, bare := k.Wrapped.(*hclsyntax.ScopeTraversalExpr); !bare {
					k.Wrapped = wrap(k.Wrapped, rolePart, t, 2*i, "this object")
				}
			}
			item.ValueExpr = wrap(item.ValueExpr, rolePart, t, 2*i+1, "this object")
		}
	case *hclsyntax.ForExpr:
		t := &tally{}
		e.CollExpr = wrap(e.CollExpr, roleColl, t, 0, "")
		if e.CondExpr != nil {
			e.CondExpr = wrap(e.CondExpr, roleCond, t, 0, "")
		}
		if e.KeyExpr != nil {
			e.KeyExpr = wrap(e.KeyExpr, roleElem, t, 0, "this for expression")
		}
		e.ValExpr = wrap(e.ValExpr, roleElem, t, 0, "this for expression")
	case *hclsyntax.BinaryOpExpr:
		e.LHS = wrap(e.LHS, roleNumber, nil, 0, "")
		e.RHS = wrap(e.RHS, roleNumber, nil, 0, "")
	case *hclsyntax.UnaryOpExpr:
		e.Val = wrap(e.Val, roleNumber, nil, 0, "")
	}
}
