package agent

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/tetherhq/tether/agent/handler"
	"github.com/tetherhq/tether/agent/handler/builtin"
	"github.com/tetherhq/tether/bus"
	"github.com/tetherhq/tether/model/testenv"
)

// The operator compares the fingerprint of the key an agent pinned with
// `tether server key`: pinning is logged at the CLI's default level, warn.
func TestEnrollmentLogsTheServerKeyAtTheDefaultLevel(t *testing.T) {
	s := newFakeServer(t)
	reg, err := builtin.Registry(handler.Runtime{Root: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	var logs testenv.SyncBuffer
	cfg := Config{Env: "test", Name: "web", StateDir: t.TempDir(), Heartbeat: 50 * time.Millisecond, HelloRetry: 50 * time.Millisecond,
		HelloRetryMax: time.Hour, ClaimRetry: 20 * time.Millisecond, ClaimWait: 200 * time.Millisecond, ServerKey: s.signer.PublicKey()}
	a, err := New(cfg, s.bus, reg, zerolog.New(&logs).Level(zerolog.WarnLevel))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := a.Run(ctx); err != nil && !errors.Is(err, context.Canceled) {
			t.Errorf("agent: %v", err)
		}
	}()
	t.Cleanup(func() { cancel(); <-done; a.Close() })

	var seen int
	if s.next(&seen, "web", bus.KindHello) == nil {
		t.Fatal("no hello")
	}
	s.enroll("web")
	want := `"server_key":"` + bus.Fingerprint(s.signer.PublicKey()) + `"`
	deadline := time.Now().Add(patience)
	for !strings.Contains(logs.String(), "enrolled; server key pinned") {
		if time.Now().After(deadline) {
			t.Fatalf("no pinning logged at warn within %s; log:\n%s", patience, logs.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
	if line := logs.String(); !strings.Contains(line, want) || !strings.Contains(line, `"level":"warn"`) {
		t.Fatalf("log %q: want level warn and %s", line, want)
	}
}
