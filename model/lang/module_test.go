package lang

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tetherhq/tether/model"
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

func runGit(t *testing.T, dir string, args ...string) string {
	t.Helper()
	cmd := exec.Command("git", append([]string{"-C", dir}, args...)...)
	cmd.Env = append(os.Environ(), "GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@example", "GIT_COMMITTER_NAME=t", "GIT_COMMITTER_EMAIL=t@example")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("git %v: %v\n%s", args, err, out)
	}
	return strings.TrimSpace(string(out))
}

// A git module is fetched at its ref into the module cache, the commit is
// recorded in the result, later compiles use the cache (even with the
// repository gone), and --update-modules follows a moved tag.
func TestGitModule(t *testing.T) {
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("git is not installed: git modules cannot be tested")
	}
	repo := t.TempDir()
	runGit(t, repo, "init", "--quiet", "-b", "main")
	writeTree(t, repo, map[string]string{
		"main.hcl":  "application \"motd\" {\n  file \"/etc/motd\" { content = templatefile(\"motd.tmpl\", {}) }\n}\n",
		"motd.tmpl": "version one\n",
	})
	runGit(t, repo, "add", ".")
	runGit(t, repo, "commit", "--quiet", "-m", "one")
	runGit(t, repo, "tag", "v1")
	first := runGit(t, repo, "rev-parse", "HEAD")

	project := t.TempDir()
	writeTree(t, project, map[string]string{"main.hcl": "module \"base\" {\n  source = \"git::file://" + repo + "\"\n  ref = \"v1\"\n}\nhost \"h\" {\n  apply \"base.motd\" {}\n}\n"})
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

	// Move the tag: the cache keeps the compile repeatable until asked.
	writeTree(t, repo, map[string]string{"motd.tmpl": "version two\n"})
	runGit(t, repo, "commit", "--quiet", "-am", "two")
	runGit(t, repo, "tag", "-f", "v1")
	if got := compile(Options{}).Resources[0].Attributes["content"]; got != "version one\n" {
		t.Fatalf("a cached ref moved without --update-modules: %q", got)
	}
	res = compile(Options{UpdateModules: true})
	if got := res.Resources[0].Attributes["content"]; got != "version two\n" || res.Modules[0].Commit == first {
		t.Fatalf("--update-modules did not follow the tag: %q at %s", got, res.Modules[0].Commit)
	}

	// Offline: the repository is gone, the cache answers.
	if err := os.RemoveAll(repo); err != nil {
		t.Fatal(err)
	}
	if got := compile(Options{}).Resources[0].Attributes["content"]; got != "version two\n" {
		t.Fatalf("offline compile from the cache: %q", got)
	}
	// A ref that does not exist is a diagnostic at the source.
	writeTree(t, project, map[string]string{"main.hcl": "module \"base\" {\n  source = \"git::file://" + repo + "\"\n  ref = \"v9\"\n}\n"})
	_, err := Compile(t.Context(), project, Options{})
	var le *Error
	if !errors.As(err, &le) || !strings.Contains(err.Error(), "Cannot fetch module") || le.Diagnostics[0].Start.Line != 2 {
		t.Fatalf("got %v, want a fetch diagnostic on line 2", err)
	}
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
