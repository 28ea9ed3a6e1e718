package cli

import (
	"errors"
	"fmt"
	"os"
	"strings"

	ucli "github.com/urfave/cli/v2"

	"github.com/tetherhq/tether/model/lang"
)

// modelFlags are the flags of every command that compiles a model.
func modelFlags() []ucli.Flag {
	return []ucli.Flag{
		&ucli.StringSliceFlag{Name: "var", Usage: "set a model variable: --var name=value (repeatable; TETHER_VAR_name=value works too)"},
	}
}

// modelDir returns the model directory argument (default: the current one).
func modelDir(c *ucli.Context) (string, error) {
	switch c.NArg() {
	case 0:
		return ".", nil
	case 1:
		return c.Args().First(), nil
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
	vars, err := modelVars(c)
	if err != nil {
		return "", nil, err
	}
	res, err := compileDir(term, dir, vars)
	return dir, res, err
}

// compileDir compiles the model in dir, showing its diagnostics.
func compileDir(term *terminal, dir string, vars map[string]string) (*lang.Result, error) {
	res, err := lang.Compile(dir, lang.Options{Vars: vars})
	var le *lang.Error
	switch {
	case errors.As(err, &le):
		fmt.Fprint(term.stderr, le.Pretty(term.progress))
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
		UsageText: "tether compile [DIR] [--var name=value]... [-o json]",
		Description: "Reads every *.hcl file in DIR (default: the current directory) and prints the resources\n" +
			"it compiles to, per agent, or the model's errors with their file:line:column.\n" +
			"With -o json it prints the exact resource set that a deploy or an export uses.\n\n" +
			"Example:\n   tether compile examples/quickstart --var site_root=/tmp/site",
		Flags: append(modelFlags(), outputFlag()),
		Action: func(c *ucli.Context) error {
			format, err := outputFormat(c)
			if err != nil {
				return err
			}
			_, res, err := compileModel(c, term)
			if err != nil {
				return err
			}
			if format == "json" {
				return writeJSON(term.stdout, res)
			}
			return printResources(term, res)
		},
	}
}

func printResources(term *terminal, res *lang.Result) error {
	t := newTable(term.stdout, "AGENT", "RESOURCE", "REQUIRES")
	for _, r := range res.Resources {
		var reqs []string
		for _, q := range r.Requires {
			reqs = append(reqs, q.String())
		}
		name := r.ID.Type + "[" + r.ID.Value + "]"
		if r.Purged {
			name += " (purged)"
		}
		t.row(r.ID.Agent, name, strings.Join(reqs, ", "))
	}
	if err := t.flush(); err != nil {
		return err
	}
	_, err := fmt.Fprintf(term.stdout, "\n%d %s for %d %s\n", len(res.Resources), plural(len(res.Resources), "resource", "resources"),
		len(res.Hosts), plural(len(res.Hosts), "host", "hosts"))
	return err
}
