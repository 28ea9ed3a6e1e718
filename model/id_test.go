package model

import (
	"encoding/json"
	"errors"
	"testing"
)

func TestParseID(t *testing.T) {
	tests := []struct {
		in   string
		want ID
	}{
		{"file[web-1,path=/etc/motd]", ID{"file", "web-1", "path", "/etc/motd"}},
		{"package[web-1,name=nginx]", ID{"package", "web-1", "name", "nginx"}},
		{"vendor:thing[h.example.com,name=x]", ID{"vendor:thing", "h.example.com", "name", "x"}},
		// The value runs to the last ']': brackets, commas and '=' need no escaping.
		{"file[a,path=/srv/a,b=[c]]", ID{"file", "a", "path", "/srv/a,b=[c]"}},
		{"file[a,path=/x]]]", ID{"file", "a", "path", "/x]]"}},
		{"file[a,path=/caf\u00e9 menu]", ID{"file", "a", "path", "/caf\u00e9 menu"}},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, err := ParseID(tt.in)
			if err != nil {
				t.Fatalf("ParseID(%q): %v", tt.in, err)
			}
			if got != tt.want {
				t.Fatalf("ParseID(%q) = %#v, want %#v", tt.in, got, tt.want)
			}
			if s := got.String(); s != tt.in {
				t.Fatalf("String() = %q, want %q", s, tt.in)
			}
		})
	}
}

func TestParseIDRejects(t *testing.T) {
	bad := []string{
		"", "file", "file[", "file[]", "file[web-1]", "file[web-1,path]",
		"file[web-1,path=]", "file[web-1,path=/x", "File[web-1,path=/x]",
		"file[,path=/x]", "file[-web,path=/x]", "file[web 1,path=/x]",
		"file[web-1,Path=/x]", "file[web-1,=/x]", "fi le[a,path=/x]",
		"file[a,path=/x\n]", "file[a,path=\xff]", ":file[a,path=/x]", "a:b:c[a,path=/x]",
		"file[a,path=/x]trailing",
	}
	for _, s := range bad {
		t.Run(s, func(t *testing.T) {
			id, err := ParseID(s)
			if err == nil {
				t.Fatalf("ParseID(%q) = %#v, want an error", s, id)
			}
			if !errors.Is(err, ErrInvalidID) {
				t.Fatalf("ParseID(%q) error %v does not wrap ErrInvalidID", s, err)
			}
		})
	}
}

func TestIDJSON(t *testing.T) {
	id := MustParseID("file[web-1,path=/etc/motd]")
	b, err := json.Marshal(id)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := string(b), `"file[web-1,path=/etc/motd]"`; got != want {
		t.Fatalf("got %s, want %s", got, want)
	}
	var back ID
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if back != id {
		t.Fatalf("got %v, want %v", back, id)
	}
	if err := json.Unmarshal([]byte(`"nope"`), &back); err == nil {
		t.Fatal("unmarshal of an invalid ID succeeded")
	}
	if _, err := json.Marshal(ID{Type: "file"}); err == nil {
		t.Fatal("marshal of an invalid ID succeeded")
	}
}

func TestValidateEnvName(t *testing.T) {
	for _, ok := range []string{"prod", "dev-1", "a_b", "local"} {
		if err := ValidateEnvName(ok); err != nil {
			t.Errorf("ValidateEnvName(%q) = %v, want nil", ok, err)
		}
	}
	for _, bad := range []string{"", "Prod", "1env", "a.b", "a b", string(make([]byte, 64))} {
		if err := ValidateEnvName(bad); err == nil {
			t.Errorf("ValidateEnvName(%q) = nil, want an error", bad)
		}
	}
}

// FuzzParseID checks the round trip both ways: whatever parses prints back to
// the same string, and parses again to the same ID. The seed corpus lives in
// testdata/fuzz/FuzzParseID.
func FuzzParseID(f *testing.F) {
	for _, s := range []string{
		"file[web-1,path=/etc/motd]", "package[web-1,name=nginx]",
		"file[a,path=/srv/a,b=[c]]", "vendor:x[h.example.com,name=y]", "file[a,path=]",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		id, err := ParseID(s)
		if err != nil {
			return
		}
		if err := id.Validate(); err != nil {
			t.Fatalf("ParseID(%q) returned an ID that does not validate: %v", s, err)
		}
		printed := id.String()
		if printed != s {
			t.Fatalf("ParseID(%q).String() = %q", s, printed)
		}
		again, err := ParseID(printed)
		if err != nil || again != id {
			t.Fatalf("ParseID(%q) = %#v, %v; want %#v", printed, again, err, id)
		}
	})
}
