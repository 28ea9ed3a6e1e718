package lang

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/tools/txtar"
)

// The scanner's depth is a bound only if it never falls short of the
// depth computed from hclsyntax's own tokens: it must follow the lexer's
// modes (strings, escapes, heredocs, comments, interpolations) exactly.
func TestScanFollowsLexer(t *testing.T) {
	sources := map[string]scanKind{}
	for _, m := range hostileModels() {
		// A prefix keeps the modes and spares lexing megabytes.
		sources[m.src[:min(len(m.src), 20_000)]] = scanConfig
	}
	for _, pattern := range []string{"testdata/*.txtar", "testdata/hostile/*.txtar"} {
		archives, _ := filepath.Glob(pattern)
		for _, a := range archives {
			ar, err := txtar.ParseFile(a)
			if err != nil {
				t.Fatal(err)
			}
			for _, f := range ar.Files {
				switch {
				case strings.HasSuffix(f.Name, ".hcl"):
					sources[string(f.Data)] = scanConfig
				case strings.HasSuffix(f.Name, ".tmpl"):
					sources[string(f.Data)] = scanTemplate
				}
			}
		}
	}
	examples, _ := filepath.Glob("../../examples/*/*.hcl")
	for _, e := range examples {
		b, err := os.ReadFile(e)
		if err != nil {
			t.Fatal(err)
		}
		sources[string(b)] = scanConfig
	}
	for _, src := range scanSeeds {
		sources[src] = scanConfig
	}
	if len(sources) < 100 {
		t.Fatalf("only %d sources to compare", len(sources))
	}
	for src, kind := range sources {
		checkScan(t, src, kind)
	}
}

// scanSeeds are sources whose modes are easy to get wrong.
var scanSeeds = []string{
	"x = \"a\\\"(\" + (1)\n",
	"x = \"$${(\" \ny = \"%%{ if }\"\n",
	"x = \"${\"${\"}\"}\"}\"\n",
	"x = <<EOT\n  EOT x\n  ${ ( } (\n EOT \ny = (1)\n",
	"x = <<-EOT\n$\nEOT\ny = [[1]]\n",
	"x = <<EOT\na$EOT\nEOT\n",
	"x = <<EOT\r\nEOT\r\ny = (1)\n",
	"x = /* ( */ 1 // (\ny = # (\n2\n",
	"x = /* unterminated (((\n",
	"x = { a = { b = 1 } }\ny = a[0][1].c[*].d\n",
	"x = a ? b : c ? d : e\n",
	"x = \"%{ for a in b }%{ if c }x%{ endif }%{ endfor }\"\n",
	"x = \"%{~ if a ~}x%{~ else ~}y%{~ endif ~}\"\n",
	"x = \"${ {a = 1} }\"\n",
	"x = \"${ 1 ~}\"\n",
	"x = 1 }} }\ny = \"${ } }\"\n",
	"x = <<A\n${<<B\n${1}\nB\n}\nA\n",
	"x = 1e5 + 1.5e-3 - 2.\n",
	"x = \"\\\\\" ( \n",
	"x = \"\\\n(\" \n",
	"x = <<É\n(\nÉ\n",
}

func checkScan(t *testing.T, src string, kind scanKind) {
	t.Helper()
	const unbounded = 1 << 30
	got := scanSource([]byte(src), "f", kind, unbounded)
	want := scanTokens([]byte(src), "f", kind, unbounded)
	if got.diag != nil && want.diag == nil {
		return // a number the scanner reads longer: the safe side
	}
	if got.deepest < want.deepest {
		short := src
		if len(short) > 200 {
			short = short[:200] + "…"
		}
		t.Errorf("scanning %q: depth %d, below the lexer's %d", short, got.deepest, want.deepest)
	}
}

// FuzzScanSource checks the scanner against hclsyntax's lexer on
// arbitrary sources.
func FuzzScanSource(f *testing.F) {
	for _, s := range scanSeeds {
		f.Add(s, false)
	}
	f.Add("${ \"a\" }%{ if b }c%{ endif }", true)
	f.Fuzz(func(t *testing.T, src string, template bool) {
		kind := scanConfig
		if template {
			kind = scanTemplate
		}
		checkScan(t, src, kind)
	})
}
