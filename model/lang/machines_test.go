package lang

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hashicorp/hcl/v2"

	"github.com/tetherhq/tether/model"
)

// A module's machines are the model's, each at its place relative to the
// project directory, whatever directory the compile was given; a model
// declaring none has no machines in its result.
func TestDeclaredMachinesPositions(t *testing.T) {
	dir := t.TempDir()
	write := fileWriter(t, dir)
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

// An application's machine_settings are declared with it, at its place
// and by its qualified name; a blueprint that does not list its
// applications has those its host block applies; settings that are not
// an object are an error at their place.
func TestDeclaredApplications(t *testing.T) {
	dir := t.TempDir()
	write := fileWriter(t, dir)
	write("main.hcl", `variable "db_disk" {
  default = 40
}
module "ntp" {
  source = "./modules/ntp"
}
application "db" {
  machine_settings = { memory_mib = 4096, disk_gib = var.db_disk, locale = "C" }
  file "/etc/db.conf" { content = "db\n" }
}
application "plain" {
  file "/etc/plain" { content = "plain\n" }
}
host "vm1" {
  platform     = "lab"
  distribution = "tiny"
  apply "db" {}
  apply "plain" {}
  apply "ntp.client" {}
}
host "vm2" {
  platform     = "lab"
  distribution = "tiny"
  applications = ["web"]
  apply "db" {}
}
`)
	write("modules/ntp/main.hcl", `application "client" {
  machine_settings = { cpus = 1 }
  file "/etc/ntp.conf" { content = "ntp\n" }
}
`)
	res, err := Compile(t.Context(), dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	ms := res.Machines
	if ms == nil || len(ms.Applications) != 2 || len(ms.Hosts) != 2 {
		t.Fatalf("machines %+v, want two applications with machine settings and two hosts", ms)
	}
	db, ntp := ms.Applications[0], ms.Applications[1]
	if db.Name != "db" || db.Pos.String() != "main.hcl:7" || db.MachineSettings["memory_mib"] != int64(4096) || db.MachineSettings["disk_gib"] != int64(40) ||
		db.MachineSettings["locale"] != "C" {
		t.Errorf("application db: %+v", db)
	}
	if ntp.Name != "ntp.client" || ntp.Pos.String() != "modules/ntp/main.hcl:1" || ntp.MachineSettings["cpus"] != int64(1) {
		t.Errorf("application ntp.client: %+v", ntp)
	}
	if got := strings.Join(ms.Hosts[0].Applications, ","); got != "db,plain,ntp.client" {
		t.Errorf("vm1's applications %s, want those it applies, in order", got)
	}
	if got := strings.Join(ms.Hosts[1].Applications, ","); got != "web" {
		t.Errorf("vm2's applications %s, want those it lists", got)
	}

	write("main.hcl", `application "db" {
  machine_settings = [1, 2]
}
`)
	if err := os.RemoveAll(filepath.Join(dir, "modules")); err != nil {
		t.Fatal(err)
	}
	if _, err := Compile(t.Context(), dir, Options{}); err == nil || !strings.Contains(err.Error(), "main.hcl:2") ||
		!strings.Contains(err.Error(), "machine_settings takes an object") {
		t.Fatalf("machine_settings of a list: %v, want an error at its place", err)
	}
}

// docs/model-language.md documents every attribute of the platform and
// distribution blocks and of a host made from a blueprint, in the table
// of its section.
func TestMachineBlocksDocumented(t *testing.T) {
	b, err := os.ReadFile("../../docs/model-language.md")
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)
	for _, tt := range []struct {
		section string
		attrs   []string
	}{
		{"### platform", attrNames(platformSchema.Attributes)},
		{"### distribution", attrNames(distributionSchema.Attributes)},
		{"### Hosts made from blueprints", attrNames(blueprintAttrs)},
	} {
		start := strings.Index(doc, "\n"+tt.section+"\n")
		if start < 0 {
			t.Errorf("no section %s", tt.section)
			continue
		}
		section := doc[start+1:]
		for _, next := range []string{"\n## ", "\n### "} {
			if end := strings.Index(section[4:], next); end >= 0 {
				section = section[:end+4]
			}
		}
		for _, a := range tt.attrs {
			if !strings.Contains(section, "| `"+a+"` |") {
				t.Errorf("section %s does not document attribute %s", tt.section, a)
			}
		}
	}
}

func attrNames(schema []hcl.AttributeSchema) []string {
	out := make([]string, len(schema))
	for i, a := range schema {
		out[i] = a.Name
	}
	return out
}
