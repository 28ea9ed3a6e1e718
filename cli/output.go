package cli

import (
	"encoding/json"
	"io"
	"os"
	"strings"
	"unicode/utf8"

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

// writeJSONLine writes v as JSON on one line, for output that is a stream
// of JSON values, one per line.
func writeJSONLine(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	return enc.Encode(v)
}

// table writes aligned columns. Widths are computed from the visible text,
// so cells can be coloured without throwing the columns off (text/tabwriter
// would count the escape codes). Cells are painted only where the terminal
// takes colour.
type table struct {
	w      io.Writer
	color  bool
	rows   [][]string
	colors [][]colour
}

// newTable starts a table on term's standard output.
func newTable(term *terminal, header ...string) *table {
	t := &table{w: term.stdout, color: term.color}
	t.row(header...)
	return t
}

// row adds a row of plain cells.
func (t *table) row(cells ...string) { t.paintedRow(nil, cells...) }

// paintedRow adds a row whose cells are coloured with colors (by index;
// none or missing: no colour).
func (t *table) paintedRow(colors []colour, cells ...string) {
	t.rows = append(t.rows, cells)
	t.colors = append(t.colors, colors)
}

func (t *table) flush() error {
	var widths []int
	for _, r := range t.rows {
		for i, c := range r {
			if i >= len(widths) {
				widths = append(widths, 0)
			}
			widths[i] = max(widths[i], utf8.RuneCountInString(c))
		}
	}
	var b strings.Builder
	for ri, r := range t.rows {
		// Trailing empty cells are dropped: lines carry no padding.
		for len(r) > 1 && r[len(r)-1] == "" {
			r = r[:len(r)-1]
		}
		for i, c := range r {
			text := c
			if t.color && i < len(t.colors[ri]) {
				text = t.colors[ri][i].paint(c)
			}
			b.WriteString(text)
			if i < len(r)-1 {
				b.WriteString(strings.Repeat(" ", widths[i]-utf8.RuneCountInString(c)+2))
			}
		}
		b.WriteByte('\n')
	}
	t.rows, t.colors = nil, nil
	_, err := io.WriteString(t.w, b.String())
	return err
}

// colour is how a cell or a word is shown on a terminal that takes colour.
// It is a type of its own, not a string, so that only these values (never
// a colour's name) can be painted.
type colour uint8

const (
	none colour = iota
	red
	green
	yellow
	boldRed
)

var escapes = [...]string{none: "", red: "\033[31m", green: "\033[32m", yellow: "\033[33m", boldRed: "\033[1;31m"}

// paint wraps s in c's escape codes.
func (c colour) paint(s string) string {
	if c == none || int(c) >= len(escapes) {
		return s
	}
	return escapes[c] + s + "\033[0m"
}

// paint colours s on a terminal that takes colour, and leaves it as it is
// elsewhere.
func (term *terminal) paint(c colour, s string) string {
	if !term.color {
		return s
	}
	return c.paint(s)
}

// colorAllowed reports whether output to a terminal may be coloured: never
// where NO_COLOR is set to anything (https://no-color.org).
func colorAllowed() bool { return os.Getenv("NO_COLOR") == "" }
