package agent

import (
	"context"
	"crypto/ed25519"
	"errors"
	"maps"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/tetherhq/tether/agent/handler"
	"github.com/tetherhq/tether/agent/handler/builtin"
	"github.com/tetherhq/tether/bus"
	"github.com/tetherhq/tether/model"
)

// patience bounds every wait: a guard against hangs, not a speed assertion.
const patience = 20 * time.Second

// fakeServer stands in for the server on the in-process bus: it signs
// commands, collects the agents' events, and declares an agent's inbox
// when it hears its hello, as the server does (agents never declare it).
type fakeServer struct {
	t      testing.TB
	bus    *bus.Local
	key    ed25519.PrivateKey
	signer *bus.Signer
	mu     sync.Mutex
	events []*bus.Envelope
	added  chan struct{}
	// patience bounds the wait for each event (default: patience).
	patience time.Duration
}

func newFakeServer(t testing.TB) *fakeServer {
	_, key, err := bus.GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	s := &fakeServer{t: t, bus: bus.NewLocal(zerolog.Nop()), key: key, signer: bus.NewSigner(key, 0), added: make(chan struct{}, 1), patience: patience}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for _, q := range []bus.Queue{bus.QueueEvents, bus.QueueCompliance} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_ = s.bus.ConsumeEvents(ctx, q, func(ctx context.Context, d bus.Delivery) error {
				if e := d.Envelope; e.Kind == bus.KindHello {
					if err := s.bus.DeclareInbox(ctx, e.Env, e.Agent); err != nil {
						return err
					}
				}
				s.mu.Lock()
				s.events = append(s.events, d.Envelope)
				s.mu.Unlock()
				select {
				case s.added <- struct{}{}:
				default:
				}
				return nil
			})
		}()
	}
	t.Cleanup(func() {
		cancel()
		s.bus.Close()
		wg.Wait()
	})
	return s
}

func (s *fakeServer) send(agent string, kind bus.Kind, body any) {
	s.t.Helper()
	e, err := s.signer.Seal(kind, "test", agent, body)
	if err != nil {
		s.t.Fatal(err)
	}
	if err := s.bus.Send(context.Background(), e, bus.SendOptions{}); err != nil {
		s.t.Fatal(err)
	}
}

// next returns the next event of kind from agent after the first from
// events already taken; it fails the test after patience.
func (s *fakeServer) next(from *int, agent string, kind bus.Kind) *bus.Envelope {
	s.t.Helper()
	deadline := time.After(s.patience)
	for {
		s.mu.Lock()
		for ; *from < len(s.events); *from++ {
			e := s.events[*from]
			if e.Kind == kind && e.Agent == agent {
				*from++
				s.mu.Unlock()
				return e
			}
		}
		s.mu.Unlock()
		select {
		case <-s.added:
		case <-deadline:
			s.t.Fatalf("no %s from %s within %s", kind, agent, s.patience)
		}
	}
}

// stateRequest returns the next state request of agent, decoded.
func (s *fakeServer) stateRequest(from *int, agent string) bus.StateRequest {
	s.t.Helper()
	var req bus.StateRequest
	if err := s.next(from, agent, bus.KindStateRequest).DecodeBody(&req); err != nil {
		s.t.Fatalf("state request of %s: %v", agent, err)
	}
	return req
}

// count returns how many events of kind agent sent so far.
func (s *fakeServer) count(agent string, kind bus.Kind) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, e := range s.events {
		if e.Kind == kind && e.Agent == agent {
			n++
		}
	}
	return n
}

// enroll answers a hello and sends a slice and a deploy.
func (s *fakeServer) enroll(agent string) {
	s.send(agent, bus.KindEnrolled, bus.Enrolled{ServerKey: s.signer.PublicKey()})
}

func (s *fakeServer) full(agent string, gen int64, rs ...model.Resource) {
	s.t.Helper()
	sl, h := s.slice(agent, gen, rs...)
	s.send(agent, bus.KindDesiredFull, bus.DesiredFull{Generation: gen, Resources: sl.Resources, SliceHash: h})
}

// slice returns agent's slice of rs at generation gen, and its hash.
func (s *fakeServer) slice(agent string, gen int64, rs ...model.Resource) (model.Slice, model.Hash) {
	s.t.Helper()
	sl := model.SliceOf(agent, gen, rs)
	h, err := sl.Hash()
	if err != nil {
		s.t.Fatal(err)
	}
	return sl, h
}

// deploy sends agent the slice of rs at generation gen and an incremental
// deploy of it under policy, and returns the deploy's results; a deploy
// that fails as a whole fails the test.
func (s *fakeServer) deploy(from *int, agent string, gen int64, id string, policy model.DriftPolicy, rs ...model.Resource) map[model.ID]model.Result {
	s.t.Helper()
	s.full(agent, gen, rs...)
	s.send(agent, bus.KindDeploy, bus.Deploy{DeployID: id, Mode: bus.DeployIncremental, Generation: gen, DriftPolicy: policy})
	got, last := s.results(from, agent, id)
	if last.Error != "" {
		s.t.Fatalf("deploy %s: %s", id, last.Error)
	}
	return got
}

