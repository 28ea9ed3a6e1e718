package server_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/tetherhq/tether/bus"
	"github.com/tetherhq/tether/model"
	"github.com/tetherhq/tether/model/gitfetch/gittest"
	"github.com/tetherhq/tether/server"
	"github.com/tetherhq/tether/server/record"
	"github.com/tetherhq/tether/server/store/sqlite"
)

// BenchmarkGitCompile measures a server compile of a model kept in a
// 4.7 MB git repository (file://), from the trigger to the compile's
// report: one op pushes (a signed webhook delivery) and waits for
// compile.finished. report-ms is the compile's own time, as its report
// says (started to finished). The server keeps the repository's clone and
// work tree between compiles (SourceOptions.CacheDir).
//
//   - unchanged: the same revision, the same inventory (a replayed push):
//     the compile is skipped;
//   - facts: the same revision, a fact the model reads changed: the work
//     tree is reused, and the model compiled;
//   - commit: a new commit changing the model: fetched (what is new) and
//     checked out.
//
// It runs on SQLite and the in-process bus (the store's and the bus's
// costs are not the subject):
//
//	go test ./server -run '^$' -bench GitCompile -benchtime 20x -count 3
func BenchmarkGitCompile(b *testing.B) {
	for _, kind := range []string{"unchanged", "facts", "commit"} {
		b.Run(kind, func(b *testing.B) { benchGitCompile(b, kind) })
	}
}

// benchModel places one file on every agent, from a fact.
const benchModel = "hostgroup \"all\" {\n  match = true\n  file \"/etc/motd\" { content = \"wave ${host.facts.wave} %d\" }\n}\n"

func benchGitCompile(b *testing.B, kind string) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	// 4.7 MB of files the model does not read (templates, vendored
	// data), random so that they do not compress, over three commits.
	repo := gittest.New(b)
	rnd := rand.NewChaCha8([32]byte{1})
	rev := ""
	for c := range 3 {
		files := map[string]string{"main.hcl": fmt.Sprintf(benchModel, 0)}
		for i := range 100 {
			data := make([]byte, 16<<10)
			_, _ = rnd.Read(data)
			files[fmt.Sprintf("data/%d/%03d.bin", c, i)] = string(data)
		}
		rev = repo.Commit(files)
	}
	st, err := sqlite.Open(ctx, filepath.Join(b.TempDir(), "t.db"), sqlite.Config{})
	if err != nil {
		b.Fatal(err)
	}
	defer st.Close()
	l := bus.NewLocal(zerolog.Nop())
	defer l.Close()
	settings := record.DefaultEnvSettings()
	settings.AutoDeploy = false
	if err := st.CreateEnv(ctx, record.Environment{Name: "prod", Settings: settings}); err != nil {
		b.Fatal(err)
	}
	web := record.Agent{Env: "prod", Name: "web-1", State: record.AgentAccepted, Facts: map[string]any{"wave": 0}}
	if err := st.UpsertAgent(ctx, web); err != nil {
		b.Fatal(err)
	}
	sources := server.StoredSources(st, server.SourceOptions{AllowFile: true, CacheDir: b.TempDir()})
	srv, err := server.New(server.Config{Sources: sources, CompileSettle: time.Millisecond}, st, l, zerolog.Nop())
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
	finished := func() record.Compile {
		wctx, stop := context.WithTimeout(ctx, 5*time.Minute)
		defer stop()
		for {
			e, err := sub.Next(wctx)
			if err != nil {
				b.Fatalf("waiting for a compile: %v", err)
			}
			if e.Kind == server.EventCompileFinished && e.Compile != nil {
				return *e.Compile
			}
		}
	}
	// The server hears compile triggers once it runs.
	for {
		if _, err := srv.RequestCompile(ctx, "prod", "bench"); !errors.Is(err, model.ErrUnavailable) {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	v, err := srv.SetSource(ctx, "prod", record.SourceRequest{URL: repo.URL(), Ref: "main"}, "bench")
	if err != nil {
		b.Fatal(err)
	}
	if c := finished(); c.Outcome == record.CompileFailed {
		b.Fatalf("first compile: %+v", c)
	}
	var report time.Duration
	b.ResetTimer()
	for i := range b.N {
		switch kind {
		case "facts":
			b.StopTimer()
			web.Facts = map[string]any{"wave": i + 1}
			if err := st.UpsertAgent(ctx, web); err != nil {
				b.Fatal(err)
			}
			b.StartTimer()
		case "commit":
			b.StopTimer()
			rev = repo.Commit(map[string]string{"main.hcl": fmt.Sprintf(benchModel, i+1)})
			b.StartTimer()
		}
		h, body := githubPush(v.WebhookSecret, "refs/heads/main", rev, "main")
		if _, err := srv.Webhook(ctx, "prod", h, body); err != nil {
			b.Fatal(err)
		}
		c := finished()
		if skipped := c.Outcome == record.CompileSkipped; c.Outcome == record.CompileFailed || skipped != (kind == "unchanged") {
			b.Fatalf("compile: %+v; want skipped only when nothing changed", c)
		}
		report += c.Duration()
	}
	b.ReportMetric(float64(report.Milliseconds())/float64(b.N), "report-ms")
}
