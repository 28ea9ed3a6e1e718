package model

import (
	"encoding/json"
	"errors"
	"math"
	"testing"
)

func TestCanonical(t *testing.T) {
	tests := []struct {
		name string
		in   any
		want string
	}{
		{"sorted keys", map[string]any{"b": 1, "a": 2, "C": 3}, `{"C":3,"a":2,"b":1}`},
		{"nested", Attributes{"x": []any{map[string]any{"z": true, "y": nil}}}, `{"x":[{"y":null,"z":true}]}`},
		{"integral float", 3.0, `3`},
		{"json number int", json.Number("42"), `42`},
		{"json number float form", json.Number("42.0"), `42`},
		{"exponent", json.Number("1e3"), `1000`},
		{"fraction", 0.5, `0.5`},
		{"big int kept exact", json.Number("9007199254740993"), `9007199254740993`},
		{"no html escaping", "<a & b>", `"<a & b>"`},
		{"control chars", "a\nb\t\x01\"\\", `"a\nb\t\u0001\"\\"`},
		{"unicode raw", "caf\u00e9", "\"caf\u00e9\""},
		{"string list", []string{"b", "a"}, `["b","a"]`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Canonical(tt.in)
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != tt.want {
				t.Fatalf("got %s, want %s", got, tt.want)
			}
			// Canonical JSON must be valid JSON.
			var v any
			if err := json.Unmarshal(got, &v); err != nil {
				t.Fatalf("canonical form %s is not JSON: %v", got, err)
			}
		})
	}
}

func TestCanonicalRejects(t *testing.T) {
	deep := any("x")
	for i := 0; i < maxValueDepth+2; i++ {
		deep = []any{deep}
	}
	for name, v := range map[string]any{
		"nan":          math.NaN(),
		"inf":          math.Inf(1),
		"bad utf8":     "\xff",
		"unsupported":  struct{}{},
		"too deep":     deep,
		"bad number":   json.Number("12abc"),
		"bad map utf8": map[string]any{"\xff": 1},
	} {
		t.Run(name, func(t *testing.T) {
			if _, err := Canonical(v); !errors.Is(err, ErrInvalidValue) {
				t.Fatalf("got %v, want ErrInvalidValue", err)
			}
		})
	}
}

func TestEqual(t *testing.T) {
	tests := []struct {
		a, b any
		want bool
	}{
		{"x", "x", true},
		{"x", "y", false},
		{1, 1.0, true},
		{json.Number("1"), int64(1), true},
		{1, "1", false},
		{nil, nil, true},
		{nil, "", false},
		{map[string]any{"a": 1, "b": 2}, Attributes{"b": 2.0, "a": 1}, true},
		{[]any{"a"}, []string{"a"}, true},
		{[]any{"a"}, []any{"b"}, false},
		{math.NaN(), math.NaN(), false},
	}
	for _, tt := range tests {
		if got := Equal(tt.a, tt.b); got != tt.want {
			t.Errorf("Equal(%#v, %#v) = %v, want %v", tt.a, tt.b, got, tt.want)
		}
	}
}

func TestDecodeJSON(t *testing.T) {
	var v map[string]any
	if err := DecodeJSON([]byte(`{"n": 12345678901234567890}`), &v); err != nil {
		t.Fatal(err)
	}
	if got, want := v["n"], json.Number("12345678901234567890"); got != want {
		t.Fatalf("got %#v, want %#v", got, want)
	}
	for _, bad := range []string{`{} {}`, `{}]`, `{"a":`, ``} {
		if err := DecodeJSON([]byte(bad), &v); err == nil {
			t.Errorf("DecodeJSON(%q) = nil, want an error", bad)
		}
	}
}
