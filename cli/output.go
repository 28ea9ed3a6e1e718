package cli

import (
	"encoding/json"
	"fmt"
	"io"
	"runtime"
	"runtime/debug"
	"strings"
	"text/tabwriter"

	ucli "github.com/urfave/cli/v2"
)

// outputFlag is the -o flag every command that prints results takes.
func outputFlag() *ucli.StringFlag {
	return &ucli.StringFlag{Name: "output", Aliases: []string{"o"}, Value: "table",
		Usage: "output format: table (for people) or json (for scripts)"}
}

// outputFormat validates -o.
func outputFormat(c *ucli.Context) (string, error) {
	switch f := c.String("output"); f {
	case "table", "json":
		return f, nil
	default:
		return "", usageError("-o %q: use table or json", f)
	}
}

// writeJSON prints v as indented JSON, without escaping <, > and & (models
// render HTML).
func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// table writes aligned columns.
type table struct{ tw *tabwriter.Writer }

func newTable(w io.Writer, header ...string) *table {
	t := &table{tw: tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)}
	t.row(header...)
	return t
}

func (t *table) row(cells ...string) { fmt.Fprintln(t.tw, strings.Join(cells, "\t")) }

func (t *table) flush() error { return t.tw.Flush() }

// colours, used only on a terminal without NO_COLOR.
const (
	red    = "\033[31m"
	green  = "\033[32m"
	yellow = "\033[33m"
	bold   = "\033[1m"
	reset  = "\033[0m"
)

func (term *terminal) paint(color, s string) string {
	if !term.tty {
		return s
	}
	return color + s + reset
}

// version is set at build time (-ldflags "-X github.com/tetherhq/tether/cli.version=v1.2.3");
// otherwise it comes from the module's build information.
var version = ""

type buildInfo struct {
	Version  string `json:"version"`
	Commit   string `json:"commit,omitempty"`
	Modified bool   `json:"modified,omitempty"`
	Go       string `json:"go"`
	Platform string `json:"platform"`
}

func readBuildInfo() buildInfo {
	out := buildInfo{Version: version, Platform: runtime.GOOS + "/" + runtime.GOARCH}
	if bi, ok := debug.ReadBuildInfo(); ok {
		out.Go = bi.GoVersion
		if out.Version == "" {
			out.Version = bi.Main.Version
		}
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				out.Commit = s.Value
			case "vcs.modified":
				out.Modified = s.Value == "true"
			}
		}
	}
	if out.Version == "" || out.Version == "(devel)" {
		out.Version = "dev"
	}
	return out
}

func versionCommand(term *terminal) *ucli.Command {
	return &ucli.Command{
		Name:      "version",
		Usage:     "print the version of this tether binary",
		UsageText: "tether version [-o json]",
		Flags:     []ucli.Flag{outputFlag()},
		Action: func(c *ucli.Context) error {
			format, err := outputFormat(c)
			if err != nil {
				return err
			}
			if c.NArg() > 0 {
				return usageError("version takes no arguments")
			}
			bi := readBuildInfo()
			if format == "json" {
				return writeJSON(term.stdout, bi)
			}
			commit := ""
			if bi.Commit != "" {
				commit = " (" + shortCommit(bi.Commit)
				if bi.Modified {
					commit += ", modified"
				}
				commit += ")"
			}
			_, err = fmt.Fprintf(term.stdout, "tether %s%s %s %s\n", bi.Version, commit, bi.Go, bi.Platform)
			return err
		},
	}
}

func shortCommit(c string) string {
	if len(c) > 12 {
		return c[:12]
	}
	return c
}
