package server_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/tetherhq/tether/agent"
	"github.com/tetherhq/tether/agent/handler"
	"github.com/tetherhq/tether/agent/handler/builtin"
	"github.com/tetherhq/tether/bus"
	"github.com/tetherhq/tether/model"
	"github.com/tetherhq/tether/server"
	"github.com/tetherhq/tether/server/record"
	"github.com/tetherhq/tether/server/scheduler"
	"github.com/tetherhq/tether/server/store"
	"github.com/tetherhq/tether/server/store/sqlite"
)

// patience bounds waits (a guard against hangs, not a speed assertion).
const patience = 30 * time.Second

type rig struct {
	t      *testing.T
	ctx    context.Context
	store  *sqlite.Store
	bus    *bus.Local
	srv    *server.Server
	sub    *server.Subscription
	roots  map[string]string
	wg     sync.WaitGroup
	cancel context.CancelFunc
}

func newRig(t *testing.T, enrollment record.Enrollment) *rig {
	t.Helper()
	settings := record.DefaultEnvSettings()
	settings.AutoDeploy = false
	settings.Enrollment = enrollment
	return startRig(t, server.Config{}, map[string]record.EnvSettings{"test": settings})
}

// startRig runs a server with cfg on a fresh SQLite store and an
// in-process bus, with the environments envs, until the test ends.
func startRig(t *testing.T, cfg server.Config, envs map[string]record.EnvSettings) *rig {
	t.Helper()
	return startRigWith(t, func(c *server.Config, _ store.Store) { *c = cfg }, envs)
}

// startRigWith is startRig with a configuration that may depend on the
// store.
func startRigWith(t *testing.T, configure func(*server.Config, store.Store), envs map[string]record.EnvSettings) *rig {
	t.Helper()
	return startRigOver(t, func(st store.Store) store.Store { return st }, configure, envs)
}

// startRigOver is startRigWith with the server's store wrapped by wrap
// (the rig's store is the one below it).
func startRigOver(t *testing.T, wrap func(store.Store) store.Store, configure func(*server.Config, store.Store), envs map[string]record.EnvSettings) *rig {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	st, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "tether.db"), sqlite.Config{})
	if err != nil {
		t.Fatal(err)
	}
	var cfg server.Config
	configure(&cfg, st)
	b := bus.NewLocal(zerolog.Nop())
	srv, err := server.New(cfg, wrap(st), b, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	r := &rig{t: t, ctx: ctx, store: st, bus: b, srv: srv, sub: srv.Subscribe(), roots: map[string]string{}, cancel: cancel}
	for env, settings := range envs {
		if _, err := srv.EnsureEnv(ctx, env, settings); err != nil {
			t.Fatal(err)
		}
	}
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		if err := srv.Run(ctx); err != nil && !errors.Is(err, context.Canceled) {
			t.Errorf("server: %v", err)
		}
	}()
	t.Cleanup(func() {
		cancel()
		b.Close()
		r.wg.Wait()
		st.Close()
	})
	return r
}

// startAgent runs an agent with the built-in handlers below its own root;
// it pins the server's key by the key itself, or by its fingerprint.
func (r *rig) startAgent(name string, byKey bool) {
	r.t.Helper()
	cfg := agent.Config{Env: "test", Name: name}
	if byKey {
		cfg.ServerKey = r.srv.PublicKey()
	} else {
		cfg.ServerFingerprint = model.Fingerprint(r.srv.PublicKey())
	}
	r.startAgentWith(cfg)
}

// startAgentWith runs an agent of cfg; stop stops it (the rig's end
// stops it too).
func (r *rig) startAgentWith(cfg agent.Config) (a *agent.Agent, stop func()) {
	r.t.Helper()
	name := cfg.Name
	root := r.t.TempDir()
	r.roots[name] = root
	reg, err := builtin.Registry(handler.Runtime{Root: root, Sync: handler.NewSyncGroup()})
	if err != nil {
		r.t.Fatal(err)
	}
	a, err = agent.New(cfg, r.bus, reg, zerolog.Nop())
	if err != nil {
		r.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(r.ctx)
	done := make(chan struct{})
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		defer close(done)
		defer a.Close()
		if err := a.Run(ctx); err != nil && !errors.Is(err, context.Canceled) {
			r.t.Errorf("agent %s: %v", name, err)
		}
	}()
	return a, func() {
		cancel()
		<-done
	}
}

