package lang

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tetherhq/tether/model"
	"github.com/tetherhq/tether/model/gitfetch/gittest"
)

// writeTree writes files (path → content) below dir.
func writeTree(t *testing.T, dir string, files map[string]string) {
	t.Helper()
	for name, content := range files {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// noGit empties PATH for the rest of the test: modules are fetched
// in-process, and a compile must not need a git binary.
func noGit(t *testing.T) {
	t.Helper()
	t.Setenv("PATH", "")
	if p, err := exec.LookPath("git"); err == nil {
		t.Fatalf("git is still found at %s with PATH emptied", p)
	}
}

// A git module is fetched at its ref into the module cache, the commit is
// recorded in the result, later compiles use the cache (even with the
// repository gone), and --update-modules follows a moved tag. All of it
// without a git binary.
func TestGitModule(t *testing.T) {
	repo := gittest.New(t)
	first := repo.Commit(map[string]string{
		"main.hcl":  "application \"motd\" {\n  file \"/etc/motd\" { content = templatefile(\"motd.tmpl\", {}) }\n}\n",
		"motd.tmpl": "version one\n",
	})
	repo.Tag("v1", first)
	noGit(t)

	project := t.TempDir()
	writeTree(t, project, map[string]string{"main.hcl": "module \"base\" {\n  source = \"" + "git::" + repo.URL() + "\"\n  ref = \"v1\"\n}\nhost \"h\" {\n  apply \"base.motd\" {}\n}\n"})
	compile := func(opts Options) *Result {
		t.Helper()
		res, err := Compile(t.Context(), project, opts)
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	res := compile(Options{})
	if len(res.Modules) != 1 || res.Modules[0].Commit != first || res.Modules[0].Ref != "v1" {
		t.Fatalf("modules %+v, want base at %s", res.Modules, first)
	}
	if got := res.Resources[0].Attributes["content"]; got != "version one\n" {
		t.Fatalf("content %q", got)
	}
	if !strings.HasPrefix(res.Modules[0].Dir, ModuleCacheDir+string(filepath.Separator)) {
		t.Fatalf("module dir %s is not in the cache", res.Modules[0].Dir)
	}
	if _, err := os.Stat(filepath.Join(project, res.Modules[0].Dir, ".git")); !os.IsNotExist(err) {
		t.Errorf(".git in the module's checkout: %v", err)
	}
	lock, err := os.ReadFile(filepath.Join(project, ModuleCacheDir, "lock.json"))
	if err != nil || !strings.Contains(string(lock), "file://"+repo.Dir+"@v1") || !strings.Contains(string(lock), first) {
		t.Fatalf("lock.json %s (%v), want v1 at %s", lock, err, first)
	}

	// Move the tag: the cache keeps the compile repeatable until asked.
	second := repo.Commit(map[string]string{"motd.tmpl": "version two\n"})
	repo.Tag("v1", second)
	if got := compile(Options{}).Resources[0].Attributes["content"]; got != "version one\n" {
		t.Fatalf("a cached ref moved without --update-modules: %q", got)
	}
	// With the checkout gone from the cache, the commit of the lock is
	// fetched again, not the tag's new one.
	if err := os.RemoveAll(filepath.Join(project, res.Modules[0].Dir)); err != nil {
		t.Fatal(err)
	}
	if res := compile(Options{}); res.Modules[0].Commit != first || res.Resources[0].Attributes["content"] != "version one\n" {
		t.Fatalf("with the cache emptied, the module is at %s, want the locked %s", res.Modules[0].Commit, first)
	}
	res = compile(Options{UpdateModules: true})
	if got := res.Resources[0].Attributes["content"]; got != "version two\n" || res.Modules[0].Commit != second {
		t.Fatalf("--update-modules did not follow the tag: %q at %s, want %s", got, res.Modules[0].Commit, second)
	}
	// A commit id is a ref too, and the cache already holds this one.
	writeTree(t, project, map[string]string{"main.hcl": "module \"base\" {\n  source = \"" + "git::" + repo.URL() + "\"\n  ref = \"" + first + "\"\n}\nhost \"h\" {\n  apply \"base.motd\" {}\n}\n"})
	if got := compile(Options{}).Resources[0].Attributes["content"]; got != "version one\n" {
		t.Fatalf("module at commit %s: %q", first, got)
	}
	if left := cacheCheckouts(t, project); len(left) != 2 {
		t.Errorf("the cache holds %v, want the 2 commits' checkouts (no temporary one left)", left)
	}

	// Offline: the repository is gone, the cache answers.
	writeTree(t, project, map[string]string{"main.hcl": "module \"base\" {\n  source = \"" + "git::" + repo.URL() + "\"\n  ref = \"v1\"\n}\nhost \"h\" {\n  apply \"base.motd\" {}\n}\n"})
	if err := os.RemoveAll(repo.Dir); err != nil {
		t.Fatal(err)
	}
	if got := compile(Options{}).Resources[0].Attributes["content"]; got != "version two\n" {
		t.Fatalf("offline compile from the cache: %q", got)
	}
}

// A module that cannot be fetched is a diagnostic at its source that says
// what went wrong and what to do.
func TestGitModuleFetchErrors(t *testing.T) {
	repo := gittest.New(t)
	repo.Commit(map[string]string{"main.hcl": "application \"a\" {}\n", "b.txt": "b"})
	noGit(t)
	tests := []struct {
		name, source, ref string
		opts              Options
		want              []string
	}{
		{"unknown ref", "git::" + repo.URL(), "v9", Options{}, []string{`no branch, tag or commit "v9"`, "check the module's ref"}},
		{"short commit id", "git::" + repo.URL(), "abcdef1", Options{}, []string{"40 hex digits"}},
		{"missing repository", "git::file://" + filepath.Join(t.TempDir(), "gone"), "main", Options{}, []string{"repository unreachable", "check the URL"}},
		{"scheme", "git::ftp://example.com/m.git", "main", Options{}, []string{`scheme "ftp" is not https, http, ssh or file`, "git::https://host/repo.git"}},
		{"path without a scheme", "git::" + repo.Dir, "main", Options{}, []string{"file:///path/to/repo"}},
		{"option as ref", "git::" + repo.URL(), "--upload-pack=touch", Options{}, []string{"is not a branch, tag or commit id"}},
		{"over the file limit", "git::" + repo.URL(), "main", Options{MaxModuleFiles: 1}, []string{"more than 1 files", "Options.MaxModuleFiles"}},
		{"over the size limit", "git::" + repo.URL(), "main", Options{MaxModuleSize: 10}, []string{"more than 10 bytes", "Options.MaxModuleSize"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			project := t.TempDir()
			writeTree(t, project, map[string]string{"main.hcl": "module \"m\" {\n  source = \"" + tt.source + "\"\n  ref = \"" + tt.ref + "\"\n}\n"})
			_, err := Compile(t.Context(), project, tt.opts)
			var le *Error
			if !errors.As(err, &le) || len(le.Diagnostics) != 1 || le.Diagnostics[0].Summary != "Cannot fetch module" || le.Diagnostics[0].Start.Line != 2 {
				t.Fatalf("got %v, want one fetch diagnostic on line 2", err)
			}
			for _, want := range tt.want {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("diagnostic %q does not say %q", err, want)
				}
			}
			if left := cacheCheckouts(t, project); len(left) > 0 {
				t.Errorf("the cache holds %v after a failed fetch, want nothing", left)
			}
		})
	}
}

// cacheCheckouts lists what the module cache holds below its repositories'
// directories: checkouts, and temporary ones left behind.
func cacheCheckouts(t *testing.T, project string) []string {
	t.Helper()
	repos, _ := os.ReadDir(filepath.Join(project, ModuleCacheDir))
	var out []string
	for _, r := range repos {
		if !r.IsDir() {
			continue // lock.json
		}
		entries, err := os.ReadDir(filepath.Join(project, ModuleCacheDir, r.Name()))
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range entries {
			out = append(out, r.Name()+"/"+e.Name())
		}
	}
	return out
}

// A module cannot read files outside the project, even through its
// template paths.
func TestModuleConfinedToProject(t *testing.T) {
	project := t.TempDir()
	writeTree(t, project, map[string]string{
		"main.hcl":         "module \"m\" { source = \"./m\" }\nhost \"h\" {\n  apply \"m.a\" {}\n}\n",
		"m/main.hcl":       "application \"a\" {\n  file \"/x\" { content = file(\"../../secret\") }\n}\n",
		"m/ok.txt":         "ok",
		"../secret.unused": "",
	})
	_, err := Compile(t.Context(), project, Options{})
	if err == nil || !strings.Contains(err.Error(), "outside the model directory") {
		t.Fatalf("got %v, want a refusal to read outside the project", err)
	}
}

// Adding a model file to a module directory invalidates a cached compile.
func TestUnchangedSeesModuleFiles(t *testing.T) {
	project := t.TempDir()
	writeTree(t, project, map[string]string{
		"main.hcl":   "module \"m\" { source = \"./m\" }\nhost \"h\" {\n  apply \"m.a\" {}\n}\n",
		"m/main.hcl": "application \"a\" {\n  file \"/x\" { content = \"x\" }\n}\n",
	})
	res, err := Compile(t.Context(), project, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if !Unchanged(project, res.Inputs) {
		t.Fatal("untouched project reported changed")
	}
	writeTree(t, project, map[string]string{"m/more.hcl": "application \"b\" {}\n"})
	if Unchanged(project, res.Inputs) {
		t.Fatal("a model file added to a module went unnoticed")
	}
}

// A for_each that would expand past the resource bound ends with a
// diagnostic instead of exhausting memory.
func TestMaxResources(t *testing.T) {
	dir := t.TempDir()
	writeTree(t, dir, map[string]string{"main.hcl": "host \"h\" {\n  package \"p\" {\n    for_each = toset([for i in range(50) : \"p${i}\"])\n  }\n}\n"})
	_, err := Compile(t.Context(), dir, Options{MaxResources: 20})
	if err == nil || !strings.Contains(err.Error(), "more than the 20 resources") {
		t.Fatalf("got %v, want the resource bound", err)
	}
	res, err := Compile(t.Context(), dir, Options{})
	if err != nil || len(res.Resources) != 50 {
		t.Fatalf("unbounded compile: %v, %d resources", err, len(res.Resources))
	}
}

// The inventory changes the fingerprint: the same files against other
// facts compile differently.
func TestFingerprintCoversInventory(t *testing.T) {
	in := []Input{{Path: "main.hcl", SHA256: "x"}}
	a := Fingerprint(in, Options{Inventory: &model.Inventory{Agents: []model.InventoryAgent{{Name: "a"}}}}, "s")
	b := Fingerprint(in, Options{Inventory: &model.Inventory{Agents: []model.InventoryAgent{{Name: "b"}}}}, "s")
	if a == b || a == Fingerprint(in, Options{}, "s") {
		t.Fatal("the inventory does not change the fingerprint")
	}
	// Two equal inventories (facts of every JSON shape, maps built in
	// another order) give the same fingerprint: a compile cache hits.
	inv := func(order int) *model.Inventory {
		facts := map[string]any{}
		keys := []string{"ipv4", "cpus", "os", "interfaces"}
		vals := []any{"10.0.0.1", 2, map[string]any{"family": "debian"}, map[string]any{"eth0": map[string]any{"ipv4": []string{"10.0.0.1"}}}}
		for i := range keys {
			j := (i + order) % len(keys)
			facts[keys[j]] = vals[j]
		}
		return &model.Inventory{Agents: []model.InventoryAgent{{Name: "a", Labels: map[string]string{"role": "web"}, Facts: facts}}}
	}
	if Fingerprint(in, Options{Inventory: inv(0)}, "s") != Fingerprint(in, Options{Inventory: inv(3)}, "s") {
		t.Fatal("two equal inventories give different fingerprints")
	}
}
