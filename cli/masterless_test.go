package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tetherhq/tether/agent/facts"
)

// fleetModel is a model of several hosts: "local", "tether-test-db" (a
// name no machine running the tests has), and every host
// labelled role=web; local's file holds this machine's OS family, a fact.
const fleetModel = `
host "local" {
  file "/local.txt" {
    content = "family=${host.facts.os.family}\n"
  }
}

host "tether-test-db" {
  file "/db.txt" {
    content = "db\n"
  }
}

hostgroup "web" {
  match = host.labels.role == "web"
  file "/web.txt" {
    content = "web on ${host.name}\n"
  }
}
`

func writeModel(t *testing.T, src string) string {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "main.hcl"), []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

// files lists the files under root, relative, sorted.
func files(t *testing.T, root string) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			rel, _ := filepath.Rel(root, p)
			out = append(out, rel)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// tether deploy deploys one host of a fleet model, this machine's, with
// the facts gathered here: by default the host named like this machine,
// else local; --host picks another; --label puts this machine in the
// hostgroups that match it.
func TestDeployIsOneHost(t *testing.T) {
	dir := writeModel(t, fleetModel)
	family, _ := facts.Gather(t.Context())["os"].(map[string]any)["family"].(string)

	root := t.TempDir()
	r := deployJSON(t, 0, dir, "--root", root, "--state-dir", t.TempDir())
	if got := files(t, root); len(got) != 1 || got[0] != "local.txt" || r.Summary.Created != 1 {
		t.Fatalf("default host: files %v, summary %+v; want local.txt alone", got, r.Summary)
	}
	if b, _ := os.ReadFile(filepath.Join(root, "local.txt")); string(b) != "family="+family+"\n" {
		t.Fatalf("local.txt = %q, want this machine's os family %q", b, family)
	}

	root = t.TempDir()
	deployJSON(t, 0, dir, "--root", root, "--state-dir", t.TempDir(), "--host", "tether-test-db")
	if got := files(t, root); len(got) != 1 || got[0] != "db.txt" {
		t.Fatalf("--host tether-test-db: files %v, want db.txt alone", got)
	}

	root = t.TempDir()
	deployJSON(t, 0, dir, "--root", root, "--state-dir", t.TempDir(), "--host", "web-9", "--label", "role=web")
	b, err := os.ReadFile(filepath.Join(root, "web.txt"))
	if got := files(t, root); len(got) != 1 || err != nil || string(b) != "web on web-9\n" {
		t.Fatalf("--host web-9 --label role=web: files %v, web.txt %q (%v)", got, b, err)
	}

	// The cached compile is used again only for the same host and facts.
	state, root := t.TempDir(), t.TempDir()
	deployJSON(t, 0, dir, "--root", root, "--state-dir", state)
	if r := deployJSON(t, 0, dir, "--root", root, "--state-dir", state); r.Compiled {
		t.Fatal("an unchanged model on the same host was compiled again")
	}
	if r := deployJSON(t, 0, dir, "--root", root, "--state-dir", state, "--host", "tether-test-db"); !r.Compiled {
		t.Fatal("another host used the first host's cached compile")
	}
}

// A model with no host for this machine says which hosts it has and how
// to pick one; a dependency on another host's resource is refused.
func TestDeployNeedsAHostForThisMachine(t *testing.T) {
	dir := writeModel(t, `host "lamp-1" {
  file "/x" {
    content = "x"
  }
}
`)
	code, _, stderr := invoke(t, "deploy", dir, "--root", t.TempDir(), "--state-dir", t.TempDir())
	if code != exitUsage || !strings.Contains(stderr, "--host NAME") || !strings.Contains(stderr, "lamp-1") {
		t.Fatalf("no host for this machine: exit %d, stderr %q", code, stderr)
	}
	dir = writeModel(t, `host "local" {
  file "/a" {
    content  = "a"
    requires = ["file[tether-test-db,path=/b]"]
  }
}
host "tether-test-db" {
  file "/b" {
    content = "b"
  }
}
`)
	code, _, stderr = invoke(t, "deploy", dir, "--root", t.TempDir(), "--state-dir", t.TempDir())
	if code != exitUsage || !strings.Contains(stderr, "file[tether-test-db,path=/b]") || !strings.Contains(stderr, "server") {
		t.Fatalf("a dependency on another host: exit %d, stderr %q", code, stderr)
	}
	if code, _, stderr := invoke(t, "deploy", dir, "--label", "bad label=x"); code != exitUsage || !strings.Contains(stderr, "--label") {
		t.Fatalf("a bad label: exit %d, stderr %q", code, stderr)
	}
}
