package lang

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/tools/txtar"

	"github.com/tetherhq/tether/model"
)

var update = flag.Bool("update", false, "rewrite the want section of testdata/*.txtar")

// TestGolden compiles every testdata/*.txtar archive: its files (but `vars`,
// `inventory.json` and `want`) form a model directory, `vars` holds
// name=value lines, `inventory.json` is the inventory, and `want` is the
// compiled resource set or the diagnostics, one per line.
// Run with -update to rewrite the want sections after a deliberate change.
func TestGolden(t *testing.T) {
	archives, err := filepath.Glob("testdata/*.txtar")
	if err != nil || len(archives) == 0 {
		t.Fatalf("no golden archives: %v", err)
	}
	for _, path := range archives {
		name := strings.TrimSuffix(filepath.Base(path), ".txtar")
		t.Run(name, func(t *testing.T) {
			ar, err := txtar.ParseFile(path)
			if err != nil {
				t.Fatal(err)
			}
			tmp := t.TempDir()
			opts := Options{Vars: map[string]string{}}
			var want *txtar.File
			for i := range ar.Files {
				f := &ar.Files[i]
				switch f.Name {
				case "want":
					want = f
				case "vars":
					for _, line := range strings.Split(strings.TrimSpace(string(f.Data)), "\n") {
						k, v, _ := strings.Cut(line, "=")
						opts.Vars[k] = v
					}
				case "inventory.json":
					inv, err := model.ParseInventory(bytes.NewReader(f.Data))
					if err != nil {
						t.Fatalf("inventory.json: %v", err)
					}
					opts.Inventory = inv
				default:
					p := filepath.Join(tmp, "model", f.Name)
					if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
						t.Fatal(err)
					}
					if err := os.WriteFile(p, f.Data, 0o644); err != nil {
						t.Fatal(err)
					}
				}
			}
			t.Chdir(tmp)
			got := render(Compile(t.Context(), "model", opts))
			if *update {
				if want == nil {
					ar.Files = append(ar.Files, txtar.File{Name: "want"})
					want = &ar.Files[len(ar.Files)-1]
				}
				want.Data = []byte(got)
				if err := os.WriteFile(absTestdata(t, path), txtar.Format(ar), 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			if want == nil {
				t.Fatalf("%s has no want section; run go test -run TestGolden -update", path)
			}
			if got != string(want.Data) {
				t.Fatalf("compile output differs from %s:\n--- got ---\n%s--- want ---\n%s", path, got, want.Data)
			}
		})
	}
}

// testdataDir is the package directory, read before any test changes the
// working directory.
var testdataDir = func() string { d, _ := os.Getwd(); return d }()

func absTestdata(t *testing.T, rel string) string {
	t.Helper()
	return filepath.Join(testdataDir, rel)
}

// render prints a compile result deterministically: one line per resource
// (ID, requires, subscribes, purged, then attributes in canonical JSON), or
// one line per diagnostic.
func render(res *Result, err error) string {
	var b bytes.Buffer
	if err != nil {
		var le *Error
		if !errors.As(err, &le) {
			return "error: " + err.Error() + "\n"
		}
		for _, d := range le.Diagnostics {
			b.WriteString(d.String())
			b.WriteByte('\n')
		}
		return b.String()
	}
	var names []string
	for _, h := range res.Hosts {
		names = append(names, h.Name)
	}
	fmt.Fprintf(&b, "hosts: %s\n", strings.Join(names, " "))
	for _, h := range res.Hosts {
		var notes []string
		if h.Agent != h.Name {
			notes = append(notes, "agent="+h.Agent)
		}
		if !h.Declared {
			notes = append(notes, "from-inventory")
		}
		if len(h.Hostgroups) > 0 {
			notes = append(notes, "hostgroups="+strings.Join(h.Hostgroups, ","))
		}
		if len(h.MissingFacts) > 0 {
			notes = append(notes, "missing="+strings.Join(h.MissingFacts, ","))
		}
		if len(notes) > 0 {
			fmt.Fprintf(&b, "host %s: %s\n", h.Name, strings.Join(notes, " "))
		}
	}
	for _, r := range res.Resources {
		b.WriteString(r.ID.String())
		if len(r.Requires) > 0 {
			fmt.Fprintf(&b, " requires=%v", ids(r.Requires))
		}
		if len(r.Subscribes) > 0 {
			fmt.Fprintf(&b, " subscribes=%v", ids(r.Subscribes))
		}
		if r.Purged {
			b.WriteString(" purged")
		}
		if r.Undefined {
			b.WriteString(" undefined")
		}
		if len(r.Sensitive) > 0 {
			fmt.Fprintf(&b, " sensitive=%v", r.Sensitive)
		}
		attrs, _ := model.Canonical(r.Attributes)
		fmt.Fprintf(&b, " %s\n", attrs)
	}
	for _, u := range res.Undefined {
		what := u.ID
		if what == "" {
			what = "block at " + u.Block + " on " + u.Agent
		}
		var missing []string
		for _, f := range u.Missing {
			missing = append(missing, f.String())
		}
		fmt.Fprintf(&b, "undefined: %s needs %s\n", what, strings.Join(missing, ", "))
	}
	for _, m := range res.Modules {
		fmt.Fprintf(&b, "module %s: %s (%s)\n", m.Name, m.Source, m.Dir)
	}
	if ms := res.Machines; ms != nil {
		line := func(what string, pos model.SourcePos, v any) {
			j, _ := json.Marshal(v)
			fmt.Fprintf(&b, "%s at %s: %s\n", what, pos, j)
		}
		for _, p := range ms.Platforms {
			line("platform "+p.Name, p.Pos, p)
		}
		for _, d := range ms.Distributions {
			line("distribution "+d.Name, d.Pos, d)
		}
		for _, h := range ms.Hosts {
			line("blueprint "+h.Name, h.Pos, h)
		}
	}
	for _, w := range res.Warnings {
		fmt.Fprintf(&b, "%s\n", w)
	}
	return b.String()
}

func ids(list []model.ID) []string {
	out := make([]string, len(list))
	for i, id := range list {
		out[i] = id.String()
	}
	return out
}