// results gathers the results of one deploy until its last batch.
func (s *fakeServer) results(from *int, agent, deployID string) (map[model.ID]model.Result, bus.ResourceStatus) {
	s.t.Helper()
	got := map[model.ID]model.Result{}
	for {
		e := s.next(from, agent, bus.KindResourceStatus)
		var body bus.ResourceStatus
		if err := e.DecodeBody(&body); err != nil {
			s.t.Fatal(err)
		}
		if body.DeployID != deployID {
			continue
		}
		for _, r := range body.Results {
			got[r.ID] = r
		}
		if body.Done {
			return got, body
		}
	}
}

func file(agent, path, content string) model.Resource {
	return model.Resource{ID: model.ID{Type: "file", Agent: agent, Key: "path", Value: path},
		Attributes: model.Attributes{"path": path, "content": content}}
}

// gate is a handler whose resources block in Apply until opened, so a test
// can act while a deploy is under way.
type gate struct {
	mu      sync.Mutex
	open    chan struct{}
	entered chan string
	applied map[string]int
}

func newGate() *gate {
	return &gate{open: make(chan struct{}), entered: make(chan string, 100), applied: map[string]int{}}
}

func (g *gate) Kind() string                     { return "gate" }
func (g *gate) Validate(r *model.Resource) error { return nil }
func (g *gate) Read(_ context.Context, r *model.Resource) (model.Attributes, bool, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return model.Attributes{"name": r.ID.Value}, g.applied[r.ID.Value] > 0, nil
}
func (g *gate) Apply(ctx context.Context, r *model.Resource, _ model.Attributes, _ handler.Changes) error {
	g.entered <- r.ID.Value
	select {
	case <-g.open:
	case <-ctx.Done():
		return ctx.Err()
	}
	g.mu.Lock()
	g.applied[r.ID.Value]++
	g.mu.Unlock()
	return nil
}

func gated(agent, name string) model.Resource {
	return model.Resource{ID: model.ID{Type: "gate", Agent: agent, Key: "name", Value: name}, Attributes: model.Attributes{"name": name}}
}

type running struct {
	a    *Agent
	stop func()
}

// start runs an agent named name with state in dir, the file handler below
// root and the gate handler g (may be nil).
func start(t testing.TB, s *fakeServer, name, dir, root string, g *gate, tune ...func(*Config)) *running {
	t.Helper()
	return startLogging(t, s, name, dir, root, g, zerolog.Nop(), tune...)
}

// startLogging is start with the agent logging to log.
func startLogging(t testing.TB, s *fakeServer, name, dir, root string, g *gate, log zerolog.Logger, tune ...func(*Config)) *running {
	t.Helper()
	reg, err := builtin.Registry(handler.Runtime{Root: root})
	if err != nil {
		t.Fatal(err)
	}
	if g != nil {
		if err := reg.Register(g); err != nil {
			t.Fatal(err)
		}
	}
	cfg := Config{Env: "test", Name: name, StateDir: dir, Heartbeat: 50 * time.Millisecond, HelloRetry: 50 * time.Millisecond,
		HelloRetryMax: time.Hour, ClaimRetry: 20 * time.Millisecond, ClaimWait: 200 * time.Millisecond, ServerKey: s.signer.PublicKey()}
	for _, f := range tune {
		f(&cfg)
	}
	a, err := New(cfg, s.bus, reg, log)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := a.Run(ctx); err != nil && !errors.Is(err, context.Canceled) {
			t.Errorf("agent %s: %v", name, err)
		}
	}()
	r := &running{a: a}
	var once sync.Once
	r.stop = func() {
		once.Do(func() {
			cancel()
			<-done
			a.Close()
		})
	}
	t.Cleanup(r.stop)
	return r
}

func TestDeployAndRestartKeepsState(t *testing.T) {
	s := newFakeServer(t)
	dir, root := t.TempDir(), t.TempDir()
	var seen int
	r := start(t, s, "web", dir, root, nil)
	if e := s.next(&seen, "web", bus.KindHello); e == nil {
		t.Fatal("no hello")
	}
	s.enroll("web")
	s.full("web", 3, file("web", "/a", "A"), file("web", "/b", "B"))
	s.send("web", bus.KindDeploy, bus.Deploy{DeployID: "d1", Mode: bus.DeployIncremental, Generation: 3})
	got, last := s.results(&seen, "web", "d1")
	if len(got) != 2 || last.Generation != 3 || last.Error != "" {
		t.Fatalf("results %v, last %+v", got, last)
	}
	if b, _ := os.ReadFile(filepath.Join(root, "a")); string(b) != "A" {
		t.Fatalf("/a holds %q", b)
	}
	// Heartbeats flow once enrolled, and goodbye ends a clean stop.
	s.next(&seen, "web", bus.KindHeartbeat)
	r.stop()
	s.next(&seen, "web", bus.KindGoodbye)

	// Restarted, the agent says it holds generation 3, trusts the same
	// server, and an incremental deploy changes nothing.
	start(t, s, "web", dir, root, nil)
	e := s.next(&seen, "web", bus.KindHello)
	var h bus.Hello
	if err := e.DecodeBody(&h); err != nil {
		t.Fatal(err)
	}
	if h.Generation != 3 || h.Token != "" {
		t.Fatalf("hello after restart: generation %d token %q, want 3 and none", h.Generation, h.Token)
	}
	s.send("web", bus.KindDeploy, bus.Deploy{DeployID: "d2", Mode: bus.DeployIncremental, Generation: 3})
	got, _ = s.results(&seen, "web", "d2")
	if len(got) != 0 {
		t.Fatalf("incremental deploy after restart redeployed %d resources", len(got))
	}
}

