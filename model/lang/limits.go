package lang

import (
	"errors"
	"fmt"
	"math/big"
	"time"

	"github.com/hashicorp/hcl/v2"
	"github.com/zclconf/go-cty/cty"
)

// Defaults of the Options that bound a compile. A model may come from an
// untrusted commit: whatever it holds, a compile ends within these bounds
// with a result or a diagnostic.
const (
	// DefaultTimeout bounds the time of a compile (Options.Timeout).
	DefaultTimeout = 60 * time.Second
	// DefaultMaxFileSize bounds each file a compile reads: model files,
	// templates and the files of file() (Options.MaxFileSize).
	DefaultMaxFileSize = 4 << 20
	// DefaultMaxTotalSize bounds the files a compile reads, together
	// (Options.MaxTotalSize).
	DefaultMaxTotalSize = 32 << 20
	// DefaultMaxTokens bounds the tokens of the model files and templates
	// a compile parses, together (Options.MaxTokens): parsing costs memory
	// and time per token, whatever the bytes.
	DefaultMaxTokens = 2_000_000
	// DefaultMaxValueSize bounds every value a compile builds: strings,
	// lists, maps, function results (Options.MaxValueSize). A value's size
	// counts its strings' bytes, its numbers' digits and 32 bytes for each
	// element, as if each shared part were copied.
	DefaultMaxValueSize = 16 << 20
	// DefaultMaxResultSize bounds the attributes of all the compiled
	// resources together, measured as values are (Options.MaxResultSize).
	DefaultMaxResultSize = 256 << 20
	// DefaultMaxNesting bounds how deep expressions, templates and the
	// documents of jsondecode and yamldecode nest (Options.MaxNesting).
	DefaultMaxNesting = 256
	// DefaultMaxModuleSize bounds the files of each git module's checkout,
	// together (Options.MaxModuleSize): the whole repository at the ref,
	// not only what the compile reads.
	DefaultMaxModuleSize = 64 << 20
	// DefaultMaxModuleFiles bounds the files and links of each git
	// module's checkout (Options.MaxModuleFiles).
	DefaultMaxModuleFiles = 10_000
)

// maxFiles bounds the distinct files a compile reads: a limit that is not
// an option, as those below (a variable only so that its test need not
// write a hundred thousand files).
var maxFiles = 100_000

// Limits of a compile that are not options: each gives a diagnostic.
const (
	// maxModuleInstances bounds the module blocks loaded, however they nest.
	maxModuleInstances = 1_000
	// maxCallArgs bounds the arguments of one function call (after ...).
	maxCallArgs = 4_096
	// maxNumberLength bounds a number written as text (a literal, or the
	// input of tonumber, parseint, jsondecode or yamldecode): reading a
	// long decimal number costs time quadratic in its length.
	maxNumberLength = 4_096
	// maxPairs bounds the pairs of elements one operation may compare:
	// finding the common type of a tuple's elements, and distinct, take
	// time quadratic in the number of elements.
	maxPairs = 1 << 24
	// elementSize is what each element of a collection adds to a value's
	// size, so that a list of empty strings is not free.
	elementSize = 32
)

// limits are the bounds of one compile, the Options with defaults filled in.
type limits struct {
	timeout    time.Duration
	fileSize   int64
	totalSize  int64
	tokens     int
	valueSize  int
	resultSize int64
	nesting    int
	resources  int

	moduleSize  int64
	moduleFiles int
}

func newLimits(o Options) limits {
	l := limits{
		timeout: o.Timeout, fileSize: o.MaxFileSize, totalSize: o.MaxTotalSize, tokens: o.MaxTokens,
		valueSize: o.MaxValueSize, resultSize: o.MaxResultSize, nesting: o.MaxNesting, resources: o.MaxResources,
		moduleSize: o.MaxModuleSize, moduleFiles: o.MaxModuleFiles,
	}
	orDefault(&l.timeout, DefaultTimeout)
	orDefault(&l.fileSize, DefaultMaxFileSize)
	orDefault(&l.totalSize, DefaultMaxTotalSize)
	orDefault(&l.tokens, DefaultMaxTokens)
	orDefault(&l.valueSize, DefaultMaxValueSize)
	orDefault(&l.resultSize, DefaultMaxResultSize)
	orDefault(&l.nesting, DefaultMaxNesting)
	orDefault(&l.resources, DefaultMaxResources)
	orDefault(&l.moduleSize, DefaultMaxModuleSize)
	orDefault(&l.moduleFiles, DefaultMaxModuleFiles)
	return l
}

