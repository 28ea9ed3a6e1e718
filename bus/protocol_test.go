package bus

import (
	"strings"
	"testing"
)

func TestCheckProtocol(t *testing.T) {
	tests := []struct {
		v    string
		want string // "" = taken; else a part of the refusal
	}{
		{"", ""},       // agents older than versions: 1.0
		{"1.0", ""},    // an older minor
		{Protocol, ""}, // this build's
		{"1.99", ""},   // a newer minor: fields and kinds this server ignores
		{"2.0", "takes agents of protocol 1.x only"},
		{"0.9", "takes agents of protocol 1.x only"},
		{"two", "not major.minor"},
		{"1", "not major.minor"},
		{"1.-1", "not major.minor"},
		{"1.2.3", "not major.minor"},
	}
	for _, tt := range tests {
		t.Run(tt.v, func(t *testing.T) {
			err := CheckProtocol(tt.v)
			switch {
			case tt.want == "" && err != nil:
				t.Fatalf("CheckProtocol(%q) = %v, want nil", tt.v, err)
			case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
				t.Fatalf("CheckProtocol(%q) = %v, want an error saying %q", tt.v, err, tt.want)
			}
		})
	}
	if major, _, err := ParseProtocol(Protocol); err != nil || major != ProtocolMajor {
		t.Fatalf("Protocol %s parses to major %d (%v), want ProtocolMajor %d", Protocol, major, err, ProtocolMajor)
	}
}

func TestProtocolHas(t *testing.T) {
	for _, tt := range []struct {
		v     string
		minor int
		want  bool
	}{
		{"", 0, true}, {"", 2, false}, {"1.1", 2, false}, {"1.2", 2, true}, {"1.10", 2, true},
		{"2.5", 2, false}, {"0.9", 2, false}, {"1.x", 0, false}, {Protocol, 2, true},
	} {
		if got := ProtocolHas(tt.v, tt.minor); got != tt.want {
			t.Errorf("ProtocolHas(%q, %d) = %v, want %v", tt.v, tt.minor, got, tt.want)
		}
	}
}