// next returns the next live event of kind.
func (r *rig) next(kind server.EventKind) server.Event {
	r.t.Helper()
	ctx, cancel := context.WithTimeout(r.ctx, patience)
	defer cancel()
	for {
		e, err := r.sub.Next(ctx)
		if err != nil {
			r.t.Fatalf("waiting for %s: %v", kind, err)
		}
		if e.Kind == kind {
			return e
		}
	}
}

func (r *rig) waitOnline(names ...string) {
	r.t.Helper()
	want := map[string]bool{}
	for _, n := range names {
		want[n] = true
	}
	for len(want) > 0 {
		delete(want, r.next(server.EventAgentOnline).Agent)
	}
}

func (r *rig) release(rs ...model.Resource) model.Version {
	r.t.Helper()
	v, _, err := r.srv.Export(r.ctx, "test", rs, model.VersionMeta{Compiler: "test"})
	if err != nil {
		r.t.Fatal(err)
	}
	rel, err := r.srv.Release(r.ctx, "test", v.Number)
	if err != nil {
		r.t.Fatal(err)
	}
	// Its fan-out runs in the background: wait for it, so that what the
	// test does next (a deploy) follows it.
	if _, err := r.srv.WaitRelease(r.ctx, "test", rel.ReleaseID); err != nil {
		r.t.Fatal(err)
	}
	return v
}

// deploy runs a deploy and returns every result by resource path.
func (r *rig) deploy(req scheduler.DeployRequest) map[model.ID]model.Result {
	r.t.Helper()
	d, err := r.srv.Deploy(r.ctx, "test", req)
	if err != nil {
		r.t.Fatal(err)
	}
	out := map[model.ID]model.Result{}
	pending := map[string]bool{}
	for _, a := range d.Agents {
		pending[a] = true
	}
	ctx, cancel := context.WithTimeout(r.ctx, patience)
	defer cancel()
	for len(pending) > 0 {
		e, err := r.sub.Next(ctx)
		if err != nil {
			r.t.Fatalf("deploy %s: still waiting for %v: %v", d.ID, pending, err)
		}
		if e.DeployID != d.ID {
			continue
		}
		switch e.Kind {
		case server.EventResult:
			out[e.Result.ID] = *e.Result
		case server.EventDeployDone:
			if e.Error != "" {
				r.t.Fatalf("agent %s: %s", e.Agent, e.Error)
			}
			delete(pending, e.Agent)
		}
	}
	return out
}

func file(agent, path, content string, requires ...model.ID) model.Resource {
	return model.Resource{ID: model.ID{Type: "file", Agent: agent, Key: "path", Value: path},
		Attributes: model.Attributes{"path": path, "content": content, "mode": "0644"}, Requires: requires}
}

func dir(agent, path string) model.Resource {
	return model.Resource{ID: model.ID{Type: "directory", Agent: agent, Key: "path", Value: path},
		Attributes: model.Attributes{"path": path}}
}

