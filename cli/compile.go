package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"

	ucli "github.com/urfave/cli/v2"

	"github.com/tetherhq/tether/model"
	"github.com/tetherhq/tether/model/lang"
)

// modelFlags are the flags of every command that compiles a model.
func modelFlags() []ucli.Flag {
	return []ucli.Flag{
		&ucli.StringSliceFlag{Name: "var", Usage: "set a model variable: --var name=value (repeatable; TETHER_VAR_name=value works too)"},
		&ucli.StringFlag{Name: "inventory", Usage: "compile against the agents, labels and facts in `FILE` (JSON: {\"agents\": [{\"name\", \"labels\", \"facts\"}]}, or the output of tether agent list -o json)"},
		&ucli.BoolFlag{Name: "update-modules", Usage: "resolve the refs of git modules again instead of using the cached commits"},
		&ucli.DurationFlag{Name: "compile-timeout", Value: lang.DefaultTimeout, Usage: "stop compiling the model after `DURATION` (a compile past it ends with a diagnostic saying so)"},
	}
}

// compileOptions collects the compile inputs the flags give.
func compileOptions(c *ucli.Context) (lang.Options, error) {
	vars, err := modelVars(c)
	if err != nil {
		return lang.Options{}, err
	}
	timeout := c.Duration("compile-timeout")
	if timeout <= 0 {
		return lang.Options{}, usageError("--compile-timeout %s: want a positive duration, like 60s or 2m", timeout)
	}
	opts := lang.Options{Vars: vars, UpdateModules: c.Bool("update-modules"), Timeout: timeout}
	if p := c.String("inventory"); p != "" {
		f, err := os.Open(p)
		if err != nil {
			return opts, usageError("--inventory: %v", err)
		}
		defer f.Close()
		inv, err := model.ParseInventory(f)
		if err != nil {
			return opts, usageError("--inventory %s: %v", p, err)
		}
		opts.Inventory = inv
	}
	return opts, nil
}

// serverInventory fetches the environment's live inventory from the
// server: its accepted agents with their labels and facts.
func serverInventory(ctx context.Context, cl *client) (*model.Inventory, error) {
	p, err := envPath(cl, "/inventory")
	if err != nil {
		return nil, err
	}
	var raw json.RawMessage
	if err := cl.call(ctx, "GET", p, nil, &raw); err != nil {
		return nil, fmt.Errorf("the server's inventory: %w (pass --inventory FILE to compile against a file instead)", err)
	}
	inv, err := model.ParseInventory(bytes.NewReader(raw))
	if err != nil {
		return nil, fmt.Errorf("the server's inventory: %w", err)
	}
	return inv, nil
}

// modelDir returns the model directory argument (default: the current one).
func modelDir(c *ucli.Context) (string, error) {
	switch c.NArg() {
	case 0:
		return ".", checkStateDir(".")
	case 1:
		dir := c.Args().First()
		return dir, checkStateDir(dir)
	default:
		return "", usageError("expected one model directory, got %d arguments: %s", c.NArg(), strings.Join(c.Args().Slice(), " "))
	}
}

// modelVars collects variables from TETHER_VAR_* and --var (which wins).
func modelVars(c *ucli.Context) (map[string]string, error) {
	vars := map[string]string{}
	for _, kv := range os.Environ() {
		if rest, ok := strings.CutPrefix(kv, "TETHER_VAR_"); ok {
			if k, v, ok := strings.Cut(rest, "="); ok && k != "" {
				vars[k] = v
			}
		}
	}
	for _, kv := range c.StringSlice("var") {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			return nil, usageError("--var %q: want name=value", kv)
		}
		vars[k] = v
	}
	return vars, nil
}

// compileModel compiles the model named by the command's argument and
// flags. A model that does not compile is shown with its source lines and
// ends the command with the usage status.
func compileModel(c *ucli.Context, term *terminal) (string, *lang.Result, error) {
	dir, err := modelDir(c)
	if err != nil {
		return "", nil, err
	}
	opts, err := compileOptions(c)
	if err != nil {
		return "", nil, err
	}
	if opts.Inventory == nil && c.IsSet("server") {
		cl, err := newClient(c)
		if err != nil {
			return "", nil, err
		}
		if opts.Inventory, err = serverInventory(c.Context, cl); err != nil {
			return "", nil, err
		}
	}
	res, err := compileDir(c.Context, term, dir, opts)
	return dir, res, err
}

// compileDir compiles the model in dir, showing its diagnostics.
func compileDir(ctx context.Context, term *terminal, dir string, opts lang.Options) (*lang.Result, error) {
	res, err := lang.Compile(ctx, dir, opts)
	var le *lang.Error
	switch {
	case errors.As(err, &le):
		fmt.Fprint(term.stderr, le.Pretty(term.stderrColor))
		n := 0
		for _, d := range le.Diagnostics {
			if d.Severity == lang.SeverityError {
				n++
			}
		}
		fmt.Fprintf(term.stderr, "tether: the model in %s has %d %s; nothing was deployed\n", dir, n, plural(n, "error", "errors"))
		return nil, &exitError{code: exitUsage, err: errPrinted}
	case errors.Is(err, lang.ErrNoModel):
		return nil, &exitError{code: exitUsage, err: err}
	case ctx.Err() != nil:
		return nil, err
	case err != nil:
		return nil, &exitError{code: exitUsage, err: err}
	}
	printWarnings(term, res.Warnings)
	return res, nil
}

