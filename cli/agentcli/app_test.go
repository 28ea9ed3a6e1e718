package agentcli

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"

	"github.com/rs/zerolog"

	"github.com/tetherhq/tether/bus"
)

func TestMain(t *testing.T) {
	tests := []struct {
		args     []string
		code     int
		stdout   string // a part of what is printed there
		stderr   string
		jsonWant bool
	}{
		{args: []string{"version"}, stdout: "protocol " + bus.Protocol},
		{args: []string{"version", "-o", "json"}, jsonWant: true},
		{args: []string{"version", "-o", "yaml"}, code: ExitUsage, stderr: `-o "yaml": use text or json`},
		{args: []string{"--help"}, stdout: "tether-agent run --config /etc/tether/agent.toml"},
		{args: []string{"frobnicate"}, code: ExitUsage, stderr: `unknown command "frobnicate"`},
		{args: []string{"run", "--config", "/nonexistent/agent.toml"}, code: ExitUsage, stderr: "--config /nonexistent/agent.toml"},
		{args: []string{"run", "--config", "/dev/null", "--env", "Bad Env"}, code: ExitUsage, stderr: "--env"},
		{args: []string{"run", "--no-such-flag"}, code: ExitUsage, stderr: "see 'tether-agent run --help'"},
		{args: []string{"--log-level", "loud", "run", "--env", "prod"}, code: ExitUsage, stderr: `--log-level "loud"`},
		// After the command too, as the unit gives them and as tether agent run takes them.
		{args: []string{"run", "--env", "prod", "--log-level", "loud"}, code: ExitUsage, stderr: `--log-level "loud"`},
		{args: []string{"run", "--log-format=yaml", "--env", "prod"}, code: ExitUsage, stderr: `--log-format "yaml"`},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			t.Setenv("TETHER_AGENT_CONFIG", "/dev/null") // not whatever this machine has in /etc/tether
			var stdout, stderr bytes.Buffer
			code := Main(context.Background(), append([]string{"tether-agent"}, tt.args...), &stdout, &stderr)
			if code != tt.code {
				t.Fatalf("exit %d, want %d; stderr %q", code, tt.code, stderr.String())
			}
			if !strings.Contains(stdout.String(), tt.stdout) {
				t.Fatalf("stdout %q, want it to say %q", stdout.String(), tt.stdout)
			}
			if !strings.Contains(stderr.String(), tt.stderr) {
				t.Fatalf("stderr %q, want it to say %q", stderr.String(), tt.stderr)
			}
			if tt.jsonWant {
				var got struct{ Version, Protocol, Platform string }
				if err := json.Unmarshal(stdout.Bytes(), &got); err != nil || got.Version == "" || got.Protocol != bus.Protocol || got.Platform == "" {
					t.Fatalf("version -o json: %q (%v), want version, protocol %s and platform", stdout.String(), err, bus.Protocol)
				}
			}
		})
	}
}

// The server, the agent and the progress of one process write to its
// stderr at once: through Serialized, every write lands whole, even on a
// writer that is not safe for goroutines (a buffer, as the tests give).
func TestSerializedTakesWritesWhole(t *testing.T) {
	var buf bytes.Buffer
	w := Serialized(&buf)
	log := zerolog.New(w)
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 200 {
				if g%2 == 0 {
					log.Info().Int("g", g).Int("i", i).Msg("logged")
				} else {
					fmt.Fprintf(w, "printed %d %d\n", g, i)
				}
			}
		}()
	}
	wg.Wait()
	lines := strings.Split(strings.TrimSuffix(buf.String(), "\n"), "\n")
	if len(lines) != 8*200 {
		t.Fatalf("%d lines, want %d", len(lines), 8*200)
	}
	for _, l := range lines {
		var v map[string]any
		if !strings.HasPrefix(l, "printed ") && json.Unmarshal([]byte(l), &v) != nil {
			t.Fatalf("a write was torn: %q", l)
		}
	}
	if f := Serialized(os.Stderr); f != os.Stderr {
		t.Fatalf("Serialized(os.Stderr) = %T, want the file itself (it takes writes whole)", f)
	}
}
