package lang

import (
	"crypto/md5"
	"crypto/sha1"
	"crypto/sha256"
	"crypto/sha512"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"hash"
	"maps"
	"path/filepath"
	"strings"
	"unicode/utf8"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/ext/tryfunc"
	"github.com/hashicorp/hcl/v2/hclsyntax"
	ctyyaml "github.com/zclconf/go-cty-yaml"
	"github.com/zclconf/go-cty/cty"
	"github.com/zclconf/go-cty/cty/function"
	"github.com/zclconf/go-cty/cty/function/stdlib"
)

// functions returns the functions available in the models of a unit:
// cty's standard library (strings, numbers, collections, encoding, regular
// expressions, dates), hashes and base64, try and can, yamlencode and
// yamldecode, sensitive, and file and templatefile, whose paths are relative
// to the unit's directory and may not leave the project. Each is bounded
// (see bounded). The map is built once per unit.
func (c *compiler) functions(u *unit) map[string]function.Function {
	if u.funcs != nil {
		return u.funcs
	}
	fns := map[string]function.Function{
		// numbers
		"abs": stdlib.AbsoluteFunc, "ceil": stdlib.CeilFunc, "floor": stdlib.FloorFunc,
		"log": stdlib.LogFunc, "max": stdlib.MaxFunc, "min": stdlib.MinFunc,
		"parseint": stdlib.ParseIntFunc, "pow": stdlib.PowFunc, "signum": stdlib.SignumFunc,
		// strings
		"chomp": stdlib.ChompFunc, "format": stdlib.FormatFunc, "formatlist": stdlib.FormatListFunc,
		"indent": stdlib.IndentFunc, "join": stdlib.JoinFunc, "lower": stdlib.LowerFunc,
		"upper": stdlib.UpperFunc, "replace": stdlib.ReplaceFunc, "split": stdlib.SplitFunc,
		"strrev": stdlib.ReverseFunc, "strlen": stdlib.StrlenFunc, "substr": stdlib.SubstrFunc,
		"title": stdlib.TitleFunc, "trim": stdlib.TrimFunc, "trimprefix": stdlib.TrimPrefixFunc,
		"trimsuffix": stdlib.TrimSuffixFunc, "trimspace": stdlib.TrimSpaceFunc,
		"regex": stdlib.RegexFunc, "regexall": stdlib.RegexAllFunc, "regex_replace": stdlib.RegexReplaceFunc,
		"startswith": startsWithFunc, "endswith": endsWithFunc, "strcontains": strContainsFunc,
		// collections
		"chunklist": stdlib.ChunklistFunc, "coalesce": stdlib.CoalesceFunc, "coalescelist": stdlib.CoalesceListFunc,
		"compact": stdlib.CompactFunc, "concat": stdlib.ConcatFunc, "contains": stdlib.ContainsFunc,
		"distinct": distinctFunc, "element": stdlib.ElementFunc, "flatten": stdlib.FlattenFunc,
		"index": stdlib.IndexFunc, "keys": stdlib.KeysFunc, "length": stdlib.LengthFunc,
		"lookup": lookupFunc, "merge": stdlib.MergeFunc, "range": stdlib.RangeFunc,
		"reverse": stdlib.ReverseListFunc, "setintersection": stdlib.SetIntersectionFunc,
		"setproduct": boundedSetProduct, "setsubtract": stdlib.SetSubtractFunc,
		"setunion": stdlib.SetUnionFunc, "slice": stdlib.SliceFunc, "sort": stdlib.SortFunc,
		"values": stdlib.ValuesFunc, "zipmap": stdlib.ZipmapFunc,
		// encoding and time
		"jsonencode": stdlib.JSONEncodeFunc, "jsondecode": stdlib.JSONDecodeFunc,
		"yamlencode": ctyyaml.YAMLEncodeFunc, "yamldecode": ctyyaml.YAMLDecodeFunc,
		"csvdecode": stdlib.CSVDecodeFunc, "formatdate": stdlib.FormatDateFunc, "timeadd": stdlib.TimeAddFunc,
		"base64encode": base64EncodeFunc, "base64decode": base64DecodeFunc,
		// conversion
		"tostring": stdlib.MakeToFunc(cty.String), "tonumber": stdlib.MakeToFunc(cty.Number),
		"tobool": stdlib.MakeToFunc(cty.Bool), "tolist": stdlib.MakeToFunc(cty.List(cty.DynamicPseudoType)),
		"toset": stdlib.MakeToFunc(cty.Set(cty.DynamicPseudoType)), "tomap": stdlib.MakeToFunc(cty.Map(cty.DynamicPseudoType)),
		// hashing and files
		"md5": hashFunc(md5.New), "sha1": hashFunc(sha1.New), "sha256": hashFunc(sha256.New), "sha512": hashFunc(sha512.New),
	}
	for name, f := range fns {
		fns[name] = c.bounded(name, f)
	}
	// try and can evaluate their arguments themselves (whose expressions
	// are guarded), sensitive only marks its argument, and file and
	// templatefile are bounded by the file limits and the template's
	// guards.
	fns["try"], fns["can"], fns["sensitive"] = tryFunc, tryfunc.CanFunc, sensitiveFunc
	fns["file"] = c.fileFunc(u)
	// templatefile sees every function but itself: a template cannot
	// render templates (no recursion to bound).
	inner := maps.Clone(fns)
	fns["templatefile"] = c.templateFileFunc(u, inner)
	u.funcs = fns
	return fns
}