func TestDiffFromAnotherGenerationAsksForState(t *testing.T) {
	s := newFakeServer(t)
	var seen int
	start(t, s, "web", t.TempDir(), t.TempDir(), nil)
	s.next(&seen, "web", bus.KindHello)
	s.enroll("web")
	s.full("web", 1, file("web", "/a", "A"))
	s.send("web", bus.KindDesiredDiff, bus.DesiredDiff{Diff: model.Diff{From: 5, To: 6}})
	if req := s.stateRequest(&seen, "web"); req.Generation != 1 {
		t.Fatalf("state request says generation %d, want 1", req.Generation)
	}
}

// While its request for the full state is under way, an agent that lags
// behind a storm of releases does not ask again at each one: the server
// would answer every request with a full state. Its answer ends the
// request; a gap after it is asked about again, and so is an answer older
// than a diff dropped while it was on its way.
func TestStateAskedOnceWhileUnderWay(t *testing.T) {
	s := newFakeServer(t)
	var seen int
	start(t, s, "web", t.TempDir(), t.TempDir(), nil)
	s.next(&seen, "web", bus.KindHello)
	s.enroll("web")
	s.full("web", 1, file("web", "/a", "A"))
	for to := int64(6); to <= 9; to++ {
		s.send("web", bus.KindDesiredDiff, bus.DesiredDiff{Diff: model.Diff{From: to - 1, To: to}})
	}
	s.handled(&seen, "web")
	if n := s.count("web", bus.KindStateRequest); n != 1 {
		t.Fatalf("%d state requests for four diffs from other generations while one is under way, want 1", n)
	}

	// The answer is of generation 8, older than the diff to 9 dropped
	// meanwhile: the agent asks again, saying it holds 8.
	s.full("web", 8, file("web", "/a", "B"))
	if req := s.stateRequest(&seen, "web"); req.Generation != 8 {
		t.Fatalf("state request after an answer older than a dropped diff: %+v, want one saying 8", req)
	}
	// Answered with 9, nothing is under way: the next gap is asked about.
	s.full("web", 9, file("web", "/a", "C"))
	s.handled(&seen, "web")
	before := s.count("web", bus.KindStateRequest)
	s.send("web", bus.KindDesiredDiff, bus.DesiredDiff{Diff: model.Diff{From: 12, To: 13}})
	if req := s.stateRequest(&seen, "web"); req.Generation != 9 {
		t.Fatalf("state request after the answer: %+v, want one saying 9", req)
	}
	if n := s.count("web", bus.KindStateRequest); n != before+1 {
		t.Fatalf("%d state requests after the answer, want %d", n, before+1)
	}
	// An answer that does not match its hash is refused, and asked
	// about again at once.
	sl := model.SliceOf("web", 13, []model.Resource{file("web", "/a", "D")})
	s.send("web", bus.KindDesiredFull, bus.DesiredFull{Generation: 13, Resources: sl.Resources, SliceHash: model.Hash{1, 2, 3}})
	if req := s.stateRequest(&seen, "web"); req.Generation != 9 {
		t.Fatalf("state request after a refused answer: %+v, want one saying 9", req)
	}
}

