package lang

import (
	"fmt"
	"regexp"
	"strings"

	"github.com/zclconf/go-cty/cty"
	"github.com/zclconf/go-cty/cty/convert"
	"github.com/zclconf/go-cty/cty/function"
	"github.com/zclconf/go-cty/cty/function/stdlib"
)

// A function call is bounded in three ways, all before the function runs
// where the cost is in the arguments:
//
//   - its arguments are converted to the parameters' types here rather
//     than by HCL, so that a long tuple converted to a collection does not
//     go through cty's unification, quadratic in the number of elements
//     (see convert);
//   - a function whose result can be much larger than its arguments (format
//     with a width, indent, join, replace, split, regexall, csvdecode,
//     yamldecode's aliases, setproduct…) has an estimate of that result
//     checked against Options.MaxValueSize, and so do the arguments of a
//     variadic function together;
//   - every result is measured, and the deadline checked.

// callBound is what bounds one function besides the generic checks.
type callBound struct {
	// prep checks (and may replace) the converted arguments.
	prep func(c *compiler, args []cty.Value) ([]cty.Value, error)
	// typ checks the result type (jsondecode and yamldecode infer it from
	// the document).
	typ func(c *compiler, t cty.Type) error
	// sum checks the arguments' sizes together: the result holds them all.
	sum bool
	// part: the result is part of an argument, which is bounded already.
	part bool
}

var callBounds = map[string]callBound{
	"format":        {prep: prepFormat(false)},
	"formatlist":    {prep: prepFormat(true)},
	"indent":        {prep: prepIndent},
	"join":          {prep: prepJoin},
	"replace":       {prep: prepReplace},
	"regex_replace": {prep: prepRegexReplace},
	"split":         {prep: prepSplit},
	"regex":         {prep: prepRegex(false)},
	"regexall":      {prep: prepRegex(true)},
	"csvdecode":     {prep: prepCSV},
	"jsondecode":    {prep: prepJSONDecode, typ: checkDecodedType},
	"yamldecode":    {prep: prepYAMLDecode, typ: checkDecodedType},
	"jsonencode":    {prep: prepJSONEncode},
	"yamlencode":    {prep: prepYAMLEncode},
	"tonumber":      {prep: prepNumberText},
	"parseint":      {prep: prepNumberText},
	"tolist":        {prep: prepTo(cty.List(cty.DynamicPseudoType))},
	"toset":         {prep: prepTo(cty.Set(cty.DynamicPseudoType))},
	"tomap":         {prep: prepTo(cty.Map(cty.DynamicPseudoType))},
	"setproduct":    {prep: prepSetProduct},
	"concat":        {sum: true},
	"merge":         {sum: true},
	"setunion":      {sum: true},
	"element":       {part: true},
	"lookup":        {part: true},
	"coalesce":      {part: true},
	"coalescelist":  {part: true},
	"slice":         {part: true},
}

