package scheduler

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/tetherhq/tether/bus"
	"github.com/tetherhq/tether/model"
	"github.com/tetherhq/tether/server/record"
	"github.com/tetherhq/tether/server/store"
	"github.com/tetherhq/tether/server/store/sqlite"
)

// recorder is a Sender that keeps what was sent, and refuses agents listed
// in offline as a broker would refuse a missing inbox, and those in full as
// it would refuse a full one.
type recorder struct {
	mu      sync.Mutex
	sent    []*bus.Envelope
	opts    []bus.SendOptions
	taken   int // sent[:taken] were returned by take
	offline map[string]bool
	full    map[string]bool
}

func (r *recorder) Send(_ context.Context, e *bus.Envelope, opts bus.SendOptions) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.offline[e.Agent] {
		return fmt.Errorf("send: %w", bus.ErrNoInbox)
	}
	if r.full[e.Agent] {
		return fmt.Errorf("send: %w (10000 messages)", bus.ErrInboxFull)
	}
	r.sent = append(r.sent, e)
	r.opts = append(r.opts, opts)
	return nil
}

func (r *recorder) SendBatch(ctx context.Context, msgs []bus.Outgoing) []error {
	errs := make([]error, len(msgs))
	for i, m := range msgs {
		errs[i] = r.Send(ctx, m.Envelope, m.Options)
	}
	return errs
}

// take returns what was sent since the last take, as "agent:kind" strings.
func (r *recorder) take() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for _, e := range r.sent[r.taken:] {
		out = append(out, e.Agent+":"+string(e.Kind))
	}
	r.taken = len(r.sent)
	return out
}

func (r *recorder) last(t *testing.T, kind bus.Kind, body any) {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	for i := len(r.sent) - 1; i >= 0; i-- {
		if r.sent[i].Kind == kind {
			if err := r.sent[i].DecodeBody(body); err != nil {
				t.Fatal(err)
			}
			return
		}
	}
	t.Fatalf("no %s sent", kind)
}

type fixture struct {
	ctx   context.Context
	store *sqlite.Store
	rec   *recorder
	s     *Scheduler
}

func newFixture(t *testing.T, settings record.EnvSettings) *fixture {
	t.Helper()
	ctx := context.Background()
	st, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "t.db"), sqlite.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	if err := st.CreateEnv(ctx, record.Environment{Name: "prod", Settings: settings}); err != nil {
		t.Fatal(err)
	}
	_, key, _ := bus.GenerateKey()
	rec := &recorder{offline: map[string]bool{}, full: map[string]bool{}}
	return &fixture{ctx: ctx, store: st, rec: rec, s: New(st, rec, bus.NewSigner(key, 0), clearSealer{}, zerolog.Nop())}
}

func (f *fixture) agent(t *testing.T, name string, gen int64) record.Agent {
	t.Helper()
	a := record.Agent{Env: "prod", Name: name, State: record.AgentAccepted, Generation: gen}
	if err := f.store.UpsertAgent(f.ctx, a); err != nil {
		t.Fatal(err)
	}
	return a
}

func (f *fixture) release(t *testing.T, rs ...model.Resource) int64 {
	t.Helper()
	n, _ := f.releaseFanout(t, rs...)
	return n
}

// releaseFanout releases rs and returns what the fan-out did not reach.
func (f *fixture) releaseFanout(t *testing.T, rs ...model.Resource) (int64, record.Fanout) {
	t.Helper()
	v, err := f.store.PutVersion(f.ctx, "prod", model.VersionMeta{}, rs)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.store.Release(f.ctx, "prod", v.Number); err != nil {
		t.Fatal(err)
	}
	rel, err := f.s.Released(f.ctx, record.Release{Env: "prod", Version: v.Number}, nil)
	if err != nil {
		t.Fatal(err)
	}
	return v.Number, rel.Fanout
}

func file(agent, path, content string, requires ...model.ID) model.Resource {
	return model.Resource{ID: model.ID{Type: "file", Agent: agent, Key: "path", Value: path},
		Attributes: model.Attributes{"path": path, "content": content}, Requires: requires}
}

