package lang

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tetherhq/tether/model"
)

// A module's machines are the model's, each at its place relative to the
// project directory, whatever directory the compile was given; a model
// declaring none has no machines in its result.
func TestDeclaredMachinesPositions(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string) {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("main.hcl", "module \"lab\" {\n  source = \"./modules/lab\"\n}\n\nhost \"vm1\" {\n  platform     = \"lab\"\n  distribution = \"tiny\"\n}\n")
	write("modules/lab/main.hcl", "\nplatform \"lab\" {\n  driver = \"libvirt\"\n  agent  = \"hv1\"\n}\n\ndistribution \"tiny\" {\n  kind = \"netboot\"\n}\n")
	res, err := Compile(t.Context(), dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	ms := res.Machines
	if ms == nil || len(ms.Platforms) != 1 || len(ms.Distributions) != 1 || len(ms.Hosts) != 1 {
		t.Fatalf("machines %+v, want a platform, a distribution and a host", ms)
	}
	for _, tt := range []struct {
		what string
		got  model.SourcePos
		want string
	}{
		{"platform", ms.Platforms[0].Pos, "modules/lab/main.hcl:2"},
		{"distribution", ms.Distributions[0].Pos, "modules/lab/main.hcl:7"},
		{"host", ms.Hosts[0].Pos, "main.hcl:5"},
	} {
		if tt.got.String() != tt.want {
			t.Errorf("%s at %s, want %s", tt.what, tt.got, tt.want)
		}
	}
	b, err := json.Marshal(res)
	if err != nil || !strings.Contains(string(b), `"machines":{"platforms":[{"name":"lab"`) {
		t.Fatalf("result as JSON %s (%v): want its machines", b, err)
	}

	write("main.hcl", "host \"vm1\" {}\n")
	if err := os.RemoveAll(filepath.Join(dir, "modules")); err != nil {
		t.Fatal(err)
	}
	res, err = Compile(t.Context(), dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if res.Machines != nil {
		t.Fatalf("a model without machines: %+v, want none", res.Machines)
	}
}
