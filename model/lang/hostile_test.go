package lang

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"runtime/metrics"
	"strconv"
	"strings"
	"testing"
	"time"
)

var updateCorpus = flag.Bool("update-corpus", false, "rewrite testdata/hostile-models from hostileModels")

// hostileModel is a one-file model written to exhaust or crash a
// compiler; want is a part of the diagnostic it must end with.
type hostileModel struct {
	name string
	src  string
	want string
}

// rep repeats s n times.
func rep(s string, n int) string { return strings.Repeat(s, n) }

// withLocals wraps expressions as locals, after a few helpers: s1k is
// 1 KiB, s64k 64 KiB, s1m 1 MiB.
func withLocals(attrs string) string {
	return "locals {\n" +
		"  s1k  = \"" + rep("x", 1024) + "\"\n" +
		"  s64k = join(\"\", [for i in range(64) : local.s1k])\n" +
		"  s1m  = join(\"\", [for i in range(16) : local.s64k])\n" +
		attrs + "}\n"
}

// yamlBomb is a billion laughs: each level aliases the previous nine
// times.
func yamlBomb(levels int) string {
	var b strings.Builder
	b.WriteString("a0: &a0 [\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\"]\n")
	for i := 1; i < levels; i++ {
		fmt.Fprintf(&b, "a%d: &a%d [%s]\n", i, i, strings.TrimSuffix(rep(fmt.Sprintf("*a%d,", i-1), 9), ","))
	}
	return b.String()
}

