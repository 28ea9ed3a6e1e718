package agent

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/tetherhq/tether/agent/handler"
	"github.com/tetherhq/tether/agent/handler/builtin"
	"github.com/tetherhq/tether/bus"
)

// logBuffer is a log sink safe for the agent's goroutines.
type logBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestNotEnrolledIsSaidAtTheDefaultLevel: an agent whose hello gets no
// answer (a mistyped environment, an operator yet to accept it) says so at
// the default level (warn), naming the environment; one the server refuses
// says why.
func TestNotEnrolledIsSaidAtTheDefaultLevel(t *testing.T) {
	s := newFakeServer(t)
	reg, err := builtin.Registry(handler.Runtime{Root: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	cfg := Config{Env: "prdo", Name: "web", StateDir: t.TempDir(), Heartbeat: 50 * time.Millisecond, HelloRetry: 50 * time.Millisecond,
		HelloRetryMax: time.Hour, ClaimRetry: 20 * time.Millisecond, ClaimWait: 200 * time.Millisecond, ServerKey: s.signer.PublicKey()}
	var logs logBuffer
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

	waitLog := func(want ...string) {
		t.Helper()
		for deadline := time.Now().Add(patience); ; time.Sleep(10 * time.Millisecond) {
			got := logs.String()
			all := true
			for _, w := range want {
				all = all && strings.Contains(got, w)
			}
			if all {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("the agent's log at warn level does not say %q:\n%s", want, got)
			}
		}
	}
	waitLog("no answer from the server to this agent's hello", "environment prdo may not exist on the server (check --env)")

	// The server answers with a refusal: its reason is logged.
	if err := s.bus.DeclareInbox(ctx, "prdo", "web"); err != nil {
		t.Fatal(err)
	}
	e, err := s.signer.Seal(bus.KindRejected, "prdo", "web", bus.Rejected{Reason: "unknown or revoked enrollment token"})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.bus.Send(ctx, e, bus.SendOptions{}); err != nil {
		t.Fatal(err)
	}
	waitLog("the server does not enroll this agent: unknown or revoked enrollment token")
}
