package embedded

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/rs/zerolog"

	"github.com/tetherhq/tether/model/lang"
)

// A root that does not exist yet is created, with the parents the model
// counts on this machine having (here the test's temporary directory),
// and not the directory the model manages, which the deploy creates.
func TestRunCreatesTheSandboxRoot(t *testing.T) {
	machine := t.TempDir() // exists on this machine, unmanaged by the model
	site := filepath.Join(machine, "site")
	dir := t.TempDir()
	hcl := `host "local" {
  directory "site" {
    path = "` + site + `"
  }
  file "index" {
    path    = "` + site + `/index.html"
    content = "hi\n"
  }
  file "nowhere" {
    path    = "/nonexistent-tether-parent/file"
    content = "x\n"
  }
}
`
	if err := os.WriteFile(filepath.Join(dir, "main.hcl"), []byte(hcl), 0o644); err != nil {
		t.Fatal(err)
	}
	root := filepath.Join(t.TempDir(), "not", "yet")
	o := Options{Dir: dir, StateDir: filepath.Join(t.TempDir(), "state"), Root: root, Compiler: "test", Salt: "test"}
	ctx := context.Background()

	dry := o
	dry.DryRun = true
	res, err := lang.Compile(ctx, o.Dir, o.Compile)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Run(ctx, dry, Compiled(res), &recorder{}, zerolog.Nop()); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(root); !os.IsNotExist(err) {
		t.Fatalf("a dry run left the root behind: %v", err)
	}

	rep, err := Run(ctx, o, Compiled(res), &recorder{}, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	if rep.Summary.Created != 2 || rep.Summary.Failed != 1 {
		t.Fatalf("summary %+v, want 2 created and the file under a parent this machine lacks failed", rep.Summary)
	}
	if b, err := os.ReadFile(filepath.Join(root, site, "index.html")); err != nil || string(b) != "hi\n" {
		t.Fatalf("deployed file below the root: %q, %v", b, err)
	}
	if _, err := os.Stat(filepath.Join(root, "nonexistent-tether-parent")); !os.IsNotExist(err) {
		t.Errorf("a parent this machine lacks was created below the root: %v", err)
	}
}