// hostileModels are the models the compiler must refuse with a
// diagnostic, quickly and in bounded memory (go test -run
// TestHostileCorpus -update-corpus writes them to testdata/hostile-models). They
// seed FuzzCompile when it fuzzes. A function, not a variable:
// megabytes held by the test binary would change what benchmarks measure.
func hostileModels() []hostileModel {
	return []hostileModel{
		// Nesting: the parser and evaluator recurse for each level.
		{"nest_parens", "locals {\n  x = " + rep("(", 100_000) + "1" + rep(")", 100_000) + "\n}\n", "Nesting too deep"},
		{"nest_brackets", "locals {\n  x = " + rep("[", 100_000) + rep("]", 100_000) + "\n}\n", "Nesting too deep"},
		{"nest_objects", "locals {\n  x = " + rep("{a = ", 100_000) + "1" + rep("}", 100_000) + "\n}\n", "Nesting too deep"},
		{"nest_blocks", "host \"h\" {\n" + rep("b {\n", 100_000) + rep("}\n", 100_000) + "}\n", "Nesting too deep"},
		{"nest_interpolations", "locals {\n  x = " + rep("\"${", 50_000) + "1" + rep("}\"", 50_000) + "\n}\n", "Nesting too deep"},
		{"nest_directives", "locals {\n  x = <<EOT\n" + rep("%{if true}", 50_000) + "x" + rep("%{endif}", 50_000) + "\nEOT\n}\n", "Nesting too deep"},
		{"nest_heredocs", "locals {\n  x = " + rep("<<A\n${", 20_000) + "1" + rep("}\nA\n", 20_000) + "}\n", "Nesting too deep"},
		{"nest_not", "locals {\n  x = " + rep("!", 100_000) + "true\n}\n", "Nesting too deep"},
		{"nest_minus", "locals {\n  x = " + rep("-", 100_000) + "1\n}\n", "Nesting too deep"},
		{"nest_minus_spaced", "locals {\n  x = " + rep("- ", 100_000) + "1\n}\n", "Nesting too deep"},
		{"nest_plus_chain", "locals {\n  x = 1" + rep(" + 1", 200_000) + "\n}\n", "Nesting too deep"},
		{"nest_and_chain", "locals {\n  x = true" + rep(" && true", 100_000) + "\n}\n", "Nesting too deep"},
		{"nest_chain_lines", "locals {\n  x = (1" + rep(" +\n 1", 100_000) + ")\n}\n", "Nesting too deep"},
		{"nest_conditionals", "locals {\n  x = " + rep("true ? 1 : ", 100_000) + "2\n}\n", "Nesting too deep"},
		{"nest_index", "locals {\n  i = 0\n  x = [1]" + rep("[local.i]", 100_000) + "\n}\n", "Nesting too deep"},
		{"nest_splat", "locals {\n  x = [[1]]" + rep("[*]", 100_000) + "\n}\n", "Nesting too deep"},
		{"nest_calls", "locals {\n  x = " + rep("upper(", 100_000) + "\"a\"" + rep(")", 100_000) + "\n}\n", "Nesting too deep"},
		{"nest_for", "locals {\n  x = " + rep("[for a in ", 50_000) + "[1]" + rep(" : a]", 50_000) + "\n}\n", "Nesting too deep"},
		{"nest_mixed", "locals {\n  x = " + rep("([{a = ", 30_000) + "1" + rep("}])", 30_000) + "\n}\n", "Nesting too deep"},
		{"nest_in_comment_trick", "locals {\n  x = " + rep("(\n# )\n", 60_000) + "1" + rep(")", 60_000) + "\n}\n", "Nesting too deep"},
		{"nest_in_block_comment_trick", "locals {\n  x = " + rep("( /* ) */", 60_000) + "1" + rep(")", 60_000) + "\n}\n", "Nesting too deep"},
		{"nest_unterminated_comment", "locals {\n  x = /* " + rep("(", 100_000) + "\n}\n", "Nesting too deep"},
		{"nest_escaped_quote_trick", "locals {\n  x = \"\\\"" + rep("${(", 50_000) + "\n}\n", "Nesting too deep"},
		{"nest_heredoc_marker_trick", "locals {\n  x = <<EOT\n  EOT x\nEOT\n  y = " + rep("(", 100_000) + "1" + rep(")", 100_000) + "\n}\n", "Nesting too deep"},
		{"nest_unicode_heredoc", "locals {\n  x = <<ÉOT\n\"\nÉOT\n  y = " + rep("(", 100_000) + "1" + rep(")", 100_000) + "\n}\n", "Nesting too deep"},
		{"nest_jsondecode", "locals {\n  x = jsondecode(\"" + rep("[", 100_000) + rep("]", 100_000) + "\")\n}\n", "nests more than"},
		{"nest_yamldecode_flow", "locals {\n  x = yamldecode(\"" + rep("[", 100_000) + rep("]", 100_000) + "\")\n}\n", "nests more than"},
		{"nest_yamldecode_block", "locals {\n  x = yamldecode(\"" + rep("- ", 100_000) + "x\")\n}\n", "nests more than"},
		{"nest_value_locals", "locals {\n  l0 = 1\n" + func() string {
			var b strings.Builder
			for i := 1; i <= 400; i++ {
				fmt.Fprintf(&b, "  l%d = [local.l%d]\n", i, i-1)
			}
			return b.String()
		}() + "}\n", "nests more than"},

		// Numbers: reading a long decimal number takes quadratic time, and a
		// huge exponent is small in memory but not as text.
		{"number_long_literal", "locals {\n  x = " + rep("7", 1_000_000) + "\n}\n", "Number too long"},
		{"number_huge_exponent", "locals {\n  x = 1e99999999\n}\n", "Number too large"},
		{"number_tonumber_long", "locals {\n  x = tonumber(\"" + rep("7", 1_000_000) + "\")\n}\n", "at most 4096 characters"},
		{"number_jsondecode_long", "locals {\n  x = jsondecode(\"" + rep("7", 1_000_000) + "\")\n}\n", "longer than 4096"},
		{"number_yamldecode_long", "locals {\n  x = yamldecode(\"" + rep("7", 1_000_000) + "\")\n}\n", "longer than 4096"},
		{"number_product_in_template", "locals {\n  x = 1e9999999\n  y = \"v=${local.x * local.x}\"\n}\n", "Value too large"},
		{"number_product_operand", "locals {\n  x = 1e9999999\n  y = local.x * local.x * 2\n}\n", "Value too large"},
		{"number_product_tostring", "locals {\n  x = 1e9999999\n  y = tostring(local.x * local.x)\n}\n", "would be larger"},

		// Aliases and repetition: small inputs, huge values.
		{"yaml_alias_bomb", "locals {\n  x = yamldecode(<<EOT\n" + yamlBomb(9) + "EOT\n  )\n}\n", "would be larger"},
		{"yaml_alias_strings", "locals {\n  x = yamldecode(<<EOT\na: &a \"" + rep("x", 100_000) + "\"\nb: [" + strings.TrimSuffix(rep("*a,", 1000), ",") + "]\nEOT\n  )\n}\n", "would be larger"},
		{"template_doubling_locals", "locals {\n  a0 = \"" + rep("x", 1024) + "\"\n" + func() string {
			var b strings.Builder
			for i := 1; i <= 40; i++ {
				fmt.Fprintf(&b, "  a%d = \"${local.a%d}${local.a%d}\"\n", i, i-1, i-1)
			}
			return b.String()
		}() + "}\n", "Value too large"},
		{"template_repeated_parts", withLocals("  x = \"" + rep("${local.s1m}", 100) + "\"\n"), "Value too large"},
		{"template_for_directive", withLocals("  x = \"%{for i in range(100)}${local.s1m}%{endfor}\"\n"), "Value too large"},
		{"list_of_references", withLocals("  x = jsonencode([" + rep("local.s1m, ", 100) + "])\n"), "Value too large"},
		{"object_of_references", withLocals("  x = jsonencode({" + func() string {
			var b strings.Builder
			for i := 0; i < 100; i++ {
				fmt.Fprintf(&b, "k%d = local.s1m, ", i)
			}
			return b.String()
		}() + "})\n"), "Value too large"},
		{"for_building_strings", withLocals("  x = [for i in range(100) : \"${local.s1m}${i}\"]\n"), "Value too large"},
		{"for_nested_product", "locals {\n  x = [for a in range(1024) : [for b in range(1024) : [for c in range(1024) : c]]]\n}\n", "Value too large"},
		{"for_each_millions", "host \"h\" {\n  package \"p\" {\n    for_each = toset(flatten([for a in range(1024) : [for b in range(1024) : \"p${a}-${b}\"]]))\n  }\n}\n", "Value too large"},
		{"format_width", "locals {\n  x = format(\"%999999999d\", 1)\n}\n", "would be larger"},
		{"format_precision", "locals {\n  x = format(\"%.999999999f\", 1)\n}\n", "would be larger"},
		{"format_repeated_index", withLocals("  x = format(\"" + rep("%[1]s", 100) + "\", local.s1m)\n"), "would be larger"},
		{"formatlist_scalar", withLocals("  x = formatlist(\"%s%d\", local.s1m, range(100))\n"), "would be larger"},
		{"indent_huge", "locals {\n  x = indent(999999999, \"a\\nb\")\n}\n", "would be larger"},
		{"join_separator", withLocals("  x = join(local.s1m, [for i in range(100) : \"x\"])\n"), "would be larger"},
		{"replace_empty", withLocals("  x = replace(local.s1m, \"\", local.s1k)\n"), "would be larger"},
		{"regex_replace_refs", withLocals("  x = regex_replace(local.s1m, \"x\", \"$0$0$0$0$0$0$0$0$0$0$0$0$0$0$0$0$0$0$0$0\")\n"), "would be larger"},
		{"split_characters", withLocals("  x = split(\"\", local.s1m)\n"), "would be larger"},
		{"regexall_empty", withLocals("  x = regexall(\"\", local.s1m)\n"), "would be larger"},
		{"csvdecode_cells", "locals {\n  x = csvdecode(\"" + rep(",", 2_000_000) + "\")\n}\n", "would be larger"},
		{"jsonencode_escapes", "locals {\n  s = replace(format(\"%4000000s\", \"\"), \" \", \"<\")\n  x = jsonencode(local.s)\n}\n", "would be larger"},
		{"yamlencode_indent", "locals {\n  lines = join(\"\\n\", [for p in setproduct(range(256), range(256)) : \"x\"])\n  deep = " + rep("[", 200) + "local.lines" + rep("]", 200) + "\n  x = yamlencode(local.deep)\n}\n", "would be larger"},
		{"base64_growth", "locals {\n  b0 = \"" + rep("x", 4096) + "\"\n" + func() string {
			var b strings.Builder
			for i := 1; i <= 40; i++ {
				fmt.Fprintf(&b, "  b%d = base64encode(\"${local.b%d}${local.b%d}\")\n", i, i-1, i-1)
			}
			return b.String()
		}() + "}\n", "Value too large"},
		{"setproduct_wide", "locals {\n  x = setproduct(range(1024), range(97), " + strings.TrimSuffix(rep("[1], ", 2000), ", ") + ")\n}\n", "would be larger"},
		{"toset_mixed_types", "locals {\n  x = toset(flatten([[for a in range(100) : [for b in range(1000) : b]], [for a in range(100) : [for b in range(1000) : \"s${b}\"]]]))\n}\n", "pairs of element types"},
		{"distinct_numbers", "locals {\n  x = distinct(flatten([for a in range(100) : [for b in range(1000) : b]]))\n}\n", "distinct compares them pairwise"},
		{"concat_many_arguments", "locals {\n  x = concat([for p in setproduct(range(8), range(1000)) : [p[1]]]...)\n}\n", "a call may have"},
		{"merge_many_arguments", "locals {\n  x = merge([for p in setproduct(range(8), range(1000)) : {k = p[1]}]...)\n}\n", "a call may have"},
	}
}

