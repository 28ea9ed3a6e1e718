package model

import (
	"errors"
	"strings"
	"testing"
)

func TestValidateText(t *testing.T) {
	tests := []struct {
		name, s  string
		required bool
		ok       bool
	}{
		{"plain", "CI of team A", true, true},
		{"unicode", "équipe ☃", true, true},
		{"empty optional", "", false, true},
		{"empty required", "", true, false},
		{"at the limit", strings.Repeat("x", 16), true, true},
		{"over the limit", strings.Repeat("x", 17), true, false},
		{"newline", "a\nb", true, false},
		{"NUL", "a\x00", true, false},
		{"DEL", "a\x7f", true, false},
		{"C1 control", "a\u0085", true, false},
		{"invalid UTF-8", "a\xff", true, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := ValidateText("name", tt.s, 16, tt.required)
			if (err == nil) != tt.ok {
				t.Fatalf("got %v, want ok %v", err, tt.ok)
			}
			if err != nil && !errors.Is(err, ErrInvalidText) {
				t.Fatalf("got %v, want it to wrap ErrInvalidText", err)
			}
			if err != nil && tt.s != "" && strings.Contains(err.Error(), tt.s) {
				t.Fatalf("got %q: the error repeats the text", err)
			}
		})
	}
}

func TestValidateLabels(t *testing.T) {
	many := map[string]string{}
	for i := range MaxLabels + 1 {
		many[strings.Repeat("k", i+1)] = "v"
	}
	tests := []struct {
		name   string
		labels map[string]string
		ok     bool
	}{
		{"none", nil, true},
		{"ordinary", map[string]string{"role": "web", "env.tier": "front-1", "rack_id": "A 7"}, true},
		{"too many", many, false},
		{"empty key", map[string]string{"": "v"}, false},
		{"key with a space", map[string]string{"the role": "web"}, false},
		{"key too long", map[string]string{strings.Repeat("k", MaxLabelKeyLen+1): "v"}, false},
		{"value too long", map[string]string{"role": strings.Repeat("v", MaxLabelValueLen+1)}, false},
		{"value with a newline", map[string]string{"role": "web\nadmin"}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := ValidateLabels(tt.labels); (err == nil) != tt.ok {
				t.Fatalf("got %v, want ok %v", err, tt.ok)
			}
		})
	}
}

func TestClip(t *testing.T) {
	tests := []struct {
		s    string
		max  int
		want string
	}{
		{"short", 10, "short"},
		{"exactly10!", 10, "exactly10!"},
		{"longer than ten", 10, "longer tha…"},
		{"ééééé", 5, "éé…"}, // cut at a character boundary
	}
	for _, tt := range tests {
		if got := Clip(tt.s, tt.max); got != tt.want {
			t.Errorf("Clip(%q, %d): got %q, want %q", tt.s, tt.max, got, tt.want)
		}
	}
}

func TestVersionMetaValidate(t *testing.T) {
	if err := (VersionMeta{Compiler: "tether 1.0", Source: "git:abc"}).Validate(); err != nil {
		t.Fatalf("got %v, want ok", err)
	}
	if err := (VersionMeta{Source: strings.Repeat("x", MaxTextLen+1)}).Validate(); !errors.Is(err, ErrInvalidText) || !strings.Contains(err.Error(), "meta.source") {
		t.Fatalf("got %v, want ErrInvalidText naming meta.source", err)
	}
}
