package record

import (
	"strings"
	"testing"
)

func TestTriggersFold(t *testing.T) {
	var ts Triggers
	ts = ts.Add(Trigger{Kind: TriggerFacts, By: "web1"})
	ts = ts.Add(Trigger{Kind: TriggerOperator, By: "alice"})
	for range 199 {
		ts = ts.Add(Trigger{Kind: TriggerFacts, By: "web2"})
	}
	ts = ts.Add(Trigger{Kind: TriggerPoll, Count: 3})
	if got, want := ts.String(), "facts ×200 (web1), operator (alice), poll ×3"; got != want {
		t.Fatalf("got %q, want %q", got, want)
	}
	if got := ts.Count(); got != 204 {
		t.Fatalf("count: got %d, want 204", got)
	}
	if err := ts.Validate(); err != nil {
		t.Fatalf("folded triggers: %v", err)
	}
}

func TestCompileResultBound(t *testing.T) {
	r := CompileResult{Undefined: make([]UndefinedBlock, MaxCompileUndefined+5)}
	for range MaxCompileDiagnostics + 1 {
		r.Diagnostics = append(r.Diagnostics, CompileDiagnostic{Severity: "error", Message: strings.Repeat("x", 2*MaxCompileMessage)})
	}
	r.Undefined[0].Facts = make([]string, MaxUndefinedFacts+1)
	b := r.Bound()
	if len(b.Diagnostics) != MaxCompileDiagnostics || b.DiagnosticsTotal != MaxCompileDiagnostics+1 {
		t.Fatalf("diagnostics: got %d of %d, want %d of %d", len(b.Diagnostics), b.DiagnosticsTotal, MaxCompileDiagnostics, MaxCompileDiagnostics+1)
	}
	if n := len(b.Diagnostics[0].Message); n > MaxCompileMessage+len("…") {
		t.Fatalf("message: got %d bytes, want at most %d", n, MaxCompileMessage+len("…"))
	}
	if len(b.Undefined) != MaxCompileUndefined || b.UndefinedTotal != MaxCompileUndefined+5 || len(b.Undefined[0].Facts) != MaxUndefinedFacts {
		t.Fatalf("undefined: got %d of %d (facts %d), want %d of %d (facts %d)", len(b.Undefined), b.UndefinedTotal, len(b.Undefined[0].Facts), MaxCompileUndefined, MaxCompileUndefined+5, MaxUndefinedFacts)
	}
	if len(r.Diagnostics) != MaxCompileDiagnostics+1 || len(r.Diagnostics[0].Message) != 2*MaxCompileMessage {
		t.Fatal("Bound changed the result it was given")
	}
	// Bounding twice keeps the first totals.
	if bb := b.Bound(); bb.DiagnosticsTotal != MaxCompileDiagnostics+1 || bb.UndefinedTotal != MaxCompileUndefined+5 {
		t.Fatalf("bounded twice: totals %d and %d", bb.DiagnosticsTotal, bb.UndefinedTotal)
	}
}