func TestUnsignedCommandsAreDropped(t *testing.T) {
	s := newFakeServer(t)
	var seen int
	r := start(t, s, "web", t.TempDir(), t.TempDir(), nil)
	s.next(&seen, "web", bus.KindHello)
	s.enroll("web")
	s.next(&seen, "web", bus.KindHeartbeat) // enrolled
	_, forger, _ := bus.GenerateKey()
	e, _ := bus.NewSigner(forger, 0).Seal(bus.KindPause, "test", "web", bus.Empty{})
	if err := s.bus.Send(context.Background(), e, bus.SendOptions{}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(patience)
	for len(s.bus.DeadLetters()) == 0 {
		if time.Now().After(deadline) {
			t.Fatal("a forged command was not dead-lettered")
		}
		time.Sleep(5 * time.Millisecond)
	}
	if paused, _ := r.a.Journal().Paused(); paused {
		t.Fatal("a forged pause paused the agent")
	}
}

func TestDeploySupersedesRepair(t *testing.T) {
	s := newFakeServer(t)
	g := newGate()
	var seen int
	start(t, s, "web", t.TempDir(), t.TempDir(), g)
	s.next(&seen, "web", bus.KindHello)
	s.enroll("web")
	s.full("web", 1, gated("web", "slow"))
	s.send("web", bus.KindRepair, bus.Deploy{DeployID: "r1", Mode: bus.DeployFull, Generation: 1})
	<-g.entered // the repair is applying
	s.send("web", bus.KindDeploy, bus.Deploy{DeployID: "d1", Mode: bus.DeployIncremental, Generation: 1})
	_, last := s.results(&seen, "web", "r1")
	if last.Error != errSuperseded.Error() {
		t.Fatalf("repair ended with %q, want %q", last.Error, errSuperseded)
	}
	<-g.entered // the deploy runs the resource again
	close(g.open)
	got, last := s.results(&seen, "web", "d1")
	if r := got[gated("web", "slow").ID]; r.State != model.StateDeployed || last.Error != "" {
		t.Fatalf("deploy after the superseded repair: %+v, %q", r, last.Error)
	}
}

// TestInterruptedDeployResumes: the agent stops in the middle of a deploy;
// started again, it finishes the deploy from its journal, and a change
// applied just before the stop is reported once.
func TestInterruptedDeployResumes(t *testing.T) {
	s := newFakeServer(t)
	dir, root := t.TempDir(), t.TempDir()
	g := newGate()
	var seen int
	r := start(t, s, "web", dir, root, g)
	s.next(&seen, "web", bus.KindHello)
	s.enroll("web")
	// /a is written, then the gate holds the deploy.
	first := file("web", "/a", "A")
	hold := gated("web", "hold")
	hold.Requires = []model.ID{first.ID}
	s.full("web", 1, first, hold)
	s.send("web", bus.KindDeploy, bus.Deploy{DeployID: "d1", Mode: bus.DeployIncremental, Generation: 1})
	<-g.entered
	r.stop()
	if jobs := r.a.Journal().Jobs(); len(jobs) != 1 || jobs[0].ID != "d1" {
		t.Fatalf("journaled jobs after the stop: %+v, want d1", jobs)
	}
	close(g.open)
	start(t, s, "web", dir, root, g)
	got, last := s.results(&seen, "web", "d1")
	if last.Error != "" || got[hold.ID].State != model.StateDeployed {
		t.Fatalf("resumed deploy: %v, error %q", got, last.Error)
	}
}

func TestStandbyTakesOver(t *testing.T) {
	s := newFakeServer(t)
	var seen int
	root := t.TempDir()
	primary := start(t, s, "api", t.TempDir(), root, nil)
	s.next(&seen, "api", bus.KindHello)
	standby := start(t, s, "api", t.TempDir(), root, nil)
	// While both run, only the primary speaks (it says hello again and
	// again: nobody enrolls it here).
	for range 3 {
		e := s.next(&seen, "api", bus.KindHello)
		var h bus.Hello
		if err := e.DecodeBody(&h); err != nil {
			t.Fatal(err)
		}
		if !primary.a.PublicKey().Equal(ed25519.PublicKey(h.PublicKey)) {
			t.Fatalf("the standby said hello while the primary runs: %s vs %s / %s", bus.Fingerprint(h.PublicKey), bus.Fingerprint(primary.a.PublicKey()), bus.Fingerprint(standby.a.PublicKey()))
		}
	}
	primary.stop()
	for {
		e := s.next(&seen, "api", bus.KindHello)
		var h bus.Hello
		if err := e.DecodeBody(&h); err != nil {
			t.Fatal(err)
		}
		if standby.a.PublicKey().Equal(ed25519.PublicKey(h.PublicKey)) {
			return // the standby took over
		}
	}
}

// Hellos said again while none is answered say which they repeat: the
// first of the series, so a server that answered one since need not
// answer again.
func TestHelloSaysWhatItRepeats(t *testing.T) {
	s := newFakeServer(t)
	var seen int
	start(t, s, "web", t.TempDir(), t.TempDir(), nil)
	first := s.next(&seen, "web", bus.KindHello)
	var h bus.Hello
	if err := first.DecodeBody(&h); err != nil {
		t.Fatal(err)
	}
	if h.Repeats != 0 {
		t.Fatalf("the first hello repeats %d, want 0", h.Repeats)
	}
	for range 2 {
		e := s.next(&seen, "web", bus.KindHello)
		if err := e.DecodeBody(&h); err != nil {
			t.Fatal(err)
		}
		if h.Repeats != first.Seq || e.Seq <= first.Seq {
			t.Fatalf("hello %d repeats %d, want %d (the first's)", e.Seq, h.Repeats, first.Seq)
		}
	}
}

func TestRejectedSlowsHello(t *testing.T) {
	s := newFakeServer(t)
	var seen int
	start(t, s, "web", t.TempDir(), t.TempDir(), nil)
	s.next(&seen, "web", bus.KindHello)
	s.next(&seen, "web", bus.KindHello) // retried every ~50ms while pending
	s.send("web", bus.KindRejected, bus.Rejected{Reason: "rejected by an operator"})
	time.Sleep(300 * time.Millisecond)
	s.mu.Lock()
	before := len(s.events)
	s.mu.Unlock()
	time.Sleep(300 * time.Millisecond)
	s.mu.Lock()
	after := len(s.events)
	s.mu.Unlock()
	if after != before {
		t.Fatalf("%d more events after the rejection settled, want none (HelloRetryMax is an hour)", after-before)
	}
}

// TestBackFromAbsenceDeploysOnlyTheLatest queues, while the agent is
// stopped, versions with a deploy each: started again, it runs only the
// deploy of the latest, and reports the others superseded. Either the
// answer to its hello comes behind the backlog (it journals the backlog
// before deploying), or the server answers before the newest state
// reaches the inbox (a release's fan-out still under way; the state the
// hello asks for follows the answer): the answer names the released
// version, and the deploy of the older state queued meanwhile waits for
// the newer one instead of enforcing a superseded state.
func TestBackFromAbsenceDeploysOnlyTheLatest(t *testing.T) {
	full := func(s *fakeServer, gen int64, deploy string, a, b string) {
		sl, h := s.slice("web", gen, file("web", "/a", a), file("web", "/b", b))
		s.send("web", bus.KindDesiredFull, bus.DesiredFull{Generation: gen, Resources: sl.Resources, SliceHash: h,
			Deploy: &bus.Deploy{DeployID: deploy, Mode: bus.DeployIncremental, Generation: gen}})
	}
	for _, tc := range []struct {
		name string
		// away is queued while the agent is stopped; back follows its
		// hello once started again. Version 3 holds a=a3, b=3.
		away, back func(s *fakeServer, seen *int)
		a3         string
	}{
		{
			name: "answer behind the backlog",
			away: func(s *fakeServer, _ *int) {
				s.full("web", 2, file("web", "/a", "2"), file("web", "/b", "1"))
				s.send("web", bus.KindDeploy, bus.Deploy{DeployID: "d2", Mode: bus.DeployIncremental, Generation: 2})
				s.full("web", 3, file("web", "/a", "2"), file("web", "/b", "3"))
				s.send("web", bus.KindDeploy, bus.Deploy{DeployID: "d3", Mode: bus.DeployIncremental, Generation: 3})
			},
			back: func(s *fakeServer, _ *int) { s.enroll("web") },
			a3:   "2",
		},
		{
			name: "answer before the latest",
			away: func(s *fakeServer, _ *int) { full(s, 2, "d2", "2", "1") },
			back: func(s *fakeServer, seen *int) {
				s.send("web", bus.KindEnrolled, bus.Enrolled{ServerKey: s.signer.PublicKey(), Generation: 3})
				s.handled(seen, "web")
				full(s, 3, "d3", "3", "3")
			},
			a3: "3",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newFakeServer(t)
			dir, root := t.TempDir(), t.TempDir()
			var seen int
			r := start(t, s, "web", dir, root, nil)
			s.next(&seen, "web", bus.KindHello)
			s.enroll("web")
			s.full("web", 1, file("web", "/a", "1"), file("web", "/b", "1"))
			s.send("web", bus.KindDeploy, bus.Deploy{DeployID: "d1", Mode: bus.DeployIncremental, Generation: 1})
			s.results(&seen, "web", "d1")
			r.stop()

			tc.away(s, &seen)
			start(t, s, "web", dir, root, nil)
			s.next(&seen, "web", bus.KindHello)
			tc.back(s, &seen)
			from := seen
			got2, last2 := s.results(&from, "web", "d2")
			if len(got2) != 0 || !strings.Contains(last2.Error, "superseded") {
				t.Fatalf("deploy d2: results %v, error %q; want none, superseded", got2, last2.Error)
			}
			got3, last3 := s.results(&seen, "web", "d3")
			if len(got3) != 2 || last3.Generation != 3 || last3.Error != "" {
				t.Fatalf("deploy d3: %d results, generation %d, error %q; want both resources of generation 3", len(got3), last3.Generation, last3.Error)
			}
			for id, res := range got3 {
				if len(res.Changes) == 0 || res.Hash.IsZero() {
					t.Fatalf("%s: %+v; want its change, and the hash it was applied at", id, res)
				}
			}
			for f, want := range map[string]string{"a": tc.a3, "b": "3"} {
				if b, _ := os.ReadFile(filepath.Join(root, f)); string(b) != want {
					t.Fatalf("/%s holds %q, want %q", f, b, want)
				}
			}
		})
	}
}