func TestFullThenDiff(t *testing.T) {
	f := newFixture(t, record.EnvSettings{AutoDeploy: true})
	a := f.agent(t, "web", 0)
	f.release(t, file("web", "/a", "1"), file("web", "/b", "1"))
	if got := fmt.Sprint(f.rec.take()); got != "[web:desired.full web:deploy]" {
		t.Fatalf("first release sent %s", got)
	}
	// The agent reports it holds generation 1; the next release is a diff.
	a.Generation = 1
	if err := f.store.UpsertAgent(f.ctx, a); err != nil {
		t.Fatal(err)
	}
	f.release(t, file("web", "/a", "2"), file("web", "/c", "1"))
	if got := fmt.Sprint(f.rec.take()); got != "[web:desired.diff web:deploy]" {
		t.Fatalf("second release sent %s", got)
	}
	var d bus.DesiredDiff
	f.rec.last(t, bus.KindDesiredDiff, &d)
	if d.From != 1 || d.To != 2 || len(d.Upserts) != 2 || len(d.Deletes) != 1 || d.Deletes[0].Value != "/b" {
		t.Fatalf("diff %+v", d)
	}
	var dep bus.Deploy
	f.rec.last(t, bus.KindDeploy, &dep)
	if dep.Generation != 2 || dep.Mode != bus.DeployIncremental {
		t.Fatalf("deploy %+v", dep)
	}
	// Nothing is sent twice for the same generation.
	if _, err := f.s.Released(f.ctx, record.Release{Env: "prod", Version: 2}, nil); err != nil {
		t.Fatal(err)
	}
	if got := f.rec.take(); len(got) != 0 {
		t.Fatalf("re-release sent %v", got)
	}
}

// A release whose fan-out meets a full inbox or an agent that never
// connected stands: those agents are listed with why and what brings them
// the version, and the deploy-interval retry brings it once the inbox has
// room again.
func TestReleaseWithUnreachedAgents(t *testing.T) {
	f := newFixture(t, record.EnvSettings{AutoDeploy: true, DeployInterval: record.Duration(10 * time.Minute)})
	f.agent(t, "web", 0)
	f.agent(t, "db", 0)
	f.agent(t, "cache", 0)
	f.rec.full["db"] = true
	f.rec.offline["cache"] = true
	n, fan := f.releaseFanout(t, file("web", "/a", "1"), file("db", "/b", "1"), file("cache", "/c", "1"))
	if got := fmt.Sprint(f.rec.take()); got != "[web:desired.full web:deploy]" {
		t.Fatalf("release sent %s, want web's full state and deploy", got)
	}
	if fan.PendingCount != 2 || len(fan.Pending) != 2 {
		t.Fatalf("got %+v, want db and cache pending", fan)
	}
	want := map[string]record.PendingReason{"db": record.PendingInboxFull, "cache": record.PendingNotConnected}
	for _, p := range fan.Pending {
		if want[p.Agent] != p.Reason || p.Later == "" {
			t.Fatalf("got %+v, want reason %s and what brings it later", p, want[p.Agent])
		}
	}
	if !strings.Contains(fan.Pending[0].Later+fan.Pending[1].Later, "deploy-interval retry (every 10m0s)") {
		t.Fatalf("got %+v, want the deploy-interval retry named for the full inbox", fan.Pending)
	}
	// The inbox has room again: the next retry brings db the version.
	f.rec.full["db"] = false
	d, err := f.s.Retry(f.ctx, "prod")
	if err != nil {
		t.Fatal(err)
	}
	if got := fmt.Sprint(f.rec.take()); !strings.Contains(got, "db:desired.full") || d.Generation != n {
		t.Fatalf("retry sent %s (generation %d), want db's full state of version %d", got, d.Generation, n)
	}
}

func TestOnlineAgentGetsWhatItMissed(t *testing.T) {
	f := newFixture(t, record.EnvSettings{AutoDeploy: false})
	f.rec.offline["web"] = true
	f.agent(t, "web", 0)
	f.release(t, file("web", "/a", "1")) // unreachable: no error, nothing sent
	if got := f.rec.take(); len(got) != 0 {
		t.Fatalf("sent to an offline agent: %v", got)
	}
	delete(f.rec.offline, "web")
	if err := f.s.Online(f.ctx, record.Agent{Env: "prod", Name: "web", State: record.AgentAccepted, Generation: 0}); err != nil {
		t.Fatal(err)
	}
	// auto_deploy off: the state, no deploy.
	if got := fmt.Sprint(f.rec.take()); got != "[web:desired.full]" {
		t.Fatalf("online sent %s", got)
	}
	// An agent already at the released generation is sent nothing.
	if err := f.s.Online(f.ctx, record.Agent{Env: "prod", Name: "web", State: record.AgentAccepted, Generation: 1}); err != nil {
		t.Fatal(err)
	}
	if got := f.rec.take(); len(got) != 0 {
		t.Fatalf("an up-to-date agent was sent %v", got)
	}
}

