package server_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tetherhq/tether/agent"
	"github.com/tetherhq/tether/model"
	"github.com/tetherhq/tether/server"
	"github.com/tetherhq/tether/server/compile/queue"
	"github.com/tetherhq/tether/server/notify"
	"github.com/tetherhq/tether/server/record"
	"github.com/tetherhq/tether/server/store"
)

// models is a fake server.Sources: each environment's model is the files
// a test wrote, its revision the name the test gave them.
type models struct {
	mu    sync.Mutex
	files map[string]map[string]string // env → file → content
	rev   map[string]string
}

var _ server.Sources = (*models)(nil)

func (m *models) set(env, rev string, files map[string]string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.files[env], m.rev[env] = files, rev
}

func (m *models) Has(_ context.Context, env string) (bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	_, ok := m.files[env]
	return ok, nil
}

func (m *models) Resolve(_ context.Context, env string) (server.Resolved, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.files[env]; !ok {
		return server.Resolved{}, errors.New("no source")
	}
	return server.Resolved{Revision: m.rev[env], Source: "models " + env}, nil
}

func (m *models) Checkout(_ context.Context, env string) (server.Checkout, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	files, ok := m.files[env]
	if !ok {
		return server.Checkout{}, errors.New("no source")
	}
	dst, err := os.MkdirTemp("", "tether-models-*")
	if err != nil {
		return server.Checkout{}, err
	}
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(dst, name), []byte(content), 0o644); err != nil {
			os.RemoveAll(dst)
			return server.Checkout{}, err
		}
	}
	return server.Checkout{Dir: dst, Revision: m.rev[env], Source: "models " + env, Release: func() { os.RemoveAll(dst) }}, nil
}

// compileRig is a server that compiles the models of m, with an
// environment "test".
func compileRig(t *testing.T, m *models, settings record.EnvSettings) *rig {
	t.Helper()
	r := startRig(t, server.Config{Sources: m}, map[string]record.EnvSettings{"test": settings, "nosource": settings})
	r.waitCompiles()
	return r
}

// waitCompiles returns once the server hears compile triggers (Run made
// its compile queue); it asks for one of "nosource", which has none.
func (r *rig) waitCompiles() {
	for {
		if _, err := r.srv.RequestCompile(r.ctx, "nosource", "test"); !errors.Is(err, model.ErrUnavailable) {
			return
		}
		runtime.Gosched()
	}
}

// compiled asks for a compile and returns its report.
func (r *rig) compiled() record.Compile {
	r.t.Helper()
	if _, err := r.srv.RequestCompile(r.ctx, "test", "alice"); err != nil {
		r.t.Fatalf("request a compile: %v", err)
	}
	return r.finished()
}

// finished returns the report of the next compile that ends.
func (r *rig) finished() record.Compile {
	r.t.Helper()
	e := r.next(server.EventCompileFinished)
	if e.Compile == nil {
		r.t.Fatalf("compile.finished without its report: %+v", e)
	}
	return *e.Compile
}

func (r *rig) compileAlerts() []record.Alert {
	r.t.Helper()
	al, err := r.store.Alerts(r.ctx, record.AlertFilter{Env: "test", Kinds: []record.AlertKind{record.AlertCompileFailed, record.AlertCompileRecovered}})
	if err != nil {
		r.t.Fatal(err)
	}
	return al
}

const (
	goodModel   = "host \"web-1\" {\n  file \"/srv/a\" { content = \"one\" }\n}\n"
	goodModel2  = "host \"web-1\" {\n  file \"/srv/a\" { content = \"two\" }\n}\n"
	brokenModel = "host \"web-1\" {\n  file \"/srv/a\" {\n    content = nope.nothing\n  }\n}\n"
)