// orDefault sets *v to def when it is zero or negative (unset).
func orDefault[T int | int64 | time.Duration](v *T, def T) {
	if *v <= 0 {
		*v = def
	}
}

// bytesText prints a size for diagnostics: "16 MiB", "1536 bytes".
func bytesText(n int64) string {
	switch {
	case n >= 1<<20 && n%(1<<20) == 0:
		return fmt.Sprintf("%d MiB", n>>20)
	case n >= 1<<10 && n%(1<<10) == 0:
		return fmt.Sprintf("%d KiB", n>>10)
	}
	return fmt.Sprintf("%d bytes", n)
}

// limitError is an error of a bound of the compile. HCL carries it inside
// its diagnostics; a guard seeing one stops evaluating the container it
// happened in (the rest could only repeat it).
type limitError struct{ msg string }

func (e *limitError) Error() string { return e.msg }

func limitf(format string, args ...any) error {
	return &limitError{msg: fmt.Sprintf(format, args...)}
}

func isLimitError(err error) bool {
	var le *limitError
	return errors.As(err, &le)
}

// limitExtra marks the diagnostics of bounds (hcl.Diagnostic.Extra).
type limitExtra struct{}

// limitDiag is a diagnostic of a bound at rng.
func limitDiag(rng *hcl.Range, summary string, err error) *hcl.Diagnostic {
	return &hcl.Diagnostic{Severity: hcl.DiagError, Summary: summary, Detail: err.Error(), Subject: rng, Extra: limitExtra{}}
}

// isLimit reports whether diags hold the diagnostic of a bound, directly or
// as the error of a function call.
func isLimit(diags hcl.Diagnostics) bool {
	type callError interface{ FunctionCallError() error }
	for _, d := range diags {
		if _, ok := hcl.DiagnosticExtra[limitExtra](d); ok {
			return true
		}
		if ce, ok := hcl.DiagnosticExtra[callError](d); ok && isLimitError(ce.FunctionCallError()) {
			return true
		}
	}
	return false
}

// tooLarge is the error of a value past Options.MaxValueSize.
func (c *compiler) tooLarge(what string) error {
	return limitf("%s would be larger than %s, the largest value a compile may build (Options.MaxValueSize)", what, bytesText(int64(c.limits.valueSize)))
}

// tooDeep is the error of a value nested past Options.MaxNesting.
func (c *compiler) tooDeep(what string) error {
	return limitf("%s nests more than %d levels deep (Options.MaxNesting)", what, c.limits.nesting)
}

// checkValue measures v against the value limits; what names it in the
// error ("the result", "this list").
func (c *compiler) checkValue(v cty.Value, what string) error {
	m := measure{budget: c.limits.valueSize, depth: c.limits.nesting}
	m.value(v, 0)
	switch {
	case m.deep:
		return c.tooDeep(what)
	case m.size > c.limits.valueSize:
		return c.tooLarge(what)
	}
	return nil
}

// sizeOf is v's size as checkValue counts it, stopping a little past the
// value limit (so measuring a huge value costs no more than the limit),
// and whether it nests past the nesting limit.
func (c *compiler) sizeOf(v cty.Value) (int, bool) {
	m := measure{budget: c.limits.valueSize, depth: c.limits.nesting}
	m.value(v, 0)
	return m.size, m.deep
}

// measure walks a value adding up its size; it stops as soon as the size
// passes the budget or the depth the limit, so a value whose parts are
// shared many times over (a YAML alias bomb) costs no more to measure than
// the budget.
type measure struct {
	budget int
	depth  int
	size   int
	deep   bool
}