func TestDeployRequests(t *testing.T) {
	f := newFixture(t, record.EnvSettings{})
	if _, err := f.s.Deploy(f.ctx, "prod", DeployRequest{}); !errors.Is(err, record.ErrNoRelease) {
		t.Fatalf("deploy without a release: %v", err)
	}
	f.release(t, file("web", "/a", "1"))
	if _, err := f.s.Deploy(f.ctx, "prod", DeployRequest{}); !errors.Is(err, record.ErrNoAgents) {
		t.Fatalf("deploy without agents: %v", err)
	}
	f.agent(t, "web", 1)
	f.agent(t, "db", 1)
	if err := f.store.UpsertAgent(f.ctx, record.Agent{Env: "prod", Name: "new", State: record.AgentPending}); err != nil {
		t.Fatal(err)
	}
	d, err := f.s.Deploy(f.ctx, "prod", DeployRequest{Full: true})
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(d.Agents) != "[db web]" || d.Generation != 1 || d.ID == "" {
		t.Fatalf("deployment %+v: want accepted agents only", d)
	}
	if got := fmt.Sprint(f.rec.take()); got != "[db:deploy web:deploy]" {
		t.Fatalf("sent %s", got)
	}
	if _, err := f.s.Deploy(f.ctx, "prod", DeployRequest{Agents: []string{"new"}}); !errors.Is(err, record.ErrNoAgents) {
		t.Fatalf("deploy to a pending agent: %v", err)
	}
	if _, err := f.s.Deploy(f.ctx, "prod", DeployRequest{Agents: []string{"ghost"}}); !errors.Is(err, model.ErrNotFound) {
		t.Fatalf("deploy to an unknown agent: %v", err)
	}

	// A halted environment refuses deploys but allows dry runs.
	env, _ := f.store.GetEnv(f.ctx, "prod")
	env.Settings.Halted = true
	f2 := newFixture(t, env.Settings)
	f2.agent(t, "web", 0)
	f2.release(t, file("web", "/a", "1"))
	f2.rec.take()
	if _, err := f2.s.Deploy(f2.ctx, "prod", DeployRequest{}); !errors.Is(err, record.ErrHalted) {
		t.Fatalf("deploy on a halted env: %v", err)
	}
	if _, err := f2.s.Deploy(f2.ctx, "prod", DeployRequest{Operation: record.OpDryRun}); err != nil {
		t.Fatalf("dry run on a halted env: %v", err)
	}
	if got := fmt.Sprint(f2.rec.take()); got != "[web:dryrun]" {
		t.Fatalf("halted env sent %s", got)
	}
}

// oldVersions is a store whose versions were all stored before it kept
// their cross-agent requirements: the scheduler reads them from the
// resources.
type oldVersions struct{ *sqlite.Store }

func (oldVersions) VersionWaits(context.Context, string, int64) (map[model.ID][]string, bool, error) {
	return nil, false, nil
}

func TestDependencyStatusGoesToWaitingAgents(t *testing.T) {
	t.Run("requirements stored with the version", func(t *testing.T) { testDependencyStatus(t, false) })
	t.Run("requirements read from the resources", func(t *testing.T) { testDependencyStatus(t, true) })
}

func testDependencyStatus(t *testing.T, old bool) {
	f := newFixture(t, record.EnvSettings{})
	if old {
		f.s = NewWith(FanoutConfig{PageSize: 1}, oldVersions{f.store}, f.rec, f.s.signer, clearSealer{}, zerolog.Nop())
	}
	db := file("db", "/ready", "1")
	f.agent(t, "db", 1)
	f.agent(t, "web", 1)
	f.agent(t, "other", 1)
	f.release(t, db, file("web", "/conf", "x", db.ID), file("other", "/x", "y"))
	f.rec.take()
	err := f.s.ResultsRecorded(f.ctx, "prod", []model.Result{
		{ID: db.ID, State: model.StateDeployed},
		{ID: file("other", "/x", "").ID, State: model.StateDeployed}, // nobody waits for it
		{ID: db.ID, State: model.StateDeployed, DryRun: true},        // a dry run is no outcome
	})
	if err != nil {
		t.Fatal(err)
	}
	if got := fmt.Sprint(f.rec.take()); got != "[web:dependency.status]" {
		t.Fatalf("sent %s", got)
	}
	var ds bus.DependencyStatus
	f.rec.last(t, bus.KindDependencyStatus, &ds)
	if ds.ID != db.ID || ds.State != model.StateDeployed {
		t.Fatalf("dependency status %+v", ds)
	}
}