func hashFunc(h func() hash.Hash) function.Function {
	return function.New(&function.Spec{
		Description: "a hash of a string, in lower-case hex",
		Params:      []function.Parameter{{Name: "str", Type: cty.String}},
		Type:        function.StaticReturnType(cty.String),
		Impl: func(args []cty.Value, _ cty.Type) (cty.Value, error) {
			sum := h()
			sum.Write([]byte(args[0].AsString()))
			return cty.StringVal(hex.EncodeToString(sum.Sum(nil))), nil
		},
	})
}

var base64EncodeFunc = function.New(&function.Spec{
	Description: "the standard base64 encoding of a string's UTF-8 bytes",
	Params:      []function.Parameter{{Name: "str", Type: cty.String}},
	Type:        function.StaticReturnType(cty.String),
	Impl: func(args []cty.Value, _ cty.Type) (cty.Value, error) {
		return cty.StringVal(base64.StdEncoding.EncodeToString([]byte(args[0].AsString()))), nil
	},
})

var base64DecodeFunc = function.New(&function.Spec{
	Description: "decodes standard base64 into a UTF-8 string",
	Params:      []function.Parameter{{Name: "str", Type: cty.String}},
	Type:        function.StaticReturnType(cty.String),
	Impl: func(args []cty.Value, _ cty.Type) (cty.Value, error) {
		b, err := base64.StdEncoding.DecodeString(args[0].AsString())
		if err != nil {
			return cty.NilVal, fmt.Errorf("not base64: %w", err)
		}
		if !utf8.Valid(b) {
			return cty.NilVal, fmt.Errorf("the decoded bytes are not UTF-8 text")
		}
		return cty.StringVal(string(b)), nil
	},
})

func stringPredicate(desc string, f func(s, sub string) bool) function.Function {
	return function.New(&function.Spec{
		Description: desc,
		Params:      []function.Parameter{{Name: "str", Type: cty.String}, {Name: "part", Type: cty.String}},
		Type:        function.StaticReturnType(cty.Bool),
		Impl: func(args []cty.Value, _ cty.Type) (cty.Value, error) {
			return cty.BoolVal(f(args[0].AsString(), args[1].AsString())), nil
		},
	})
}

var (
	startsWithFunc  = stringPredicate("whether str starts with part", strings.HasPrefix)
	endsWithFunc    = stringPredicate("whether str ends with part", strings.HasSuffix)
	strContainsFunc = stringPredicate("whether str contains part", strings.Contains)
)

