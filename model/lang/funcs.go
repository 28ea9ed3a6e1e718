package lang

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"unicode/utf8"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/hclsyntax"
	"github.com/zclconf/go-cty/cty"
	"github.com/zclconf/go-cty/cty/function"
	"github.com/zclconf/go-cty/cty/function/stdlib"
)

// functions returns the functions available in models: cty's standard
// library (strings, numbers, collections, encoding, regular expressions,
// dates) plus file, templatefile and sha256. Paths are relative to the model
// directory and may not leave it.
func (c *compiler) functions() map[string]function.Function {
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
		// collections
		"chunklist": stdlib.ChunklistFunc, "coalesce": stdlib.CoalesceFunc, "coalescelist": stdlib.CoalesceListFunc,
		"compact": stdlib.CompactFunc, "concat": stdlib.ConcatFunc, "contains": stdlib.ContainsFunc,
		"distinct": stdlib.DistinctFunc, "element": stdlib.ElementFunc, "flatten": stdlib.FlattenFunc,
		"index": stdlib.IndexFunc, "keys": stdlib.KeysFunc, "length": stdlib.LengthFunc,
		"lookup": stdlib.LookupFunc, "merge": stdlib.MergeFunc, "range": stdlib.RangeFunc,
		"reverse": stdlib.ReverseListFunc, "setintersection": stdlib.SetIntersectionFunc,
		"setproduct": stdlib.SetProductFunc, "setsubtract": stdlib.SetSubtractFunc,
		"setunion": stdlib.SetUnionFunc, "slice": stdlib.SliceFunc, "sort": stdlib.SortFunc,
		"values": stdlib.ValuesFunc, "zipmap": stdlib.ZipmapFunc,
		// encoding and time
		"jsonencode": stdlib.JSONEncodeFunc, "jsondecode": stdlib.JSONDecodeFunc,
		"csvdecode": stdlib.CSVDecodeFunc, "formatdate": stdlib.FormatDateFunc, "timeadd": stdlib.TimeAddFunc,
		// conversion
		"tostring": stdlib.MakeToFunc(cty.String), "tonumber": stdlib.MakeToFunc(cty.Number),
		"tobool": stdlib.MakeToFunc(cty.Bool), "tolist": stdlib.MakeToFunc(cty.List(cty.DynamicPseudoType)),
		"toset": stdlib.MakeToFunc(cty.Set(cty.DynamicPseudoType)), "tomap": stdlib.MakeToFunc(cty.Map(cty.DynamicPseudoType)),
		// hashing and files
		"sha256": sha256Func,
		"file":   c.fileFunc(),
	}
	// templatefile sees every function but itself: a template cannot
	// render templates (no recursion to bound).
	inner := make(map[string]function.Function, len(fns))
	for k, v := range fns {
		inner[k] = v
	}
	fns["templatefile"] = c.templateFileFunc(inner)
	return fns
}

var sha256Func = function.New(&function.Spec{
	Description: "SHA-256 of a string, in lower-case hex",
	Params:      []function.Parameter{{Name: "str", Type: cty.String}},
	Type:        function.StaticReturnType(cty.String),
	Impl: func(args []cty.Value, _ cty.Type) (cty.Value, error) {
		sum := sha256.Sum256([]byte(args[0].AsString()))
		return cty.StringVal(hex.EncodeToString(sum[:])), nil
	},
})

// readModelFile reads a file named relative to the model directory, refusing
// paths that leave it.
func (c *compiler) readModelFile(name string) (string, string, error) {
	if filepath.IsAbs(name) {
		return "", "", fmt.Errorf("%q is absolute; name files relative to the model directory", name)
	}
	p := filepath.Join(c.dir, name)
	if !within(c.dir, p) {
		return "", "", fmt.Errorf("%q is outside the model directory", name)
	}
	// A symbolic link may not lead out either.
	if real, err := filepath.EvalSymlinks(p); err == nil {
		root, rerr := filepath.EvalSymlinks(c.dir)
		if rerr == nil && !within(root, real) {
			return "", "", fmt.Errorf("%q leads outside the model directory (to %s)", name, real)
		}
	}
	b, err := os.ReadFile(p)
	if err != nil {
		return "", "", fmt.Errorf("read %s: %w", name, unwrapPathError(err))
	}
	c.record(p, b)
	if !utf8.Valid(b) {
		return "", "", fmt.Errorf("%s is not UTF-8 text", name)
	}
	return p, string(b), nil
}

// within reports whether p is dir or below it.
func within(dir, p string) bool {
	rel, err := filepath.Rel(dir, p)
	return err == nil && rel != ".." && !strings.HasPrefix(rel, ".."+string(filepath.Separator))
}

func unwrapPathError(err error) error {
	if pe, ok := err.(*os.PathError); ok {
		return pe.Err
	}
	return err
}

func (c *compiler) fileFunc() function.Function {
	return function.New(&function.Spec{
		Description: "the content of a file of the model directory",
		Params:      []function.Parameter{{Name: "path", Type: cty.String}},
		Type:        function.StaticReturnType(cty.String),
		Impl: func(args []cty.Value, _ cty.Type) (cty.Value, error) {
			_, s, err := c.readModelFile(args[0].AsString())
			if err != nil {
				return cty.NilVal, err
			}
			return cty.StringVal(s), nil
		},
	})
}

// templateFileFunc renders an HCL template file with the given variables.
// Parsed templates are cached: a model renders one template for many files.
func (c *compiler) templateFileFunc(fns map[string]function.Function) function.Function {
	return function.New(&function.Spec{
		Description: "render a template file (HCL template syntax) with the given variables",
		Params: []function.Parameter{
			{Name: "path", Type: cty.String},
			{Name: "vars", Type: cty.DynamicPseudoType},
		},
		Type: function.StaticReturnType(cty.String),
		Impl: func(args []cty.Value, _ cty.Type) (cty.Value, error) {
			name := args[0].AsString()
			vars := args[1]
			if !vars.Type().IsObjectType() && !vars.Type().IsMapType() {
				return cty.NilVal, fmt.Errorf("the second argument must be an object of template variables, like { title = var.title }")
			}
			tmpl, err := c.template(name)
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

func (c *compiler) template(name string) (hcl.Expression, error) {
	if t, ok := c.templates[name]; ok {
		return t, nil
	}
	p, src, err := c.readModelFile(name)
	if err != nil {
		return nil, err
	}
	expr, diags := hclsyntax.ParseTemplate([]byte(src), c.display(p), hcl.Pos{Line: 1, Column: 1, Byte: 0})
	if diags.HasErrors() {
		return nil, fmt.Errorf("%s", diagsText(diags))
	}
	c.templates[name] = expr
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
