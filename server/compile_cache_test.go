package server_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/tetherhq/tether/agent"
	"github.com/tetherhq/tether/bus"
	"github.com/tetherhq/tether/model/gitfetch/gittest"
	"github.com/tetherhq/tether/server"
	"github.com/tetherhq/tether/server/record"
	"github.com/tetherhq/tether/server/store"
)

// cachedRig is a server whose sources are the ones set through it, kept
// between compiles in cache.
func cachedRig(t *testing.T, cache string, settings record.EnvSettings) *rig {
	t.Helper()
	r := startRigWith(t, func(c *server.Config, st store.Store) {
		c.Sources = server.StoredSources(st, server.SourceOptions{AllowFile: true, CacheDir: cache})
	}, map[string]record.EnvSettings{"test": settings, "nosource": settings})
	r.waitCompiles()
	return r
}

// waveModel gives every agent a file holding its fact "wave".
const waveModel = "hostgroup \"all\" {\n  match = true\n  file \"/srv/wave\" { content = \"wave ${host.facts.wave} %s\" }\n}\n"

func waveOf(tag string) map[string]string {
	return map[string]string{"fleet/main.hcl": strings.Replace(waveModel, "%s", tag, 1)}
}

// push delivers a signed push of main at rev and returns the compile it
// asked for.
func (r *rig) push(secret, rev string) record.Compile {
	r.t.Helper()
	h, body := githubPush(secret, "refs/heads/main", rev, "main")
	if res, err := r.srv.Webhook(r.ctx, "test", h, body); err != nil || !res.Compile {
		r.t.Fatalf("push: %+v (%v), want a compile asked for", res, err)
	}
	return r.finished()
}

// releasedContent is what the released version puts in /srv/wave of
// agent.
func (r *rig) releasedContent(agent string) string {
	r.t.Helper()
	v, err := r.store.ReleasedVersion(r.ctx, "test")
	if err != nil {
		r.t.Fatal(err)
	}
	v, err = r.store.GetVersion(r.ctx, "test", v.Number, true)
	if err != nil {
		r.t.Fatal(err)
	}
	for _, res := range v.Resources {
		if res.ID.Agent == agent {
			s, _ := res.Attributes.String("content")
			return s
		}
	}
	return ""
}