// A good model is released, the same again is unchanged; a broken one
// fails with its file:line, releases nothing and raises one alert per
// streak of failures, resolved by the next success.
func TestCompileOutcomes(t *testing.T) {
	m := &models{files: map[string]map[string]string{}, rev: map[string]string{}}
	m.set("test", "r1", map[string]string{"main.hcl": goodModel})
	r := compileRig(t, m, record.DefaultEnvSettings())

	c := r.compiled()
	if c.Outcome != record.CompileReleased || c.Version == 0 || c.Revision != "r1" || c.ResourcesPerAgent["web-1"] != 1 {
		t.Fatalf("first compile: %+v, want released, revision r1, one resource for web-1", c)
	}
	if len(c.Triggers) != 1 || c.Triggers[0].Kind != record.TriggerOperator || c.Triggers[0].By != "alice" {
		t.Fatalf("triggers %v, want operator (alice)", c.Triggers)
	}
	released, err := r.store.ReleasedVersion(r.ctx, "test")
	if err != nil || released.Number != c.Version {
		t.Fatalf("released version %d (%v), want %d", released.Number, err, c.Version)
	}
	if got, err := r.srv.GetCompile(r.ctx, "test", c.ID); err != nil || got.Outcome != record.CompileReleased {
		t.Fatalf("stored report: %+v (%v)", got, err)
	}

	if again := r.compiled(); again.Outcome != record.CompileUnchanged || again.Version != 0 {
		t.Fatalf("same model again: %+v, want unchanged, no version", again)
	}

	m.set("test", "r2", map[string]string{"main.hcl": brokenModel})
	for i := range 2 {
		bad := r.compiled()
		if bad.Outcome != record.CompileFailed || bad.Version != 0 || len(bad.Diagnostics) == 0 {
			t.Fatalf("broken model, compile %d: %+v, want failed", i, bad)
		}
		if d := bad.Diagnostics[0]; d.File != "main.hcl" || d.Line != 3 || d.Col == 0 || d.Severity != "error" {
			t.Fatalf("diagnostic %+v, want an error at main.hcl:3", d)
		}
	}
	if v, _ := r.store.ReleasedVersion(r.ctx, "test"); v.Number != c.Version {
		t.Fatalf("released version %d after failed compiles, want still %d", v.Number, c.Version)
	}
	if al := r.compileAlerts(); len(al) != 1 || al[0].Kind != record.AlertCompileFailed || al[0].Compliance != model.NonCompliant || !strings.Contains(al[0].Message, "main.hcl:3") {
		t.Fatalf("alerts after two failures: %+v, want one, naming main.hcl:3", al)
	}

	m.set("test", "r3", map[string]string{"main.hcl": goodModel2})
	ok := r.compiled()
	if ok.Outcome != record.CompileReleased || ok.Version <= c.Version {
		t.Fatalf("fixed model: %+v, want a new version released", ok)
	}
	al := r.compileAlerts()
	if len(al) != 2 || al[0].Kind != record.AlertCompileRecovered || al[0].Compliance != model.Compliant || al[1].Kind != record.AlertCompileFailed {
		t.Fatalf("alerts after the fix: %+v, want the failure (compile.failed) and its resolution (compile.recovered)", al)
	}
	list, err := r.srv.ListCompiles(r.ctx, "test", 0)
	if err != nil || len(list) != 5 || list[0].ID != ok.ID {
		t.Fatalf("listed %d compiles (%v), want 5, newest first", len(list), err)
	}
}

// With auto_release off, a new version is left a candidate.
func TestCompileCandidate(t *testing.T) {
	m := &models{files: map[string]map[string]string{}, rev: map[string]string{}}
	m.set("test", "r1", map[string]string{"main.hcl": goodModel})
	settings := record.DefaultEnvSettings()
	settings.AutoRelease = false
	r := compileRig(t, m, settings)

	c := r.compiled()
	if c.Outcome != record.CompileCandidate || c.Version == 0 {
		t.Fatalf("compile: %+v, want candidate with a version", c)
	}
	if _, err := r.store.ReleasedVersion(r.ctx, "test"); !errors.Is(err, model.ErrNotFound) {
		t.Fatalf("released version: %v, want none", err)
	}
}

// An environment without a source is refused; a server without sources
// compiles nothing.
func TestCompileNoSource(t *testing.T) {
	m := &models{files: map[string]map[string]string{}, rev: map[string]string{}}
	r := compileRig(t, m, record.DefaultEnvSettings())
	if _, err := r.srv.RequestCompile(r.ctx, "test", "alice"); !errors.Is(err, server.ErrNoSource) || !errors.Is(err, model.ErrConflict) {
		t.Fatalf("compile without a source: %v, want ErrNoSource, a conflict", err)
	}
	plain := newRig(t, record.EnrollManual)
	if _, err := plain.srv.RequestCompile(plain.ctx, "test", "alice"); !errors.Is(err, server.ErrNoSource) {
		t.Fatalf("compile on a server without sources: %v, want ErrNoSource", err)
	}
}

