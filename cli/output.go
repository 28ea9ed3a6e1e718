package cli

import (
	"encoding/json"
	"io"
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
// would count the escape codes).
type table struct {
	w      io.Writer
	rows   [][]string
	colors [][]string
}

func newTable(w io.Writer, header ...string) *table {
	t := &table{w: w}
	t.row(header...)
	return t
}

// row adds a row of plain cells.
func (t *table) row(cells ...string) { t.paintedRow(nil, cells...) }

// paintedRow adds a row whose cells are coloured with colors (by index; ""
// or missing: no colour).
func (t *table) paintedRow(colors []string, cells ...string) {
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
			if i < len(t.colors[ri]) && t.colors[ri][i] != "" {
				text = t.colors[ri][i] + c + reset
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

// colours, used only on a terminal without NO_COLOR.
const (
	red    = "\033[31m"
	green  = "\033[32m"
	yellow = "\033[33m"
	bold   = "\033[1m"
	reset  = "\033[0m"
)

func (term *terminal) paint(color, s string) string {
	if !term.tty || color == "" {
		return s
	}
	return color + s + reset
}

// colour returns color on a terminal, "" elsewhere.
func (term *terminal) colour(color string) string {
	if !term.tty {
		return ""
	}
	return color
}
