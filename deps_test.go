package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

const module = "github.com/tetherhq/tether"

// rule is one row of the package table of docs/architecture.md: what a package may import from this
// module and from third parties. Standard-library imports are always fine.
type rule struct {
	internal []string // module packages ("model", "agent/handler/*" = any child)
	external []string // third-party module path prefixes
}

// Loggers and ids cross every layer by design.
var everywhere = []string{"github.com/rs/zerolog", "github.com/google/uuid"}

// rules maps a package (relative to the module; "x/*" = every child of x not
// listed itself) to its allowances. A package missing here fails the test:
// add it with the the package table of docs/architecture.md row it follows.
var rules = map[string]rule{
	"model":                             {},
	"model/graph":                       {internal: []string{"model"}},
	"model/secret":                      {internal: []string{"model"}, external: []string{"golang.org/x/crypto"}},
	"model/secret/secrettest":           {}, // test helper: counts a planted secret in what a deploy left behind
	"model/durable":                     {},
	"model/testenv":                     {},                                                  // test helpers: skip or fail for a missing service
	"model/gitfetch/gittest":            {external: []string{"github.com/go-git/go-git/v5"}}, // test helper: repositories made with go-git
	"model/gitfetch":                    {external: []string{"github.com/go-git/go-git/v5", "github.com/go-git/go-billy/v5"}},
	"model/lang":                        {internal: []string{"model", "model/graph", "model/durable", "model/gitfetch"}, external: []string{"github.com/hashicorp/hcl/v2", "github.com/zclconf/go-cty", "github.com/zclconf/go-cty-yaml"}},
	"schema":                            {},
	"bus":                               {internal: []string{"model"}},
	"bus/bustest":                       {internal: []string{"bus", "model"}},
	"bus/amqp":                          {internal: []string{"bus", "model"}, external: []string{"github.com/rabbitmq/amqp091-go"}},
	"bus/amqp/rabbitnode":               {}, // private RabbitMQ nodes, for tests (through amqptest) and `tether bench`
	"bus/amqp/amqptest":                 {internal: []string{"bus", "bus/amqp", "bus/amqp/rabbitnode", "model/testenv"}},
	"agent/handler":                     {internal: []string{"model", "model/durable"}, external: []string{"golang.org/x/sys"}},
	"agent/handler/handlertest":         {internal: []string{"agent/handler", "model", "model/testenv"}, external: []string{"golang.org/x/sys"}},
	"agent/handler/builtin":             {internal: []string{"agent/handler", "agent/handler/*"}},
	"agent/handler/*":                   {internal: []string{"agent/handler", "model", "model/durable"}, external: []string{"golang.org/x/sys"}},
	"agent/handler/libvirt":             {internal: []string{"agent/handler", "model"}, external: []string{"github.com/digitalocean/go-libvirt", "libvirt.org/go/libvirtxml"}},
	"agent/target/ssh":                  {internal: []string{"agent/handler", "model/durable"}, external: []string{"golang.org/x/crypto/ssh", "github.com/pkg/sftp"}},
	"agent/target/ssh/sshtest":          {internal: []string{"agent/handler", "agent/handler/handlertest", "agent/target/ssh", "model/testenv"}}, // test helper: a private sshd, the suites' SSH target
	"agent/engine":                      {internal: []string{"model", "model/graph", "agent/handler"}},
	"agent/journal":                     {internal: []string{"model", "model/durable"}},
	"agent/facts":                       {internal: []string{"model"}},
	"agent":                             {internal: []string{"agent/*", "agent/handler", "agent/handler/*", "bus", "model", "model/secret"}, external: []string{"github.com/fsnotify/fsnotify", "golang.org/x/sys"}},
	"server/record":                     {internal: []string{"model"}, external: []string{"golang.org/x/crypto"}},
	"server/store":                      {internal: []string{"model", "server/record", "schema"}},
	"server/store/storetest":            {internal: []string{"server/store", "server/record", "model", "schema"}},
	"server/store/sqlite":               {internal: []string{"server/store", "server/record", "model", "schema"}, external: []string{"modernc.org/sqlite"}},
	"server/store/postgres":             {internal: []string{"server/store", "server/record", "model", "schema"}, external: []string{"github.com/jackc/pgx/v5"}},
	"server/store/postgres/pgtest":      {internal: []string{"server/store/postgres", "model/testenv"}},
	"server/scheduler":                  {internal: []string{"model", "model/graph", "server/record", "bus"}},
	"server/clientlimit":                {external: []string{"golang.org/x/time"}},
	"server/compile":                    {internal: []string{"model", "model/lang", "server/record", "server/store", "server/event", "server/webhook", "server/compile/queue", "server/compile/source"}},
	"server/compile/queue":              {internal: []string{"server/record"}},
	"server/webhook":                    {},
	"server/notify":                     {internal: []string{"model", "server/record"}},
	"server/event":                      {internal: []string{"model", "server/record"}},
	"server/enroll":                     {internal: []string{"server/record"}},
	"server/release":                    {internal: []string{"bus", "model", "server/record", "server/event", "server/scheduler", "server/store"}},
	"server/machines":                   {internal: []string{"bus", "model", "model/secret", "server/event", "server/record", "server/store"}},
	"server/ingest":                     {internal: []string{"bus", "model", "model/secret", "server/enroll", "server/event", "server/record", "server/scheduler", "server/store", "server/trust"}},
	"server/keyring":                    {internal: []string{"model/durable"}},
	"server/trust":                      {internal: []string{"bus", "model", "model/secret", "server/event", "server/record"}},
	"server/brokerauth":                 {internal: []string{"bus", "model", "server/record"}},
	"server/compile/source":             {internal: []string{"model/gitfetch", "model/durable"}},
	"server/console":                    {internal: []string{"model", "server/record"}},
	"server/api":                        {internal: []string{"model", "server/record", "server/clientlimit"}, external: []string{"github.com/labstack/echo/v4"}},
	"server/api/internal/openapiclient": {external: []string{"github.com/oapi-codegen/runtime"}}, // the client generated from the OpenAPI document, for the API's tests
	"server/api/internal/openapigen":    {},                                                      // tests only: writes the OpenAPI document and the generated client
	"server":                            {internal: []string{"server/*", "server/store/*", "bus", "model", "model/secret", "schema"}, external: []string{"github.com/prometheus/client_golang"}},
	"cli":                               {internal: []string{"*"}, external: []string{"github.com/urfave/cli/v2", "github.com/mattn/go-isatty", "github.com/BurntSushi/toml", "golang.org/x/sync"}},
	"cli/agentcli":                      {internal: []string{"agent", "agent/facts", "agent/handler", "agent/handler/builtin", "agent/handler/libvirt", "agent/journal", "bus", "bus/amqp", "model"}, external: []string{"github.com/urfave/cli/v2", "github.com/mattn/go-isatty"}},
	"cli/ownagent":                      {internal: []string{"agent", "agent/facts", "agent/handler", "agent/journal", "bus", "bus/amqp", "cli/agentcli", "model"}},
	"cli/tether-agent":                  {internal: []string{"cli/agentcli"}}, // the agent-only binary's main
	"cli/embedded":                      {internal: []string{"agent", "agent/facts", "agent/handler", "agent/handler/builtin", "bus", "model", "model/lang", "server", "server/record", "server/store/sqlite"}},
	"cli/bench":                         {internal: []string{"cli/embedded", "agent", "agent/facts", "agent/journal", "agent/handler", "agent/handler/builtin", "bus", "bus/amqp", "bus/amqp/rabbitnode", "model", "server", "server/api", "server/brokerauth", "server/keyring", "server/record", "server/store", "server/store/postgres", "server/store/postgres/pgbaseline"}, external: []string{"golang.org/x/sync"}},
	"cli/e2e":                           {},                          // tests only: real processes, checked through the store
	"cli/guest":                         {},                          // builds an agent initramfs (tether distribution make-initrd; the end-to-end tests' virtual machine)
	"docs":                              {},                          // tests only: the documentation's runnable blocks, run
	"":                                  {internal: []string{"cli"}}, // main.go

	// Benchmark code, kept out of the production store.
	"server/store/postgres/pgbaseline": {internal: []string{"server/store", "model"}, external: []string{"github.com/jackc/pgx/v5"}},
}

