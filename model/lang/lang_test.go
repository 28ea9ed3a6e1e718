package lang

import (
	"errors"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/hcl/v2"

	"github.com/tetherhq/tether/model"
)

// TestExamplesCompile compiles every model under examples/, against its
// inventory.json when it has one (and without it too).
func TestExamplesCompile(t *testing.T) {
	dirs, err := filepath.Glob("../../examples/*")
	if err != nil || len(dirs) < 4 {
		t.Fatalf("want at least 4 examples, found %v (%v)", dirs, err)
	}
	for _, dir := range dirs {
		t.Run(filepath.Base(dir), func(t *testing.T) {
			res, err := Compile(t.Context(), dir, Options{})
			if err != nil {
				t.Fatalf("%s does not compile:\n%v", dir, err)
			}
			if err := model.ValidateSet(res.Resources); err != nil {
				t.Fatalf("%s: not a valid resource set: %v", dir, err)
			}
			// An example made of hostgroups alone (for a server's live
			// inventory) compiles to nothing without one: it brings its
			// inventory.
			f, err := os.Open(filepath.Join(dir, "inventory.json"))
			if errors.Is(err, os.ErrNotExist) {
				if len(res.Resources) == 0 {
					t.Fatalf("%s compiles to no resources, and has no inventory.json", dir)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			inv, err := model.ParseInventory(f)
			if err != nil {
				t.Fatalf("%s/inventory.json: %v", dir, err)
			}
			withInv, err := Compile(t.Context(), dir, Options{Inventory: inv})
			if err != nil {
				t.Fatalf("%s does not compile against its inventory:\n%v", dir, err)
			}
			if len(withInv.Resources) <= len(res.Resources) {
				t.Fatalf("%s: the inventory selected no more resources (%d, without it %d)", dir, len(withInv.Resources), len(res.Resources))
			}
		})
	}
}

func TestPrettyShowsSource(t *testing.T) {
	dir := t.TempDir()
	src := "host \"h\" {\n  file \"/x\" {\n    content = \"x\"\n    colour = \"red\"\n  }\n}\n"
	if err := os.WriteFile(filepath.Join(dir, "main.hcl"), []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := Compile(t.Context(), dir, Options{})
	var le *Error
	if !errors.As(err, &le) {
		t.Fatalf("got %v, want *Error", err)
	}
	pretty := le.Pretty(false)
	for _, want := range []string{"main.hcl:4:5: error: Unsupported argument", `  4 |     colour = "red"`, "    |     ^^^^^^\n", "not expected here"} {
		if !strings.Contains(pretty, want) {
			t.Fatalf("pretty output lacks %q:\n%s", want, pretty)
		}
	}
}

func TestNoModel(t *testing.T) {
	if _, err := Compile(t.Context(), t.TempDir(), Options{}); !errors.Is(err, ErrNoModel) {
		t.Fatalf("empty directory: got %v, want ErrNoModel", err)
	}
	if _, err := Compile(t.Context(), filepath.Join(t.TempDir(), "missing"), Options{}); err == nil || !strings.Contains(err.Error(), "no such file") {
		t.Fatalf("missing directory: got %v", err)
	}
}

func TestSymlinkOutOfModel(t *testing.T) {
	dir := t.TempDir()
	outside := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(outside, []byte("s3cret"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, filepath.Join(dir, "link")); err != nil {
		t.Fatal(err)
	}
	src := "host \"h\" {\n  file \"/x\" { content = file(\"link\") }\n}\n"
	if err := os.WriteFile(filepath.Join(dir, "main.hcl"), []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := Compile(t.Context(), dir, Options{})
	if err == nil || !strings.Contains(err.Error(), "leads outside the model directory") {
		t.Fatalf("got %v, want a refusal to follow the link out", err)
	}
}

// FuzzCompile feeds arbitrary bytes as a model file: the compiler returns a
// result or diagnostics, and never panics. Its seeds are the golden
// models; the hostile models of hostile_test.go seed it too when it
// fuzzes.
func FuzzCompile(f *testing.F) {
	seeds, _ := filepath.Glob("testdata/*.txtar")
	for _, s := range seeds {
		b, _ := os.ReadFile(s)
		f.Add(string(b))
	}
	f.Add("host \"h\" { file \"/x\" { content = \"${\" } }")
	f.Add("variable \"v\" { type = list(map(string)) default = [{a = \"b\"}] }")
	// Fuzzing, the hostile models seed it too; a plain go test compiles
	// them once, in TestHostileCorpus.
	if fl := flag.Lookup("test.fuzz"); fl != nil && fl.Value.String() != "" {
		for _, m := range hostileModels() {
			f.Add(m.src)
		}
	}
	dir := f.TempDir()
	f.Fuzz(func(t *testing.T, src string) {
		if err := os.WriteFile(filepath.Join(dir, "main.hcl"), []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
		// A short deadline: the fuzzer tries many inputs, and one running
		// to its deadline ends with a diagnostic like any other.
		res, err := Compile(t.Context(), dir, Options{Timeout: 10 * time.Second})
		if err == nil && res == nil {
			t.Fatal("no result and no error")
		}
		var le *Error
		if err != nil && errors.As(err, &le) && len(le.Diagnostics) == 0 {
			t.Fatal("a compile error without diagnostics")
		}
	})
}

func TestInputsAndFingerprint(t *testing.T) {
	dir := t.TempDir()
	write := fileWriter(t, dir)
	write("main.hcl", "host \"h\" {\n  file \"/x\" { content = templatefile(\"t/x.tmpl\", {}) }\n  file \"/y\" { content = file(\"f.txt\") }\n}\n")
	write("t/x.tmpl", "template")
	write("f.txt", "file")
	write("unused.txt", "never read")
	res, err := Compile(t.Context(), dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	var paths []string
	for _, in := range res.Inputs {
		paths = append(paths, in.Path)
	}
	if got := strings.Join(paths, " "); got != "f.txt main.hcl t/x.tmpl" {
		t.Fatalf("inputs %q, want every file read and nothing else", got)
	}
	if !Unchanged(dir, res.Inputs) {
		t.Fatal("an untouched model reported changed")
	}
	fp := Fingerprint(res.Inputs, Options{}, "v1")
	if fp != Fingerprint(res.Inputs, Options{Vars: map[string]string{}}, "v1") {
		t.Fatal("fingerprint not stable")
	}
	for name, other := range map[string]string{
		"var":  Fingerprint(res.Inputs, Options{Vars: map[string]string{"a": "b"}}, "v1"),
		"salt": Fingerprint(res.Inputs, Options{}, "v2"),
	} {
		if other == fp {
			t.Fatalf("changing the %s left the fingerprint unchanged", name)
		}
	}
	for name, change := range map[string]func(){
		"template edited":    func() { write("t/x.tmpl", "edited") },
		"read file edited":   func() { write("f.txt", "edited") },
		"model file added":   func() { write("extra.hcl", "") },
		"model file removed": func() { os.Remove(filepath.Join(dir, "main.hcl")) },
	} {
		t.Run(name, func(t *testing.T) {
			snapshot := map[string][]byte{}
			for _, n := range []string{"main.hcl", "t/x.tmpl", "f.txt"} {
				snapshot[n], _ = os.ReadFile(filepath.Join(dir, n))
			}
			change()
			if Unchanged(dir, res.Inputs) {
				t.Fatalf("%s, but the model reported unchanged", name)
			}
			for n, b := range snapshot {
				write(n, string(b))
			}
			os.Remove(filepath.Join(dir, "extra.hcl"))
			if !Unchanged(dir, res.Inputs) {
				t.Fatal("restoring the files did not restore the model")
			}
		})
	}
	// Editing a file the model does not read changes nothing.
	write("unused.txt", "edited")
	if !Unchanged(dir, res.Inputs) {
		t.Fatal("a file the model never read invalidated it")
	}
}

// docs/model-language.md documents every attribute of every kind and every
// function: a kind or function added without its documentation fails here.
func TestReferenceDocumentsEverything(t *testing.T) {
	b, err := os.ReadFile("../../docs/model-language.md")
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)
	for _, k := range model.Kinds() {
		start := strings.Index(doc, "\n### "+k.Kind+"\n")
		if start < 0 {
			t.Errorf("no section ### %s", k.Kind)
			continue
		}
		section := doc[start+1:]
		if end := strings.Index(section[4:], "\n## "); end >= 0 {
			section = section[:end+4]
		}
		if end := strings.Index(section[4:], "\n### "); end >= 0 {
			section = section[:end+4]
		}
		for _, a := range k.Attrs {
			if !strings.Contains(section, "| `"+a.Name+"` |") {
				t.Errorf("section %s does not document attribute %s", k.Kind, a.Name)
			}
			if a.Required && !strings.Contains(section, "| `"+a.Name+"` | "+string(a.Type)+", required |") {
				t.Errorf("section %s does not say %s is required", k.Kind, a.Name)
			}
		}
	}
	c := &compiler{templates: map[string]hcl.Expression{}}
	for name := range c.functions(&unit{}) {
		if !strings.Contains(doc, "`"+name+"`") {
			t.Errorf("function %s is not documented", name)
		}
	}
}

// fileWriter returns a function writing a file of a model below dir,
// making its directories.
func fileWriter(t *testing.T, dir string) func(name, content string) {
	return func(name, content string) {
		t.Helper()
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// A label an agent may announce that is no identifier (tether.role) is in
// the inventory as any other, and the model reads it by index.
func TestInventoryLabelsAsAgentsAnnounceThem(t *testing.T) {
	dir := t.TempDir()
	fileWriter(t, dir)("main.hcl", `hostgroup "served" {
  match = host.labels["tether.role"] == "hv"
  file "/etc/role" { content = host.labels["tether.role"] }
}
`)
	inv := &model.Inventory{Agents: []model.InventoryAgent{
		{Name: "hv1", Labels: map[string]string{"tether.role": "hv", "1x": "y"}},
		{Name: "web1", Labels: map[string]string{"role": "web"}},
	}}
	if err := inv.Validate(); err != nil {
		t.Fatal(err)
	}
	res, err := Compile(t.Context(), dir, Options{Inventory: inv})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, r := range res.Resources {
		got = append(got, r.ID.String())
	}
	if strings.Join(got, ",") != "file[hv1,path=/etc/role]" {
		t.Fatalf("resources %v, want hv1's file alone", got)
	}
}