func TestStateRequestSendsFull(t *testing.T) {
	f := newFixture(t, record.EnvSettings{})
	f.agent(t, "web", 1)
	f.release(t, file("web", "/a", "1"))
	f.rec.take()
	if err := f.s.StateRequest(f.ctx, "prod", "web"); err != nil {
		t.Fatal(err)
	}
	var full bus.DesiredFull
	f.rec.last(t, bus.KindDesiredFull, &full)
	want, _ := model.SliceOf("web", 1, []model.Resource{file("web", "/a", "1")}).Hash()
	if full.Generation != 1 || len(full.Resources) != 1 || full.SliceHash != want {
		t.Fatalf("full state %+v", full)
	}
}

func TestPeriodicTriggers(t *testing.T) {
	settings := record.DefaultEnvSettings()
	f := newFixture(t, settings)
	for _, n := range []string{"web", "db", "idle", "paused"} {
		f.agent(t, n, 0)
	}
	if _, err := f.s.Retry(f.ctx, "prod"); err != nil {
		t.Fatalf("retry before any release: %v, want nothing to do", err)
	}
	gen := f.release(t, file("web", "/a", "1"), file("db", "/b", "1"), file("paused", "/c", "1"))
	a, _ := f.store.GetAgent(f.ctx, "prod", "paused")
	a.Paused = true
	if err := f.store.UpsertAgent(f.ctx, a); err != nil {
		t.Fatal(err)
	}
	// web deployed its resource; db's failed; paused never ran.
	fresh, err := f.store.RecordResults(f.ctx, []store.ResultBatch{
		{Env: "prod", Agent: "web", Version: gen, Results: []model.Result{{ID: file("web", "/a", "").ID, State: model.StateDeployed}}},
		{Env: "prod", Agent: "db", Version: gen, Results: []model.Result{{ID: file("db", "/b", "").ID, State: model.StateFailed}}},
	})
	if err != nil || len(fresh) != 2 {
		t.Fatal(err)
	}
	// Their reports said the generation they hold (the server records it).
	for _, n := range []string{"web", "db"} {
		if _, err := f.store.SetAgentGeneration(f.ctx, "prod", n, gen); err != nil {
			t.Fatal(err)
		}
	}
	f.rec.take()
	d, err := f.s.Retry(f.ctx, "prod")
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(d.Agents) != "[db]" || d.Operation != record.OpDeploy {
		t.Fatalf("retry %+v: want a deploy to db only (web is done, idle holds nothing, paused is paused)", d)
	}
	if got := fmt.Sprint(f.rec.take()); got != "[db:deploy]" {
		t.Fatalf("retry sent %s", got)
	}
	if exp := f.rec.opts[len(f.rec.opts)-1].Expiration; exp != time.Duration(settings.DeployInterval) {
		t.Fatalf("retry expires after %s, want the deploy interval %s", exp, time.Duration(settings.DeployInterval))
	}
	// An agent that reports an older generation than it was sent (its
	// inbox emptied under it) is sent its desired state again first,
	// once what was sent had a whole interval to arrive.
	if _, err := f.store.SetAgentGeneration(f.ctx, "prod", "db", 0); err != nil {
		t.Fatal(err)
	}
	if _, err := f.s.Retry(f.ctx, "prod"); err != nil {
		t.Fatal(err)
	}
	if got := fmt.Sprint(f.rec.take()); got != "[db:deploy]" {
		t.Fatalf("retry within an interval of the release to an agent reporting generation 0 sent %s, want the deploy alone (the release may be on its way)", got)
	}
	f.s.now = func() time.Time { return time.Now().Add(time.Duration(settings.DeployInterval)) }
	if _, err := f.s.Retry(f.ctx, "prod"); err != nil {
		t.Fatal(err)
	}
	if got := fmt.Sprint(f.rec.take()); got != "[db:desired.full db:deploy]" {
		t.Fatalf("retry an interval after the release to an agent reporting generation 0 sent %s, want its desired state, then the deploy", got)
	}
	f.s.now = time.Now

	// Verify: a dry run under drift policy alert, a repair under heal,
	// to every active agent.
	d, err = f.s.Verify(f.ctx, "prod")
	if err != nil || d.Operation != record.OpDryRun || fmt.Sprint(d.Agents) != "[db idle web]" {
		t.Fatalf("verify under alert: %+v, %v; want a dry run of db, idle and web", d, err)
	}
	if exp := f.rec.opts[len(f.rec.opts)-1].Expiration; exp != time.Duration(settings.RepairInterval) {
		t.Fatalf("verify expires after %s, want the repair interval", exp)
	}
	f.rec.take()
	heal := settings
	heal.DriftPolicy = model.DriftHeal
	if _, err := f.store.UpdateEnvSettings(f.ctx, "prod", func(s *record.EnvSettings) error { *s = heal; return nil }); err != nil {
		t.Fatal(err)
	}
	if d, err = f.s.Verify(f.ctx, "prod"); err != nil || d.Operation != record.OpRepair {
		t.Fatalf("verify under heal: %+v, %v; want a repair", d, err)
	}
	if got := fmt.Sprint(f.rec.take()); got != "[db:repair idle:repair web:repair]" {
		t.Fatalf("verify under heal sent %s", got)
	}

	// Halted, or not deploying automatically: retries stop; halted:
	// verifications stop too.
	for _, change := range []func(*record.EnvSettings){
		func(s *record.EnvSettings) { s.AutoDeploy = false },
		func(s *record.EnvSettings) { s.AutoDeploy, s.Halted = true, true },
	} {
		if _, err := f.store.UpdateEnvSettings(f.ctx, "prod", func(s *record.EnvSettings) error { change(s); return nil }); err != nil {
			t.Fatal(err)
		}
		if d, err := f.s.Retry(f.ctx, "prod"); err != nil || len(d.Agents) != 0 {
			t.Fatalf("retry: %+v, %v; want nothing sent", d, err)
		}
	}
	if d, err := f.s.Verify(f.ctx, "prod"); err != nil || len(d.Agents) != 0 {
		t.Fatalf("verify of a halted env: %+v, %v; want nothing sent", d, err)
	}
	if got := f.rec.take(); len(got) != 0 {
		t.Fatalf("sent %v, want nothing", got)
	}
}