// A compile whose revision and inputs are those of the last one is
// skipped, with a report that says so; a fact the model reads, a new
// commit, the environment's settings, another release, or an operator's
// request compile. The source's clone and work tree, kept between
// compiles, may be damaged or removed: the compile still reads the
// revision's files.
func TestCompileSkipsWhatDidNotChange(t *testing.T) {
	cache := filepath.Join(t.TempDir(), "sources")
	settings := quietSettings()
	settings.Enrollment = record.EnrollOpen
	r := cachedRig(t, cache, settings)
	repo := gittest.New(t)
	rev := repo.Commit(waveOf("one"))
	v, err := r.srv.SetSource(r.ctx, "test", record.SourceRequest{URL: repo.URL(), Ref: "main", Subdir: "fleet"}, "alice")
	if err != nil {
		t.Fatal(err)
	}
	secret := v.WebhookSecret
	if c := r.finished(); c.Outcome != record.CompileUnchanged && c.Outcome != record.CompileReleased {
		t.Fatalf("compile of the new source: %+v", c)
	}

	// An agent comes: the inventory changed, a compile releases its file.
	var wave atomic.Int64
	wave.Store(1)
	gather := func(context.Context) map[string]any { return map[string]any{"wave": wave.Load()} }
	r.startAgentWith(agent.Config{Env: "test", Name: "web-1", StateDir: t.TempDir(), ServerKey: r.srv.PublicKey(),
		Facts: gather, FactsInterval: 50 * time.Millisecond, NoWatch: true})
	ran := r.finished()
	if ran.Outcome != record.CompileReleased || ran.Triggers[0].Kind != record.TriggerAgent || ran.Revision != rev || ran.Inputs == "" {
		t.Fatalf("compile after the agent came: %+v, want released at %s, with its inputs", ran, rev)
	}
	if got := r.releasedContent("web-1"); got != "wave 1 one" {
		t.Fatalf("released content %q, want wave 1 one", got)
	}
	skippedBefore := metricWith(t, r.srv, "tether_compiles_total", `{outcome="skipped"}`)

	// The same revision pushed again, nothing else changed: skipped.
	for range 2 {
		c := r.push(secret, rev)
		if c.Outcome != record.CompileSkipped || c.Revision != rev || c.SameAs != ran.ID || c.Inputs != ran.Inputs || c.Version != 0 ||
			c.ResourcesPerAgent["web-1"] != 1 {
			t.Fatalf("push of the same revision: %+v, want skipped at %s, the same as %s", c, rev, ran.ID)
		}
		if got, err := r.srv.GetCompile(r.ctx, "test", c.ID); err != nil || got.Outcome != record.CompileSkipped || got.SameAs != ran.ID {
			t.Fatalf("stored report: %+v (%v), want skipped, the same as %s", got, err, ran.ID)
		}
	}
	if got := metricWith(t, r.srv, "tether_compiles_total", `{outcome="skipped"}`); got != skippedBefore+2 {
		t.Fatalf("tether_compiles_total{outcome=skipped} = %v, want %v", got, skippedBefore+2)
	}

	// A fact the model reads changes: the agent reports it, and the
	// compile it asks for runs.
	wave.Store(2)
	c := r.finished()
	if c.Outcome != record.CompileReleased || c.Triggers[0].Kind != record.TriggerFacts || c.Revision != rev {
		t.Fatalf("compile after the fact changed: %+v, want released, triggered by facts", c)
	}
	if got := r.releasedContent("web-1"); got != "wave 2 one" {
		t.Fatalf("released content %q, want wave 2 one", got)
	}
	if c := r.push(secret, rev); c.Outcome != record.CompileSkipped {
		t.Fatalf("push after the fact's compile: %+v, want skipped", c)
	}

	// An operator's request compiles, whatever the inputs.
	if c := r.compiled(); c.Outcome != record.CompileUnchanged {
		t.Fatalf("operator's request: %+v, want compiled (unchanged)", c)
	}

	// The environment's settings are inputs.
	autoRelease := func(on bool) {
		t.Helper()
		if _, err := r.srv.UpdateEnvSettings(r.ctx, "test", func(s *record.EnvSettings) error { s.AutoRelease = on; return nil }); err != nil {
			t.Fatal(err)
		}
	}
	autoRelease(false)
	if c := r.push(secret, rev); c.Outcome == record.CompileSkipped || c.Outcome == record.CompileFailed {
		t.Fatalf("push after a settings change: %+v, want compiled", c)
	}
	autoRelease(true)
	r.push(secret, rev)

	// Another version released since (a rollback): compiled, and the
	// model's version released again, as before the skips.
	if _, err := r.srv.Release(r.ctx, "test", ran.Version); err != nil {
		t.Fatal(err)
	}
	if c := r.push(secret, rev); c.Outcome != record.CompileReleased {
		t.Fatalf("push after a rollback: %+v, want the model released again", c)
	}

	// A new commit: fetched (what is new) and compiled.
	rev2 := repo.Commit(waveOf("two"))
	if c := r.push(secret, rev2); c.Outcome != record.CompileReleased || c.Revision != rev2 {
		t.Fatalf("push of a new commit: %+v, want released at %s", c, rev2)
	}
	if got := r.releasedContent("web-1"); got != "wave 2 two" {
		t.Fatalf("released content %q, want wave 2 two", got)
	}

	// The work tree edited behind the server's back: the compile reads
	// the revision's files, not the edit.
	entries, err := filepath.Glob(filepath.Join(cache, "*", "tree", "main.hcl"))
	if err != nil || len(entries) != 1 {
		t.Fatalf("the kept work tree: %v (%v), want one", entries, err)
	}
	if err := os.WriteFile(entries[0], []byte(strings.Replace(waveModel, "%s", "EDITED", 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	if c := r.compiled(); c.Outcome != record.CompileUnchanged {
		t.Fatalf("compile after the work tree was edited: %+v, want unchanged (the tree written again)", c)
	}
	// The whole cache gone, and the history rewritten (a force push).
	if err := os.RemoveAll(cache); err != nil {
		t.Fatal(err)
	}
	rev3 := repo.Rewrite(waveOf("three"))
	if c := r.push(secret, rev3); c.Outcome != record.CompileReleased || c.Revision != rev3 {
		t.Fatalf("push after the cache went and the history was rewritten: %+v, want released at %s", c, rev3)
	}
	if got := r.releasedContent("web-1"); got != "wave 2 three" {
		t.Fatalf("released content %q, want wave 2 three", got)
	}
	if _, err := os.Stat(cache); err != nil {
		t.Fatalf("the cache was not made again: %v", err)
	}
}

// replicaOf runs another server on r's store, with a bus of its own and
// sources kept in cache.
func replicaOf(t *testing.T, r *rig, cache string) *rig {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	b := bus.NewLocal(zerolog.Nop())
	srv, err := server.New(server.Config{Sources: server.StoredSources(r.store, server.SourceOptions{AllowFile: true, CacheDir: cache})}, r.store, b, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	o := &rig{t: t, ctx: ctx, store: r.store, bus: b, srv: srv, sub: srv.Subscribe(), roots: map[string]string{}, cancel: cancel}
	o.wg.Add(1)
	go func() {
		defer o.wg.Done()
		if err := srv.Run(ctx); err != nil && !errors.Is(err, context.Canceled) {
			t.Errorf("replica: %v", err)
		}
	}()
	t.Cleanup(func() {
		cancel()
		b.Close()
		o.wg.Wait()
	})
	o.waitCompiles()
	return o
}

// Two replicas share nothing but the database: one skips the compile of
// what the other compiled, without a clone of its own; each fetches into
// its own cache when it must compile.
func TestCompileSkipsAcrossReplicas(t *testing.T) {
	a := cachedRig(t, filepath.Join(t.TempDir(), "a"), quietSettings())
	if err := a.store.UpsertAgent(a.ctx, record.Agent{Env: "test", Name: "web-1", State: record.AgentAccepted, Facts: map[string]any{"wave": 1}}); err != nil {
		t.Fatal(err)
	}
	repo := gittest.New(t)
	rev := repo.Commit(waveOf("one"))
	v, err := a.srv.SetSource(a.ctx, "test", record.SourceRequest{URL: repo.URL(), Ref: "main", Subdir: "fleet"}, "alice")
	if err != nil {
		t.Fatal(err)
	}
	first := a.finished()
	if first.Outcome != record.CompileReleased {
		t.Fatalf("first compile: %+v, want released", first)
	}
	bCache := filepath.Join(t.TempDir(), "b")
	b := replicaOf(t, a, bCache)
	h, body := githubPush(v.WebhookSecret, "refs/heads/main", rev, "main")
	if _, err := b.srv.Webhook(b.ctx, "test", h, body); err != nil {
		t.Fatal(err)
	}
	c := b.finished()
	if c.Outcome != record.CompileSkipped || c.SameAs != first.ID {
		t.Fatalf("the other replica's compile: %+v, want skipped, the same as %s", c, first.ID)
	}
	if entries, _ := filepath.Glob(filepath.Join(bCache, "*", "git")); len(entries) != 0 {
		t.Fatalf("the other replica cloned the repository to skip a compile: %v", entries)
	}
	rev2 := repo.Commit(waveOf("two"))
	h, body = githubPush(v.WebhookSecret, "refs/heads/main", rev2, "main")
	if _, err := b.srv.Webhook(b.ctx, "test", h, body); err != nil {
		t.Fatal(err)
	}
	if c := b.finished(); c.Outcome != record.CompileReleased || c.Revision != rev2 {
		t.Fatalf("the other replica's compile of a new commit: %+v, want released at %s", c, rev2)
	}
}