// exclusive lists third-party modules confined to the packages that wrap
// them: their types never cross those packages' boundaries.
var exclusive = map[string][]string{
	// pgbaseline: the benchmarks' bare-pgx baseline, kept out of the store.
	"github.com/jackc/pgx/v5":             {"server/store/postgres", "server/store/postgres/pgbaseline"},
	"github.com/labstack/echo/v4":         {"server/api"},
	"github.com/oapi-codegen/runtime":     {"server/api/internal/openapiclient"},
	"github.com/prometheus/client_golang": {"server"},
	"github.com/rabbitmq/amqp091-go":      {"bus/amqp"},
	"github.com/urfave/cli/v2":            {"cli", "cli/agentcli"},
	"golang.org/x/time":                   {"server/clientlimit"},
	"github.com/hashicorp/hcl/v2":         {"model/lang"},
	"github.com/zclconf/go-cty":           {"model/lang"},
	"github.com/zclconf/go-cty-yaml":      {"model/lang"},
	"modernc.org/sqlite":                  {"server/store/sqlite"},
	"github.com/go-git/go-git/v5":         {"model/gitfetch", "model/gitfetch/gittest"},
	"github.com/go-git/go-billy/v5":       {"model/gitfetch"},
	"github.com/digitalocean/go-libvirt":  {"agent/handler/libvirt"},
	"libvirt.org/go/libvirtxml":           {"agent/handler/libvirt"},
	"golang.org/x/crypto/ssh":             {"agent/target/ssh"},
	"github.com/pkg/sftp":                 {"agent/target/ssh"},
}