// clearSealer is a Sealer for resources without sensitive values: it
// returns them as they are.
type clearSealer struct{}

func (clearSealer) SealFor(_ context.Context, _, _ string, rs []model.Resource) ([]model.Resource, error) {
	return rs, nil
}

// A fan-out over many pages, several in hand at once, deals with every
// accepted agent once: sent, up to date or pending; progress is told
// after each page, its counts only growing.
func TestReleasedInPages(t *testing.T) {
	f := newFixture(t, record.EnvSettings{AutoDeploy: true})
	f.s = NewWith(FanoutConfig{PageSize: 7, Workers: 3}, f.store, f.rec, f.s.signer, clearSealer{}, zerolog.Nop())
	const n = 60
	var rs []model.Resource
	for i := range n {
		name := fmt.Sprintf("web%02d", i)
		f.agent(t, name, 0)
		rs = append(rs, file(name, "/a", "1"))
	}
	f.rec.offline["web07"] = true
	f.rec.full["web33"] = true
	// An agent discovered but not accepted is left alone.
	if err := f.store.UpsertAgent(f.ctx, record.Agent{Env: "prod", Name: "stranger", State: record.AgentPending}); err != nil {
		t.Fatal(err)
	}
	v, err := f.store.PutVersion(f.ctx, "prod", model.VersionMeta{}, rs)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.store.Release(f.ctx, "prod", v.Number); err != nil {
		t.Fatal(err)
	}
	var calls []int
	rel, err := f.s.Released(f.ctx, record.Release{Env: "prod", Version: v.Number}, func(r record.Release) { calls = append(calls, r.Done()) })
	if err != nil {
		t.Fatal(err)
	}
	if rel.Agents != n || rel.Sent != n-2 || rel.PendingCount != 2 || rel.UpToDate != 0 {
		t.Fatalf("got %d agents, %d sent, %d pending, %d up to date; want %d, %d, 2, 0", rel.Agents, rel.Sent, rel.PendingCount, rel.UpToDate, n, n-2)
	}
	if len(calls) != (n+6)/7 || calls[len(calls)-1] != n || !slices.IsSorted(calls) {
		t.Fatalf("progress told %v, want once per page (%d), growing to %d", calls, (n+6)/7, n)
	}
	sent := map[string]int{}
	for _, s := range f.rec.take() {
		sent[s]++
	}
	for i := range n {
		name := fmt.Sprintf("web%02d", i)
		want := 1
		if name == "web07" || name == "web33" {
			want = 0
		}
		if sent[name+":desired.full"] != want || sent[name+":deploy"] != want {
			t.Fatalf("%s was sent %d desired states and %d deploys, want %d of each", name, sent[name+":desired.full"], sent[name+":deploy"], want)
		}
	}
	// Again: every agent sent the version is up to date.
	f.rec.offline["web07"], f.rec.full["web33"] = false, false
	again, err := f.s.Released(f.ctx, record.Release{Env: "prod", Version: v.Number}, nil)
	if err != nil || again.UpToDate != n-2 || again.Sent != 2 {
		t.Fatalf("second fan-out: %+v, %v; want %d up to date and the 2 missed sent", again, err, n-2)
	}
}

