package api

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/rs/zerolog"
)

// TestEnumsComplete: every string type of this module that the OpenAPI
// document describes and that has constants is an enum there, listing
// exactly its constants (read from its package's source), so that a
// state or a role added in Go is never missing from the document.
func TestEnumsComplete(t *testing.T) {
	const module = "github.com/tetherhq/tether/"
	_, s := buildDocument(New(Config{}, Services{}, zerolog.Nop()).routes(), "test")
	consts := map[string]map[string][]string{} // package → type → values
	checked := 0
	for typ := range s.seen {
		if typ.Kind() != reflect.String || typ.Name() == "" || !strings.HasPrefix(typ.PkgPath(), module) {
			continue
		}
		pkg := typ.PkgPath()
		if consts[pkg] == nil {
			consts[pkg] = constantsOf(t, filepath.Join("..", "..", strings.TrimPrefix(pkg, module)))
		}
		want := slices.Sorted(slices.Values(consts[pkg][typ.Name()]))
		got := slices.Sorted(slices.Values(enumValues()[typ]))
		if !slices.Equal(got, want) {
			t.Errorf("%s: the document lists %q, its constants are %q: list them in enumValues (server/api/openapi.go)", typ, got, want)
		}
		checked++
	}
	if checked < 15 {
		t.Fatalf("%d enumerated types checked, want every one of the document", checked)
	}
}

// constantsOf reads the string constants of the package in dir, by type.
func constantsOf(t *testing.T, dir string) map[string][]string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]string{}
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(token.NewFileSet(), name, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range f.Decls {
			g, ok := d.(*ast.GenDecl)
			if !ok || g.Tok != token.CONST {
				continue
			}
			for _, spec := range g.Specs {
				vs := spec.(*ast.ValueSpec)
				typ, ok := vs.Type.(*ast.Ident)
				if !ok {
					continue
				}
				for _, v := range vs.Values {
					lit, ok := v.(*ast.BasicLit)
					if !ok || lit.Kind != token.STRING {
						continue
					}
					s, err := strconv.Unquote(lit.Value)
					if err != nil {
						t.Fatal(err)
					}
					out[typ.Name] = append(out[typ.Name], s)
				}
			}
		}
	}
	return out
}