// An incremental deploy runs the subscribers of what it changes, and they
// are refreshed once; a deploy that changes something else leaves them be.
func TestSubscriberRefreshedByIncrementalDeploy(t *testing.T) {
	s := newFakeServer(t)
	dir, root := t.TempDir(), t.TempDir()
	var seen int
	start(t, s, "web", dir, root, nil)
	s.next(&seen, "web", bus.KindHello)
	s.enroll("web")
	conf := file("web", "/app.conf", "v1")
	reload := model.Resource{ID: model.ID{Type: "exec", Agent: "web", Key: "name", Value: "reload"},
		Attributes: model.Attributes{"name": "reload", "command": "echo reload >> reloads", "cwd": "/", "refreshonly": true},
		Subscribes: []model.ID{conf.ID}}
	other := file("web", "/other", "o1")
	deploy := func(gen int64, id string, rs ...model.Resource) map[model.ID]model.Result {
		t.Helper()
		return s.deploy(&seen, "web", gen, id, "", rs...)
	}
	reloads := func() string {
		b, _ := os.ReadFile(filepath.Join(root, "reloads"))
		return string(b)
	}
	deploy(1, "d1", conf, reload, other)
	if got := reloads(); got != "reload\n" {
		t.Fatalf("after creating the config: reloads %q, want one", got)
	}
	conf2 := file("web", "/app.conf", "v2")
	got := deploy(2, "d2", conf2, reload, other)
	if r := got[reload.ID]; !r.Refreshed || !strings.Contains(r.Message, "file[web,path=/app.conf]") {
		t.Fatalf("reload result %+v, want refreshed because of the config", r)
	}
	if got := reloads(); got != "reload\nreload\n" {
		t.Fatalf("after changing the config: reloads %q, want two", got)
	}
	got = deploy(3, "d3", conf2, reload, file("web", "/other", "o2"))
	if _, ran := got[reload.ID]; ran || reloads() != "reload\nreload\n" {
		t.Fatalf("a change elsewhere ran the reload: %v, reloads %q", got, reloads())
	}
}

