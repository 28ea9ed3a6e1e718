package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	ucli "github.com/urfave/cli/v2"

	"github.com/tetherhq/tether/agent/handler/handlertest"
	"github.com/tetherhq/tether/bus"
	"github.com/tetherhq/tether/model"
	"github.com/tetherhq/tether/model/lang"
	"github.com/tetherhq/tether/server/store/sqlite"
)

// invoke runs the tether command line in-process.
func invoke(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errb bytes.Buffer
	code = run(context.Background(), append([]string{"tether"}, args...), strings.NewReader(""), &out, &errb)
	return code, out.String(), errb.String()
}

// quickstart copies the model files of examples/quickstart (not its
// embedded state) to a temporary directory, so the repository stays clean,
// and returns it with a sandbox root holding the /tmp the site goes to.
func quickstart(t *testing.T) (dir, root string) {
	t.Helper()
	dir = filepath.Join(t.TempDir(), "quickstart")
	src := "../examples/quickstart"
	err := filepath.WalkDir(src, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		if d.IsDir() && d.Name() == ".tether" {
			return filepath.SkipDir
		}
		if d.IsDir() {
			return os.MkdirAll(filepath.Join(dir, rel), 0o755)
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(dir, rel), b, 0o644)
	})
	if err != nil {
		t.Fatal(err)
	}
	root = t.TempDir()
	if err := os.Mkdir(filepath.Join(root, "tmp"), 0o755); err != nil {
		t.Fatal(err)
	}
	return dir, root
}

func deployJSON(t *testing.T, wantCode int, args ...string) deployReport {
	t.Helper()
	code, out, errs := invoke(t, append([]string{"deploy", "-o", "json"}, args...)...)
	if code != wantCode {
		t.Fatalf("tether deploy %v: exit %d, want %d\nstdout: %s\nstderr: %s", args, code, wantCode, out, errs)
	}
	var r deployReport
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatalf("deploy -o json printed no JSON: %v\n%s", err, out)
	}
	return r
}