func TestEmbeddedPipeline(t *testing.T) {
	r := newRig(t, record.EnrollOpen)
	site := dir("web", "/site")
	index := file("web", "/site/index.html", "<h1>v1</h1>", site.ID)
	// The load balancer's config requires a resource on another agent.
	lb := file("lb", "/backends", "web:80", index.ID)
	r.release(site, index, lb)
	r.startAgent("web", true)
	r.startAgent("lb", false) // pins the key it learns from `enrolled` by its fingerprint
	r.waitOnline("web", "lb")

	got := r.deploy(scheduler.DeployRequest{Full: true})
	for _, res := range []model.Resource{site, index, lb} {
		g := got[res.ID]
		if g.State != model.StateDeployed || !g.Changes.Created() {
			t.Fatalf("%s: %s %v (%s), want deployed and created", res.ID, g.State, g.Changes, g.Message)
		}
	}
	if b, err := os.ReadFile(filepath.Join(r.roots["web"], "site/index.html")); err != nil || string(b) != "<h1>v1</h1>" {
		t.Fatalf("index.html on disk: %q, %v", b, err)
	}
	if b, _ := os.ReadFile(filepath.Join(r.roots["lb"], "backends")); string(b) != "web:80" {
		t.Fatalf("backends on disk: %q", b)
	}
	sts, err := r.store.Statuses(r.ctx, "test", record.StatusFilter{State: model.StateDeployed, Compliance: model.Compliant})
	if err != nil || len(sts) != 3 {
		t.Fatalf("store has %d deployed and compliant resources, want 3 (%v)", len(sts), err)
	}

	// A second full deploy changes nothing.
	for id, g := range r.deploy(scheduler.DeployRequest{Full: true}) {
		if g.Changed() {
			t.Fatalf("second deploy changed %s: %v", id, g.Changes)
		}
	}

	// Drift by hand: a full deploy repairs exactly that file.
	if err := os.WriteFile(filepath.Join(r.roots["web"], "site/index.html"), []byte("defaced"), 0o644); err != nil {
		t.Fatal(err)
	}
	changed := 0
	for id, g := range r.deploy(scheduler.DeployRequest{Full: true}) {
		if g.Changed() {
			changed++
			if id != index.ID || g.Changes["content"].Current != "defaced" {
				t.Fatalf("repaired %s with %v, want only index.html", id, g.Changes)
			}
		}
	}
	if changed != 1 {
		t.Fatalf("%d resources repaired, want 1", changed)
	}

	// A new release reaches the agent as a diff; an incremental deploy runs
	// only what changed.
	index2 := file("web", "/site/index.html", "<h1>v2</h1>", site.ID)
	v2 := r.release(site, index2, lb)
	got = r.deploy(scheduler.DeployRequest{Agents: []string{"web"}})
	if len(got) != 1 || got[index2.ID].State != model.StateDeployed || !got[index2.ID].Changed() {
		t.Fatalf("incremental deploy ran %v, want only the changed index.html", got)
	}
	if b, _ := os.ReadFile(filepath.Join(r.roots["web"], "site/index.html")); string(b) != "<h1>v2</h1>" {
		t.Fatalf("index.html after v2: %q", b)
	}
	actions, err := r.store.Actions(r.ctx, "test", index.ID, 10)
	if err != nil || len(actions) != 3 { // created, repaired, updated
		t.Fatalf("index.html action log has %d entries, want 3 (%v)", len(actions), err)
	}
	// Its report recorded the generation the agent holds now.
	if a, err := r.store.GetAgent(r.ctx, "test", "web"); err != nil || a.Generation != v2.Number {
		t.Fatalf("agent web holds generation %d (%v), want %d: its report", a.Generation, err, v2.Number)
	}
}

func TestCrossAgentFailureSkipsWaitingAgent(t *testing.T) {
	r := newRig(t, record.EnrollOpen)
	// web's file cannot be written: its parent directory is not managed and
	// does not exist. lb's file requires it.
	broken := file("web", "/missing/dir/f", "x")
	lb := file("lb", "/backends", "x", broken.ID)
	r.release(broken, lb)
	r.startAgent("web", true)
	r.startAgent("lb", true)
	r.waitOnline("web", "lb")
	got := r.deploy(scheduler.DeployRequest{Full: true})
	if got[broken.ID].State != model.StateFailed {
		t.Fatalf("broken: %s", got[broken.ID].State)
	}
	if g := got[lb.ID]; g.State != model.StateSkipped || g.Message == "" {
		t.Fatalf("lb: %s %q, want skipped naming the failed requirement", g.State, g.Message)
	}
	if _, err := os.Stat(filepath.Join(r.roots["lb"], "backends")); !os.IsNotExist(err) {
		t.Fatalf("a skipped resource was written: %v", err)
	}
}