// Facts go out in hello, and again, once, when they change.
func TestFactsReportedOnChange(t *testing.T) {
	s := newFakeServer(t)
	var mu sync.Mutex
	current := map[string]any{"hostname": "web", "ipv4": "10.0.0.1"}
	gather := func(context.Context) map[string]any {
		mu.Lock()
		defer mu.Unlock()
		return maps.Clone(current)
	}
	var seen int
	start(t, s, "web", t.TempDir(), t.TempDir(), nil, func(c *Config) {
		c.Facts, c.FactsInterval = gather, 10*time.Millisecond
	})
	var hello bus.Hello
	if err := s.next(&seen, "web", bus.KindHello).DecodeBody(&hello); err != nil {
		t.Fatal(err)
	}
	if hello.Facts["ipv4"] != "10.0.0.1" {
		t.Fatalf("hello facts %v", hello.Facts)
	}
	s.enroll("web")
	s.next(&seen, "web", bus.KindHeartbeat) // enrolled, checking facts
	mu.Lock()
	current["ipv4"] = "10.0.0.2"
	mu.Unlock()
	var f bus.Facts
	if err := s.next(&seen, "web", bus.KindFacts).DecodeBody(&f); err != nil {
		t.Fatal(err)
	}
	if f.Facts["ipv4"] != "10.0.0.2" {
		t.Fatalf("facts %v, want the new address", f.Facts)
	}
	// Unchanged since: heartbeats go on, facts are not sent again.
	for range 3 {
		s.next(&seen, "web", bus.KindHeartbeat)
	}
	if n := s.count("web", bus.KindFacts); n != 1 {
		t.Fatalf("%d facts messages, want 1", n)
	}
}

// A facts.refresh is answered with a facts report, facts changed or not;
// one forged is refused, unanswered.
func TestFactsRefreshAnswered(t *testing.T) {
	s := newFakeServer(t)
	gather := func(context.Context) map[string]any { return map[string]any{"hostname": "web", "ipv4": "10.0.0.1"} }
	var seen int
	start(t, s, "web", t.TempDir(), t.TempDir(), nil, func(c *Config) {
		c.Facts, c.Labels = gather, map[string]string{"role": "web"}
	})
	s.next(&seen, "web", bus.KindHello)
	s.enroll("web")
	s.next(&seen, "web", bus.KindHeartbeat) // enrolled

	_, stranger, err := bus.GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	forged, err := bus.NewSigner(stranger, 0).Seal(bus.KindFactsRefresh, "test", "web", bus.Empty{})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.bus.Send(context.Background(), forged, bus.SendOptions{}); err != nil {
		t.Fatal(err)
	}
	s.send("web", bus.KindFactsRefresh, bus.Empty{})
	var f bus.Facts
	if err := s.next(&seen, "web", bus.KindFacts).DecodeBody(&f); err != nil {
		t.Fatal(err)
	}
	if f.Facts["ipv4"] != "10.0.0.1" || f.Labels["role"] != "web" {
		t.Fatalf("facts report %+v, want the host's facts and labels", f)
	}
	// The inbox is in order: by the heartbeats after the answer, the forged
	// refresh, sent first, was handled too, and got no answer of its own.
	for range 2 {
		s.next(&seen, "web", bus.KindHeartbeat)
	}
	if n := s.count("web", bus.KindFacts); n != 1 {
		t.Fatalf("%d facts reports, want 1: the forged refresh was answered", n)
	}
}

// silentUntil reads agent's compliance messages until one for which last
// holds, failing with what if any of them, that one included, reports
// about quiet.
func (s *fakeServer) silentUntil(from *int, agent string, quiet model.ID, what string, last func(bus.Compliance) bool) {
	s.t.Helper()
	for {
		var body bus.Compliance
		if err := s.next(from, agent, bus.KindCompliance).DecodeBody(&body); err != nil {
			s.t.Fatal(err)
		}
		for _, r := range body.Reports {
			if r.ID == quiet {
				s.t.Fatalf("%s: %+v", what, r)
			}
		}
		if last(body) {
			return
		}
	}
}