// bounded wraps a function with the bounds above. Parameters of a
// collection or structural type take any value, so that HCL passes such
// arguments through unconverted (conversion errors come back as the same
// "Invalid function argument" diagnostics); others keep their type. All
// the work is in Impl, where the function's own Type is called only when
// the result type must be checked: its return type is left open.
func (c *compiler) bounded(name string, f function.Function) function.Function {
	b := callBounds[name]
	params := f.Params()
	varParam := f.VarParam()
	loose := func(p function.Parameter) function.Parameter {
		t := p.Type
		if !t.IsPrimitiveType() {
			t = cty.DynamicPseudoType
		}
		return function.Parameter{Name: p.Name, Description: p.Description, Type: t,
			AllowNull: true, AllowUnknown: true, AllowDynamicType: true, AllowMarked: true}
	}
	spec := &function.Spec{Description: f.Description(), Type: function.StaticReturnType(cty.DynamicPseudoType)}
	for _, p := range params {
		spec.Params = append(spec.Params, loose(p))
	}
	if varParam != nil {
		v := loose(*varParam)
		spec.VarParam = &v
	}
	spec.Impl = func(args []cty.Value, _ cty.Type) (cty.Value, error) {
		if err := c.ctx.Err(); err != nil {
			return cty.NilVal, c.timeoutError()
		}
		if len(args) > maxCallArgs {
			return cty.NilVal, limitf("%d arguments, more than the %d a call may have", len(args), maxCallArgs)
		}
		total := 0
		for i, a := range args {
			p := varParam
			if i < len(params) {
				p = &params[i]
			}
			if p == nil {
				continue // too many: the function says so
			}
			if err := c.checkNumber(a); err != nil {
				return cty.NilVal, err
			}
			v, err := c.convert(a, p.Type)
			if err != nil {
				if isLimitError(err) {
					return cty.NilVal, err
				}
				return cty.NilVal, function.NewArgError(i, err)
			}
			args[i] = v
			if b.sum {
				size, _ := c.sizeOf(v)
				if total += size; total > c.limits.valueSize {
					return cty.NilVal, c.tooLarge("the result")
				}
			}
		}
		if b.prep != nil {
			var err error
			if args, err = b.prep(c, args); err != nil {
				return cty.NilVal, err
			}
		}
		if b.typ != nil {
			t, err := f.ReturnTypeForValues(args)
			if err != nil {
				return cty.NilVal, err
			}
			if err := b.typ(c, t); err != nil {
				return cty.NilVal, err
			}
		}
		v, err := f.Call(args)
		if err != nil || b.part {
			return v, err
		}
		if err := c.checkValue(v, "the result"); err != nil {
			return cty.NilVal, err
		}
		return v, nil
	}
	return function.New(spec)
}

// convert is convert.Convert, bounded. cty converts a tuple to a list (or
// to a set of any type, or an object to some maps) by finding the common
// type of its elements, in time quadratic in their number: a list of
// 65,536 strings took 25 s. So a tuple or object whose elements convert to
// one type is converted here, element by element; any other conversion
// comparing more than maxPairs pairs of types is refused.
func (c *compiler) convert(v cty.Value, want cty.Type) (cty.Value, error) {
	if want == cty.DynamicPseudoType {
		return v, nil
	}
	if out, ok, err := c.convertElements(v, want); ok || err != nil {
		return out, err
	}
	if pairs := unifyPairs(v, want, 0); pairs > maxPairs {
		return cty.NilVal, limitf("converting this value to %s compares %d pairs of element types, more than %d; give the elements one type",
			want.FriendlyNameForConstraint(), pairs, maxPairs)
	}
	return convert.Convert(v, want)
}

// convertElements converts a tuple to a list or set, or an object to a map,
// when its elements all convert to one type: the value cty's conversion
// gives, without its unification. ok is false when it does not apply (cty
// converts, and explains a failure); err is a bound passed.
func (c *compiler) convertElements(v cty.Value, want cty.Type) (cty.Value, bool, error) {
	if !want.IsListType() && !want.IsSetType() && !want.IsMapType() {
		return cty.NilVal, false, nil
	}
	uv, marks := v.Unmark()
	if !uv.IsKnown() || uv.IsNull() {
		return cty.NilVal, false, nil
	}
	ty := uv.Type()
	isTuple := ty.IsTupleType() && !want.IsMapType()
	if !isTuple && !(ty.IsObjectType() && want.IsMapType()) || uv.LengthInt() < 2 {
		return cty.NilVal, false, nil
	}
	ety := want.ElementType()
	var elems []cty.Value
	var attrs map[string]cty.Value
	if !isTuple {
		attrs = make(map[string]cty.Value, uv.LengthInt())
	}
	var first cty.Type
	for it := uv.ElementIterator(); it.Next(); {
		k, e := it.Element()
		ce, err := c.convert(e, ety)
		if err != nil {
			if isLimitError(err) {
				return cty.NilVal, false, err
			}
			return cty.NilVal, false, nil
		}
		if ce.IsNull() {
			ce = cty.NullVal(ce.Type().WithoutOptionalAttributesDeep())
		}
		switch {
		case first == cty.NilType:
			first = ce.Type()
		case !ce.Type().Equals(first):
			return cty.NilVal, false, nil
		}
		if first == cty.DynamicPseudoType {
			return cty.NilVal, false, nil
		}
		if isTuple {
			elems = append(elems, ce)
		} else {
			attrs[k.AsString()] = ce
		}
	}
	var out cty.Value
	switch {
	case want.IsListType():
		out = cty.ListVal(elems)
	case want.IsSetType():
		out = cty.SetVal(elems)
	default:
		out = cty.MapVal(attrs)
	}
	return out.WithMarks(marks), true, nil
}

