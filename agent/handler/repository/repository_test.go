package repository

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tetherhq/tether/agent/handler"
	"github.com/tetherhq/tether/agent/handler/handlertest"
	"github.com/tetherhq/tether/agent/target/ssh/sshtest"
	"github.com/tetherhq/tether/model"
)

const key = "-----BEGIN PGP PUBLIC KEY BLOCK-----\n\nmDMEZQAAABYJKwYBBAHaRw8BAQdA\n-----END PGP PUBLIC KEY BLOCK-----\n"

func res(name string, attrs model.Attributes) model.Resource {
	return handlertest.NamedResource(Kind, name, attrs)
}

func dirs(paths ...string) func(t *testing.T, root string) {
	return func(t *testing.T, root string) {
		for _, p := range paths {
			if err := os.MkdirAll(filepath.Join(root, p), 0o755); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// printURIs asks the real apt what it would fetch for the sources below
// root: proof that apt reads the rendered file as meant.
func printURIs(t *testing.T, root string) string {
	t.Helper()
	lists := filepath.Join(t.TempDir(), "lists")
	if err := os.MkdirAll(filepath.Join(lists, "partial"), 0o755); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("apt-get", "update", "--print-uris",
		"-o", "Dir::Etc::SourceList=/dev/null",
		"-o", "Dir::Etc::SourceParts="+filepath.Join(root, "etc/apt/sources.list.d"),
		"-o", "Dir::State::Lists="+lists).CombinedOutput()
	if err != nil {
		t.Fatalf("apt-get refused the source: %v\n%s", err, out)
	}
	return string(out)
}

func TestConformanceApt(t *testing.T) {
	handlertest.NeedCommands(t, "apt-get")
	handlertest.Run(t, handlertest.Suite{
		New: func(rt handler.Runtime) handler.Handler { return New(rt) },
		// The local host, and this machine reached over SSH (agentless).
		Targets: sshtest.Targets(t),
		Cases: []handlertest.Case{
			{
				Name:  "signed source, then other components, then disabled",
				Setup: dirs("etc/apt/sources.list.d"),
				Resource: res("vendor", model.Attributes{"provider": "apt", "url": "https://deb.example.com/debian",
					"suite": "bookworm", "key": key}),
				Update: new(res("vendor", model.Attributes{"provider": "apt", "url": "https://deb.example.com/debian",
					"suite": "bookworm", "components": []any{"main", "contrib"}, "key": key, "enabled": false})),
				Check: func(t *testing.T, root string, r *model.Resource) {
					src, err := os.ReadFile(filepath.Join(root, "etc/apt/sources.list.d/vendor.sources"))
					if err != nil {
						t.Fatal(err)
					}
					if !strings.Contains(string(src), "Signed-By: /etc/apt/keyrings/vendor.asc\n") {
						t.Fatalf("source without its key:\n%s", src)
					}
					if k, _ := os.ReadFile(filepath.Join(root, "etc/apt/keyrings/vendor.asc")); string(k) != key {
						t.Fatalf("key file holds %q", k)
					}
					uris := printURIs(t, root)
					if r.Attributes["enabled"] == false {
						if strings.Contains(uris, "example.com") {
							t.Fatalf("apt still uses the disabled source:\n%s", uris)
						}
						return
					}
					if !strings.Contains(uris, "'https://deb.example.com/debian/dists/bookworm/InRelease'") ||
						!strings.Contains(uris, "/dists/bookworm/main/binary-") {
						t.Fatalf("apt would fetch:\n%s", uris)
					}
				},
			},
			{
				Name:     "flat repository",
				Setup:    dirs("etc/apt/sources.list.d"),
				Resource: res("flat", model.Attributes{"provider": "apt", "url": "file:///srv/repo", "suite": "./"}),
				Check: func(t *testing.T, root string, _ *model.Resource) {
					if uris := printURIs(t, root); !strings.Contains(uris, "file:/srv/repo/") && !strings.Contains(uris, "file:///srv/repo/") {
						t.Fatalf("apt would fetch:\n%s", uris)
					}
				},
			},
		},
		Invalid: []handlertest.Invalid{
			{Name: "apt without suite", Resource: res("x", model.Attributes{"provider": "apt", "url": "https://x"})},
			{Name: "no url", Resource: res("x", model.Attributes{"provider": "apt", "suite": "bookworm"})},
			{Name: "bad url", Resource: res("x", model.Attributes{"provider": "apt", "url": "deb.example.com", "suite": "x"})},
			{Name: "apk", Resource: res("x", model.Attributes{"provider": "apk", "url": "https://x"})},
		},
	})
}

// dnf is not on this machine: the file is checked for what dnf reads, not
// by dnf itself. The host is said to be a dnf host, as its facts would say
// (a purged resource names no provider).
func TestConformanceDnf(t *testing.T) {
	handlertest.Run(t, handlertest.Suite{
		New: func(rt handler.Runtime) handler.Handler {
			rt.PackageManager = "dnf"
			return New(rt)
		},
		Cases: []handlertest.Case{{
			Name:     "repo file with its key",
			Setup:    dirs("etc/yum.repos.d"),
			Resource: res("vendor", model.Attributes{"provider": "dnf", "url": "https://rpm.example.com/el9", "key": key}),
			Update:   new(res("vendor", model.Attributes{"provider": "dnf", "url": "https://rpm.example.com/el9", "key": key, "enabled": false})),
			Check: func(t *testing.T, root string, r *model.Resource) {
				b, err := os.ReadFile(filepath.Join(root, "etc/yum.repos.d/vendor.repo"))
				if err != nil {
					t.Fatal(err)
				}
				want := "[vendor]\nname=vendor\nbaseurl=https://rpm.example.com/el9\nenabled=1\ngpgcheck=1\ngpgkey=file:///etc/pki/rpm-gpg/RPM-GPG-KEY-vendor\n"
				if r.Attributes["enabled"] == false {
					want = strings.Replace(want, "enabled=1", "enabled=0", 1)
				}
				if !strings.HasSuffix(string(b), want) {
					t.Fatalf("repo file:\n%s\nwant it to end with:\n%s", b, want)
				}
			},
		}},
	})
}

// A hand edit is read back as the attribute it changed.
func TestReadNamesTheDrift(t *testing.T) {
	root := t.TempDir()
	dirs("etc/apt/sources.list.d")(t, root)
	h := New(handler.Runtime{Root: root})
	r := res("v", model.Attributes{"provider": "apt", "url": "https://a.example.com", "suite": "stable"})
	if err := os.WriteFile(filepath.Join(root, "etc/apt/sources.list.d/v.sources"), []byte("Types: deb\nURIs: https://evil.example.com\nSuites: stable\nComponents: main\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cur, exists, err := h.Read(t.Context(), &r)
	if err != nil || !exists {
		t.Fatal(exists, err)
	}
	ch := handler.ComputeChanges(&r, cur, exists)
	if len(ch) != 1 || ch["url"].Current != "https://evil.example.com" {
		t.Fatalf("changes %v, want the url only", ch)
	}
}