// A fan-out of a version no longer released stops, saying by which.
func TestReleasedSuperseded(t *testing.T) {
	f := newFixture(t, record.EnvSettings{AutoDeploy: true})
	f.agent(t, "web", 0)
	old := f.release(t, file("web", "/a", "1"))
	f.release(t, file("web", "/a", "2"))
	f.rec.take()
	_, err := f.s.Released(f.ctx, record.Release{Env: "prod", Version: old}, nil)
	var sup *SupersededError
	if !errors.As(err, &sup) || sup.By != old+1 {
		t.Fatalf("got %v, want superseded by version %d", err, old+1)
	}
	if got := f.rec.take(); len(got) != 0 {
		t.Fatalf("a superseded fan-out sent %v", got)
	}
}

// A fan-out whose context ends stops, and says so.
func TestReleasedCancelled(t *testing.T) {
	f := newFixture(t, record.EnvSettings{AutoDeploy: true})
	f.agent(t, "web", 0)
	n := f.release(t, file("web", "/a", "1"))
	ctx, cancel := context.WithCancel(f.ctx)
	cancel()
	if _, err := f.s.Released(ctx, record.Release{Env: "prod", Version: n}, nil); !errors.Is(err, context.Canceled) {
		t.Fatalf("got %v, want context.Canceled", err)
	}
}

// A resume deploys at once to the agents it resumes, active ones only,
// and nothing while the environment is halted or does not deploy
// automatically; a drift policy change goes to every accepted agent.
func TestCatchupAndSettings(t *testing.T) {
	settings := record.DefaultEnvSettings()
	f := newFixture(t, settings)
	for _, n := range []string{"web", "db", "paused"} {
		f.agent(t, n, 0)
	}
	pending := f.agent(t, "pending", 0)
	pending.State = record.AgentPending
	if err := f.store.UpsertAgent(f.ctx, pending); err != nil {
		t.Fatal(err)
	}
	if d, err := f.s.Catchup(f.ctx, "prod"); err != nil || len(d.Agents) != 0 {
		t.Fatalf("catch-up before any release: %+v, %v; want nothing to do", d, err)
	}
	f.release(t, file("web", "/a", "1"), file("db", "/b", "1"), file("paused", "/c", "1"))
	a, _ := f.store.GetAgent(f.ctx, "prod", "paused")
	a.Paused = true
	if err := f.store.UpsertAgent(f.ctx, a); err != nil {
		t.Fatal(err)
	}
	f.rec.take()

	d, err := f.s.Catchup(f.ctx, "prod", "web")
	if err != nil || fmt.Sprint(d.Agents) != "[web]" || d.Operation != record.OpDeploy {
		t.Fatalf("catch-up of web: %+v, %v; want a deploy to web", d, err)
	}
	var dep bus.Deploy
	f.rec.last(t, bus.KindDeploy, &dep)
	if dep.Mode != bus.DeployIncremental || dep.Generation != 1 {
		t.Fatalf("catch-up deploy %+v, want incremental of generation 1", dep)
	}
	if got := fmt.Sprint(f.rec.take()); got != "[web:deploy]" {
		t.Fatalf("catch-up of web sent %s", got)
	}
	if d, err := f.s.Catchup(f.ctx, "prod"); err != nil || fmt.Sprint(d.Agents) != "[db web]" {
		t.Fatalf("catch-up of the environment: %+v, %v; want db and web (paused is paused)", d, err)
	}
	f.rec.take()

	for _, change := range []func(*record.EnvSettings){
		func(s *record.EnvSettings) { s.AutoDeploy = false },
		func(s *record.EnvSettings) { s.AutoDeploy, s.Halted = true, true },
	} {
		if _, err := f.store.UpdateEnvSettings(f.ctx, "prod", func(s *record.EnvSettings) error { change(s); return nil }); err != nil {
			t.Fatal(err)
		}
		if d, err := f.s.Catchup(f.ctx, "prod"); err != nil || len(d.Agents) != 0 {
			t.Fatalf("catch-up: %+v, %v; want nothing sent", d, err)
		}
	}
	if got := f.rec.take(); len(got) != 0 {
		t.Fatalf("sent %v, want nothing", got)
	}

	// Settings go to every accepted agent, paused or halted too.
	f.rec.offline["db"] = true // never connected: no inbox, no error
	if err := f.s.Settings(f.ctx, "prod", record.EnvSettings{DriftPolicy: model.DriftHeal}); err != nil {
		t.Fatal(err)
	}
	if got := fmt.Sprint(f.rec.take()); got != "[paused:settings web:settings]" {
		t.Fatalf("settings sent %s", got)
	}
	var st bus.Settings
	f.rec.last(t, bus.KindSettings, &st)
	if st.DriftPolicy != model.DriftHeal {
		t.Fatalf("settings %+v, want drift_policy heal", st)
	}
}