// unifyPairs counts the pairs of types cty may compare converting v to
// want: each tuple, object or map converted to a collection costs
// n·(n-1)/2 for its n elements.
func unifyPairs(v cty.Value, want cty.Type, depth int) int {
	v, _ = v.Unmark()
	if depth > 64 || !v.IsKnown() || v.IsNull() || want == cty.DynamicPseudoType {
		return 0
	}
	ty := v.Type()
	pairs := 0
	switch {
	case want.IsCollectionType():
		if !v.CanIterateElements() {
			return 0
		}
		if ty.IsTupleType() || ty.IsObjectType() || ty.IsMapType() {
			n := v.LengthInt()
			pairs += n * (n - 1) / 2
		}
		for it := v.ElementIterator(); it.Next() && pairs <= maxPairs; {
			_, e := it.Element()
			pairs += unifyPairs(e, want.ElementType(), depth+1)
		}
	case want.IsObjectType() && ty.IsObjectType():
		for name, at := range want.AttributeTypes() {
			if ty.HasAttribute(name) && pairs <= maxPairs {
				pairs += unifyPairs(v.GetAttr(name), at, depth+1)
			}
		}
	case want.IsTupleType() && ty.IsTupleType() && v.LengthInt() == len(want.TupleElementTypes()):
		for i, et := range want.TupleElementTypes() {
			if pairs > maxPairs {
				break
			}
			pairs += unifyPairs(v.Index(cty.NumberIntVal(int64(i))), et, depth+1)
		}
	}
	return pairs
}

// known returns the unmarked value of an argument, or false while it is
// unknown or null (then the function decides).
func known(v cty.Value) (cty.Value, bool) {
	v, _ = v.UnmarkDeep()
	return v, v.IsWhollyKnown() && !v.IsNull()
}

func knownString(v cty.Value) (string, bool) {
	v, ok := known(v)
	if !ok || v.Type() != cty.String {
		return "", false
	}
	return v.AsString(), true
}

// over is the error of an estimate past the value limit.
func (c *compiler) over(est int) error {
	if est > c.limits.valueSize || est < 0 {
		return c.tooLarge("the result")
	}
	return nil
}

