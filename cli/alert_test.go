package cli

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/tetherhq/tether/model"
	"github.com/tetherhq/tether/server"
	"github.com/tetherhq/tether/server/record"
)

// A compile that recovers is good news in `tether alert list`: its own
// kind, green on a terminal (never under NO_COLOR), the failure red; and
// --kind compile asks for both compile kinds.
func TestAlertListCompileKinds(t *testing.T) {
	at := time.Date(2026, 12, 7, 10, 0, 0, 0, time.UTC)
	alerts := []record.Alert{
		{Seq: 3, At: at, Env: "prod", Kind: record.AlertCompileRecovered, Compliance: model.Compliant, Message: `compile 2 of revision "b" succeeded (released): compiles fail no more`},
		{Seq: 2, At: at, Env: "prod", Kind: record.AlertCompileFailed, Compliance: model.NonCompliant, Message: `compile 1 of revision "a" failed: main.hcl:3:15: Unknown variable`},
	}
	var asked []string
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		asked = append(asked, r.URL.Query().Get("kind"))
		_ = json.NewEncoder(w).Encode(alerts)
	}))
	t.Cleanup(ts.Close)
	t.Setenv("TETHER_SERVER", ts.URL)
	t.Setenv("TETHER_TOKEN", "test")
	t.Setenv("TETHER_ENV", "prod")
	for _, tt := range []struct {
		name     string
		terminal bool
		noColor  string
	}{{"piped", false, ""}, {"terminal", true, ""}, {"terminal with NO_COLOR", true, "1"}} {
		t.Run(tt.name, func(t *testing.T) {
			t.Setenv("NO_COLOR", tt.noColor)
			if tt.terminal {
				asTerminal(t)
			}
			code, out, errs := invoke(t, "alert", "list", "--kind", "compile")
			if code != 0 {
				t.Fatalf("alert list: exit %d: %s", code, errs)
			}
			if asked[len(asked)-1] != "compile" {
				t.Fatalf("asked for kind %q, want compile", asked[len(asked)-1])
			}
			colour := tt.terminal && tt.noColor == ""
			if got := strings.Contains(out, "\033["); got != colour {
				t.Fatalf("escape codes %v, want %v:\n%q", got, colour, out)
			}
			if colour && (!strings.Contains(out, "\033[32mcompile.recovered\033[0m") || !strings.Contains(out, "\033[31mcompile.failed\033[0m")) {
				t.Fatalf("want compile.recovered green, compile.failed red:\n%q", out)
			}
			lines := strings.Split(strings.TrimSpace(out), "\n")
			if len(lines) != 3 || !strings.Contains(lines[1], "compile.recovered") || !strings.Contains(lines[1], "succeeded") || !strings.Contains(lines[2], "compile.failed") {
				t.Fatalf("alert list:\n%s", out)
			}
		})
	}
	if code, out, _ := invoke(t, "alert", "list", "--help"); code != 0 || !strings.Contains(out, record.AlertKindsHelp) {
		t.Fatalf("alert list --help does not say what --kind takes:\n%s", out)
	}
}

// `tether watch` says what a compile did, and a recovery is good news.
func TestCompileEventLines(t *testing.T) {
	term := &terminal{stdout: io.Discard, stderr: io.Discard, color: true}
	rev := strings.Repeat("ab", 20)
	fixed := record.Alert{Kind: record.AlertCompileRecovered, Compliance: model.Compliant, Message: "compile 2 succeeded (released): compiles fail no more"}
	legacy := record.Alert{Kind: record.AlertCompileFailed, Compliance: model.Compliant, Message: "compile 2 succeeded (released): compiles fail no more"}
	failed := record.Alert{Kind: record.AlertCompileFailed, Compliance: model.NonCompliant, Message: "compile 1 failed: main.hcl:3:15: Unknown variable"}
	for _, c := range []struct {
		e    server.Event
		want []string
	}{
		{server.Event{Kind: server.EventCompileStarted, Compile: &record.Compile{Outcome: record.CompileRunning, Triggers: record.Triggers{{Kind: record.TriggerFacts, Count: 3, By: "web-1"}}}},
			[]string{"compile", "started: facts ×3 (web-1)"}},
		{server.Event{Kind: server.EventCompileFinished, Compile: &record.Compile{Outcome: record.CompileReleased, Revision: rev, CompileResult: record.CompileResult{Version: 4}}},
			[]string{"\033[32mcompile", "version 4 released (revision abababababab)"}},
		{server.Event{Kind: server.EventCompileFinished, Compile: &record.Compile{Outcome: record.CompileSkipped, Revision: rev, CompileResult: record.CompileResult{SameAs: "0123456789abcdef"}}},
			[]string{"compile", "skipped at abababababab: nothing changed since compile 01234567"}},
		{server.Event{Kind: server.EventCompileFinished, Compile: &record.Compile{Outcome: record.CompileFailed, Revision: rev,
			CompileResult: record.CompileResult{Diagnostics: []record.CompileDiagnostic{{File: "main.hcl", Line: 3, Col: 15, Severity: "error", Message: "Unknown variable"}}}}},
			[]string{"\033[31mcompile", "failed at abababababab: main.hcl:3:15: Unknown variable"}},
		{server.Event{Kind: server.EventCompileAlert, Alert: &failed}, []string{"\033[31mfailing", "compile 1 failed"}},
		{server.Event{Kind: server.EventCompileRecovered, Alert: &fixed}, []string{"\033[32mrecovered", "compiles fail no more"}},
		{server.Event{Kind: server.EventCompileAlert, Alert: &legacy}, []string{"\033[32mrecovered"}},
	} {
		c.e.Env = "prod"
		line := eventLine(term, c.e)
		for _, w := range c.want {
			if !strings.Contains(line, w) {
				t.Errorf("event line %q lacks %q", line, w)
			}
		}
		if strings.Contains(line, "{") {
			t.Errorf("event line %q: JSON instead of words", line)
		}
	}
}