// TestHostileCorpus compiles every hostile model (testdata/hostile-models,
// written from hostileModels with -update-corpus; an input the fuzzer
// found may be put there too), without a hang and in bounded memory: a
// hostile model ends with the error diagnostic its entry names, any other
// input with a result or diagnostics.
func TestHostileCorpus(t *testing.T) {
	dir := filepath.Join("testdata", "hostile-models")
	if *updateCorpus {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		for _, m := range hostileModels() {
			data := "go test fuzz v1\nstring(" + strconv.Quote(m.src) + ")\n"
			if err := os.WriteFile(filepath.Join(dir, m.name), []byte(data), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	want := map[string]hostileModel{}
	for _, m := range hostileModels() {
		want[m.name] = m
	}
	entries, err := os.ReadDir(dir)
	if err != nil || len(entries) < 55 {
		t.Fatalf("want at least 55 hostile models in %s, found %d (%v)", dir, len(entries), err)
	}
	for _, e := range entries {
		t.Run(e.Name(), func(t *testing.T) {
			src := readCorpusFile(t, filepath.Join(dir, e.Name()))
			m, known := want[e.Name()]
			if known && m.src != src {
				t.Fatalf("%s differs from hostileModels; run go test -run TestHostileCorpus -update-corpus", e.Name())
			}
			model := t.TempDir()
			if err := os.WriteFile(filepath.Join(model, "main.hcl"), []byte(src), 0o644); err != nil {
				t.Fatal(err)
			}
			res, err := boundedCompile(t, model, Options{})
			var le *Error
			switch {
			case !known && err == nil && res != nil:
			case !errors.As(err, &le) || !hasError(le):
				t.Fatalf("got %v, want a compile error with diagnostics", err)
			case known && !strings.Contains(err.Error(), m.want):
				t.Fatalf("got\n%v\nwant a diagnostic containing %q", err, m.want)
			}
		})
	}
}

// readCorpusFile reads a one-string input of the Go fuzzer's corpus.
func readCorpusFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	header, rest, ok := strings.Cut(string(b), "\n")
	if !ok || header != "go test fuzz v1" {
		t.Fatalf("%s: not a fuzz corpus file", path)
	}
	rest = strings.TrimSpace(rest)
	if !strings.HasPrefix(rest, "string(") || !strings.HasSuffix(rest, ")") {
		t.Fatalf("%s: want one string input", path)
	}
	src, err := strconv.Unquote(rest[len("string(") : len(rest)-1])
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return src
}

func hasError(e *Error) bool {
	for _, d := range e.Diagnostics {
		if d.Severity == SeverityError {
			return true
		}
	}
	return false
}

// maxHeap bounds the heap a hostile compile may reach. Past abortHeap the
// test binary stops at once: a broken bound must not take down a machine
// shared with others.
const (
	maxHeap   = 1 << 30
	abortHeap = 3 << 30
)

// boundedCompile compiles dir, failing the test if the compile does not
// return within hangAfter (it hangs: a deadline did not hold) or if the
// heap grows past maxHeap.
func boundedCompile(t *testing.T, dir string, opts Options) (*Result, error) {
	t.Helper()
	const hangAfter = 3 * time.Minute
	type outcome struct {
		res *Result
		err error
	}
	done := make(chan outcome, 1)
	base := heapBytes()
	go func() {
		res, err := Compile(t.Context(), dir, opts)
		done <- outcome{res, err}
	}()
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	hang := time.After(hangAfter)
	peak := uint64(0)
	for {
		select {
		case o := <-done:
			if grown := peak - min(peak, base); grown > maxHeap {
				t.Errorf("the compile's heap grew by %d MiB, want at most %d MiB", grown>>20, maxHeap>>20)
			}
			return o.res, o.err
		case <-hang:
			t.Fatalf("the compile did not return within %s", hangAfter)
		case <-tick.C:
			h := heapBytes()
			peak = max(peak, h)
			if h > base+abortHeap {
				fmt.Fprintf(os.Stderr, "FAIL: %s: the compile's heap passed %d MiB; stopping the tests\n", t.Name(), abortHeap>>20)
				os.Exit(3)
			}
		}
	}
}

func heapBytes() uint64 {
	s := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
	metrics.Read(s)
	return s[0].Value.Uint64()
}