// prepFormat estimates format and formatlist: the format's text, every
// width and precision, and each argument a verb prints (a verb may print
// one argument many times: %[1]s%[1]s). formatlist repeats that for each
// element of its list arguments.
func prepFormat(list bool) func(c *compiler, args []cty.Value) ([]cty.Value, error) {
	return func(c *compiler, args []cty.Value) ([]cty.Value, error) {
		format, ok := knownString(args[0])
		if !ok {
			return args, nil
		}
		vals := args[1:]
		n := 1 // formatlist: the length of the list arguments
		isList := make([]bool, len(vals))
		if list {
			for i, v := range vals {
				uv, _ := v.Unmark()
				if uv.IsKnown() && !uv.IsNull() && (uv.Type().IsListType() || uv.Type().IsTupleType()) {
					isList[i] = true
					n = max(n, uv.LengthInt())
				}
			}
		}
		sizes := make([]int, len(vals))
		for i, v := range vals {
			sizes[i], _ = c.sizeOf(v)
		}
		est := n * len(format)
		next := 0
		for i := 0; i < len(format); i++ {
			if format[i] != '%' {
				continue
			}
			i++
			if i < len(format) && format[i] == '%' {
				continue
			}
			for i < len(format) && strings.IndexByte(" +-0#", format[i]) >= 0 {
				i++
			}
			if i < len(format) && format[i] == '[' {
				j := i + 1
				num := readInt(format, &j)
				if j < len(format) && format[j] == ']' {
					next = num - 1
					i = j + 1
				}
			}
			width := readInt(format, &i)
			prec := 0
			if i < len(format) && format[i] == '.' {
				i++
				prec = readInt(format, &i)
			}
			factor := 1
			if i < len(format) {
				switch format[i] {
				case 'q', 'v':
					factor = 6 // JSON quoting: a control character becomes \u0000
				case 'b':
					factor = 4 // binary digits of a number
				case 'd', 'o', 'x', 'X', 'e', 'E', 'f', 'g', 'G':
					factor = 2
				}
			}
			est += n * (width + prec)
			if next >= 0 && next < len(vals) {
				if isList[next] {
					est += factor * sizes[next]
				} else {
					est += n * factor * sizes[next]
				}
			}
			next++
			if est > c.limits.valueSize || est < 0 {
				return nil, c.over(est)
			}
		}
		return args, c.over(est)
	}
}

// readInt reads the decimal number at s[*i:], saturating far past any
// limit rather than overflowing.
func readInt(s string, i *int) int {
	n := 0
	for *i < len(s) && isDigit(s[*i]) {
		if n < 1<<40 {
			n = n*10 + int(s[*i]-'0')
		}
		*i++
	}
	return n
}

func prepIndent(c *compiler, args []cty.Value) ([]cty.Value, error) {
	nv, ok := known(args[0])
	str, sok := knownString(args[1])
	if !ok || !sok || nv.Type() != cty.Number {
		return args, nil
	}
	spaces, _ := nv.AsBigFloat().Int64()
	if spaces < 0 {
		return args, nil
	}
	if spaces > int64(c.limits.valueSize) {
		return nil, c.tooLarge("the result")
	}
	// indent makes the padding even for a single line.
	return args, c.over(int(spaces)*(strings.Count(str, "\n")+1) + len(str))
}

func prepJoin(c *compiler, args []cty.Value) ([]cty.Value, error) {
	sep, ok := knownString(args[0])
	if !ok {
		return args, nil
	}
	est, count := 0, 0
	for _, l := range args[1:] {
		if lv, ok := known(l); ok && lv.CanIterateElements() {
			count += lv.LengthInt()
		}
		size, _ := c.sizeOf(l)
		est += size
	}
	return args, c.over(est + len(sep)*max(count-1, 0))
}

func prepReplace(c *compiler, args []cty.Value) ([]cty.Value, error) {
	str, ok1 := knownString(args[0])
	sub, ok2 := knownString(args[1])
	repl, ok3 := knownString(args[2])
	if !ok1 || !ok2 || !ok3 || len(repl) <= len(sub) {
		return args, nil
	}
	n := strings.Count(str, sub) // for "" one more than the characters
	return args, c.over(len(str) + n*len(repl))
}

func prepRegexReplace(c *compiler, args []cty.Value) ([]cty.Value, error) {
	str, ok1 := knownString(args[0])
	pattern, ok2 := knownString(args[1])
	repl, ok3 := knownString(args[2])
	if !ok1 || !ok2 || !ok3 || repl == "" {
		return args, nil
	}
	re, err := regexp.Compile(pattern)
	if err != nil {
		return args, nil // the function says why
	}
	// Count matches only as far as the limit allows.
	enough := (c.limits.valueSize-len(str))/len(repl) + 1
	if enough < 1 {
		return nil, c.tooLarge("the result")
	}
	matches := len(re.FindAllStringIndex(str, enough+1))
	refs := strings.Count(repl, "$") // each $1 may repeat all the matched text
	return args, c.over(len(str) + matches*len(repl) + refs*len(str))
}