func TestQuickstartLifecycle(t *testing.T) {
	dir, root := quickstart(t)
	site := filepath.Join(root, "tmp", "tether-quickstart")

	first := deployJSON(t, 0, dir, "--root", root)
	if first.Summary.Created != 7 || first.Summary.Failed != 0 || !first.NewVersion || first.Version != 1 {
		t.Fatalf("first deploy: %+v", first.Summary)
	}
	index, err := os.ReadFile(filepath.Join(site, "index.html"))
	if err != nil || !strings.Contains(string(index), "<h1>Hello from Tether</h1>") {
		t.Fatalf("index.html: %v\n%s", err, index)
	}
	if _, err := os.Stat(filepath.Join(dir, ".tether", "deploy", "tether.db")); err != nil {
		t.Fatalf("embedded store not under the model directory: %v", err)
	}

	second := deployJSON(t, 0, dir, "--root", root)
	if s := second.Summary; s.Unchanged != 7 || s.Created+s.Changed+s.Removed != 0 || second.NewVersion {
		t.Fatalf("second deploy: %+v (new version %v), want 7 unchanged", s, second.NewVersion)
	}

	// Edit one managed file and delete another: exactly those are repaired.
	if err := os.WriteFile(filepath.Join(site, "about.html"), []byte("defaced"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(site, "robots.txt")); err != nil {
		t.Fatal(err)
	}
	third := deployJSON(t, 0, dir, "--root", root)
	if s := third.Summary; s.Changed != 1 || s.Created != 1 || s.Unchanged != 5 {
		t.Fatalf("repair: %+v, want 1 changed, 1 created, 5 unchanged", s)
	}
	for _, r := range third.Results {
		switch {
		case strings.HasSuffix(r.ID.Value, "about.html"):
			if !r.Changed() || r.Changes["content"].Current != "defaced" {
				t.Fatalf("about.html result %+v", r)
			}
		case strings.HasSuffix(r.ID.Value, "robots.txt"):
			if !r.Changes.Created() {
				t.Fatalf("robots.txt result %+v", r)
			}
		default:
			if r.Changed() {
				t.Fatalf("%s changed although untouched", r.ID)
			}
		}
	}

	// A variable changes the model: a new version.
	other := deployJSON(t, 0, dir, "--root", root, "--var", "site_title=Changed")
	if !other.NewVersion || other.Version != 2 || other.Summary.Changed != 3 {
		t.Fatalf("after --var: version %d new %v %+v, want version 2 with 3 changed pages", other.Version, other.NewVersion, other.Summary)
	}
}

func TestDeployTableOutput(t *testing.T) {
	dir, root := quickstart(t)
	code, out, errs := invoke(t, "deploy", dir, "--root", root)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	for _, want := range []string{"OUTCOME", "created", "AGENT", "local", "7 resources deployed", "7 created", "0 failed"} {
		if !strings.Contains(out, want) {
			t.Fatalf("table output lacks %q:\n%s", want, out)
		}
	}
	code, out, _ = invoke(t, "deploy", dir, "--root", root, "--dry-run")
	if code != 0 || !strings.Contains(out, "dry run, nothing changed") || !strings.Contains(out, "7 unchanged") {
		t.Fatalf("dry run: exit %d\n%s", code, out)
	}
}

func TestDryRunWritesNothing(t *testing.T) {
	dir, root := quickstart(t)
	r := deployJSON(t, 0, dir, "--root", root, "--dry-run")
	if !r.DryRun || r.Summary.Created != 7 {
		t.Fatalf("dry run report %+v", r.Summary)
	}
	entries, _ := os.ReadDir(filepath.Join(root, "tmp"))
	if len(entries) != 0 {
		t.Fatalf("dry run wrote %d entries below the root", len(entries))
	}
}

// TestBadModels: every broken model exits 2 with file:line:column and
// deploys nothing.
func TestBadModels(t *testing.T) {
	tests := map[string]struct {
		src  string
		want []string
	}{
		"syntax error": {
			"host \"local\" {\n  file \"/x\" {\n    content = \"x\n  }\n}\n",
			[]string{"main.hcl:3:17: error: Invalid multi-line string"},
		},
		"unknown attribute": {
			"host \"local\" {\n  file \"/x\" {\n    content = \"x\"\n    colour  = \"red\"\n  }\n}\n",
			[]string{"main.hcl:4:5: error: Unsupported argument", "colour"},
		},
		"missing reference": {
			"host \"local\" {\n  file \"/x\" {\n    content  = \"x\"\n    requires = [directory[\"/nope\"]]\n  }\n}\n",
			[]string{"main.hcl:4:17: error: Reference to undeclared resource", `directory titled "/nope"`},
		},
		"requires cycle": {
			"host \"local\" {\n  file \"/a\" {\n    content  = \"a\"\n    requires = [file[\"/b\"]]\n  }\n  file \"/b\" {\n    content  = \"b\"\n    requires = [file[\"/a\"]]\n  }\n}\n",
			[]string{"main.hcl:2:3: error: Requirement cycle", "file[local,path=/a] -> file[local,path=/b] -> file[local,path=/a]"},
		},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			if err := os.WriteFile(filepath.Join(dir, "main.hcl"), []byte(tt.src), 0o644); err != nil {
				t.Fatal(err)
			}
			root := t.TempDir()
			code, _, errs := invoke(t, "deploy", dir, "--root", root)
			if code != exitUsage {
				t.Fatalf("exit %d, want %d\n%s", code, exitUsage, errs)
			}
			for _, want := range append(tt.want, "nothing was deployed") {
				if !strings.Contains(errs, want) {
					t.Fatalf("stderr lacks %q:\n%s", want, errs)
				}
			}
			if entries, _ := os.ReadDir(root); len(entries) != 0 {
				t.Fatal("a broken model deployed something")
			}
			if _, err := os.Stat(filepath.Join(dir, ".tether")); !os.IsNotExist(err) {
				t.Fatal("a broken model created the embedded store")
			}
		})
	}
}