// Every deploy the scheduler sends is recorded first, with what set it off
// and who asked; an agent it could not reach is ended with why.
func TestDeploysRecorded(t *testing.T) {
	settings := record.DefaultEnvSettings()
	f := newFixture(t, settings)
	f.agent(t, "web", 0)
	f.agent(t, "db", 0)
	v, err := f.store.PutVersion(f.ctx, "prod", model.VersionMeta{}, []model.Resource{file("web", "/a", "1"), file("db", "/b", "1")})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.store.Release(f.ctx, "prod", v.Number); err != nil {
		t.Fatal(err)
	}
	const relID = "6f1d7c1e-8d8e-4d4b-9a55-3c3e0f6a9b10"
	if _, err := f.s.Released(record.WithWho(f.ctx, "ci"), record.Release{ID: relID, Env: "prod", Version: v.Number}, nil); err != nil {
		t.Fatal(err)
	}
	check := func(id string, trigger record.DeployTrigger, who string, kind record.Operation, agents ...string) record.Deploy {
		t.Helper()
		d, err := f.store.GetDeploy(f.ctx, "prod", id)
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, a := range d.Agents {
			names = append(names, a.Agent)
		}
		if d.Trigger != trigger || d.Who != who || d.Kind != kind || d.Version != v.Number || !slices.Equal(names, agents) {
			t.Fatalf("deploy %s: %+v; want %s %s by %s to %v", id, d, kind, trigger, who, agents)
		}
		return d
	}
	check(relID, record.DeployByRelease, "ci", record.OpDeploy, "db", "web")

	// web deployed, db failed: the retry goes to db.
	if _, err := f.store.RecordResults(f.ctx, []store.ResultBatch{
		{Env: "prod", Agent: "web", Version: v.Number, DeployID: relID, Results: []model.Result{{ID: file("web", "/a", "").ID, State: model.StateDeployed}}, Done: true},
		{Env: "prod", Agent: "db", Version: v.Number, DeployID: relID, Results: []model.Result{{ID: file("db", "/b", "").ID, State: model.StateFailed}}, Done: true},
	}); err != nil {
		t.Fatal(err)
	}
	if d := check(relID, record.DeployByRelease, "ci", record.OpDeploy, "db", "web"); d.OK != 1 || d.Failed != 1 || d.Outcome != record.DeployFailed {
		t.Fatalf("release after the answers: %+v; want web ok, db failed", d)
	}
	d, err := f.s.Retry(f.ctx, "prod")
	if err != nil {
		t.Fatal(err)
	}
	check(d.ID, record.DeployByDeployInterval, record.WhoServer, record.OpDeploy, "db")
	if d, err = f.s.Verify(f.ctx, "prod"); err != nil {
		t.Fatal(err)
	}
	check(d.ID, record.DeployByRepairInterval, record.WhoServer, record.OpDryRun, "db", "web")
	if d, err = f.s.Catchup(record.WithWho(f.ctx, "bob"), "prod", "web"); err != nil {
		t.Fatal(err)
	}
	check(d.ID, record.DeployByResume, "bob", record.OpDeploy, "web")

	// An operator's repair; db's inbox is gone: it is ended, not waited for.
	f.rec.offline["db"] = true
	if d, err = f.s.Deploy(record.WithWho(f.ctx, "alice"), "prod", DeployRequest{Operation: record.OpRepair}); err != nil {
		t.Fatal(err)
	}
	got := check(d.ID, record.DeployByOperator, "alice", record.OpRepair, "db", "web")
	if db := got.Agents[0]; db.Outcome != record.AgentFailed || !strings.Contains(db.Error, "not reached") {
		t.Fatalf("db, offline: %+v; want failed, not reached", db)
	}
	if w := got.Waiting(); !slices.Equal(w, []string{"web"}) {
		t.Fatalf("waiting for %v, want web", w)
	}

	// An agent that says hello behind the released version is deployed to.
	f.agent(t, "late", 0)
	if _, err := f.store.PutVersion(f.ctx, "prod", model.VersionMeta{}, []model.Resource{file("web", "/a", "1"), file("db", "/b", "1"), file("late", "/c", "1")}); err != nil {
		t.Fatal(err)
	}
	v2, err := f.store.Release(f.ctx, "prod", v.Number+1)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.s.Online(f.ctx, record.Agent{Env: "prod", Name: "late", State: record.AgentAccepted}); err != nil {
		t.Fatal(err)
	}
	ds, err := f.store.ListDeploys(f.ctx, "prod", record.DeployFilter{Agent: "late"})
	if err != nil || len(ds) != 1 || ds[0].Trigger != record.DeployByHello || ds[0].Who != record.WhoServer || ds[0].Version != v2.Number {
		t.Fatalf("deploys of late after its hello: %+v, %v; want one, by hello, of version %d", ds, err, v2.Number)
	}
}