func prepSplit(c *compiler, args []cty.Value) ([]cty.Value, error) {
	sep, ok1 := knownString(args[0])
	str, ok2 := knownString(args[1])
	if !ok1 || !ok2 {
		return args, nil
	}
	pieces := strings.Count(str, sep) + 1
	return args, c.over(len(str) + pieces*elementSize)
}

// prepRegex estimates regex (one match) and regexall (every match) by
// finding the matches, at most as many as the limit allows.
func prepRegex(all bool) func(c *compiler, args []cty.Value) ([]cty.Value, error) {
	return func(c *compiler, args []cty.Value) ([]cty.Value, error) {
		pattern, ok1 := knownString(args[0])
		str, ok2 := knownString(args[1])
		if !ok1 || !ok2 {
			return args, nil
		}
		re, err := regexp.Compile(pattern)
		if err != nil {
			return args, nil
		}
		perMatch := (re.NumSubexp() + 1) * elementSize
		var matches [][]int
		if all {
			matches = re.FindAllStringSubmatchIndex(str, c.limits.valueSize/perMatch+1)
		} else if m := re.FindStringSubmatchIndex(str); m != nil {
			matches = [][]int{m}
		}
		est := 0
		for _, m := range matches {
			est += perMatch
			for g := 0; g+1 < len(m); g += 2 {
				if m[g] >= 0 {
					est += m[g+1] - m[g]
				}
			}
			if est > c.limits.valueSize {
				break
			}
		}
		return args, c.over(est)
	}
}

// prepCSV estimates csvdecode: every field becomes an element, and every
// row an object holding the header's names.
func prepCSV(c *compiler, args []cty.Value) ([]cty.Value, error) {
	str, ok := knownString(args[0])
	if !ok {
		return args, nil
	}
	rows := strings.Count(str, "\n") + 1
	fields := strings.Count(str, ",") + rows
	header := strings.IndexByte(str, '\n')
	if header < 0 {
		header = len(str)
	}
	return args, c.over(len(str) + fields*elementSize + rows*header)
}

// prepNumberText refuses a number written with more than maxNumberLength
// characters: reading a long decimal number takes quadratic time.
func prepNumberText(c *compiler, args []cty.Value) ([]cty.Value, error) {
	if s, ok := knownString(args[0]); ok && len(s) > maxNumberLength {
		return nil, limitf("a number has at most %d characters", maxNumberLength)
	}
	return args, nil
}

// prepTo converts the argument of tolist, toset and tomap with convert:
// the function's own conversion is then already done.
func prepTo(want cty.Type) func(c *compiler, args []cty.Value) ([]cty.Value, error) {
	return func(c *compiler, args []cty.Value) ([]cty.Value, error) {
		v, err := c.convert(args[0], want)
		switch {
		case err != nil && isLimitError(err):
			return nil, err
		case err != nil:
			return args, nil // the function explains the mismatch
		}
		return []cty.Value{v}, nil
	}
}

// prepJSONDecode refuses a document nesting deeper than the limit (cty's
// decoder recurses for each level) or with too long a number, before it
// is decoded.
func prepJSONDecode(c *compiler, args []cty.Value) ([]cty.Value, error) {
	src, ok := knownString(args[0])
	if !ok {
		return args, nil
	}
	depth, number, inString := 0, 0, false
	for i := 0; i < len(src); i++ {
		b := src[i]
		if inString {
			switch b {
			case '\\':
				i++
			case '"':
				inString = false
			}
			continue
		}
		if isDigit(b) {
			if number++; number > maxNumberLength {
				return nil, limitf("the document has a number longer than %d characters", maxNumberLength)
			}
			continue
		}
		number = 0
		switch b {
		case '"':
			inString = true
		case '[', '{':
			if depth++; depth > c.limits.nesting {
				return nil, c.tooDeep("the document")
			}
		case ']', '}':
			depth = max(depth-1, 0)
		}
	}
	return args, nil
}