// TestUnwritableFile: a file the agent may not write fails with the OS
// error and exit status 1; its dependant is skipped; the rest is deployed.
func TestUnwritableFile(t *testing.T) {
	root := t.TempDir()
	if err := os.MkdirAll(filepath.Join(root, "locked"), 0o755); err != nil {
		t.Fatal(err)
	}
	how := handlertest.MakeUnwritable(t, filepath.Join(root, "locked"))
	dir := t.TempDir()
	src := `host "local" {
  directory "/site" {}
  file "/site/index.html" { content = "ok" }
  file "/locked/secret" { content = "no" }
  file "/site/after" {
    content  = "waits for the locked file"
    requires = [file["/locked/secret"]]
  }
}
`
	if err := os.WriteFile(filepath.Join(dir, "main.hcl"), []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	r := deployJSON(t, exitFailed, dir, "--root", root)
	states := map[string]model.Result{}
	for _, res := range r.Results {
		states[res.ID.Value] = res
	}
	if s := states["/locked/secret"]; s.State != model.StateFailed || !strings.Contains(s.Message, how.WantErr) {
		t.Fatalf("locked file (%s): %s %q, want failed with %q", how.How, s.State, s.Message, how.WantErr)
	}
	if s := states["/site/after"]; s.State != model.StateSkipped || !strings.Contains(s.Message, "file[local,path=/locked/secret] failed") {
		t.Fatalf("dependant: %s %q", s.State, s.Message)
	}
	for _, p := range []string{"/site", "/site/index.html"} {
		if states[p].State != model.StateDeployed {
			t.Fatalf("%s: %s, want deployed", p, states[p].State)
		}
	}
	if r.Summary.Failed != 1 || r.Summary.Skipped != 1 || r.Summary.Created != 2 {
		t.Fatalf("summary %+v", r.Summary)
	}
	// The table says it too, and exits 1.
	code, out, _ := invoke(t, "deploy", dir, "--root", root)
	if code != exitFailed || !strings.Contains(out, "1 failed") || !strings.Contains(out, how.WantErr) ||
		!strings.Contains(out, "2 of 4 resources deployed") {
		t.Fatalf("exit %d\n%s", code, out)
	}
}

func TestCorruptStore(t *testing.T) {
	dir, root := quickstart(t)
	state := t.TempDir()
	db := filepath.Join(state, "tether.db")
	if err := os.WriteFile(db, bytes.Repeat([]byte("garbage!"), 1000), 0o600); err != nil {
		t.Fatal(err)
	}
	code, _, errs := invoke(t, "deploy", dir, "--root", root, "--state-dir", state)
	if code != exitFailed {
		t.Fatalf("exit %d, want 1", code)
	}
	for _, want := range []string{db, "damaged or not a Tether store", "move it aside or delete it"} {
		if !strings.Contains(errs, want) {
			t.Fatalf("stderr lacks %q:\n%s", want, errs)
		}
	}
}

func TestLockedStore(t *testing.T) {
	dir, root := quickstart(t)
	state := t.TempDir()
	held, err := sqlite.Open(context.Background(), filepath.Join(state, "tether.db"), sqlite.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	code, _, errs := invoke(t, "deploy", dir, "--root", root, "--state-dir", state)
	if code != exitFailed || !strings.Contains(errs, "in use by another tether process") || !strings.Contains(errs, "wait for it to finish") {
		t.Fatalf("exit %d\n%s", code, errs)
	}
}

func TestCompile(t *testing.T) {
	code, out, errs := invoke(t, "compile", "../examples/quickstart", "-o", "json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	var res struct {
		Resources []model.Resource `json:"resources"`
		Hosts     []lang.Host      `json:"hosts"`
	}
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatal(err)
	}
	if len(res.Resources) != 7 || len(res.Hosts) != 1 || res.Hosts[0].Name != "local" || res.Hosts[0].Resources != 7 {
		t.Fatalf("compiled %d resources for %v", len(res.Resources), res.Hosts)
	}
	if err := model.ValidateSet(res.Resources); err != nil {
		t.Fatalf("compile -o json is not a valid resource set: %v", err)
	}
	if !strings.Contains(out, "<!doctype html>") {
		t.Fatal("JSON output escapes HTML")
	}
	code, out, _ = invoke(t, "compile", "../examples/quickstart", "--var", "site_root=/srv/www")
	if code != 0 || !strings.Contains(out, "file[/srv/www/index.html]") || !strings.Contains(out, "7 resources for 1 host") {
		t.Fatalf("table: exit %d\n%s", code, out)
	}
	t.Setenv("TETHER_VAR_site_root", "/from/env")
	_, out, _ = invoke(t, "compile", "../examples/quickstart")
	if !strings.Contains(out, "/from/env/index.html") {
		t.Fatalf("TETHER_VAR_ ignored:\n%s", out)
	}
}

func TestUsageErrors(t *testing.T) {
	for name, args := range map[string][]string{
		"unknown flag":                        {"deploy", "--bogus"},
		"bad output":                          {"compile", "../examples/quickstart", "-o", "yaml"},
		"var without =":                       {"compile", "../examples/quickstart", "--var", "site_root"},
		"two directories":                     {"compile", "a", "b"},
		"undeclared var":                      {"compile", "../examples/quickstart", "--var", "nope=1"},
		"no model":                            {"compile", "/nonexistent-model-dir"},
		"bad log level":                       {"--log-level", "loud", "deploy", "../examples/quickstart"},
		"parallel zero":                       {"deploy", "../examples/quickstart", "--parallel", "0"},
		"unknown command":                     {"bogus"},
		"unknown subcommand":                  {"agent", "bogus"},
		"unknown nested command":              {"agent", "token", "bogus"},
		"unknown command after a global flag": {"--log-level", "info", "bogus"},
	} {
		t.Run(name, func(t *testing.T) {
			code, _, errs := invoke(t, args...)
			if code != exitUsage {
				t.Fatalf("exit %d, want %d\n%s", code, exitUsage, errs)
			}
			if !strings.HasPrefix(errs, "tether: ") && !strings.Contains(errs, "error:") {
				t.Fatalf("no clear error message:\n%s", errs)
			}
		})
	}
}

// Usage errors name the full path of the command they concern.
func TestUsageHintsNameTheCommand(t *testing.T) {
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"--bogus"}, "see 'tether --help'"},
		{[]string{"deploy", "--bogus"}, "see 'tether deploy --help'"},
		{[]string{"resource", "list", "--bogus"}, "see 'tether resource list --help'"},
		{[]string{"agent", "token", "create", "--bogus"}, "see 'tether agent token create --help'"},
		{[]string{"agent", "token", "bogus"}, "see 'tether agent token --help'"},
		{[]string{"env", "create"}, "tether env create takes 1 argument(s)"},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			code, _, errs := invoke(t, tt.args...)
			if code != exitUsage || !strings.Contains(errs, tt.want) || strings.Contains(errs, "tether tether") {
				t.Fatalf("exit %d, want %d and %q:\n%s", code, exitUsage, tt.want, errs)
			}
		})
	}
}

