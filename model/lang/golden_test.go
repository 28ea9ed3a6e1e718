package lang

import (
	"bytes"
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

// TestGolden compiles every testdata/*.txtar archive: its files (but `vars`
// and `want`) form a model directory, `vars` holds name=value lines, and
// `want` is the compiled resource set or the diagnostics, one per line.
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
			got := render(Compile("model", opts))
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
	fmt.Fprintf(&b, "hosts: %s\n", strings.Join(res.Hosts, " "))
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
		attrs, _ := model.Canonical(r.Attributes)
		fmt.Fprintf(&b, " %s\n", attrs)
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