func (m *measure) over() bool { return m.size > m.budget || m.deep }

func (m *measure) value(v cty.Value, depth int) {
	if m.over() {
		return
	}
	if depth > m.depth {
		m.deep = true
		return
	}
	v, _ = v.Unmark()
	ty := v.Type()
	switch {
	case !v.IsKnown() || v.IsNull():
		m.size += 4
	case ty == cty.String:
		m.size += len(v.AsString())
	case ty == cty.Number:
		m.size += numberSize(v.AsBigFloat())
	case ty == cty.Bool:
		m.size += 5
	case ty.IsCapsuleType():
		m.size += elementSize
	case ty.IsObjectType():
		// By name: iterating an object makes a value of each key.
		m.size += 2
		for name := range ty.AttributeTypes() {
			if m.over() {
				break
			}
			m.size += elementSize + len(name)
			m.value(v.GetAttr(name), depth+1)
		}
	case ty.IsMapType():
		m.size += 2
		for it := v.ElementIterator(); it.Next() && !m.over(); {
			k, e := it.Element()
			m.size += elementSize + len(k.AsString())
			m.value(e, depth+1)
		}
	case v.CanIterateElements():
		m.size += 2
		for it := v.ElementIterator(); it.Next() && !m.over(); {
			_, e := it.Element()
			m.size += elementSize
			m.value(e, depth+1)
		}
	default:
		m.size += elementSize
	}
}

// typeSize adds up the parts of a type the way measure adds up a value's
// elements, stopping past budget: the type jsondecode or yamldecode infers
// for a document mirrors the value it will build.
func typeSize(t cty.Type, budget, depth int) (int, bool) {
	size := 0
	deep := false
	var walk func(t cty.Type, d int)
	walk = func(t cty.Type, d int) {
		if size > budget || deep {
			return
		}
		if d > depth {
			deep = true
			return
		}
		size += elementSize
		switch {
		case t.IsObjectType():
			for name, at := range t.AttributeTypes() {
				size += len(name)
				walk(at, d+1)
			}
		case t.IsTupleType():
			for _, et := range t.TupleElementTypes() {
				walk(et, d+1)
			}
		case t.IsCollectionType():
			walk(t.ElementType(), d+1)
		}
	}
	walk(t, 0)
	return size, deep
}

// numberSize is the length of a number written out in decimals: a number
// like 1e99999999 is small in memory and huge as text.
func numberSize(f *big.Float) int {
	if f.IsInf() {
		return 4
	}
	exp := f.MantExp(nil)
	if f.IsInt() {
		// log10(2) < 0.30103
		return int(float64(exp)*0.30103) + 2
	}
	if exp < 0 {
		exp = -exp
	}
	// A fraction: up to the 155 digits of the mantissa's 512 bits.
	return int(float64(exp)*0.30103) + 160
}

// checkNumber refuses a number whose decimal text would pass the value
// limit: arithmetic on such a number, or writing it out, costs memory
// proportional to that text.
func (c *compiler) checkNumber(v cty.Value) error {
	v, _ = v.Unmark()
	if v.Type() != cty.Number || !v.IsKnown() || v.IsNull() {
		return nil
	}
	if numberSize(v.AsBigFloat()) > c.limits.valueSize {
		return c.tooLarge("this number written out")
	}
	return nil
}

// timedOut gives the diagnostic of a compile past its deadline, at rng (or
// nil while the compile is within it). The caller's own cancellation is
// not a diagnostic: Compile returns the context's error for it.
func (c *compiler) timedOut(rng *hcl.Range) *hcl.Diagnostic {
	if c.ctx.Err() == nil {
		return nil
	}
	return limitDiag(rng, "Compile timed out", c.timeoutError())
}

func (c *compiler) timeoutError() error {
	return limitf("the compile took longer than %s and was stopped here (--compile-timeout, Options.Timeout)", c.limits.timeout)
}

// halted reports whether the compile must stop expanding: past its
// deadline, or past a bound that makes the rest pointless.
func (c *compiler) halted() bool {
	return c.ctx.Err() != nil || c.halt
}
