package cli

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tetherhq/tether/model"
	"github.com/tetherhq/tether/server/record"
)

// asTerminal makes every writer count as a terminal for the rest of the
// test, as stdout and stderr are when a person runs tether.
func asTerminal(t *testing.T) {
	t.Helper()
	saved := isTerminal
	isTerminal = func(io.Writer) bool { return true }
	t.Cleanup(func() { isTerminal = saved })
}

// fakeResources is a server that answers `tether resource list` for
// environment prod with a deployed and a failed resource.
func fakeResources(t *testing.T) {
	t.Helper()
	sts := []record.ResourceStatus{
		{ID: model.ID{Type: "file", Agent: "web-1", Key: "path", Value: "/etc/motd"}, Version: 3, State: model.StateDeployed, Compliance: model.Compliant, UpdatedAt: time.Now()},
		{ID: model.ID{Type: "file", Agent: "web-1", Key: "path", Value: "/etc/issue"}, Version: 3, State: model.StateFailed, Compliance: model.NonCompliant, UpdatedAt: time.Now(), Message: "permission denied"},
	}
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/api/v1/envs/prod/resources" {
			http.Error(w, `{"error":{"code":"not_found","message":"no such path"}}`, http.StatusNotFound)
			return
		}
		_ = json.NewEncoder(w).Encode(sts)
	}))
	t.Cleanup(ts.Close)
	t.Setenv("TETHER_SERVER", ts.URL)
	t.Setenv("TETHER_TOKEN", "test")
	t.Setenv("TETHER_ENV", "prod")
}

// Colour is shown only on a terminal and never under NO_COLOR, as escape
// codes (never a colour's name), for tables and compile diagnostics alike.
func TestColourOnlyOnATerminal(t *testing.T) {
	bad := t.TempDir()
	if err := os.WriteFile(filepath.Join(bad, "main.hcl"), []byte("host \"local\" {\n  file \"/x\" {\n    colour = \"red\"\n  }\n}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name     string
		terminal bool
		noColor  string
		want     bool
	}{
		{"piped", false, "", false},
		{"terminal", true, "", true},
		{"terminal with NO_COLOR", true, "1", false},
		{"piped with NO_COLOR", false, "1", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Setenv("NO_COLOR", tt.noColor)
			if tt.terminal {
				asTerminal(t)
			}
			code, _, errs := invoke(t, "compile", bad)
			if code != exitUsage || !strings.Contains(errs, "Unsupported argument") {
				t.Fatalf("compile of a bad model: exit %d, want %d:\n%s", code, exitUsage, errs)
			}
			if got := strings.Contains(errs, "\033["); got != tt.want {
				t.Fatalf("compile diagnostics: escape codes %v, want %v:\n%q", got, tt.want, errs)
			}

			fakeResources(t)
			code, out, errs := invoke(t, "resource", "list")
			if code != 0 {
				t.Fatalf("resource list: exit %d: %s", code, errs)
			}
			for _, name := range []string{"green", "red", "yellow"} {
				if strings.Contains(out, name) {
					t.Fatalf("resource list prints the colour name %q:\n%q", name, out)
				}
			}
			if got := strings.Contains(out, "\033["); got != tt.want {
				t.Fatalf("resource list: escape codes %v, want %v:\n%q", got, tt.want, out)
			}
			if tt.want && !strings.Contains(out, "\033[32mdeployed\033[0m") {
				t.Fatalf("resource list: deployed is not green:\n%q", out)
			}
			if !strings.Contains(out, "deployed") || !strings.Contains(out, "failed") {
				t.Fatalf("resource list lacks the states:\n%q", out)
			}
		})
	}
}