// sensitiveFunc marks a value sensitive: attributes holding it are never
// logged nor shown in clear.
var sensitiveFunc = function.New(&function.Spec{
	Description: "marks a value sensitive",
	Params:      []function.Parameter{{Name: "value", Type: cty.DynamicPseudoType, AllowMarked: true, AllowUnknown: true, AllowNull: true, AllowDynamicType: true}},
	Type: func(args []cty.Value) (cty.Type, error) {
		return args[0].Type(), nil
	},
	Impl: func(args []cty.Value, _ cty.Type) (cty.Value, error) {
		return args[0].Mark(sensitiveMark{}), nil
	},
})

func (c *compiler) fileFunc(u *unit) function.Function {
	return function.New(&function.Spec{
		Description: "the content of a file of the model directory",
		Params:      []function.Parameter{{Name: "path", Type: cty.String}},
		Type:        function.StaticReturnType(cty.String),
		Impl: func(args []cty.Value, _ cty.Type) (cty.Value, error) {
			if c.ctx.Err() != nil {
				return cty.NilVal, c.timeoutError()
			}
			_, s, err := c.readModelFile(u, args[0].AsString())
			if err != nil {
				return cty.NilVal, err
			}
			return cty.StringVal(s), nil
		},
	})
}

// templateFileFunc renders an HCL template file with the given variables.
// Parsed templates are cached: a model renders one template for many files.
func (c *compiler) templateFileFunc(u *unit, fns map[string]function.Function) function.Function {
	return function.New(&function.Spec{
		Description: "render a template file (HCL template syntax) with the given variables",
		Params: []function.Parameter{
			{Name: "path", Type: cty.String},
			{Name: "vars", Type: cty.DynamicPseudoType},
		},
		Type: function.StaticReturnType(cty.String),
		Impl: func(args []cty.Value, _ cty.Type) (cty.Value, error) {
			if c.ctx.Err() != nil {
				return cty.NilVal, c.timeoutError()
			}
			name := args[0].AsString()
			vars := args[1]
			if !vars.Type().IsObjectType() && !vars.Type().IsMapType() {
				return cty.NilVal, fmt.Errorf("the second argument must be an object of template variables, like { title = var.title }")
			}
			tmpl, err := c.template(u, name)
			if err != nil {
				return cty.NilVal, err
			}
			scope := map[string]cty.Value{}
			for it := vars.ElementIterator(); it.Next(); {
				k, v := it.Element()
				scope[k.AsString()] = v
			}
			val, diags := tmpl.Value(&hcl.EvalContext{Variables: scope, Functions: fns})
			if diags.HasErrors() {
				return cty.NilVal, fmt.Errorf("%s", diagsText(diags))
			}
			if val.IsNull() {
				return cty.NilVal, fmt.Errorf("template %s rendered null", name)
			}
			if !val.IsKnown() {
				return cty.UnknownVal(cty.String), nil
			}
			if val.Type() != cty.String {
				return cty.NilVal, fmt.Errorf("template %s did not render a string", name)
			}
			return val, nil
		},
	})
}

func (c *compiler) template(u *unit, name string) (hcl.Expression, error) {
	key := filepath.Join(u.dir, name)
	if t, ok := c.templates[key]; ok {
		return t, nil
	}
	p, src, err := c.readModelFile(u, name)
	if err != nil {
		return nil, err
	}
	if d := c.scanSource([]byte(src), c.display(p), scanTemplate); d != nil {
		return nil, fmt.Errorf("%s", diagsText(hcl.Diagnostics{d}))
	}
	expr, diags := hclsyntax.ParseTemplate([]byte(src), c.display(p), hcl.Pos{Line: 1, Column: 1, Byte: 0})
	if diags.HasErrors() {
		return nil, fmt.Errorf("%s", diagsText(diags))
	}
	// The template may read facts or labels no model file does.
	if diags := c.scan(expr.(hclsyntax.Node)); diags.HasErrors() {
		return nil, fmt.Errorf("%s", diagsText(diags))
	}
	c.templates[key] = expr
	return expr, nil
}

// diagsText prints diagnostics of a template as file:line:column lines, to
// travel inside a function error.
func diagsText(diags hcl.Diagnostics) string {
	var parts []string
	for _, d := range diags {
		parts = append(parts, convertDiag(d).String())
	}
	return strings.Join(parts, "; ")
}