// reports hands out, one at a time, the compliance reports about one
// resource, in the order the agent sent them (one message may carry a
// drift and its heal).
// replace puts data in path in one step (a rename), as an editor that
// saves atomically does. os.WriteFile truncates, then writes: a monitor that
// looks in between rightly reports the empty file, one report more than a
// test that counts them expects.
func replace(t *testing.T, path, data string) {
	t.Helper()
	tmp := path + ".new"
	if err := os.WriteFile(tmp, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

type reports struct {
	s      *fakeServer
	from   *int
	agent  string
	id     model.ID
	queued []bus.DriftReport
}

func (q *reports) next() bus.DriftReport {
	q.s.t.Helper()
	for len(q.queued) == 0 {
		var body bus.Compliance
		if err := q.s.next(q.from, q.agent, bus.KindCompliance).DecodeBody(&body); err != nil {
			q.s.t.Fatal(err)
		}
		for _, r := range body.Reports {
			if r.ID == q.id {
				q.queued = append(q.queued, r)
			}
		}
	}
	r := q.queued[0]
	q.queued = q.queued[1:]
	return r
}

// Drift of a watched file (content, mode, deletion) is reported at once;
// put back by hand it is reported compliant; under heal it is re-applied and
// reported restored; the agent's own deploys are never drift.
func TestDriftReportedAndHealed(t *testing.T) {
	s := newFakeServer(t)
	root := t.TempDir()
	var seen int
	start(t, s, "web", t.TempDir(), root, nil)
	s.next(&seen, "web", bus.KindHello)
	s.enroll("web")
	motd := file("web", "/motd", "hello\n")
	motd.Attributes["mode"] = "0644"
	path := filepath.Join(root, "motd")
	deploy := func(gen int64, id string, policy model.DriftPolicy, rs ...model.Resource) {
		t.Helper()
		s.deploy(&seen, "web", gen, id, policy, rs...)
	}
	deploy(1, "d1", model.DriftAlert, motd)
	q := &reports{s: s, from: &seen, agent: "web", id: motd.ID}

	replace(t, path, "defaced\n")
	r := q.next()
	if r.Compliance != model.NonCompliant || r.Changes["content"].Current != "defaced\n" || r.Changes["content"].Desired != "hello\n" || r.Seen.IsZero() {
		t.Fatalf("content drift report %+v", r)
	}
	replace(t, path, "hello\n")
	if r := q.next(); r.Compliance != model.Compliant || r.Healed {
		t.Fatalf("put back by hand: %+v", r)
	}
	if err := os.Chmod(path, 0o666); err != nil {
		t.Fatal(err)
	}
	if r := q.next(); r.Changes["mode"].Current != "0666" {
		t.Fatalf("mode drift report %+v", r)
	}
	if b, _ := os.Stat(path); b.Mode().Perm() != 0o666 {
		t.Fatal("alert policy changed the file")
	}

	// Heal: the next deploy carries the policy, and repairs the mode.
	deploy(2, "d2", model.DriftHeal, motd, file("web", "/other", "x"))
	before := s.count("web", bus.KindCompliance)
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	if r := q.next(); r.Compliance != model.NonCompliant || !r.Changes.Created() {
		t.Fatalf("deletion report %+v", r)
	}
	if r := q.next(); r.Compliance != model.Compliant || !r.Healed {
		t.Fatalf("heal report %+v", r)
	}
	if b, err := os.ReadFile(path); err != nil || string(b) != "hello\n" {
		t.Fatalf("healed file holds %q (%v)", b, err)
	}
	if n := s.count("web", bus.KindCompliance); n != before+1 && n != before+2 {
		t.Fatalf("%d compliance messages for one deletion", n-before)
	}

	// The agent's own change is no drift.
	motd2 := file("web", "/motd", "hello again\n")
	motd2.Attributes["mode"] = "0644"
	deploy(3, "d3", model.DriftHeal, motd2, file("web", "/other", "x"))
	// A later out-of-band write shows the monitor is still at work and
	// came after anything the deploy could have caused.
	if err := os.WriteFile(filepath.Join(root, "other"), []byte("y"), 0o644); err != nil {
		t.Fatal(err)
	}
	s.silentUntil(&seen, "web", motd.ID, "the agent's own deploy was reported as drift", func(body bus.Compliance) bool {
		return body.Reports[0].ID.Value == "/other" && body.Reports[len(body.Reports)-1].Healed
	})
}

// A resource drifting again and again is reported flapping once, then held
// back: no flood.
func TestFlappingIsHeldBack(t *testing.T) {
	s := newFakeServer(t)
	root := t.TempDir()
	var seen int
	start(t, s, "web", t.TempDir(), root, nil, func(c *Config) { c.FlapCount, c.FlapWindow = 3, time.Minute })
	s.next(&seen, "web", bus.KindHello)
	s.enroll("web")
	f := file("web", "/flappy", "0")
	s.deploy(&seen, "web", 1, "d1", "", f)
	q := &reports{s: s, from: &seen, agent: "web", id: f.ID}
	var got []bus.DriftReport
	for i := 1; i <= 8; i++ {
		replace(t, filepath.Join(root, "flappy"), strconv.Itoa(i))
		if i <= 3 {
			got = append(got, q.next())
		} else {
			time.Sleep(20 * time.Millisecond)
		}
	}
	if !got[2].Flapping || got[0].Flapping || got[1].Flapping {
		t.Fatalf("reports %+v: want the third flagged flapping", got)
	}
	// One more check after the writes: nothing beyond the flapping report.
	time.Sleep(100 * time.Millisecond)
	if n := s.count("web", bus.KindCompliance); n != 3 {
		t.Fatalf("%d compliance messages for 8 drifts, want 3", n)
	}
}

// The drift policy outlives the agent: drift while it was down is found at
// start and healed, and so is drift after, without a new deploy.
func TestDriftPolicyKeptAcrossRestart(t *testing.T) {
	s := newFakeServer(t)
	root, dir := t.TempDir(), t.TempDir()
	var seen int
	r := start(t, s, "web", dir, root, nil)
	s.next(&seen, "web", bus.KindHello)
	s.enroll("web")
	motd := file("web", "/motd", "hello\n")
	s.deploy(&seen, "web", 1, "d1", model.DriftHeal, motd)
	r.stop()

	path := filepath.Join(root, "motd")
	if err := os.WriteFile(path, []byte("changed while the agent was down\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	start(t, s, "web", dir, root, nil)
	q := &reports{s: s, from: &seen, agent: "web", id: motd.ID}
	if d := q.next(); d.Compliance != model.NonCompliant || d.Changes["content"].Current != "changed while the agent was down\n" {
		t.Fatalf("drift while down: %+v", d)
	}
	if h := q.next(); !h.Healed {
		t.Fatalf("drift while down: %+v, want healed under the kept policy", h)
	}
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	if d := q.next(); !d.Changes.Created() {
		t.Fatalf("deletion after the restart: %+v", d)
	}
	if h := q.next(); !h.Healed {
		t.Fatalf("deletion after the restart: %+v, want healed", h)
	}
	if b, err := os.ReadFile(path); err != nil || string(b) != "hello\n" {
		t.Fatalf("healed file holds %q (%v)", b, err)
	}
}

// Drift reported under alert and then put right by a repair is not
// reported again as changed back by hand: the repair's result says it.
func TestRepairedDriftIsNoNews(t *testing.T) {
	s := newFakeServer(t)
	root := t.TempDir()
	var seen int
	start(t, s, "web", t.TempDir(), root, nil)
	s.next(&seen, "web", bus.KindHello)
	s.enroll("web")
	motd := file("web", "/motd", "hello\n")
	motd.Attributes["mode"] = "0644"
	other := file("web", "/other", "x")
	s.deploy(&seen, "web", 1, "d1", model.DriftAlert, motd, other)
	path := filepath.Join(root, "motd")
	if err := os.Chmod(path, 0o600); err != nil {
		t.Fatal(err)
	}
	q := &reports{s: s, from: &seen, agent: "web", id: motd.ID}
	if d := q.next(); d.Changes["mode"].Current != "0600" {
		t.Fatalf("drift report %+v", d)
	}
	s.send("web", bus.KindRepair, bus.Deploy{DeployID: "r1", Mode: bus.DeployFull, Generation: 1, DriftPolicy: model.DriftAlert})
	results, last := s.results(&seen, "web", "r1")
	if last.Error != "" || !results[motd.ID].Changes.Has("mode") {
		t.Fatalf("repair: %+v (%s)", results[motd.ID], last.Error)
	}
	// A later out-of-band change marks the end: nothing about motd before it.
	if err := os.WriteFile(filepath.Join(root, "other"), []byte("y"), 0o644); err != nil {
		t.Fatal(err)
	}
	s.silentUntil(&seen, "web", motd.ID, "after the repair the monitor reported", func(body bus.Compliance) bool {
		return body.Reports[0].ID == other.ID
	})
}

// A desired state may carry the deploy that follows it (protocol 1.2): it
// is journaled with the desired state, in one transaction, and runs as a
// deploy command would — after a restart too, when the agent was paused
// in between.
func TestDeployCarriedByDesiredState(t *testing.T) {
	s := newFakeServer(t)
	dir, root := t.TempDir(), t.TempDir()
	var seen int
	r := start(t, s, "web", dir, root, nil)
	s.next(&seen, "web", bus.KindHello)
	s.enroll("web")
	a1, b1 := file("web", "/a", "A1"), file("web", "/b", "B1")
	sl, h := s.slice("web", 1, a1, b1)
	s.send("web", bus.KindDesiredFull, bus.DesiredFull{Generation: 1, Resources: sl.Resources, SliceHash: h,
		Deploy: &bus.Deploy{DeployID: "d1", Mode: bus.DeployIncremental, Generation: 1}})
	if got, last := s.results(&seen, "web", "d1"); len(got) != 2 || last.Error != "" || last.Generation != 1 {
		t.Fatalf("full state carrying d1: results %v, last %+v; want both deployed at 1", got, last)
	}

	// Paused, the deploy a diff carries waits in the journal; the agent
	// restarts, is resumed, and runs it.
	s.send("web", bus.KindPause, bus.Empty{})
	s.handled(&seen, "web")
	a2 := file("web", "/a", "A2")
	_, h2 := s.slice("web", 2, a2, b1)
	s.send("web", bus.KindDesiredDiff, bus.DesiredDiff{Diff: model.Diff{From: 1, To: 2, Upserts: []model.Resource{a2}}, SliceHash: h2,
		Deploy: &bus.Deploy{DeployID: "d2", Mode: bus.DeployIncremental, Generation: 2}})
	s.handled(&seen, "web")
	if b, _ := os.ReadFile(filepath.Join(root, "a")); string(b) != "A1" {
		t.Fatalf("paused, /a holds %q; want A1 until resumed", b)
	}
	r.stop()
	start(t, s, "web", dir, root, nil)
	s.send("web", bus.KindResume, bus.Empty{})
	got, last := s.results(&seen, "web", "d2")
	if got[a2.ID].State != model.StateDeployed || len(got[a2.ID].Changes) == 0 || last.Error != "" || last.Generation != 2 {
		t.Fatalf("d2 after the restart: results %v, last %+v; want /a deployed at 2", got, last)
	}
	// /b, unchanged, may be reported too (the deploy after a restart
	// sometimes runs it again); it must not change.
	if b, ok := got[b1.ID]; ok && (b.State != model.StateDeployed || len(b.Changes) != 0) {
		t.Fatalf("d2 after the restart changed /b: %+v", b)
	}
	if b, _ := os.ReadFile(filepath.Join(root, "a")); string(b) != "A2" {
		t.Fatalf("/a holds %q, want A2", b)
	}

	// A desired state older than the one held is refused; the deploy it
	// carries runs all the same, on the state held, as the deploy
	// command that would have followed it: the server hears how it ended.
	s.send("web", bus.KindDesiredFull, bus.DesiredFull{Generation: 1, Resources: sl.Resources, SliceHash: h,
		Deploy: &bus.Deploy{DeployID: "d3", Mode: bus.DeployIncremental, Generation: 1}})
	if _, last := s.results(&seen, "web", "d3"); last.Error != "" || last.Generation != 2 {
		t.Fatalf("d3, carried by an older desired state: last %+v; want it done on generation 2", last)
	}
	if b, _ := os.ReadFile(filepath.Join(root, "a")); string(b) != "A2" {
		t.Fatalf("after the older desired state /a holds %q, want A2", b)
	}
}
