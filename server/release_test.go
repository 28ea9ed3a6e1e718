package server_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/rs/zerolog"

	"github.com/tetherhq/tether/agent"
	"github.com/tetherhq/tether/agent/handler"
	"github.com/tetherhq/tether/agent/handler/builtin"
	"github.com/tetherhq/tether/bus"
	"github.com/tetherhq/tether/model"
	"github.com/tetherhq/tether/server"
	"github.com/tetherhq/tether/server/record"
	"github.com/tetherhq/tether/server/scheduler"
	"github.com/tetherhq/tether/server/store/sqlite"
)

// gatedBus lets the first pass batches of commands through, then holds
// every batch until the gate opens (or the sender gives up): a broker as
// slow as a test wants, mid fan-out.
type gatedBus struct {
	*bus.Local
	mu      sync.Mutex
	pass    int
	gate    chan struct{}
	blocked chan struct{} // a batch is held
}

func newGatedBus(l *bus.Local, pass int) *gatedBus {
	return &gatedBus{Local: l, pass: pass, gate: make(chan struct{}), blocked: make(chan struct{}, 1)}
}

func (b *gatedBus) SendBatch(ctx context.Context, msgs []bus.Outgoing) []error {
	b.mu.Lock()
	through := b.pass > 0
	b.pass--
	b.mu.Unlock()
	if !through {
		select {
		case b.blocked <- struct{}{}:
		default:
		}
		select {
		case <-b.gate:
		case <-ctx.Done():
			errs := make([]error, len(msgs))
			for i := range errs {
				errs[i] = ctx.Err()
			}
			return errs
		}
	}
	return b.Local.SendBatch(ctx, msgs)
}

// runServer runs srv until the returned stop is called (or the test ends).
func runUntilStopped(t *testing.T, srv *server.Server) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Run(ctx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
				t.Errorf("server: %v", err)
			}
		})
	}
	t.Cleanup(stop)
	return stop
}

// A server stopped mid fan-out loses nothing: the version stays released
// and its release running; an agent that says hello gets the version
// while the fan-out is still held up; the next server to lead the
// environment resumes the fan-out, which reaches every agent.
func TestServerStoppedMidFanoutLosesNothing(t *testing.T) {
	ctx := context.Background()
	st, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "tether.db"), sqlite.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	local := bus.NewLocal(zerolog.Nop())
	t.Cleanup(local.Close)
	settings := record.DefaultEnvSettings()
	settings.AutoDeploy = true
	settings.Enrollment = record.EnrollOpen
	if err := st.CreateEnv(ctx, record.Environment{Name: "prod", Settings: settings}); err != nil {
		t.Fatal(err)
	}
	const agents = 300
	rs := []model.Resource{file("late", "/motd", "hello")}
	for i := range agents {
		name := fmt.Sprintf("web-%03d", i)
		if err := st.UpsertAgent(ctx, record.Agent{Env: "prod", Name: name, State: record.AgentAccepted}); err != nil {
			t.Fatal(err)
		}
		if err := local.DeclareInbox(ctx, "prod", name); err != nil {
			t.Fatal(err)
		}
		rs = append(rs, file(name, "/motd", "hello"))
	}
	cfg := server.Config{Fanout: scheduler.FanoutConfig{PageSize: 50, Workers: 1}}

	// Server a sends the first page, and is stopped while the broker
	// holds the second.
	gateA := newGatedBus(local, 1)
	a, err := server.New(cfg, st, gateA, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	stopA := runUntilStopped(t, a)
	v, _, err := a.Export(ctx, "prod", rs, model.VersionMeta{Compiler: "test"})
	if err != nil {
		t.Fatal(err)
	}
	rel, err := a.Release(ctx, "prod", v.Number)
	if err != nil || rel.ReleaseID == "" || rel.State != model.VersionReleased {
		t.Fatalf("release: %+v, %v; want version %d released with a release id", rel, err, v.Number)
	}
	<-gateA.blocked
	stopA()
	if got, err := st.ReleasedVersion(ctx, "prod"); err != nil || got.Number != v.Number {
		t.Fatalf("released version after the stop: %+v, %v; want %d", got, err, v.Number)
	}
	left, err := st.GetRelease(ctx, "prod", rel.ReleaseID)
	if err != nil || left.State != record.ReleaseRunning {
		t.Fatalf("release after the stop: %+v, %v; want still running, for the next leader", left, err)
	}

	// Server b leads next; its broker holds the fan-out it resumes.
	gateB := newGatedBus(local, 0)
	b, err := server.New(cfg, st, gateB, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	sub := b.Subscribe()
	defer sub.Close()
	runUntilStopped(t, b)
	<-gateB.blocked // resumed, and held

	// An agent that says hello meanwhile gets the version and deploys it.
	root := t.TempDir()
	reg, err := builtin.Registry(handler.Runtime{Root: root, Sync: handler.NewSyncGroup()})
	if err != nil {
		t.Fatal(err)
	}
	late, err := agent.New(agent.Config{Env: "prod", Name: "late", ServerKey: b.PublicKey()}, local, reg, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	actx, stopAgent := context.WithCancel(ctx)
	agentDone := make(chan struct{})
	go func() {
		defer close(agentDone)
		defer late.Close()
		_ = late.Run(actx)
	}()
	defer func() { stopAgent(); <-agentDone }()
	waitFor(t, "the late agent to deploy the version on its hello", func() bool {
		got, err := os.ReadFile(filepath.Join(root, "motd"))
		return err == nil && string(got) == "hello"
	})

	// The broker takes the rest: the resumed fan-out reaches everyone.
	close(gateB.gate)
	done, err := b.WaitRelease(ctx, "prod", rel.ReleaseID)
	if err != nil {
		t.Fatal(err)
	}
	// The late agent was accepted after the pages it would be on were
	// listed, or before: counted or not, it holds the version.
	if done.State != record.ReleaseDone || done.Agents < agents || done.Done() != done.Agents || done.PendingCount != 0 || done.Sent < agents {
		t.Fatalf("resumed release: %+v; want done, at least %d agents sent the version, none pending", done, agents)
	}
	for {
		e, err := sub.Next(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if e.Kind == server.EventReleaseDone {
			if e.Release == nil || e.Release.ID != rel.ReleaseID || e.Release.State != record.ReleaseDone {
				t.Fatalf("release.done event %+v, want the release, done", e)
			}
			break
		}
	}
	// The last agent of the last page holds its desired state.
	got := make(chan bus.Kind, 8)
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		_ = local.ConsumeInbox(cctx, "prod", "web-299", func(_ context.Context, d bus.Delivery) error {
			got <- d.Envelope.Kind
			return nil
		})
	}()
	if k := <-got; k != bus.KindDesiredFull {
		t.Fatalf("web-299 got %s first, want its desired state", k)
	}
}
