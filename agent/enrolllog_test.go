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

// An agent tells its version and protocol in hello and heartbeats; told
// that the server does not take its protocol, it says so at the default
// level (error), naming both protocols, and slows its hellos down.
func TestVersionToldAndProtocolRefusalLogged(t *testing.T) {
	s := newFakeServer(t)
	var seen int
	var logs testenv.SyncBuffer
	startLogging(t, s, "web", t.TempDir(), t.TempDir(), nil, zerolog.New(&logs).Level(zerolog.WarnLevel), func(c *Config) { c.Version = "v7.7.7" })
	var h bus.Hello
	if err := s.next(&seen, "web", bus.KindHello).DecodeBody(&h); err != nil || h.Version != "v7.7.7" || h.Protocol != bus.Protocol {
		t.Fatalf("hello: version %q, protocol %q (%v); want v7.7.7, %s", h.Version, h.Protocol, err, bus.Protocol)
	}
	s.send("web", bus.KindRejected, bus.Rejected{Reason: "the agent speaks protocol 1.1 and this server 2.0", Protocol: "2.0"})
	want := "does not take this agent's protocol version (" + bus.Protocol + "; the server speaks 2.0)"
	deadline := time.Now().Add(patience)
	for l := logs.String(); !strings.Contains(l, `"level":"error"`) || !strings.Contains(l, want); l = logs.String() {
		if time.Now().After(deadline) {
			t.Fatalf("no refusal of the protocol logged at error within %s; log:\n%s", patience, l)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if strings.Contains(logs.String(), "ask an operator to accept it") {
		t.Fatalf("the refusal of the protocol was logged as one of enrollment:\n%s", logs.String())
	}
}