// The deploy that follows a release rides with the desired state to agents
// of protocol 1.2 and later (one message, not two) and is recorded once
// the broker took it; older agents get it as a command of its own; a
// paused agent gets none; an agent not reached is not in the deploy, as
// an older one whose desired state was not taken.
func TestDeployRidesWithDesiredState(t *testing.T) {
	f := newFixture(t, record.EnvSettings{AutoDeploy: true})
	agentOf := func(name, protocol string, paused bool) {
		if err := f.store.UpsertAgent(f.ctx, record.Agent{Env: "prod", Name: name, State: record.AgentAccepted, Protocol: protocol, Paused: paused}); err != nil {
			t.Fatal(err)
		}
	}
	agentOf("new", bus.Protocol, false)
	agentOf("newer", "1.7", false)
	agentOf("old", "1.1", false)
	agentOf("paused", bus.Protocol, true)
	agentOf("away", bus.Protocol, false)
	f.rec.offline["away"] = true
	v, err := f.store.PutVersion(f.ctx, "prod", model.VersionMeta{}, []model.Resource{
		file("new", "/a", "1"), file("newer", "/a", "1"), file("old", "/a", "1"), file("paused", "/a", "1"), file("away", "/a", "1")})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.store.Release(f.ctx, "prod", v.Number); err != nil {
		t.Fatal(err)
	}
	const relID = "0b3c2a9e-5d1f-4c7e-8a2b-6f4e3d2c1b0a"
	if _, err := f.s.Released(f.ctx, record.Release{ID: relID, Env: "prod", Version: v.Number}, nil); err != nil {
		t.Fatal(err)
	}
	got := f.rec.take()
	slices.Sort(got)
	if want := []string{"new:desired.full", "newer:desired.full", "old:deploy", "old:desired.full", "paused:desired.full"}; !slices.Equal(got, want) {
		t.Fatalf("sent %v, want %v", got, want)
	}
	f.rec.mu.Lock()
	for _, e := range f.rec.sent {
		if e.Kind != bus.KindDesiredFull {
			continue
		}
		var body bus.DesiredFull
		if err := e.DecodeBody(&body); err != nil {
			t.Fatal(err)
		}
		carries := e.Agent == "new" || e.Agent == "newer"
		if carries && (body.Deploy == nil || body.Deploy.DeployID != relID || body.Deploy.Generation != v.Number || body.Deploy.Mode != bus.DeployIncremental) {
			t.Errorf("%s: the desired state carries deploy %+v, want %s of generation %d", e.Agent, body.Deploy, relID, v.Number)
		}
		if !carries && body.Deploy != nil {
			t.Errorf("%s: the desired state carries a deploy (%+v), want none", e.Agent, body.Deploy)
		}
	}
	f.rec.mu.Unlock()
	d, err := f.store.GetDeploy(f.ctx, "prod", relID)
	if err != nil {
		t.Fatal(err)
	}
	outcome := map[string]record.DeployAgent{}
	for _, a := range d.Agents {
		outcome[a.Agent] = a
	}
	if _, in := outcome["away"]; in || len(outcome) != 3 {
		t.Fatalf("deploy recorded for %+v; want new, newer, old (away was not reached: it gets the version at its next hello)", d.Agents)
	}
	if w := d.Waiting(); !slices.Equal(w, []string{"new", "newer", "old"}) {
		t.Fatalf("waiting for %v, want new, newer, old", w)
	}
}