func TestDryRunChangesNothing(t *testing.T) {
	r := newRig(t, record.EnrollOpen)
	f := file("web", "/f", "x")
	r.release(f)
	r.startAgent("web", true)
	r.waitOnline("web")
	got := r.deploy(scheduler.DeployRequest{Operation: record.OpDryRun})
	if g := got[f.ID]; !g.DryRun || !g.Changes.Created() || g.Changed() {
		t.Fatalf("dry run result %+v", g)
	}
	if _, err := os.Stat(filepath.Join(r.roots["web"], "f")); !os.IsNotExist(err) {
		t.Fatalf("dry run wrote the file: %v", err)
	}
	sts, _ := r.store.Statuses(r.ctx, "test", record.StatusFilter{})
	if len(sts) != 1 || sts[0].State != model.StateAvailable {
		t.Fatalf("dry run changed the status: %+v", sts)
	}
}

func TestManualEnrollmentWaitsForOperator(t *testing.T) {
	r := newRig(t, record.EnrollManual)
	r.release(file("web", "/f", "x"))
	r.startAgent("web", false)
	if e := r.next(server.EventAgentDiscovered); e.Agent != "web" {
		t.Fatalf("discovered %q", e.Agent)
	}
	a, err := r.store.GetAgent(r.ctx, "test", "web")
	if err != nil || a.State != record.AgentPending || len(a.PublicKey) == 0 {
		t.Fatalf("agent %+v, %v; want pending with its key", a, err)
	}
	if _, err := r.srv.Deploy(r.ctx, "test", scheduler.DeployRequest{}); !errors.Is(err, record.ErrNoAgents) {
		t.Fatalf("deploy with only a pending agent: got %v, want ErrNoAgents", err)
	}
}

