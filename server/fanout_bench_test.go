package server_test

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/tetherhq/tether/bus"
	"github.com/tetherhq/tether/bus/amqp/amqptest"
	"github.com/tetherhq/tether/model"
	"github.com/tetherhq/tether/server"
	"github.com/tetherhq/tether/server/record"
	"github.com/tetherhq/tether/server/store"
	"github.com/tetherhq/tether/server/store/postgres/pgtest"
	"github.com/tetherhq/tether/server/store/sqlite"
)

// BenchmarkFanout measures a release's fan-out to accepted agents with 20
// resources each, one of which changes per release: each agent is sent a
// diff and a deploy. One op releases a new version (exporting it is not
// timed) and waits for the fan-out's release.done event; answer-ms is how
// long Release took to answer, fanout-ms the fan-out itself. It runs on the
// in-process bus with SQLite (the embedded mode) and on RabbitMQ (classic
// inboxes) with PostgreSQL (a server):
//
//	go test ./server -run '^$' -bench Fanout -benchtime 3x -count 2
func BenchmarkFanout(b *testing.B) {
	const agents = 2000
	b.Run(fmt.Sprintf("local/agents=%d", agents), func(b *testing.B) {
		st, err := sqlite.Open(context.Background(), filepath.Join(b.TempDir(), "t.db"), sqlite.Config{})
		if err != nil {
			b.Fatal(err)
		}
		defer st.Close()
		l := bus.NewLocal(zerolog.Nop())
		defer l.Close()
		benchFanout(b, agents, st, l)
	})
	b.Run(fmt.Sprintf("rabbitmq/agents=%d", agents), func(b *testing.B) {
		benchFanout(b, agents, pgtest.Open(b), amqptest.Open(b, amqptest.Config(b)))
	})
}

func benchFanout(b *testing.B, agents int, st store.Store, bb bus.Bus) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	settings := record.DefaultEnvSettings()
	settings.AutoDeploy = true
	settings.VersionsToKeep = 3
	if err := st.CreateEnv(ctx, record.Environment{Name: "prod", Settings: settings}); err != nil {
		b.Fatal(err)
	}
	for i := range agents {
		name := fmt.Sprintf("host-%05d", i)
		if err := st.UpsertAgent(ctx, record.Agent{Env: "prod", Name: name, State: record.AgentAccepted}); err != nil {
			b.Fatal(err)
		}
		if err := bb.DeclareInbox(ctx, "prod", name); err != nil {
			b.Fatal(err)
		}
	}
	srv, err := server.New(server.Config{}, st, bb, zerolog.Nop())
	if err != nil {
		b.Fatal(err)
	}
	sub := srv.Subscribe()
	defer sub.Close()
	done := make(chan error, 1)
	go func() { done <- srv.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
			b.Error(err)
		}
	}()
	var answer, fanout time.Duration // summed over the timed ops
	release := func(round int) {
		rs := make([]model.Resource, 0, agents*20)
		for i := range agents {
			name := fmt.Sprintf("host-%05d", i)
			for j := range 20 {
				content := "stable"
				if j == 0 {
					content = fmt.Sprint(round)
				}
				rs = append(rs, file(name, fmt.Sprintf("/etc/app/%02d.conf", j), content))
			}
		}
		b.StopTimer()
		v, _, err := srv.Export(ctx, "prod", rs, model.VersionMeta{Compiler: "bench"})
		if err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		start := time.Now()
		rel, err := srv.Release(ctx, "prod", v.Number)
		answer += time.Since(start)
		if err != nil || rel.ReleaseID == "" {
			b.Fatalf("release: %+v, %v", rel, err)
		}
		for {
			e, err := sub.Next(ctx)
			if err != nil {
				b.Fatal(err)
			}
			if e.Kind == server.EventReleaseDone && e.Release.ID == rel.ReleaseID {
				if r := e.Release; r.State != record.ReleaseDone || r.Sent != agents {
					b.Fatalf("release %+v, want done, %d agents sent", r, agents)
				}
				fanout += e.Release.FinishedAt.Sub(e.Release.StartedAt)
				return
			}
		}
	}
	release(0) // every agent holds a version: the rest are diffs
	answer, fanout = 0, 0
	b.ResetTimer()
	for i := range b.N {
		release(i + 1)
	}
	b.StopTimer()
	b.ReportMetric(float64(agents)*float64(b.N)/b.Elapsed().Seconds(), "agents/s")
	// What the caller waits for (the version released and the release
	// recorded), and the fan-out in the background, from the release's
	// own times.
	b.ReportMetric(float64(answer.Milliseconds())/float64(b.N), "answer-ms")
	b.ReportMetric(float64(fanout.Milliseconds())/float64(b.N), "fanout-ms")
}
