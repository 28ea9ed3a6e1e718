package model

import (
	"encoding/json"
	"errors"
	"testing"
)

func fileRes(agent, path, content string) Resource {
	return Resource{
		ID:         ID{Type: "file", Agent: agent, Key: "path", Value: path},
		Attributes: Attributes{"path": path, "content": content},
	}
}

func TestResourceHash(t *testing.T) {
	a := fileRes("web-1", "/etc/motd", "hello")
	a.Requires = []ID{MustParseID("directory[web-1,path=/etc]"), MustParseID("package[web-1,name=x]")}
	b := a
	// Order of requires and of attribute keys carries no meaning.
	b.Requires = []ID{a.Requires[1], a.Requires[0], a.Requires[1]}
	b.Attributes = Attributes{"content": "hello", "path": "/etc/motd"}
	// Sensitive markers change presentation, not intent.
	b.Sensitive = []string{"content"}
	ha, err := a.Hash()
	if err != nil {
		t.Fatal(err)
	}
	hb, err := b.Hash()
	if err != nil {
		t.Fatal(err)
	}
	if ha != hb {
		t.Fatalf("equal intent hashed differently: %s vs %s", ha, hb)
	}

	changes := map[string]func(r *Resource){
		"content":    func(r *Resource) { r.Attributes = Attributes{"path": "/etc/motd", "content": "bye"} },
		"purged":     func(r *Resource) { r.Purged = true },
		"requires":   func(r *Resource) { r.Requires = nil },
		"subscribes": func(r *Resource) { r.Subscribes = []ID{MustParseID("file[web-1,path=/x]")} },
		"agent":      func(r *Resource) { r.ID.Agent = "web-2" },
		"undefined":  func(r *Resource) { r.Undefined = true },
		"number":     func(r *Resource) { r.Attributes = Attributes{"path": "/etc/motd", "content": "hello", "n": 1} },
	}
	for name, change := range changes {
		t.Run(name, func(t *testing.T) {
			c := a
			c.Attributes = Attributes{"path": "/etc/motd", "content": "hello"}
			change(&c)
			hc, err := c.Hash()
			if err != nil {
				t.Fatal(err)
			}
			if hc == ha {
				t.Fatalf("changing %s left the hash unchanged", name)
			}
		})
	}
}

func TestResourceCanonicalIsStable(t *testing.T) {
	r := fileRes("a", "/x", "y")
	r.Attributes["mode"] = "0644"
	got, err := r.Canonical()
	if err != nil {
		t.Fatal(err)
	}
	want := `{"attributes":{"content":"y","mode":"0644","path":"/x"},"id":"file[a,path=/x]","purged":false,"requires":[],"subscribes":[],"type":"file"}`
	if string(got) != want {
		t.Fatalf("got  %s\nwant %s", got, want)
	}
}

func TestResourceValidate(t *testing.T) {
	good := fileRes("a", "/x", "y")
	if err := good.Validate(); err != nil {
		t.Fatalf("valid resource rejected: %v", err)
	}
	bad := map[string]func(r *Resource){
		"identity missing":  func(r *Resource) { delete(r.Attributes, "path") },
		"identity differs":  func(r *Resource) { r.Attributes["path"] = "/y" },
		"identity not text": func(r *Resource) { r.Attributes["path"] = 1 },
		"bad id":            func(r *Resource) { r.ID.Agent = "" },
		"self require":      func(r *Resource) { r.Requires = []ID{r.ID} },
		"bad require":       func(r *Resource) { r.Requires = []ID{{Type: "x"}} },
		"bad value":         func(r *Resource) { r.Attributes["c"] = "\xff" },
	}
	for name, mutate := range bad {
		t.Run(name, func(t *testing.T) {
			r := fileRes("a", "/x", "y")
			mutate(&r)
			if err := r.Validate(); !errors.Is(err, ErrInvalidResource) {
				t.Fatalf("got %v, want ErrInvalidResource", err)
			}
		})
	}
}

func TestResourceJSONRoundTrip(t *testing.T) {
	r := fileRes("a", "/x", "y")
	r.Requires = []ID{MustParseID("directory[a,path=/]")}
	r.Sensitive = []string{"content"}
	b, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	var back Resource
	if err := DecodeJSON(b, &back); err != nil {
		t.Fatal(err)
	}
	h1, _ := r.Hash()
	h2, _ := back.Hash()
	if h1 != h2 {
		t.Fatalf("hash changed across JSON: %s vs %s (%s)", h1, h2, b)
	}
	if red := back.Redacted(); red["content"] != RedactedValue || red["path"] != "/x" {
		t.Fatalf("Redacted() = %v", red)
	}
}