func TestForgedEventsAreDropped(t *testing.T) {
	r := newRig(t, record.EnrollOpen)
	f := file("web", "/f", "x")
	r.release(f)
	r.startAgent("web", true)
	r.waitOnline("web")

	// An impostor claims to be web and reports the file deployed.
	_, key, _ := bus.GenerateKey()
	forged, err := bus.NewSigner(key, 0).Seal(bus.KindResourceStatus, "test", "web", bus.ResourceStatus{
		DeployID: "forged", Generation: 1, Results: []model.Result{{ID: f.ID, State: model.StateDeployed}}, Done: true,
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := r.bus.Publish(r.ctx, forged); err != nil {
		t.Fatal(err)
	}
	// And an unknown agent reports something.
	stranger, _ := bus.NewSigner(key, 0).Seal(bus.KindHeartbeat, "test", "stranger", bus.Empty{})
	if err := r.bus.Publish(r.ctx, stranger); err != nil {
		t.Fatal(err)
	}
	// Neither is signed by a key the server knows: both are filed under
	// an unknown signer, naming whom they claim to be, and use up none
	// of web's alerts.
	for _, who := range []string{"web", "stranger"} {
		if e := r.next(server.EventSecurity); e.Agent != "(unknown signer)" || !strings.Contains(e.Alert.Message, "claims to be agent test/"+who) {
			t.Fatalf("security alert %q about %q, want it about an unknown signer claiming to be %s", e.Alert.Message, e.Agent, who)
		}
	}
	sts, _ := r.store.Statuses(r.ctx, "test", record.StatusFilter{})
	if sts[0].State != model.StateAvailable {
		t.Fatalf("a forged report changed the status to %s", sts[0].State)
	}
	// The alert is raised before the handler returns, the dead letter
	// after: wait for the bus to record it.
	deadline := time.Now().Add(patience)
	for {
		n, _ := r.bus.DeadLetterCount(r.ctx)
		if n == 2 {
			break
		}
		if n > 2 || time.Now().After(deadline) {
			t.Fatalf("%d dead letters, want 2", n)
		}
		time.Sleep(time.Millisecond)
	}
}

func TestTokenEnrollment(t *testing.T) {
	r := newRig(t, record.EnrollToken)
	r.release(file("web", "/f", "x"))
	secret, err := model.NewEnrollmentToken(r.srv.PublicKey())
	if err != nil {
		t.Fatal(err)
	}
	tok := record.EnrollmentToken{ID: "t1", Env: "test", Name: "rack 1", Hash: record.HashSecret(secret), MaxUses: 1, CreatedBy: "test"}
	if err := r.store.CreateEnrollToken(r.ctx, tok); err != nil {
		t.Fatal(err)
	}
	// A valid token enrolls at once: the agent gets its slice and deploys.
	r.startAgentWith(agent.Config{Env: "test", Name: "web", Token: secret})
	r.waitOnline("web")
	if _, err := r.srv.Deploy(r.ctx, "test", scheduler.DeployRequest{}); err != nil {
		t.Fatal(err)
	}
	if e := r.next(server.EventDeployDone); e.Agent != "web" || e.Error != "" {
		t.Fatalf("deploy: %+v", e)
	}
	// The token is used up: the next agent stays pending, and is told why.
	r.startAgentWith(agent.Config{Env: "test", Name: "db", Token: secret})
	e := r.next(server.EventAgentDiscovered)
	if e.Agent != "db" || e.Error != "enrollment token rack 1 is used up" {
		t.Fatalf("second agent: %+v", e)
	}
	wrong, err := model.NewEnrollmentToken(r.srv.PublicKey()) // this server's, never issued
	if err != nil {
		t.Fatal(err)
	}
	r.startAgentWith(agent.Config{Env: "test", Name: "cache", Token: wrong})
	if e := r.next(server.EventAgentDiscovered); e.Agent != "cache" || e.Error != "unknown or revoked enrollment token" {
		t.Fatalf("agent with a wrong token: %+v", e)
	}
	for _, name := range []string{"db", "cache"} {
		a, err := r.store.GetAgent(r.ctx, "test", name)
		if err != nil || a.State != record.AgentPending {
			t.Fatalf("%s: %+v, %v; want pending", name, a, err)
		}
	}
	// An operator still accepts one by hand.
	if _, err := r.srv.AgentAction(r.ctx, "test", "db", record.AgentAccept); err != nil {
		t.Fatal(err)
	}
	r.waitOnline("db")
}

// An operator's facts refresh reaches the agent, whose answer updates its
// record: facts changed on the host show without waiting for the agent's
// next periodic check (a minute, by default).
func TestFactsRefresh(t *testing.T) {
	r := newRig(t, record.EnrollManual)
	var mu sync.Mutex
	kernel := "6.1.0"
	gather := func(context.Context) map[string]any {
		mu.Lock()
		defer mu.Unlock()
		return map[string]any{"hostname": "web", "kernel": map[string]any{"release": kernel}}
	}
	r.startAgentWith(agent.Config{Env: "test", Name: "web", ServerKey: r.srv.PublicKey(), Facts: gather})
	r.next(server.EventAgentDiscovered)
	if _, err := r.srv.RefreshFacts(r.ctx, "test", "web"); !errors.Is(err, model.ErrConflict) {
		t.Fatalf("refresh of a pending agent: got %v, want ErrConflict", err)
	}
	if _, err := r.srv.AgentAction(r.ctx, "test", "web", record.AgentAccept); err != nil {
		t.Fatal(err)
	}
	r.waitOnline("web")
	if _, err := r.srv.RefreshFacts(r.ctx, "test", "nobody"); !errors.Is(err, model.ErrNotFound) {
		t.Fatalf("refresh of an unknown agent: got %v, want ErrNotFound", err)
	}

	mu.Lock()
	kernel = "6.1.1"
	mu.Unlock()
	if _, err := r.srv.RefreshFacts(r.ctx, "test", "web"); err != nil {
		t.Fatal(err)
	}
	for {
		e := r.next(server.EventAgentChanged)
		if e.Agent != "web" || e.Error != "facts" {
			continue
		}
		a, err := r.store.GetAgent(r.ctx, "test", "web")
		if err != nil {
			t.Fatal(err)
		}
		kernelFacts, _ := a.Facts["kernel"].(map[string]any)
		if got := kernelFacts["release"]; got != "6.1.1" {
			t.Fatalf("kernel release recorded after the refresh: got %v, want 6.1.1", got)
		}
		return
	}
}