func TestVersion(t *testing.T) {
	code, out, _ := invoke(t, "version", "-o", "json")
	var bi struct {
		buildInfo
		Protocol string `json:"protocol"`
	}
	if code != 0 || json.Unmarshal([]byte(out), &bi) != nil || bi.Version == "" || bi.Go == "" || bi.Platform == "" || bi.Protocol != bus.Protocol {
		t.Fatalf("version -o json: exit %d %q", code, out)
	}
	code, out, _ = invoke(t, "version")
	if code != 0 || !strings.HasPrefix(out, "tether ") {
		t.Fatalf("version: exit %d %q", code, out)
	}
}

// commandPaths lists every command of the command line, nested ones
// included, as the words that name it: ["agent", "token", "create"].
func commandPaths() [][]string {
	var paths [][]string
	var walk func(prefix []string, cmds []*ucli.Command)
	walk = func(prefix []string, cmds []*ucli.Command) {
		for _, c := range cmds {
			p := append(append([]string{}, prefix...), c.Name)
			paths = append(paths, p)
			walk(p, c.Subcommands)
		}
	}
	walk(nil, newApp(&terminal{}).Commands)
	return paths
}

// Every command, nested ones too, has --help and `tether help CMD...`, and
// both name the command's full path.
func TestHelpForEveryCommand(t *testing.T) {
	paths := commandPaths()
	if len(paths) < 30 {
		t.Fatalf("%d commands found, want the whole tree", len(paths))
	}
	for _, p := range paths {
		name := "tether " + strings.Join(p, " ")
		for _, args := range [][]string{append(append([]string{}, p...), "--help"), append([]string{"help"}, p...)} {
			code, out, errs := invoke(t, args...)
			if code != 0 || !strings.Contains(out, "USAGE:") || !strings.Contains(out, name) {
				t.Fatalf("tether %s: exit %d, want 0 and the help of %s\nstdout: %s\nstderr: %s", strings.Join(args, " "), code, name, out, errs)
			}
		}
	}
	code, out, _ := invoke(t, "help")
	if code != 0 || !strings.Contains(out, "COMMANDS:") {
		t.Fatalf("tether help: exit %d\n%s", code, out)
	}
	for _, args := range [][]string{{"help", "bogus"}, {"help", "agent", "bogus"}} {
		code, _, errs := invoke(t, args...)
		if code != exitUsage || !strings.Contains(errs, `no command "bogus"`) {
			t.Fatalf("tether %s: exit %d, want %d and no such command:\n%s", strings.Join(args, " "), code, exitUsage, errs)
		}
	}
}

