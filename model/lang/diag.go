package lang

import (
	"fmt"
	"strings"

	"github.com/hashicorp/hcl/v2"
)

// Severity of a diagnostic.
type Severity string

// Severities.
const (
	SeverityError   Severity = "error"
	SeverityWarning Severity = "warning"
)

// Pos is a position in a model file (1-based line and column).
type Pos struct {
	Line   int `json:"line"`
	Column int `json:"column"`
}

// Diagnostic is one problem in a model, at a place.
type Diagnostic struct {
	Severity Severity `json:"severity"`
	Summary  string   `json:"summary"`
	Detail   string   `json:"detail,omitempty"`
	// File is empty for problems without a place (a --var for an
	// undeclared variable).
	File  string `json:"file,omitempty"`
	Start Pos    `json:"start"`
	End   Pos    `json:"end"`
}

// String prints file:line:column: summary: detail.
func (d Diagnostic) String() string {
	var b strings.Builder
	if d.File != "" {
		fmt.Fprintf(&b, "%s:%d:%d: ", d.File, d.Start.Line, d.Start.Column)
	}
	if d.Severity == SeverityWarning {
		b.WriteString("warning: ")
	}
	b.WriteString(d.Summary)
	if d.Detail != "" {
		b.WriteString(": ")
		b.WriteString(d.Detail)
	}
	return b.String()
}

// Error is a model that does not compile: its diagnostics, at least one of
// them an error.
type Error struct {
	Diagnostics []Diagnostic
	files       map[string]*hcl.File
}

// Error lists the diagnostics, one per line.
func (e *Error) Error() string {
	lines := make([]string, 0, len(e.Diagnostics))
	for _, d := range e.Diagnostics {
		lines = append(lines, d.String())
	}
	return strings.Join(lines, "\n")
}

// Pretty renders each diagnostic as file:line:column, the offending source
// line with the range underlined, and the detail, in colour if asked.
func (e *Error) Pretty(color bool) string {
	var b strings.Builder
	paint := func(code, s string) string {
		if !color {
			return s
		}
		return code + s + "\033[0m"
	}
	for i, d := range e.Diagnostics {
		if i > 0 {
			b.WriteByte('\n')
		}
		sev := paint("\033[1;31m", "error")
		if d.Severity == SeverityWarning {
			sev = paint("\033[1;33m", "warning")
		}
		if d.File != "" {
			fmt.Fprintf(&b, "%s: ", paint("\033[1m", fmt.Sprintf("%s:%d:%d", d.File, d.Start.Line, d.Start.Column)))
		}
		fmt.Fprintf(&b, "%s: %s\n", sev, d.Summary)
		if line, ok := e.sourceLine(d.File, d.Start.Line); ok {
			num := fmt.Sprint(d.Start.Line)
			fmt.Fprintf(&b, "  %s | %s\n", num, line)
			width := 1
			if d.End.Line == d.Start.Line && d.End.Column > d.Start.Column {
				width = d.End.Column - d.Start.Column
			}
			pad := strings.Repeat(" ", len(num))
			fmt.Fprintf(&b, "  %s | %s%s\n", pad, underlinePad(line, d.Start.Column), paint("\033[1;31m", strings.Repeat("^", width)))
		}
		if d.Detail != "" {
			fmt.Fprintf(&b, "  %s\n", d.Detail)
		}
	}
	return b.String()
}

// sourceLine returns line n (1-based) of a parsed model file.
func (e *Error) sourceLine(file string, n int) (string, bool) {
	f, ok := e.files[file]
	if !ok || n < 1 {
		return "", false
	}
	lines := strings.Split(string(f.Bytes), "\n")
	if n > len(lines) {
		return "", false
	}
	return strings.TrimRight(lines[n-1], "\r"), true
}

// underlinePad is the white space before column col of line, keeping tabs so
// the caret lines up.
func underlinePad(line string, col int) string {
	var b strings.Builder
	for i, r := range []rune(line) {
		if i >= col-1 {
			break
		}
		if r == '\t' {
			b.WriteRune('\t')
		} else {
			b.WriteByte(' ')
		}
	}
	return b.String()
}

func convertDiags(diags hcl.Diagnostics) []Diagnostic {
	out := make([]Diagnostic, 0, len(diags))
	for _, d := range diags {
		out = append(out, convertDiag(d))
	}
	return out
}

func convertDiag(d *hcl.Diagnostic) Diagnostic {
	out := Diagnostic{Severity: SeverityError, Summary: d.Summary, Detail: d.Detail}
	if d.Severity == hcl.DiagWarning {
		out.Severity = SeverityWarning
	}
	if d.Subject != nil {
		out.File = d.Subject.Filename
		out.Start = Pos{Line: d.Subject.Start.Line, Column: d.Subject.Start.Column}
		out.End = Pos{Line: d.Subject.End.Line, Column: d.Subject.End.Column}
	}
	return out
}

// errorf builds an error diagnostic at rng (nil: no place).
func errorf(rng *hcl.Range, summary, detail string, args ...any) *hcl.Diagnostic {
	return &hcl.Diagnostic{Severity: hcl.DiagError, Summary: summary, Detail: fmt.Sprintf(detail, args...), Subject: rng}
}

// where prints a range as file:line:column, for details naming a second place.
func where(rng hcl.Range) string {
	return fmt.Sprintf("%s:%d:%d", rng.Filename, rng.Start.Line, rng.Start.Column)
}

// maxDiagnostics bounds the diagnostics of one compile: past it, a model has
// one mistake repeated, and more lines do not help.
const maxDiagnostics = 100

// dedupe drops repeated diagnostics: a block applied to many hosts reports
// one mistake once, saying for how many hosts it occurred.
func dedupe(diags hcl.Diagnostics) hcl.Diagnostics {
	type key struct {
		summary string
		rng     hcl.Range
		noPlace string
	}
	seen := map[key]*hcl.Diagnostic{}
	extra := map[*hcl.Diagnostic]int{}
	var out hcl.Diagnostics
	for _, d := range diags {
		k := key{summary: d.Summary}
		if d.Subject != nil {
			k.rng = *d.Subject
		} else {
			k.noPlace = d.Detail
		}
		if first, dup := seen[k]; dup {
			if first.Detail != d.Detail {
				extra[first]++
			}
			continue
		}
		seen[k] = d
		out = append(out, d)
	}
	errs := 0
	var bounded hcl.Diagnostics
	for _, d := range out {
		if n := extra[d]; n > 0 {
			d.Detail += fmt.Sprintf(" (and %d more like it)", n)
		}
		if d.Severity == hcl.DiagError {
			errs++
			if errs > maxDiagnostics {
				continue
			}
		}
		bounded = append(bounded, d)
	}
	if errs > maxDiagnostics {
		bounded = append(bounded, &hcl.Diagnostic{Severity: hcl.DiagError, Summary: "Too many errors",
			Detail: fmt.Sprintf("%d more errors are not shown; fix the ones above first", errs-maxDiagnostics)})
	}
	return bounded
}
