package lang

import (
	"errors"
	"fmt"
	"strings"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/ext/customdecode"
	"github.com/zclconf/go-cty/cty"
	"github.com/zclconf/go-cty/cty/function"
	"github.com/zclconf/go-cty/cty/function/stdlib"
)

// A fact a host has not reported is an unknown value, and what depends on it
// waits for it. try and lookup are where a model says a default is right
// instead: try(host.facts.os.family == "debian", false) and
// lookup(host.facts, "ipv4", "") give the default while the fact is missing,
// and the fact once reported.

// tryFunc is HCL's try with one difference: an argument whose value is
// unknown because of a missing fact is passed over for the next one, as an
// argument with an error is. The last argument is returned even then (the
// result waits for the fact). Any other unknown value is returned as
// unknown, as HCL's try does.
var tryFunc = function.New(&function.Spec{
	VarParam: &function.Parameter{Name: "expressions", Type: customdecode.ExpressionClosureType},
	Type: func(args []cty.Value) (cty.Type, error) {
		v, err := tryValues(args)
		if err != nil {
			return cty.NilType, err
		}
		return v.Type(), nil
	},
	Impl: func(args []cty.Value, _ cty.Type) (cty.Value, error) { return tryValues(args) },
})

func tryValues(args []cty.Value) (cty.Value, error) {
	if len(args) == 0 {
		return cty.NilVal, errors.New("at least one argument is required")
	}
	var diags hcl.Diagnostics
	for i, arg := range args {
		v, more := customdecode.ExpressionClosureFromVal(arg).Value()
		diags = append(diags, more...)
		if more.HasErrors() {
			continue
		}
		if v.IsWhollyKnown() {
			return v, nil
		}
		_, marks := v.UnmarkDeep()
		if waitsForFact(marks) && i < len(args)-1 {
			continue
		}
		// The unknown keeps its marks: the resource it reaches names the
		// facts it waits for.
		return cty.DynamicVal.WithMarks(marks), nil
	}
	var buf strings.Builder
	buf.WriteString("no expression succeeded:\n")
	for _, d := range diags {
		if d.Subject != nil {
			fmt.Fprintf(&buf, "- %s (at %s)\n  %s\n", d.Summary, d.Subject, d.Detail)
		} else {
			fmt.Fprintf(&buf, "- %s\n  %s\n", d.Summary, d.Detail)
		}
	}
	buf.WriteString("\nAt least one expression must produce a successful result")
	return cty.NilVal, errors.New(buf.String())
}

// lookupFunc is cty's lookup, except on an object (host.facts is one): an
// attribute that is a missing fact gives the default, and another unknown
// attribute does not make the whole result unknown.
var lookupFunc = function.New(&function.Spec{
	Description: stdlib.LookupFunc.Description(),
	Params:      stdlib.LookupFunc.Params(),
	VarParam:    stdlib.LookupFunc.VarParam(),
	Type: func(args []cty.Value) (cty.Type, error) {
		if v, ok := lookupObject(args); ok {
			return v.Type(), nil
		}
		return stdlib.LookupFunc.ReturnTypeForValues(args)
	},
	Impl: func(args []cty.Value, _ cty.Type) (cty.Value, error) {
		if v, ok := lookupObject(args); ok {
			return v, nil
		}
		return stdlib.LookupFunc.Call(args)
	},
})

// lookupObject answers lookup(object, key, default) when the object and
// the key are known; ok is false for everything else, which cty's lookup
// answers.
func lookupObject(args []cty.Value) (cty.Value, bool) {
	if len(args) != 3 {
		return cty.NilVal, false
	}
	obj, objMarks := args[0].Unmark()
	key, keyMarks := args[1].Unmark()
	if !obj.IsKnown() || obj.IsNull() || !obj.Type().IsObjectType() || !key.IsKnown() || key.IsNull() {
		return cty.NilVal, false
	}
	name := key.AsString()
	if obj.Type().HasAttribute(name) {
		v := obj.GetAttr(name)
		_, marks := v.UnmarkDeep()
		if v.IsWhollyKnown() || !waitsForFact(marks) {
			return v.WithMarks(objMarks, keyMarks), true
		}
	}
	return args[2].WithMarks(objMarks, keyMarks), true
}

// waitsForFact says whether marks include a missing fact.
func waitsForFact(marks cty.ValueMarks) bool {
	for m := range marks {
		if _, ok := m.(missingFact); ok {
			return true
		}
	}
	return false
}