func printWarnings(term *terminal, warnings []lang.Diagnostic) {
	for _, w := range warnings {
		fmt.Fprintf(term.stderr, "tether: %s\n", w)
	}
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

func compileCommand(term *terminal) *ucli.Command {
	return &ucli.Command{
		Name:      "compile",
		Usage:     "compile a model and show the resources each agent gets",
		UsageText: "tether compile [DIR] [--var name=value]... [--inventory FILE | --server URL --env ENV] [-o json [--show-sensitive]]",
		Description: "Reads every *.hcl file in DIR (default: the current directory) and the modules it uses,\n" +
			"and prints the resources it compiles to, per agent, or the model's errors with their\n" +
			"file:line:column. Hostgroups select agents of the inventory by labels and facts: the\n" +
			"inventory is --inventory FILE, or, with --server (or TETHER_SERVER), the environment's live\n" +
			"inventory on the server (its accepted agents, as they reported themselves). A fact the\n" +
			"inventory lacks is unknown, and the resources that need it are listed as undefined with\n" +
			"the facts they wait for.\n" +
			"With -o json it prints the exact resource set that a deploy or an export uses, each\n" +
			"sensitive value shown as " + model.RedactedValue + " unless --show-sensitive is given.\n\n" +
			"Examples:\n" +
			"   tether compile examples/quickstart --var site_root=/tmp/site\n" +
			"   tether compile examples/webfarm --inventory examples/webfarm/inventory.json\n" +
			"   tether compile examples/webfarm --inventory examples/webfarm/inventory.json -o json | jq '.resources | length'\n" +
			"   tether compile examples/webfarm --server http://tether.example:8420 --env prod",
		Flags: append(append(modelFlags(), connectionFlags()...), outputFlag(),
			&ucli.BoolFlag{Name: "show-sensitive", Usage: "with -o json, show sensitive values in clear instead of " + model.RedactedValue}),
		Action: func(c *ucli.Context) error {
			format, err := outputFormat(c)
			if err != nil {
				return err
			}
			if c.Bool("show-sensitive") && format != "json" {
				return usageError("--show-sensitive goes with -o json (the table shows no values)")
			}
			_, res, err := compileModel(c, term)
			if err != nil {
				return err
			}
			if format == "json" {
				if !c.Bool("show-sensitive") {
					res = redactedResult(res)
				}
				return writeJSON(term.stdout, res)
			}
			return printResources(term, res)
		},
	}
}

// redactedResult returns res with each sensitive value replaced by the
// redaction marker (res itself when it has none).
func redactedResult(res *lang.Result) *lang.Result {
	if !slices.ContainsFunc(res.Resources, func(r model.Resource) bool { return len(r.Sensitive) > 0 || len(r.Sealed) > 0 }) {
		return res
	}
	out := *res
	out.Resources = make([]model.Resource, len(res.Resources))
	for i := range res.Resources {
		out.Resources[i] = res.Resources[i].Redact()
	}
	return &out
}

func printResources(term *terminal, res *lang.Result) error {
	t := newTable(term, "AGENT", "RESOURCE", "STATE", "REQUIRES")
	undefined := 0
	// Per agent, then by resource: what each agent gets reads as a block.
	sorted := slices.Clone(res.Resources)
	slices.SortStableFunc(sorted, func(a, b model.Resource) int { return strings.Compare(a.ID.Agent, b.ID.Agent) })
	for _, r := range sorted {
		var reqs []string
		for _, q := range r.Requires {
			reqs = append(reqs, q.String())
		}
		name := r.ID.Type + "[" + r.ID.Value + "]"
		state := "defined"
		switch {
		case r.Undefined:
			state = "undefined"
			undefined++
		case r.Purged:
			state = "purged"
		}
		t.row(r.ID.Agent, name, state, strings.Join(reqs, ", "))
	}
	if err := t.flush(); err != nil {
		return err
	}
	w := term.stdout
	fmt.Fprintf(w, "\n%d %s for %d %s", len(res.Resources), plural(len(res.Resources), "resource", "resources"),
		len(res.Hosts), plural(len(res.Hosts), "host", "hosts"))
	if undefined > 0 {
		fmt.Fprintf(w, ", %d undefined", undefined)
	}
	fmt.Fprintln(w)
	var missing []string
	for _, h := range res.Hosts {
		if len(h.MissingFacts) > 0 {
			missing = append(missing, fmt.Sprintf("  %s: %s", h.Name, strings.Join(h.MissingFacts, ", ")))
		}
	}
	if len(missing) > 0 {
		fmt.Fprintf(w, "\nMissing facts (resources needing them are undefined and not deployed until the agents report them):\n%s\n",
			strings.Join(missing, "\n"))
	}
	blocks := 0
	for _, u := range res.Undefined {
		if u.ID == "" {
			blocks++
		}
	}
	if blocks > 0 {
		fmt.Fprintf(w, "%d %s could not even be expanded (unknown for_each or identity); see -o json .undefined\n",
			blocks, plural(blocks, "block", "blocks"))
	}
	for _, m := range res.Modules {
		if m.Commit != "" {
			fmt.Fprintf(w, "module %s: %s at %s (%s)\n", m.Name, m.Source, m.Ref, m.Commit)
		}
	}
	return nil
}