func TestKindCheckAttributes(t *testing.T) {
	k, ok := LookupKind("file")
	if !ok {
		t.Fatal("no file kind")
	}
	good := Attributes{"path": "/etc/x", "content": "c", "mode": "0640", "owner": "root", "group": "0"}
	if p := k.Problems(good, false, false); p != nil {
		t.Fatalf("good attributes rejected: %v", p)
	}
	bad := []Attributes{
		{"path": "/etc/x", "colour": "red"},
		{"path": "etc/x"},
		{"path": "/etc/../x"},
		{"path": "/etc/x/"},
		{"path": "/"},
		{"path": 3},
		{"path": "/x", "mode": "rw-r--r--"},
		{"path": "/x", "mode": "99"},
		{"path": "/x", "mode": 644},
		{"path": "/x", "owner": ""},
		{"path": "/x", "owner": "a:b"},
	}
	for _, attrs := range bad {
		if p := k.Problems(attrs, false, false); len(p) == 0 {
			t.Errorf("Problems(%v) = nil, want a problem", attrs)
		}
	}
	for _, k := range Kinds() {
		if _, ok := k.Attr(AttrPresent); ok {
			t.Errorf("kind %s declares the reserved attribute %q", k.Kind, AttrPresent)
		}
		if a, ok := k.Attr(k.Identity); !ok || a.Type != TypeString {
			t.Errorf("kind %s: identity %q must be a declared string attribute", k.Kind, k.Identity)
		}
	}
}

func TestParseMode(t *testing.T) {
	for in, want := range map[string]uint32{"644": 0o644, "0644": 0o644, "2755": 0o2755, "0000": 0} {
		got, err := ParseMode(in)
		if err != nil || got != want {
			t.Errorf("ParseMode(%q) = %o, %v; want %o", in, got, err, want)
		}
	}
	if got := FormatMode(0o644); got != "0644" {
		t.Errorf("FormatMode(0644) = %q", got)
	}
}

// TestSealedInTheHash: a sealed value's digest is part of the hash, its box
// and key are not; Validate refuses a sealed attribute that is not marked
// sensitive, that is also in clear, or lacks its parts; Redact shows a
// sealed value as the marker and no ciphertext.
func TestSealedInTheHash(t *testing.T) {
	base := func() Resource {
		return Resource{ID: ID{Type: "file", Agent: "a", Key: "path", Value: "/s"}, Attributes: Attributes{"path": "/s"},
			Sensitive: []string{"content"}, Sealed: map[string]Sealed{"content": {Digest: Hash{1}, To: SealedToServer, Box: []byte{9}}}}
	}
	hash := func(r Resource) Hash {
		h, err := r.Hash()
		if err != nil {
			t.Fatal(err)
		}
		return h
	}
	r := base()
	if err := r.Validate(); err != nil {
		t.Fatal(err)
	}
	other := base()
	other.Sealed["content"] = Sealed{Digest: Hash{1}, To: "SHA256:agent", Box: []byte{7, 7}}
	if hash(r) != hash(other) {
		t.Fatal("the box or its key changed the hash: sealing to an agent would redeploy")
	}
	changed := base()
	changed.Sealed["content"] = Sealed{Digest: Hash{2}, To: SealedToServer, Box: []byte{9}}
	if hash(r) == hash(changed) {
		t.Fatal("another digest kept the hash: a changed secret would not deploy")
	}
	none := base()
	none.Sealed, none.Sensitive = nil, nil
	if hash(r) == hash(none) {
		t.Fatal("a sealed value does not count in the hash")
	}
	for name, edit := range map[string]func(*Resource){
		"not sensitive": func(r *Resource) { r.Sensitive = nil },
		"also in clear": func(r *Resource) { r.Attributes["content"] = "x" },
		"no digest":     func(r *Resource) { r.Sealed["content"] = Sealed{To: SealedToServer, Box: []byte{9}} },
		"no box":        func(r *Resource) { r.Sealed["content"] = Sealed{Digest: Hash{1}, To: SealedToServer} },
	} {
		r := base()
		edit(&r)
		if err := r.Validate(); !errors.Is(err, ErrInvalidResource) {
			t.Errorf("%s: got %v, want ErrInvalidResource", name, err)
		}
	}
	shown := base().Redact()
	if shown.Attributes["content"] != RedactedValue || shown.Sealed != nil {
		t.Fatalf("redacted: %+v", shown)
	}
	if got := (&Resource{Attributes: Attributes{"a": 1, "b": 2}, Sensitive: []string{"b", "c"}}).ClearSensitive(); len(got) != 1 || got[0] != "b" {
		t.Fatalf("ClearSensitive: %v, want [b]", got)
	}
}