func TestReorderFlags(t *testing.T) {
	app := newApp(&terminal{})
	tests := []struct{ in, want string }{
		{"tether deploy dir --dry-run", "tether deploy --dry-run dir"},
		{"tether deploy dir -o json --var a=b", "tether deploy -o json --var a=b dir"},
		{"tether deploy dir --var=a=b", "tether deploy --var=a=b dir"},
		{"tether --log-level debug deploy dir --root /r", "tether --log-level debug deploy --root /r dir"},
		{"tether deploy -- --weird-dir", "tether deploy -- --weird-dir"},
		{"tether deploy dir --log-level debug -o json", "tether --log-level debug deploy -o json dir"},
		{"tether compile", "tether compile"},
		{"tether bench deploy --files 10", "tether bench deploy --files 10"},
		{"tether bench deploy x --runs 2 --log-level info", "tether --log-level info bench deploy --runs 2 x"},
		// A boolean flag a configuration file may set (altsrc) takes no
		// value: the flag after it keeps its own.
		{"tether server --allow-file-sources --listen a:1 --no-compile --amqp u", "tether server --allow-file-sources --listen a:1 --no-compile --amqp u"},
	}
	for _, tt := range tests {
		if got := strings.Join(reorderFlags(app, strings.Fields(tt.in)), " "); got != tt.want {
			t.Errorf("reorderFlags(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

func TestCompileCache(t *testing.T) {
	dir, root := quickstart(t)
	state := t.TempDir()
	deploy := func(extra ...string) deployReport {
		t.Helper()
		return deployJSON(t, 0, append([]string{dir, "--root", root, "--state-dir", state}, extra...)...)
	}
	if r := deploy(); !r.Compiled || r.Version != 1 {
		t.Fatalf("first deploy: compiled %v version %d", r.Compiled, r.Version)
	}
	if r := deploy(); r.Compiled || r.Version != 1 || r.Summary.Unchanged != 7 {
		t.Fatalf("unchanged model: compiled %v version %d %+v, want the cached version 1", r.Compiled, r.Version, r.Summary)
	}
	if r := deploy("--recompile"); !r.Compiled || r.NewVersion {
		t.Fatalf("--recompile: compiled %v new version %v", r.Compiled, r.NewVersion)
	}
	// Editing a template the model reads invalidates the cache.
	tmpl := filepath.Join(dir, "templates", "page.html.tmpl")
	b, _ := os.ReadFile(tmpl)
	if err := os.WriteFile(tmpl, append(b, []byte("<!-- edited -->\n")...), 0o644); err != nil {
		t.Fatal(err)
	}
	if r := deploy(); !r.Compiled || !r.NewVersion || r.Summary.Changed != 2 {
		t.Fatalf("edited template: compiled %v new %v %+v, want 2 pages changed", r.Compiled, r.NewVersion, r.Summary)
	}
	// So does another variable value.
	if r := deploy("--var", "site_title=Other"); !r.Compiled || !r.NewVersion {
		t.Fatalf("new --var: compiled %v new %v", r.Compiled, r.NewVersion)
	}
	// A cache naming a version the store no longer has is not trusted.
	for _, f := range []string{"tether.db", "tether.db-wal", "tether.db-shm"} {
		os.Remove(filepath.Join(state, f))
	}
	if r := deploy("--var", "site_title=Other"); !r.Compiled || r.Version != 1 {
		t.Fatalf("store gone: compiled %v version %d, want a fresh compile as version 1", r.Compiled, r.Version)
	}
}

// compile --inventory selects agents by label and names the facts a
// resource waits for; a broken inventory is a usage error.
func TestCompileWithInventory(t *testing.T) {
	code, out, errs := invoke(t, "compile", "../examples/webfarm", "--inventory", "../examples/webfarm/inventory.json", "-o", "json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	var res lang.Result
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatal(err)
	}
	missing := map[string][]string{}
	for _, h := range res.Hosts {
		missing[h.Name] = h.MissingFacts
	}
	if strings.Join(missing["web-3"], ",") != "ipv4" || len(missing["web-1"]) != 0 {
		t.Fatalf("missing facts %v, want web-3 lacking ipv4 only", missing)
	}
	if len(res.Undefined) != 1 || res.Undefined[0].ID != "file[lb-1,path=/etc/haproxy/haproxy.cfg]" {
		t.Fatalf("undefined %+v", res.Undefined)
	}
	code, out, _ = invoke(t, "compile", "../examples/webfarm", "--inventory", "../examples/webfarm/inventory.json")
	if code != 0 || !strings.Contains(out, "web-3: ipv4") || !strings.Contains(out, "1 undefined") {
		t.Fatalf("table output lacks the missing facts (exit %d):\n%s", code, out)
	}
	bad := filepath.Join(t.TempDir(), "inv.json")
	if err := os.WriteFile(bad, []byte(`{"agents": [{"name": "a"}, {"name": "a"}]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	code, _, errs = invoke(t, "compile", "../examples/webfarm", "--inventory", bad)
	if code != exitUsage || !strings.Contains(errs, `agent "a" is listed twice`) {
		t.Fatalf("exit %d: %s", code, errs)
	}
}

// A project keeps its config in .tether.toml and its state in .tether/:
// both live in one directory, and tether deploy works there. A config file
// under its old name, .tether, is refused with the command that renames it.
func TestProjectConfigBesideState(t *testing.T) {
	t.Setenv("TETHER_SERVER", "")
	t.Setenv("TETHER_TOKEN", "")
	t.Setenv("TETHER_ENV", "")
	dir, root := quickstart(t)
	old, oldRoot := quickstart(t)
	config := "server = \"http://127.0.0.1:1\"\nenv = \"prod\"\ntoken = \"tether_test\"\n"
	if err := os.WriteFile(filepath.Join(dir, ".tether.toml"), []byte(config), 0o600); err != nil {
		t.Fatal(err)
	}
	if r := deployJSON(t, 0, dir, "--root", root); r.Summary.Created != 7 {
		t.Fatalf("deploy beside .tether.toml: %+v", r.Summary)
	}
	t.Chdir(dir)
	if code, _, errs := invoke(t, "env", "show"); code != 1 || !strings.Contains(errs, "http://127.0.0.1:1") {
		t.Fatalf("env show beside .tether.toml: exit %d, want 1 naming the server .tether.toml names:\n%s", code, errs)
	}

	if err := os.WriteFile(filepath.Join(old, ".tether"), []byte(config), 0o600); err != nil {
		t.Fatal(err)
	}
	want := "mv " + filepath.Join(old, ".tether") + " " + filepath.Join(old, ".tether.toml")
	if code, _, errs := invoke(t, "deploy", old, "--root", oldRoot); code != exitUsage || !strings.Contains(errs, want) {
		t.Fatalf("deploy beside an old .tether file: exit %d, want %d and %q:\n%s", code, exitUsage, want, errs)
	}
	t.Chdir(old)
	if code, _, errs := invoke(t, "env", "show"); code != exitUsage || !strings.Contains(errs, "mv ") {
		t.Fatalf("env show beside an old .tether file: exit %d, want %d and how to rename it:\n%s", code, exitUsage, errs)
	}
}

// tether completion prints scripts generated from the command tree; the
// bash one, run in bash, completes nested commands and their flags.
func TestCompletionAndMan(t *testing.T) {
	scripts := map[string]string{}
	for _, shell := range []string{"bash", "zsh", "fish"} {
		code, out, errs := invoke(t, "completion", shell)
		if code != 0 || !strings.Contains(out, "tether") || !strings.Contains(out, "accept") {
			t.Fatalf("completion %s: exit %d\n%s%s", shell, code, out, errs)
		}
		scripts[shell] = filepath.Join(t.TempDir(), "tether."+shell)
		if err := os.WriteFile(scripts[shell], []byte(out), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if code, _, errs := invoke(t, "completion", "powershell"); code != exitUsage {
		t.Fatalf("completion powershell: exit %d, want %d\n%s", code, exitUsage, errs)
	}

	bash, err := exec.LookPath("bash")
	if err != nil {
		t.Skip("no bash on this machine: the completion scripts were not run")
	}
	for _, tt := range []struct {
		words []string
		want  string
	}{
		{[]string{"tether", "dep"}, "deploy"},
		{[]string{"tether", "agent", "acc"}, "accept"},
		{[]string{"tether", "agent", "token", "rev"}, "revoke"},
		{[]string{"tether", "resource", "list", "--sta"}, "--state"},
		{[]string{"tether", "agent", "accept", "--all"}, "--all-pending"},
	} {
		prog := fmt.Sprintf(`source %q; COMP_WORDS=(%s); COMP_CWORD=%d; _tether; echo "${COMPREPLY[*]}"`,
			scripts["bash"], strings.Join(tt.words, " "), len(tt.words)-1)
		out, err := exec.Command(bash, "-c", prog).CombinedOutput()
		if err != nil || strings.TrimSpace(string(out)) != tt.want {
			t.Fatalf("bash completion of %q: %v %q, want %q", strings.Join(tt.words, " "), err, out, tt.want)
		}
	}
	for _, shell := range []string{"zsh", "fish"} {
		if path, err := exec.LookPath(shell); err == nil {
			if out, err := exec.Command(path, "-n", scripts[shell]).CombinedOutput(); err != nil {
				t.Fatalf("%s -n of the %s completion: %v\n%s", shell, shell, err, out)
			}
		} else {
			t.Logf("no %s on this machine: its completion script was not checked for syntax", shell)
		}
	}

	code, out, errs := invoke(t, "man")
	if code != 0 || !strings.Contains(out, ".TH") || !strings.Contains(out, "accept") || !strings.Contains(out, "--all-pending") {
		t.Fatalf("man: exit %d\n%.500s%s", code, out, errs)
	}
}

// TestDeployUndefinedExitsFailed: a resource that waits for a fact this
// host does not report is not deployed, and the run says so and exits 1
// (a script must not take it for a converged host); the rest is deployed.
func TestDeployUndefinedExitsFailed(t *testing.T) {
	root := t.TempDir()
	dir := t.TempDir()
	src := `host "local" {
  file "/ok" { content = "ok" }
  file "/waits" { content = host.facts.no_such_fact_here }
  file "/after" {
    content  = "after"
    requires = [file["/waits"]]
  }
}
`
	if err := os.WriteFile(filepath.Join(dir, "main.hcl"), []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	r := deployJSON(t, exitFailed, dir, "--root", root, "--host", "local")
	if r.Undefined() != 2 || r.Summary.Created != 1 {
		t.Fatalf("undefined %d, summary %+v, want 2 undefined and 1 created", r.Undefined(), r.Summary)
	}
	if _, err := os.Stat(filepath.Join(root, "waits")); !os.IsNotExist(err) {
		t.Fatalf("the undefined file was written: %v", err)
	}
	code, _, errs := invoke(t, "deploy", dir, "--root", root, "--host", "local")
	if code != exitFailed || !strings.Contains(errs, "2 resources were not deployed") || !strings.Contains(errs, "facts this host does not report") {
		t.Fatalf("exit %d, want 1 with the reason\nstderr: %s", code, errs)
	}
	// A dry run changes nothing and says what would wait: it exits 0.
	if code, _, errs := invoke(t, "deploy", dir, "--root", root, "--host", "local", "--dry-run"); code != 0 {
		t.Fatalf("dry run: exit %d, want 0\n%s", code, errs)
	}
}
