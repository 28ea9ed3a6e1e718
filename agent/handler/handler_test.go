package handler

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/tetherhq/tether/model"
)

func fileRes(attrs model.Attributes) *model.Resource {
	a := model.Attributes{"path": "/x"}
	for k, v := range attrs {
		a[k] = v
	}
	return &model.Resource{ID: model.MustParseID("file[a,path=/x]"), Attributes: a}
}

func TestComputeChanges(t *testing.T) {
	tests := []struct {
		name    string
		res     *model.Resource
		current model.Attributes
		exists  bool
		want    string
	}{
		{"absent: create with every attribute", fileRes(model.Attributes{"content": "c", "mode": "0644"}), nil, false,
			"map[content:{<nil> c} mode:{<nil> 0644} present:{false true}]"},
		{"same", fileRes(model.Attributes{"content": "c"}), model.Attributes{"path": "/x", "content": "c"}, true, "map[]"},
		{"content differs", fileRes(model.Attributes{"content": "c"}), model.Attributes{"path": "/x", "content": "d"}, true,
			"map[content:{d c}]"},
		{"not read counts as a change", fileRes(model.Attributes{"owner": "root"}), model.Attributes{"path": "/x"}, true,
			"map[owner:{<nil> root}]"},
		{"numbers compare by value", fileRes(model.Attributes{"n": 1.0}), model.Attributes{"n": 1}, true, "map[]"},
		{"purged and present", &model.Resource{ID: fileRes(nil).ID, Attributes: model.Attributes{"path": "/x"}, Purged: true},
			model.Attributes{"path": "/x"}, true, "map[present:{true false}]"},
		{"purged and absent", &model.Resource{ID: fileRes(nil).ID, Attributes: model.Attributes{"path": "/x"}, Purged: true},
			nil, false, "map[]"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := ComputeChanges(tt.res, tt.current, tt.exists)
			if s := fmt.Sprint(map[string]Change(got)); s != tt.want && !(len(got) == 0 && tt.want == "map[]") {
				t.Fatalf("got %s, want %s", s, tt.want)
			}
		})
	}
	c := ComputeChanges(fileRes(nil), nil, false)
	if !c.Created() || c.Removed() {
		t.Fatalf("create changes: Created=%v Removed=%v", c.Created(), c.Removed())
	}
}

func TestRedact(t *testing.T) {
	r := fileRes(model.Attributes{"content": "secret"})
	r.Sensitive = []string{"content"}
	got := ComputeChanges(r, nil, false).Redact(r)
	if got["content"].Desired != model.RedactedValue || got["content"].Current != model.RedactedValue {
		t.Fatalf("sensitive change not redacted: %v", got)
	}
	if got[model.AttrPresent].Desired != true {
		t.Fatalf("non-sensitive change altered: %v", got)
	}
}

type kindOnly string

func (k kindOnly) Kind() string                 { return string(k) }
func (kindOnly) Validate(*model.Resource) error { return nil }
func (kindOnly) Apply(context.Context, *model.Resource, model.Attributes, Changes) error {
	return nil
}
func (kindOnly) Read(context.Context, *model.Resource) (model.Attributes, bool, error) {
	return nil, false, nil
}

func TestRegistry(t *testing.T) {
	r := NewRegistry()
	for _, k := range []string{"file", "directory"} {
		if err := r.Register(kindOnly(k)); err != nil {
			t.Fatal(err)
		}
	}
	if err := r.Register(kindOnly("file")); !errors.Is(err, ErrDuplicateKind) {
		t.Fatalf("duplicate register: got %v, want ErrDuplicateKind", err)
	}
	if err := r.Register(kindOnly("Bad Kind")); err == nil {
		t.Fatal("registered an invalid kind")
	}
	if _, ok := r.Lookup("file"); !ok {
		t.Fatal("file not found")
	}
	if _, ok := r.Lookup("package"); ok {
		t.Fatal("found an unregistered kind")
	}
	if got := fmt.Sprint(r.Kinds()); got != "[directory file]" {
		t.Fatalf("Kinds() = %s", got)
	}
}

func TestHostPath(t *testing.T) {
	rt := Runtime{Root: "/sandbox"}
	if p, err := rt.HostPath("/etc/motd"); err != nil || p != "/sandbox/etc/motd" {
		t.Fatalf("got %q, %v", p, err)
	}
	if p, _ := (Runtime{}).HostPath("/etc/motd"); p != "/etc/motd" {
		t.Fatalf("no root: got %q", p)
	}
	for _, bad := range []string{"etc", "/a/../../etc", "/"} {
		if _, err := rt.HostPath(bad); !errors.Is(err, ErrInvalid) {
			t.Errorf("HostPath(%q) = %v, want ErrInvalid", bad, err)
		}
	}
}

// TestSyncGroup runs many concurrent syncs: every caller succeeds and the
// data is on disk.
func TestSyncGroup(t *testing.T) {
	g := NewSyncGroup()
	dir := t.TempDir()
	var wg sync.WaitGroup
	errs := make(chan error, 64)
	for i := 0; i < 64; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			f, err := os.Create(filepath.Join(dir, fmt.Sprint(i)))
			if err != nil {
				errs <- err
				return
			}
			defer f.Close()
			if _, err := f.WriteString("x"); err != nil {
				errs <- err
				return
			}
			errs <- g.Sync(f)
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	// A closed file is an error, not a hang or a crash.
	f, _ := os.Create(filepath.Join(dir, "closed"))
	f.Close()
	if err := g.Sync(f); err == nil {
		t.Fatal("Sync of a closed file succeeded")
	}
}

func TestDeclared(t *testing.T) {
	d := Declare("file")
	if d.Kind() != "file" {
		t.Fatalf("Kind() = %q", d.Kind())
	}
	if err := d.Validate(fileRes(model.Attributes{"content": "x"})); err != nil {
		t.Fatalf("valid file rejected: %v", err)
	}
	purged := fileRes(model.Attributes{"content": "x"})
	purged.Purged = true
	if err := d.Validate(purged); !errors.Is(err, ErrInvalid) {
		t.Fatalf("purged resource with attributes: got %v, want ErrInvalid", err)
	}
	defer func() {
		if recover() == nil {
			t.Fatal("Declare of an undeclared kind did not panic")
		}
	}()
	Declare("no-such-kind")
}