// prepYAMLDecode bounds what the YAML parser and cty's decoder recurse
// through, before decoding: a node is at most as deep as the flow
// brackets open around it, plus its line's indentation, plus the block
// indicators ("- ", "? ", ": ") before it on its line. Quotes are not
// followed (a bracket inside a string counts too: the safe side).
func prepYAMLDecode(c *compiler, args []cty.Value) ([]cty.Value, error) {
	src, ok := knownString(args[0])
	if !ok {
		return args, nil
	}
	flow, number := 0, 0
	for rest := src; rest != ""; {
		line := rest
		if nl := strings.IndexByte(rest, '\n'); nl >= 0 {
			line, rest = rest[:nl], rest[nl+1:]
		} else {
			rest = ""
		}
		indent := len(line) - len(strings.TrimLeft(line, " "))
		block := indent
		for i := indent; i < len(line); i++ {
			b := line[i]
			if isDigit(b) {
				if number++; number > maxNumberLength {
					return nil, limitf("the document has a number longer than %d characters", maxNumberLength)
				}
			} else {
				number = 0
			}
			switch b {
			case '[', '{':
				flow++
			case ']', '}':
				flow = max(flow-1, 0)
			case '-', '?', ':':
				if i+1 == len(line) || line[i+1] == ' ' || line[i+1] == '\t' {
					block++
				}
			}
			if flow+block > c.limits.nesting {
				return nil, c.tooDeep("the document")
			}
		}
		number = 0
	}
	return args, nil
}

// checkDecodedType refuses a decoded document whose type, once its YAML
// aliases are expanded, passes the value limit: yamldecode builds the
// value sharing aliased parts, but everything after it would expand them.
func checkDecodedType(c *compiler, t cty.Type) error {
	size, deep := typeSize(t, c.limits.valueSize, c.limits.nesting)
	switch {
	case deep:
		return c.tooDeep("the document")
	case size > c.limits.valueSize:
		return fmt.Errorf("%w (YAML aliases repeat the nodes they name)", c.tooLarge("the decoded document"))
	}
	return nil
}

// prepJSONEncode estimates the JSON text of a value: a character JSON
// escapes (a control character, a quote, <, > or &) takes six bytes, and
// so do the three of U+2028 and U+2029.
func prepJSONEncode(c *compiler, args []cty.Value) ([]cty.Value, error) {
	est := encodedSize(args[0], c.limits.valueSize, c.limits.nesting, func(s string, _ int) int {
		n := len(s) + 2
		for i := 0; i < len(s); i++ {
			switch b := s[i]; {
			case b < 0x20 || b == '"' || b == '\\' || b == '<' || b == '>' || b == '&':
				n += 5
			case b == 0xe2:
				n += 3
			}
		}
		return n
	}, 0)
	return args, c.over(est)
}

// prepYAMLEncode estimates the YAML text of a value: each line is
// indented two spaces per level, a multi-line string's lines too, and a
// quoted string escapes a control character in four bytes.
func prepYAMLEncode(c *compiler, args []cty.Value) ([]cty.Value, error) {
	est := encodedSize(args[0], c.limits.valueSize, c.limits.nesting, func(s string, depth int) int {
		n := len(s) + 2 + (strings.Count(s, "\n")+1)*(2*depth+2)
		for i := 0; i < len(s); i++ {
			if b := s[i]; b < 0x20 || b == 0x7f {
				n += 3
			}
		}
		return n
	}, 2)
	return args, c.over(est)
}