// Accepting an agent whose labels a hostgroup matches compiles, and the
// agent gets its resources without an operator asking.
func TestCompileOnAcceptance(t *testing.T) {
	m := &models{files: map[string]map[string]string{}, rev: map[string]string{}}
	m.set("test", "r1", map[string]string{"main.hcl": "hostgroup \"web\" {\n  match = host.labels.role == \"web\"\n  file \"/srv/index.html\" { content = \"hi\" }\n}\n"})
	r := compileRig(t, m, record.DefaultEnvSettings())
	a := record.Agent{Env: "test", Name: "web-7", State: record.AgentPending, Labels: map[string]string{"role": "web"}}
	if err := r.store.UpsertAgent(r.ctx, a); err != nil {
		t.Fatal(err)
	}
	if _, err := r.srv.AgentAction(r.ctx, "test", "web-7", record.AgentAccept); err != nil {
		t.Fatal(err)
	}
	c := r.finished()
	if c.Outcome != record.CompileReleased || c.ResourcesPerAgent["web-7"] != 1 {
		t.Fatalf("compile after the acceptance: %+v, want released with one resource for web-7", c)
	}
	if len(c.Triggers) != 1 || c.Triggers[0].Kind != record.TriggerAgent || c.Triggers[0].By != "web-7" {
		t.Fatalf("triggers %v, want agent (web-7)", c.Triggers)
	}
	v, err := r.store.GetVersion(r.ctx, "test", c.Version, true)
	if err != nil {
		t.Fatal(err)
	}
	if len(v.Resources) != 1 || v.Resources[0].ID.Agent != "web-7" {
		t.Fatalf("released resources %+v, want one for web-7", v.Resources)
	}
}

// A compile left running by a replica that died (nobody holds its lease)
// is marked failed by the environment's leader and compiled again with
// its triggers: what asked for it is not lost with the replica.
func TestAbandonedCompileResumed(t *testing.T) {
	m := &models{files: map[string]map[string]string{}, rev: map[string]string{}}
	m.set("test", "r1", map[string]string{"main.hcl": goodModel})
	r := startRig(t, server.Config{Sources: m, LeadEvery: 20 * time.Millisecond}, map[string]record.EnvSettings{"test": record.DefaultEnvSettings(), "nosource": record.DefaultEnvSettings()})
	r.waitCompiles()
	dead, err := r.store.StartCompile(r.ctx, record.Compile{Env: "test", Triggers: record.Triggers{}.Add(record.Trigger{Kind: record.TriggerWebhook, By: "acme/fleet abc"}).Add(record.Trigger{Kind: record.TriggerFacts, Count: 7})})
	if err != nil {
		t.Fatal(err)
	}
	c := r.finished()
	if c.ID == dead.ID || c.Outcome != record.CompileReleased || c.Triggers.String() != "webhook (acme/fleet abc), facts ×7" {
		t.Fatalf("compile after the abandoned one: %+v, want a new one with its triggers", c)
	}
	got, err := r.store.GetCompile(r.ctx, "test", dead.ID)
	if err != nil || got.Outcome != record.CompileFailed || !strings.Contains(firstMessage(got), "stopped before it ended") {
		t.Fatalf("abandoned compile now %+v (%v), want failed, saying why", got, err)
	}
}

func firstMessage(c record.Compile) string {
	if len(c.Diagnostics) == 0 {
		return ""
	}
	return c.Diagnostics[0].Message
}

