package engine

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/tetherhq/tether/agent/handler"
	"github.com/tetherhq/tether/agent/handler/builtin"
	"github.com/tetherhq/tether/model"
	"github.com/tetherhq/tether/model/graph"
)

// fake is a handler for kind "fake" whose behaviour is scripted per resource
// name; it records the order of events.
type fake struct {
	mu       sync.Mutex
	events   []string
	applied  map[string]bool
	fail     map[string]bool
	panics   map[string]bool
	inFlight int
	maxIn    int
	barrier  *barrier
	block    chan struct{}
}

func newFake() *fake {
	return &fake{applied: map[string]bool{}, fail: map[string]bool{}, panics: map[string]bool{}}
}

func (f *fake) Kind() string                     { return "fake" }
func (f *fake) Validate(r *model.Resource) error { return nil }

func (f *fake) Read(_ context.Context, r *model.Resource) (model.Attributes, bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return model.Attributes{"name": r.ID.Value}, f.applied[r.ID.Value], nil
}

func (f *fake) Apply(ctx context.Context, r *model.Resource, _ model.Attributes, _ handler.Changes) error {
	name := r.ID.Value
	f.mu.Lock()
	f.inFlight++
	f.maxIn = max(f.maxIn, f.inFlight)
	f.events = append(f.events, "start "+name)
	b, block := f.barrier, f.block
	f.mu.Unlock()
	defer func() {
		f.mu.Lock()
		f.inFlight--
		f.events = append(f.events, "end "+name)
		f.mu.Unlock()
	}()
	if b != nil {
		b.wait()
	}
	if block != nil {
		select {
		case <-block:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	if f.panics[name] {
		panic("boom in " + name)
	}
	if f.fail[name] {
		return errors.New("scripted failure")
	}
	f.mu.Lock()
	f.applied[name] = true
	f.mu.Unlock()
	return nil
}

// barrier releases its waiters once n of them arrived.
type barrier struct {
	mu   sync.Mutex
	n    int
	full chan struct{}
}

func newBarrier(n int) *barrier { return &barrier{n: n, full: make(chan struct{})} }

func (b *barrier) wait() {
	b.mu.Lock()
	b.n--
	if b.n == 0 {
		close(b.full)
	}
	b.mu.Unlock()
	<-b.full
}

func fr(name string, requires ...string) model.Resource {
	r := model.Resource{ID: model.ID{Type: "fake", Agent: "a", Key: "name", Value: name}, Attributes: model.Attributes{"name": name}}
	for _, q := range requires {
		r.Requires = append(r.Requires, model.ID{Type: "fake", Agent: "a", Key: "name", Value: q})
	}
	return r
}

func newEngine(t testing.TB, hs ...handler.Handler) *Engine {
	t.Helper()
	reg := handler.NewRegistry()
	for _, h := range hs {
		if err := reg.Register(h); err != nil {
			t.Fatal(err)
		}
	}
	return New(reg, zerolog.Nop())
}

func byName(results []Result) map[string]Result {
	out := map[string]Result{}
	for _, r := range results {
		out[r.ID.Value] = r
	}
	return out
}

func TestOrderAndReport(t *testing.T) {
	f := newFake()
	e := newEngine(t, f)
	rs := []model.Resource{fr("c", "b"), fr("b", "a"), fr("a"), fr("d", "a")}
	var reported []string
	results, err := e.Run(context.Background(), rs, Options{Parallelism: 4}, func(r Result) {
		reported = append(reported, r.ID.Value)
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(results) != 4 || len(reported) != 4 {
		t.Fatalf("%d results, %d reports, want 4 each", len(results), len(reported))
	}
	for i, r := range results {
		if r.ID != rs[i].ID {
			t.Fatalf("result %d is %s, want %s (input order)", i, r.ID, rs[i].ID)
		}
		if r.State != model.StateDeployed || !r.Changed() || !r.Changes.Created() {
			t.Fatalf("%s: state %s changes %v, want deployed and created", r.ID, r.State, r.Changes)
		}
	}
	pos := map[string]int{}
	for i, ev := range f.events {
		pos[ev] = i
	}
	for _, edge := range [][2]string{{"a", "b"}, {"b", "c"}, {"a", "d"}} {
		if pos["end "+edge[0]] > pos["start "+edge[1]] {
			t.Fatalf("%s started before its requirement %s ended: %v", edge[1], edge[0], f.events)
		}
	}

	// Second run: no change anywhere, nothing applied.
	f.events = nil
	results, err = e.Run(context.Background(), rs, Options{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range results {
		if r.Changed() || len(r.Changes) != 0 {
			t.Fatalf("second run changed %s: %v", r.ID, r.Changes)
		}
	}
	if len(f.events) != 0 {
		t.Fatalf("second run applied: %v", f.events)
	}
}

func TestFailureSkipsDependants(t *testing.T) {
	f := newFake()
	f.fail["b"] = true
	e := newEngine(t, f)
	rs := []model.Resource{fr("a"), fr("b", "a"), fr("c", "b"), fr("d", "c"), fr("e", "a"), fr("x")}
	results, err := e.Run(context.Background(), rs, Options{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	got := byName(results)
	want := map[string]model.ResourceState{
		"a": model.StateDeployed, "b": model.StateFailed, "c": model.StateSkipped,
		"d": model.StateSkipped, "e": model.StateDeployed, "x": model.StateDeployed,
	}
	for name, state := range want {
		if got[name].State != state {
			t.Errorf("%s: state %s (%s), want %s", name, got[name].State, got[name].Message, state)
		}
	}
	if !strings.Contains(got["b"].Message, "scripted failure") {
		t.Errorf("failure message %q does not carry the error", got["b"].Message)
	}
	if !strings.Contains(got["c"].Message, "fake[a,name=b] failed") {
		t.Errorf("skip message %q does not name the failed requirement", got["c"].Message)
	}
	if !strings.Contains(got["d"].Message, "fake[a,name=c] was skipped") {
		t.Errorf("skip message %q does not name the skipped requirement", got["d"].Message)
	}
	for _, ev := range f.events {
		if ev == "start c" || ev == "start d" {
			t.Fatalf("a dependant of a failure ran: %v", f.events)
		}
	}
}

func TestUnavailableUndefinedAndPanic(t *testing.T) {
	f := newFake()
	f.panics["p"] = true
	e := newEngine(t, f)
	unknown := model.Resource{ID: model.MustParseID("gizmo[a,name=g]"), Attributes: model.Attributes{"name": "g"}}
	undef := fr("u")
	undef.Undefined = true
	rs := []model.Resource{unknown, fr("after-g"), undef, fr("after-u", "u"), fr("after-after-u", "after-u"), fr("p"), fr("after-p", "p")}
	rs[1].Requires = []model.ID{unknown.ID}
	results, err := e.Run(context.Background(), rs, Options{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	got := byName(results)
	want := map[string]model.ResourceState{
		"g": model.StateUnavailable, "after-g": model.StateSkipped,
		"u": model.StateUndefined, "after-u": model.StateSkippedForUndefined, "after-after-u": model.StateSkippedForUndefined,
		"p": model.StateFailed, "after-p": model.StateSkipped,
	}
	for name, state := range want {
		if got[name].State != state {
			t.Errorf("%s: state %s (%s), want %s", name, got[name].State, got[name].Message, state)
		}
	}
	if !strings.Contains(got["p"].Message, "panicked: boom in p") {
		t.Errorf("panic message %q", got["p"].Message)
	}
}

func TestBoundedParallelism(t *testing.T) {
	f := newFake()
	// Three resources must be inside Apply at the same time to pass the
	// barrier: a sequential engine would never finish (the context ends it).
	f.barrier = newBarrier(3)
	e := newEngine(t, f)
	var rs []model.Resource
	for i := 0; i < 12; i++ {
		rs = append(rs, fr(fmt.Sprint(i)))
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	results, err := e.Run(ctx, rs[:3], Options{Parallelism: 3}, nil)
	if err != nil {
		t.Fatalf("3 independent resources did not run concurrently: %v", err)
	}
	for _, r := range results {
		if r.State != model.StateDeployed {
			t.Fatalf("%s: %s", r.ID, r.State)
		}
	}
	f.barrier = nil
	f.maxIn = 0
	if _, err := e.Run(ctx, rs, Options{Parallelism: 2}, nil); err != nil {
		t.Fatal(err)
	}
	if f.maxIn > 2 {
		t.Fatalf("%d resources ran at once, want at most 2", f.maxIn)
	}
}

func TestDryRunChangesNothing(t *testing.T) {
	root := t.TempDir()
	reg, err := builtin.Registry(handler.Runtime{Root: root})
	if err != nil {
		t.Fatal(err)
	}
	e := New(reg, zerolog.Nop())
	rs := sampleSite("a")
	results, err := e.Run(context.Background(), rs, Options{DryRun: true}, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range results {
		if r.State != model.StateDeployed || !r.DryRun || !r.Changes.Created() || r.Changed() {
			t.Fatalf("%s: state %s dry %v changes %v", r.ID, r.State, r.DryRun, r.Changes)
		}
	}
	entries, _ := os.ReadDir(root)
	if len(entries) != 0 {
		t.Fatalf("dry run wrote %d entries", len(entries))
	}
	// Then a real run creates them, and a dry run afterwards finds nothing.
	if _, err := e.Run(context.Background(), rs, Options{}, nil); err != nil {
		t.Fatal(err)
	}
	results, _ = e.Run(context.Background(), rs, Options{DryRun: true}, nil)
	for _, r := range results {
		if len(r.Changes) != 0 {
			t.Fatalf("%s: dry run after deploy reports %v", r.ID, r.Changes)
		}
	}
}

func sampleSite(agent string) []model.Resource {
	dir := func(p string, req ...model.ID) model.Resource {
		return model.Resource{ID: model.ID{Type: "directory", Agent: agent, Key: "path", Value: p},
			Attributes: model.Attributes{"path": p, "mode": "0755"}, Requires: req}
	}
	file := func(p, content string, req ...model.ID) model.Resource {
		return model.Resource{ID: model.ID{Type: "file", Agent: agent, Key: "path", Value: p},
			Attributes: model.Attributes{"path": p, "content": content, "mode": "0644"}, Requires: req}
	}
	site := dir("/site")
	css := dir("/site/css", site.ID)
	return []model.Resource{
		site, css,
		file("/site/index.html", "<h1>hi</h1>", site.ID),
		file("/site/css/main.css", "body{}", css.ID),
	}
}

func TestExternalRequirements(t *testing.T) {
	f := newFake()
	e := newEngine(t, f)
	other := func(name string) model.ID { return model.ID{Type: "fake", Agent: "b", Key: "name", Value: name} }
	x, y := fr("x"), fr("y")
	x.Requires = []model.ID{other("ok")}
	y.Requires = []model.ID{other("broken")}
	deps := depsFunc(func(ctx context.Context, id model.ID) (model.ResourceState, error) {
		if id.Value == "ok" {
			return model.StateDeployed, nil
		}
		return model.StateFailed, nil
	})
	results, err := e.Run(context.Background(), []model.Resource{x, y, fr("z", "y")}, Options{Dependencies: deps}, nil)
	if err != nil {
		t.Fatal(err)
	}
	got := byName(results)
	if got["x"].State != model.StateDeployed || got["y"].State != model.StateSkipped || got["z"].State != model.StateSkipped {
		t.Fatalf("states x=%s y=%s z=%s, want deployed skipped skipped", got["x"].State, got["y"].State, got["z"].State)
	}
	if !strings.Contains(got["y"].Message, "fake[b,name=broken] failed") {
		t.Fatalf("message %q does not name the other agent's resource", got["y"].Message)
	}

	// Without a Dependencies source the requirement can never be met.
	results, _ = e.Run(context.Background(), []model.Resource{x}, Options{}, nil)
	if results[0].State != model.StateSkipped || !strings.Contains(results[0].Message, "agent b") {
		t.Fatalf("state %s message %q", results[0].State, results[0].Message)
	}

	// A waiter for a resource that was skipped meanwhile does not outlive Run.
	blocking := depsFunc(func(ctx context.Context, id model.ID) (model.ResourceState, error) {
		<-ctx.Done()
		return "", ctx.Err()
	})
	f.fail["first"] = true
	w := fr("w", "first")
	w.Requires = append(w.Requires, other("never"))
	results, err = e.Run(context.Background(), []model.Resource{fr("first"), w}, Options{Dependencies: blocking}, nil)
	if err != nil || byName(results)["w"].State != model.StateSkipped {
		t.Fatalf("got %v %v", results, err)
	}
}

type depsFunc func(ctx context.Context, id model.ID) (model.ResourceState, error)

func (d depsFunc) Wait(ctx context.Context, id model.ID) (model.ResourceState, error) {
	return d(ctx, id)
}

func TestCancel(t *testing.T) {
	f := newFake()
	f.block = make(chan struct{})
	e := newEngine(t, f)
	ctx, cancel := context.WithCancel(context.Background())
	started := make(chan struct{})
	var once sync.Once
	go func() {
		// Cancel once the first resource is inside Apply.
		for {
			f.mu.Lock()
			n := len(f.events)
			f.mu.Unlock()
			if n > 0 {
				once.Do(func() { close(started) })
				cancel()
				return
			}
			time.Sleep(time.Millisecond)
		}
	}()
	results, err := e.Run(ctx, []model.Resource{fr("a"), fr("b", "a"), fr("c", "b")}, Options{Parallelism: 1}, nil)
	<-started
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("got %v, want context.Canceled", err)
	}
	for _, r := range results {
		if r.State != model.StateCancelled {
			t.Fatalf("%s: %s, want cancelled", r.ID, r.State)
		}
	}
}

func TestCycleIsAnError(t *testing.T) {
	e := newEngine(t, newFake())
	_, err := e.Run(context.Background(), []model.Resource{fr("a", "b"), fr("b", "a")}, Options{}, nil)
	if !errors.Is(err, graph.ErrCycle) || !strings.Contains(err.Error(), "fake[a,name=a] -> fake[a,name=b] -> fake[a,name=a]") {
		t.Fatalf("got %v, want a cycle error naming the cycle", err)
	}
}

func TestBeforeApply(t *testing.T) {
	f := newFake()
	f.applied["done"] = true // converged already: no changes, no call
	e := newEngine(t, f)
	var mu sync.Mutex
	var called []string
	results, err := e.Run(context.Background(), []model.Resource{fr("a"), fr("refused"), fr("done")}, Options{
		BeforeApply: func(res *model.Resource, changes model.Changes) error {
			mu.Lock()
			called = append(called, res.ID.Value)
			mu.Unlock()
			if len(changes) == 0 {
				t.Errorf("%s: called without changes", res.ID)
			}
			if res.ID.Value == "refused" {
				return errors.New("journal full")
			}
			return nil
		},
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	got := byName(results)
	if got["a"].State != model.StateDeployed || !f.applied["a"] {
		t.Fatalf("a: %+v applied=%v", got["a"], f.applied["a"])
	}
	if got["refused"].State != model.StateFailed || f.applied["refused"] || !strings.Contains(got["refused"].Message, "journal full") {
		t.Fatalf("refused: %+v applied=%v, want failed and not applied", got["refused"], f.applied["refused"])
	}
	if len(called) != 2 {
		t.Fatalf("BeforeApply called for %v, want a and refused", called)
	}
}

// refresher is the fake with a Refresh, as services and execs have.
type refresher struct {
	*fake
	refreshed []string
}

func (r *refresher) Refresh(_ context.Context, res *model.Resource, applied handler.Changes) (string, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if applied.Created() {
		return "", nil // just started
	}
	r.refreshed = append(r.refreshed, res.ID.Value)
	return "restarted", nil
}

func subscribes(r model.Resource, to ...string) model.Resource {
	for _, s := range to {
		r.Subscribes = append(r.Subscribes, model.ID{Type: "fake", Agent: "a", Key: "name", Value: s})
	}
	return r
}

// A subscriber runs after what it subscribes to and is refreshed once when
// at least one of them changed, not otherwise; a dry run only says so.
func TestSubscribeRefreshes(t *testing.T) {
	f := &refresher{fake: newFake()}
	e := newEngine(t, f)
	rs := []model.Resource{subscribes(fr("svc"), "conf", "unit"), fr("conf"), fr("unit"), subscribes(fr("quiet"), "other"), fr("other")}
	run := func(opts Options) map[string]Result {
		t.Helper()
		results, err := e.Run(context.Background(), rs, opts, nil)
		if err != nil {
			t.Fatal(err)
		}
		return byName(results)
	}
	run(Options{})
	pos := map[string]int{}
	for i, ev := range f.events {
		pos[ev] = i
	}
	if pos["end conf"] > pos["start svc"] || pos["end unit"] > pos["start svc"] {
		t.Fatalf("svc ran before what it subscribes to: %v", f.events)
	}
	if len(f.refreshed) != 0 {
		t.Fatalf("refreshed %v on the first deploy, where svc itself was just created", f.refreshed)
	}

	// conf and unit drift; other does not.
	f.mu.Lock()
	f.applied["conf"], f.applied["unit"] = false, false
	f.mu.Unlock()
	dry := run(Options{DryRun: true})
	if len(f.refreshed) != 0 || !strings.HasPrefix(dry["svc"].Message, "would refresh: fake[a,name=conf] and 1 more") {
		t.Fatalf("dry run: refreshed %v, svc says %q", f.refreshed, dry["svc"].Message)
	}
	got := run(Options{})
	if fmt.Sprint(f.refreshed) != "[svc]" {
		t.Fatalf("refreshed %v, want svc once", f.refreshed)
	}
	if svc := got["svc"]; !svc.Refreshed || svc.Message != "restarted after fake[a,name=conf] and 1 more changed" || svc.State != model.StateDeployed {
		t.Fatalf("svc result %+v", svc)
	}
	if got["quiet"].Refreshed {
		t.Fatal("quiet was refreshed though nothing it subscribes to changed")
	}
}