// encodedSize estimates the encoding of v: str gives a string's size at a
// depth, and every element costs its key, punctuation and indent spaces
// per level of depth. It stops past budget.
func encodedSize(v cty.Value, budget, maxDepth int, str func(s string, depth int) int, indent int) int {
	size := 0
	var walk func(v cty.Value, depth int)
	walk = func(v cty.Value, depth int) {
		if size > budget {
			return
		}
		if depth > maxDepth {
			size = budget + 1
			return
		}
		v, _ = v.Unmark()
		size += elementSize + indent*depth
		switch {
		case !v.IsKnown() || v.IsNull():
		case v.Type() == cty.String:
			size += str(v.AsString(), depth)
		case v.Type() == cty.Number:
			size += numberSize(v.AsBigFloat())
		case v.Type().IsMapType() || v.Type().IsObjectType():
			for it := v.ElementIterator(); it.Next() && size <= budget; {
				k, e := it.Element()
				size += str(k.AsString(), depth)
				walk(e, depth+1)
			}
		case v.CanIterateElements():
			for it := v.ElementIterator(); it.Next() && size <= budget; {
				_, e := it.Element()
				walk(e, depth+1)
			}
		}
	}
	walk(v, 0)
	return size
}

// maxProduct bounds setproduct's number of elements.
const maxProduct = 100_000

// prepSetProduct bounds setproduct: the product of its arguments' lengths
// times their number of elements each, and cty's unification of a tuple
// argument's element types (a tuple of one type is taken as a list).
func prepSetProduct(c *compiler, args []cty.Value) ([]cty.Value, error) {
	n := 1
	out := make([]cty.Value, len(args))
	for i, a := range args {
		out[i] = a
		ua, _ := a.Unmark()
		if !ua.IsKnown() || ua.IsNull() || !ua.CanIterateElements() {
			continue
		}
		length := ua.LengthInt()
		if n *= max(length, 1); n > maxProduct {
			return nil, limitf("the product has more than %d elements", maxProduct)
		}
		if ua.Type().IsTupleType() {
			if l, ok, err := c.convertElements(a, cty.List(cty.DynamicPseudoType)); err != nil {
				return nil, err
			} else if ok {
				out[i] = l
			} else if length*(length-1)/2 > maxPairs {
				return nil, limitf("argument %d has %d elements of different types: give at most a few thousand, or of one type", i+1, length)
			}
		}
	}
	return out, c.over(n * len(args) * elementSize)
}

var boundedSetProduct = function.New(&function.Spec{
	Description: stdlib.SetProductFunc.Description(),
	VarParam:    &function.Parameter{Name: "sets", Type: cty.DynamicPseudoType, AllowMarked: true},
	Type: func(args []cty.Value) (cty.Type, error) {
		return stdlib.SetProductFunc.ReturnTypeForValues(args)
	},
	Impl: func(args []cty.Value, _ cty.Type) (cty.Value, error) {
		return stdlib.SetProductFunc.Call(args)
	},
})

// distinctFunc is cty's distinct, which compares every element with every
// kept one (quadratic time), made linear for lists of known strings and
// bounded to maxPairs comparisons otherwise.
var distinctFunc = function.New(&function.Spec{
	Description: stdlib.DistinctFunc.Description(),
	Params:      stdlib.DistinctFunc.Params(),
	Type: func(args []cty.Value) (cty.Type, error) {
		return stdlib.DistinctFunc.ReturnTypeForValues(args)
	},
	Impl: func(args []cty.Value, retType cty.Type) (cty.Value, error) {
		list := args[0]
		if list.Type().ElementType() == cty.String && list.IsWhollyKnown() && !list.IsNull() && !list.ContainsMarked() {
			seen := map[string]bool{}
			var out []cty.Value
			for it := list.ElementIterator(); it.Next(); {
				_, e := it.Element()
				if s := e.AsString(); !seen[s] {
					seen[s] = true
					out = append(out, e)
				}
			}
			if len(out) == 0 {
				return cty.ListValEmpty(cty.String), nil
			}
			return cty.ListVal(out), nil
		}
		if list.IsKnown() && !list.IsNull() {
			if n := list.LengthInt(); n*(n-1)/2 > maxPairs {
				return cty.NilVal, limitf("%d elements: distinct compares them pairwise, so give at most a few thousand, or strings", n)
			}
		}
		return stdlib.DistinctFunc.Call(args)
	},
})