// A storm of fact changes (200 agents within a second) is folded into a
// few compiles, and no trigger is lost: their fact triggers add up to 200.
func TestFactStormCoalesces(t *testing.T) {
	const n = 200
	m := &models{files: map[string]map[string]string{}, rev: map[string]string{}}
	m.set("test", "r1", map[string]string{"main.hcl": "hostgroup \"all\" {\n  match = true\n  file \"/srv/wave\" { content = tostring(host.facts.wave) }\n}\n"})
	settings := record.DefaultEnvSettings()
	settings.Enrollment = record.EnrollOpen
	settings.AutoDeploy = false // the compiles are the subject, not 200 deploys
	r := compileRig(t, m, settings)
	var wave atomic.Int64
	wave.Store(1)
	gather := func(context.Context) map[string]any { return map[string]any{"wave": wave.Load()} }
	names := make([]string, n)
	for i := range names {
		names[i] = fmt.Sprintf("agent-%03d", i)
		r.startAgentWith(agent.Config{Env: "test", Name: names[i], StateDir: t.TempDir(), ServerKey: r.srv.PublicKey(),
			Facts: gather, FactsInterval: 100 * time.Millisecond, NoWatch: true})
	}
	r.waitOnline(names...)
	// Let the acceptances' compiles end.
	settled := func() bool {
		cs, err := r.store.ListCompiles(r.ctx, "test", 1)
		return err == nil && len(cs) == 1 && cs[0].Outcome != record.CompileRunning
	}
	for !settled() {
		time.Sleep(50 * time.Millisecond)
	}
	time.Sleep(500 * time.Millisecond)
	for !settled() {
		time.Sleep(50 * time.Millisecond)
	}
	// The acceptances of 200 agents may have made many compiles (more
	// under the race detector, where they trickle in): the storm's are
	// those newer than the last of them.
	before, err := r.store.ListCompiles(r.ctx, "test", 1)
	if err != nil || len(before) != 1 {
		t.Fatalf("compiles before the storm: %v (%v), want the acceptances'", before, err)
	}

	flipped := time.Now()
	wave.Store(2) // every agent sees it at its next check, within 100 ms
	stored := 0   // agents whose new fact is stored
	waitStored := func() bool {
		as, err := r.store.ListAgents(r.ctx, "test")
		if err != nil {
			t.Fatal(err)
		}
		stored = 0
		for _, a := range as {
			if fmt.Sprint(a.Facts["wave"]) == "2" {
				stored++
			}
		}
		return stored == n && len(as) == n
	}
	compiles := func() int {
		cs, err := r.store.ListCompiles(r.ctx, "test", 1000)
		if err != nil {
			t.Fatal(err)
		}
		return len(cs)
	}
	// A guard against a stall, not a timing assertion: under the race
	// detector on a loaded machine, or with slow disk writes, the storm's
	// reports alone take minutes. It gives up when neither a report nor a
	// compile was stored for three minutes.
	progress, since := -1, time.Now()
	var spread time.Duration // from the change to the last agent's report stored
	for !waitStored() || !settled() {
		if spread == 0 && waitStored() {
			spread = time.Since(flipped)
		}
		if p := stored + compiles(); p != progress {
			progress, since = p, time.Now()
		}
		if time.Since(since) > 3*time.Minute {
			var stacks strings.Builder
			_ = pprof.Lookup("goroutine").WriteTo(&stacks, 1)
			t.Fatalf("the fact storm stalled: %d of %d agents' new fact stored, nothing more for three minutes; goroutines:\n%s", stored, n, stacks.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	// A compile may still be queued behind the last one: give it its settle.
	time.Sleep(600 * time.Millisecond)
	for !settled() {
		time.Sleep(50 * time.Millisecond)
	}
	after, err := r.store.ListCompiles(r.ctx, "test", 1000)
	if err != nil {
		t.Fatal(err)
	}
	last := slices.IndexFunc(after, func(c record.Compile) bool { return c.ID == before[0].ID })
	if last < 0 {
		t.Fatalf("the last compile before the storm (%s) is not among the %d listed", before[0].ID, len(after))
	}
	storm := after[:last]
	facts := 0
	for _, c := range storm {
		for _, tr := range c.Triggers {
			if tr.Kind == record.TriggerFacts {
				facts += tr.Count
			}
		}
	}
	if spread == 0 {
		spread = time.Since(flipped)
	}
	// Within a second, at most three compiles (a 200 ms settle, then one
	// start every 500 ms); a loaded machine may stretch the storm itself.
	most := max(3, 1+int((spread+queue.Default().Gap-1)/queue.Default().Gap))
	t.Logf("%d fact changes over %s compiled %d times", facts, spread.Round(time.Millisecond), len(storm))
	if len(storm) == 0 || len(storm) > most || facts != n {
		t.Fatalf("%d compiles for a storm of %s, folding %d fact changes: want 1 to %d, folding %d", len(storm), spread, facts, most, n)
	}
	// The storm's newest compile that released holds every agent's new
	// fact; a compile after it (a report stored while that one read the
	// inventory, its trigger queued behind it) finds nothing to change, or
	// is skipped when what it would read is what the release read.
	released := slices.IndexFunc(storm, func(c record.Compile) bool { return c.Outcome == record.CompileReleased })
	if released < 0 || storm[released].ResourcesPerAgent[names[0]] != 1 {
		t.Fatalf("no compile of the storm released the new facts: %+v", storm)
	}
	for _, c := range storm[:released] {
		if c.Outcome != record.CompileUnchanged && c.Outcome != record.CompileSkipped {
			t.Fatalf("a compile after the storm's release: %s, want unchanged or skipped: %+v", c.Outcome, c)
		}
	}
}

// A compile that succeeds after failures raises a compile.recovered
// alert, published as an event of its own kind, compile.recovered, which
// a webhook made with the default kinds receives as such; the failure is
// a compile.failed alert, a compile.alert event.
func TestCompileRecoveredIsItsOwnKind(t *testing.T) {
	type delivery struct{ event, alert string }
	got := make(chan delivery, 16)
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		var b struct {
			Type string `json:"type"`
			Data struct {
				Alert *record.Alert `json:"alert"`
			} `json:"data"`
		}
		body, _ := io.ReadAll(req.Body)
		if json.Unmarshal(body, &b) == nil && b.Data.Alert != nil {
			got <- delivery{b.Type, string(b.Data.Alert.Kind)}
		}
	}))
	defer hook.Close()
	m := &models{files: map[string]map[string]string{}, rev: map[string]string{}}
	m.set("test", "r1", map[string]string{"main.hcl": brokenModel})
	r := startRigWith(t, func(c *server.Config, _ store.Store) {
		c.Sources = m
		c.Webhooks = notify.SenderConfig{Poll: 20 * time.Millisecond, Policy: notify.Policy{Allow: []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}}}
	}, map[string]record.EnvSettings{"test": record.DefaultEnvSettings(), "nosource": record.DefaultEnvSettings()})
	r.waitCompiles()
	u := hook.URL
	if _, err := r.srv.CreateWebhook(r.ctx, "test", record.WebhookRequest{Name: "ops", URL: &u}, "alice"); err != nil {
		t.Fatal(err)
	}

	// compiled asks for a compile and returns the kinds of the events
	// published until it finished.
	compiled := func() (record.Compile, []server.Event) {
		t.Helper()
		if _, err := r.srv.RequestCompile(r.ctx, "test", "alice"); err != nil {
			t.Fatal(err)
		}
		var seen []server.Event
		for {
			e := r.nextEvent()
			if e.Kind == server.EventCompileFinished {
				return *e.Compile, seen
			}
			seen = append(seen, e)
		}
	}
	alertEvents := func(es []server.Event) []string {
		var out []string
		for _, e := range es {
			if e.Alert != nil {
				out = append(out, string(e.Kind)+"/"+string(e.Alert.Kind)+"/"+string(e.Alert.Compliance))
			}
		}
		return out
	}
	if c, es := compiled(); c.Outcome != record.CompileFailed || fmt.Sprint(alertEvents(es)) != "[compile.alert/compile.failed/non_compliant]" {
		t.Fatalf("failed compile: %s, events %v; want one compile.alert of a compile.failed alert", c.Outcome, alertEvents(es))
	}
	m.set("test", "r2", map[string]string{"main.hcl": goodModel})
	c, es := compiled()
	if c.Outcome != record.CompileReleased || fmt.Sprint(alertEvents(es)) != "[compile.recovered/compile.recovered/compliant]" {
		t.Fatalf("compile after the fix: %s, events %v; want one compile.recovered event of a compile.recovered alert", c.Outcome, alertEvents(es))
	}
	if _, es := compiled(); len(alertEvents(es)) != 0 {
		t.Fatalf("the next compile: events %v, want no alert (the streak is over)", alertEvents(es))
	}
	want := []delivery{{"compile.alert", "compile.failed"}, {"compile.recovered", "compile.recovered"}}
	for i, w := range want {
		select {
		case d := <-got:
			if d != w {
				t.Fatalf("delivery %d: %+v, want %+v", i, d, w)
			}
		case <-time.After(patience):
			t.Fatalf("delivery %d (%+v) did not come", i, w)
		}
	}
}

// nextEvent returns the next live event, whatever its kind.
func (r *rig) nextEvent() server.Event {
	r.t.Helper()
	ctx, cancel := context.WithTimeout(r.ctx, patience)
	defer cancel()
	e, err := r.sub.Next(ctx)
	if err != nil {
		r.t.Fatalf("waiting for an event: %v", err)
	}
	return e
}
