package model

import (
	"encoding/json"
	"slices"
	"testing"
)

// Each reader accepts every form its type comes in (decoded JSON, Go
// values) and reads anything else as unset.
func TestAttributesTypedReads(t *testing.T) {
	a := Attributes{
		"s": "x", "b": true, "f": false,
		"n": json.Number("1001"), "big": json.Number("1e3"), "frac": json.Number("1.5"), "float": 30.0, "int": 7,
		"list": []any{"a", "b"}, "strs": []string{"c"}, "badlist": []any{"a", 1},
		"map": map[string]any{"K": "v"}, "badmap": map[string]any{"K": 1},
		"null": nil,
	}
	if s, ok := a.String("s"); !ok || s != "x" {
		t.Errorf("String(s) = %q, %v; want x, true", s, ok)
	}
	for _, name := range []string{"n", "b", "null", "missing"} {
		if s, ok := a.String(name); ok {
			t.Errorf("String(%s) = %q, true; want unset", name, s)
		}
	}
	if v, ok := a.Bool("b"); !ok || !v {
		t.Errorf("Bool(b) = %v, %v; want true, true", v, ok)
	}
	if v, ok := a.Bool("f"); !ok || v {
		t.Errorf("Bool(f) = %v, %v; want false, true", v, ok)
	}
	if v, ok := a.Bool("s"); ok || v {
		t.Errorf("Bool(s) = %v, %v; want unset", v, ok)
	}
	for name, want := range map[string]int64{"n": 1001, "big": 1000, "float": 30, "int": 7} {
		if got, ok := a.Int(name); !ok || got != want {
			t.Errorf("Int(%s) = %d, %v; want %d, true", name, got, ok, want)
		}
	}
	for _, name := range []string{"frac", "s", "null"} {
		if got, ok := a.Int(name); ok {
			t.Errorf("Int(%s) = %d, true; want unset", name, got)
		}
	}
	if got, ok := a.Number("frac"); !ok || got != 1.5 {
		t.Errorf("Number(frac) = %v, %v; want 1.5, true", got, ok)
	}
	if got, ok := a.StringList("list"); !ok || !slices.Equal(got, []string{"a", "b"}) {
		t.Errorf("StringList(list) = %v, %v", got, ok)
	}
	if got, ok := a.StringList("strs"); !ok || !slices.Equal(got, []string{"c"}) {
		t.Errorf("StringList(strs) = %v, %v", got, ok)
	}
	if got, ok := a.StringList("badlist"); ok {
		t.Errorf("StringList(badlist) = %v, true; want unset", got)
	}
	if got, ok := a.StringMap("map"); !ok || len(got) != 1 || got["K"] != "v" {
		t.Errorf("StringMap(map) = %v, %v", got, ok)
	}
	if got, ok := a.StringMap("badmap"); ok {
		t.Errorf("StringMap(badmap) = %v, true; want unset", got)
	}
}
