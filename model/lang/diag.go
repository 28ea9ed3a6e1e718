package lang

import (
	"bytes"
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
	raw         hcl.Diagnostics
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

// Pretty renders the diagnostics with the offending source lines underlined,
// wrapped at width columns, in colour if asked.
func (e *Error) Pretty(width int, color bool) string {
	var buf bytes.Buffer
	w := hcl.NewDiagnosticTextWriter(&buf, e.files, uint(width), color)
	if err := w.WriteDiagnostics(e.raw); err != nil {
		return e.Error()
	}
	return buf.String()
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