// importers lists module packages that only the packages named may import
// (their tests aside): benchmark code stays out of what the binary serves.
var importers = map[string][]string{
	"server/store/postgres/pgbaseline": {"cli/bench"},
}

// lean lists packages that must not depend, even indirectly, on what an
// agent does without (module packages, and third-party module path
// prefixes): the agent-only binary is built of them.
var lean = map[string][]string{
	"cli/agentcli":     agentless,
	"cli/tether-agent": agentless,
}

// agentless is what the agent-only binary never holds: the server, its
// stores and their drivers, the schema, the compiler, the full command line.
var agentless = []string{
	module + "/server", module + "/schema", module + "/model/lang", module + "/model/gitfetch", module + "/cli/embedded", module + "/cli/bench",
	"modernc.org/sqlite", "github.com/jackc/pgx", "github.com/labstack/echo", "github.com/prometheus",
	"github.com/hashicorp/hcl", "github.com/zclconf", "github.com/go-git",
}

// pkg is what go list says of one package.
type pkg struct {
	ImportPath string
	Imports    []string
	Deps       []string
}

func listPackages(t *testing.T) []pkg {
	t.Helper()
	out, err := exec.Command("go", "list", "-json", "./...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	var pkgs []pkg
	dec := json.NewDecoder(bytes.NewReader(out))
	for {
		var p pkg
		if err := dec.Decode(&p); err == io.EOF {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		pkgs = append(pkgs, p)
	}
	return pkgs
}

func rel(path string) string {
	return strings.TrimPrefix(strings.TrimPrefix(path, module), "/")
}

func isStdlib(path string) bool {
	first, _, _ := strings.Cut(path, "/")
	return !strings.Contains(first, ".")
}

// ruleFor finds the rule of a package: its own row, else the nearest "x/*".
func ruleFor(p string) (rule, bool) {
	if r, ok := rules[p]; ok {
		return r, true
	}
	for parent := p; parent != ""; {
		i := strings.LastIndex(parent, "/")
		if i < 0 {
			break
		}
		parent = parent[:i]
		if r, ok := rules[parent+"/*"]; ok {
			return r, true
		}
	}
	return rule{}, false
}

func matches(pattern, p string) bool {
	switch {
	case pattern == "*":
		return true
	case strings.HasSuffix(pattern, "/*"):
		return strings.HasPrefix(p, strings.TrimSuffix(pattern, "*"))
	default:
		return pattern == p
	}
}

// violations checks packages against the rules and returns what breaks them.
func violations(pkgs []pkg) []string {
	var out []string
	for _, p := range pkgs {
		name := rel(p.ImportPath)
		r, ok := ruleFor(name)
		if !ok {
			out = append(out, fmt.Sprintf("%s: no dependency rule; add it to deps_test.go following the package table of docs/architecture.md", p.ImportPath))
			continue
		}
		for _, imp := range p.Imports {
			switch {
			case isStdlib(imp):
			case strings.HasPrefix(imp, module):
				if !slices.ContainsFunc(r.internal, func(pat string) bool { return matches(pat, rel(imp)) }) {
					out = append(out, fmt.Sprintf("%s imports %s, which the package table of docs/architecture.md does not allow", name, rel(imp)))
				}
			default:
				allowed := append(append([]string{}, everywhere...), r.external...)
				if !slices.ContainsFunc(allowed, func(m string) bool { return strings.HasPrefix(imp, m) }) {
					out = append(out, fmt.Sprintf("%s imports third-party %s, which is not allowed there", name, imp))
				}
			}
			for m, owners := range exclusive {
				if strings.HasPrefix(imp, m) && !slices.Contains(owners, name) {
					out = append(out, fmt.Sprintf("%s imports %s, which only %s may use", name, m, strings.Join(owners, " and ")))
				}
			}
			if only, ok := importers[rel(imp)]; ok && strings.HasPrefix(imp, module) && !slices.Contains(only, name) {
				out = append(out, fmt.Sprintf("%s imports %s, which only %s may import", name, rel(imp), strings.Join(only, " and ")))
			}
		}
		// server and agent never depend on each other, even indirectly;
		// nothing but main depends on cli.
		for _, dep := range p.Deps {
			for _, no := range lean[name] {
				if dep == no || strings.HasPrefix(dep, no+"/") {
					out = append(out, fmt.Sprintf("%s depends on %s, which the agent-only build must not hold", name, dep))
				}
			}
			d := rel(dep)
			if !strings.HasPrefix(dep, module) {
				continue
			}
			switch {
			case isUnder(name, "server") && isUnder(d, "agent"):
				out = append(out, fmt.Sprintf("%s depends on %s: server and agent never import each other", name, d))
			case isUnder(name, "agent") && isUnder(d, "server"):
				out = append(out, fmt.Sprintf("%s depends on %s: agent and server never import each other", name, d))
			case d == "cli" && name != "":
				out = append(out, fmt.Sprintf("%s depends on cli: nothing imports cli", name))
			}
		}
	}
	slices.Sort(out)
	return out
}

func isUnder(p, top string) bool { return p == top || strings.HasPrefix(p, top+"/") }

// TestDependencyRules enforces the package table of docs/architecture.md on the real packages.
func TestDependencyRules(t *testing.T) {
	pkgs := listPackages(t)
	if len(pkgs) < 10 {
		t.Fatalf("go list found only %d packages", len(pkgs))
	}
	for _, v := range violations(pkgs) {
		t.Error(v)
	}
}

// TestDependencyRulesCatchViolations feeds the checker packages that break
// each kind of rule.
func TestDependencyRulesCatchViolations(t *testing.T) {
	m := func(p string) string { return module + "/" + p }
	tests := []struct {
		pkg  pkg
		want string
	}{
		{pkg{ImportPath: m("model"), Imports: []string{m("bus")}}, "model imports bus"},
		{pkg{ImportPath: m("bus"), Imports: []string{"github.com/jackc/pgx/v5/pgxpool"}}, "only server/store/postgres and server/store/postgres/pgbaseline may use"},
		{pkg{ImportPath: m("server/store/postgres/pgtest"), Imports: []string{"github.com/jackc/pgx/v5"}}, "only server/store/postgres and server/store/postgres/pgbaseline may use"},
		{pkg{ImportPath: m("server"), Imports: []string{m("server/store/postgres/pgbaseline")}}, "server imports server/store/postgres/pgbaseline, which only"},
		{pkg{ImportPath: m("agent/engine"), Imports: []string{"github.com/some/thing"}}, "third-party github.com/some/thing"},
		{pkg{ImportPath: m("server"), Deps: []string{m("agent/handler")}}, "server and agent never import each other"},
		{pkg{ImportPath: m("agent"), Deps: []string{m("server/store")}}, "agent and server never import each other"},
		{pkg{ImportPath: m("server/scheduler"), Deps: []string{m("cli")}}, "nothing imports cli"},
		{pkg{ImportPath: m("mystery")}, "no dependency rule"},
		{pkg{ImportPath: m("cli/agentcli"), Deps: []string{m("server/store")}}, "cli/agentcli depends on github.com/tetherhq/tether/server/store, which the agent-only build must not hold"},
		{pkg{ImportPath: m("cli/tether-agent"), Deps: []string{"modernc.org/sqlite/lib"}}, "cli/tether-agent depends on modernc.org/sqlite/lib, which the agent-only build"},
		{pkg{ImportPath: m("cli/tether-agent"), Deps: []string{"github.com/jackc/pgx/v5"}}, "which the agent-only build must not hold"},
		{pkg{ImportPath: m("server/scheduler"), Imports: []string{m("server/store")}}, "server/scheduler imports server/store"},
		{pkg{ImportPath: m("agent/handler/file"), Imports: []string{"github.com/digitalocean/go-libvirt"}}, "which only agent/handler/libvirt may use"},
		{pkg{ImportPath: m("agent"), Imports: []string{"libvirt.org/go/libvirtxml"}}, "which only agent/handler/libvirt may use"},
		{pkg{ImportPath: m("agent/target/ssh/sshtest"), Imports: []string{"golang.org/x/crypto/ssh"}}, "which only agent/target/ssh may use"},
		{pkg{ImportPath: m("agent/handler/file"), Imports: []string{"github.com/pkg/sftp"}}, "which only agent/target/ssh may use"},
	}
	for _, tt := range tests {
		got := strings.Join(violations([]pkg{tt.pkg}), "\n")
		if !strings.Contains(got, tt.want) {
			t.Errorf("%s: violations %q, want one saying %q", tt.pkg.ImportPath, got, tt.want)
		}
	}
	for _, ok := range []pkg{
		{ImportPath: m("agent/handler/file"), Imports: []string{m("agent/handler"), m("model"), "os"}},
		{ImportPath: m("server/store/postgres/pgbaseline"), Imports: []string{"github.com/jackc/pgx/v5", m("server/store"), m("model")}},
		{ImportPath: m("agent/handler/libvirt"), Imports: []string{"github.com/digitalocean/go-libvirt", "libvirt.org/go/libvirtxml", m("agent/handler"), m("model")}},
	} {
		if v := violations([]pkg{ok}); len(v) > 0 {
			t.Errorf("a conforming package was flagged: %v", v)
		}
	}
}
