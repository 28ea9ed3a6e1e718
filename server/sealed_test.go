package server_test

import (
	"context"
	"crypto/ecdh"
	"crypto/ed25519"
	"errors"
	"strings"
	"sync"
	"testing"

	"github.com/rs/zerolog"

	"github.com/tetherhq/tether/bus"
	"github.com/tetherhq/tether/model"
	"github.com/tetherhq/tether/model/secret"
	"github.com/tetherhq/tether/model/secret/secrettest"
	"github.com/tetherhq/tether/server"
	"github.com/tetherhq/tether/server/keyring"
	"github.com/tetherhq/tether/server/record"
	"github.com/tetherhq/tether/server/scheduler"
	"github.com/tetherhq/tether/server/store"
)

// secretFile is a file whose content is sensitive.
func secretFile(agent, path, content string) model.Resource {
	r := file(agent, path, content)
	r.Sensitive = []string{"content"}
	return r
}

// inboxAgent says hello with keys of its own — no key-agreement key makes
// it an agent older than sealed values — and keeps what the server sends.
type inboxAgent struct {
	r    *rig
	name string
	key  ed25519.PrivateKey
	kex  *ecdh.PrivateKey
	seq  uint64

	mu  sync.Mutex
	got []*bus.Envelope
}

func (r *rig) inboxAgent(name string, withKex bool) *inboxAgent {
	r.t.Helper()
	_, key, _ := bus.GenerateKey()
	f := &inboxAgent{r: r, name: name, key: key}
	if withKex {
		f.kex, _ = secret.GenerateKey()
	}
	if err := r.bus.DeclareInbox(r.ctx, "test", name); err != nil {
		r.t.Fatal(err)
	}
	// It holds its name's claim, as an agent does: what the server tells
	// an agent without an inbox reaches it.
	if claim, err := r.bus.Claim(r.ctx, "test", name); err == nil {
		r.t.Cleanup(claim.Release)
	}
	ctx, cancel := context.WithCancel(r.ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = r.bus.ConsumeInbox(ctx, "test", name, func(_ context.Context, d bus.Delivery) error {
			f.mu.Lock()
			f.got = append(f.got, d.Envelope)
			f.mu.Unlock()
			return nil
		})
	}()
	r.t.Cleanup(func() { cancel(); <-done })
	return f
}

// hello says hello with the fake agent's keys, or with kex instead of its
// own key-agreement key when kex is given.
func (f *inboxAgent) hello(gen int64, kex ...[]byte) {
	f.r.t.Helper()
	h := bus.Hello{PublicKey: f.key.Public().(ed25519.PublicKey), Generation: gen}
	if f.kex != nil {
		h.KeyAgreementKey = f.kex.PublicKey().Bytes()
	}
	if len(kex) > 0 {
		h.KeyAgreementKey = kex[0]
	}
	f.seq++
	f.r.forge(f.key, f.seq, bus.KindHello, f.name, h)
}

// desired waits for the next desired state sent to the fake agent from
// the i-th message on, and returns its resources, and where the next
// search starts.
func (f *inboxAgent) desired(from int) (kind bus.Kind, resources []model.Resource, raw []byte, next int) {
	f.r.t.Helper()
	var e *bus.Envelope
	waitFor(f.r.t, "a desired state sent to "+f.name, func() bool {
		f.mu.Lock()
		defer f.mu.Unlock()
		for i := from; i < len(f.got); i++ {
			if k := f.got[i].Kind; k == bus.KindDesiredFull || k == bus.KindDesiredDiff {
				e, next = f.got[i], i+1
				return true
			}
		}
		return false
	})
	raw, err := bus.Encode(e)
	if err != nil {
		f.r.t.Fatal(err)
	}
	if e.Kind == bus.KindDesiredFull {
		var body bus.DesiredFull
		if err := e.DecodeBody(&body); err != nil {
			f.r.t.Fatal(err)
		}
		return e.Kind, body.Resources, raw, next
	}
	var body bus.DesiredDiff
	if err := e.DecodeBody(&body); err != nil {
		f.r.t.Fatal(err)
	}
	return e.Kind, body.Upserts, raw, next
}

// TestUnchangedSecretKeepsItsHash: versions hash a sensitive value by its
// keyed digest: the same secret keeps its resource's hash across versions
// (the resource is not sent again, nor deployed again), a changed secret
// changes it, an export of the same set adds no version, and the store
// holds the value sealed.
func TestUnchangedSecretKeepsItsHash(t *testing.T) {
	r := newRig(t, record.EnrollOpen)
	const s1, s2 = "PLANTED-hash-one-5d0c", "PLANTED-hash-two-9e41"
	other := func(c string) model.Resource { return file("web", "/other", c) }
	v1 := r.release(secretFile("web", "/secret", s1), other("1"))
	again, reused, err := r.srv.Export(r.ctx, "test", []model.Resource{secretFile("web", "/secret", s1), other("1")}, model.VersionMeta{})
	if err != nil || !reused || again.Number != v1.Number {
		t.Fatalf("export of the same set: version %d, reused %v, %v; want version %d reused", again.Number, reused, err, v1.Number)
	}
	v2 := r.release(secretFile("web", "/secret", s1), other("2"))
	v3 := r.release(secretFile("web", "/secret", s2), other("2"))
	hashOf := func(v model.Version, path string) model.Hash {
		hs, err := r.store.ResourceHashes(r.ctx, "test", v.Number)
		if err != nil {
			t.Fatal(err)
		}
		for _, h := range hs {
			if h.ID.Value == path {
				return h.Hash
			}
		}
		t.Fatalf("no %s in version %d", path, v.Number)
		return model.Hash{}
	}
	if hashOf(v1, "/secret") != hashOf(v2, "/secret") {
		t.Fatal("an unchanged secret changed its resource's hash: it would be deployed again")
	}
	if hashOf(v2, "/secret") == hashOf(v3, "/secret") {
		t.Fatal("a changed secret kept its resource's hash: it would not be deployed")
	}
	clear := secretFile("web", "/secret", s1)
	if h, _ := clear.Hash(); h == hashOf(v1, "/secret") {
		t.Fatal("the stored hash is the hash over the clear value: a guess could be checked against it")
	}
	stored, err := r.store.Resource(r.ctx, "test", v1.Number, clear.ID)
	if err != nil {
		t.Fatal(err)
	}
	if _, inClear := stored.Attributes["content"]; inClear || stored.Sealed["content"].To != model.SealedToServer {
		t.Fatalf("stored resource %+v: want its content sealed to the server", stored)
	}

	// On the bus: the first desired state seals the value to the agent;
	// a version with the secret unchanged does not send it again; one
	// with it changed does.
	f := r.inboxAgent("web", true)
	f.hello(0)
	_, rs, raw, next := f.desired(0)
	if n := secrettest.Count(raw, s2); n != 0 {
		t.Fatalf("the desired state on the bus holds the secret %d times", n)
	}
	var sent *model.Resource
	for i := range rs {
		if rs[i].ID == clear.ID {
			sent = &rs[i]
		}
	}
	if sent == nil || sent.Sealed["content"].To != model.Fingerprint(f.kex.PublicKey().Bytes()) {
		t.Fatalf("desired state %+v: want the secret sealed to the agent's key", rs)
	}
	opened, err := secret.Open(f.kex, sent)
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := opened.Attributes.String("content"); got != s2 {
		t.Fatalf("opened %q, want %q", got, s2)
	}
	if h, _ := sent.Hash(); h != hashOf(v3, "/secret") {
		t.Fatal("the resource sealed to the agent has another hash than the stored one: the agent's slice hash would not match")
	}

	r.release(secretFile("web", "/secret", s2), other("3"))
	kind, rs, _, next := f.desired(next)
	if kind != bus.KindDesiredDiff || len(rs) != 1 || rs[0].ID != other("3").ID {
		t.Fatalf("after a version with the secret unchanged: %s upserting %v; want a diff of /other alone", kind, rs)
	}
	r.release(secretFile("web", "/secret", s1), other("3"))
	kind, rs, _, _ = f.desired(next)
	if kind != bus.KindDesiredDiff || len(rs) != 1 || rs[0].ID != clear.ID || len(rs[0].Sealed) != 1 {
		t.Fatalf("after a version with the secret changed: %s upserting %v; want a diff of /secret, sealed", kind, rs)
	}
}

// TestNoSecretsForAnAgentWithoutKeyAgreementKey: an agent older than
// sealed values is sent no desired state holding sensitive values; the
// release and the deploy say why, and so does the resource's status.
func TestNoSecretsForAnAgentWithoutKeyAgreementKey(t *testing.T) {
	r := newRig(t, record.EnrollOpen)
	const s = "PLANTED-old-agent-77ab"
	f := r.inboxAgent("web", false)
	f.hello(0)
	r.waitOnline("web")
	v, _, err := r.srv.Export(r.ctx, "test", []model.Resource{secretFile("web", "/secret", s)}, model.VersionMeta{})
	if err != nil {
		t.Fatal(err)
	}
	started, err := r.srv.Release(r.ctx, "test", v.Number)
	if err != nil {
		t.Fatal(err)
	}
	rel, err := r.srv.WaitRelease(r.ctx, "test", started.ReleaseID)
	if err != nil {
		t.Fatal(err)
	}
	if len(rel.Pending) != 1 || rel.Pending[0].Reason != record.PendingNoKeyAgreement {
		t.Fatalf("release: pending %+v, want web pending for want of a key-agreement key", rel.Pending)
	}
	_, err = r.srv.Deploy(r.ctx, "test", scheduler.DeployRequest{})
	if !errors.Is(err, record.ErrNoAgents) || !strings.Contains(err.Error(), "key-agreement key") {
		t.Fatalf("deploy: got %v, want it refused naming the missing key-agreement key", err)
	}
	st := r.status(secretFile("web", "/secret", s).ID)
	if st.State != model.StateFailed || !strings.Contains(st.Message, "key-agreement key") {
		t.Fatalf("status %s %q, want failed naming the missing key-agreement key", st.State, st.Message)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, e := range f.got {
		if e.Kind == bus.KindDesiredFull || e.Kind == bus.KindDesiredDiff {
			t.Fatalf("an agent without a key-agreement key was sent %s", e.Kind)
		}
	}
}

// TestKeyAgreementKeyCannotBeSwapped: an accepted agent's key-agreement
// key, once known, is not replaced by a hello (signed by the agent's key
// or not), and the attempt raises a security alert; an accepted agent
// that had none (upgraded) gets its first one recorded.
func TestKeyAgreementKeyCannotBeSwapped(t *testing.T) {
	r := newRig(t, record.EnrollManual)
	f := r.inboxAgent("web", false)
	f.hello(0)
	waitFor(t, "web discovered", func() bool { _, err := r.store.GetAgent(r.ctx, "test", "web"); return err == nil })
	if _, err := r.srv.AgentAction(r.ctx, "test", "web", record.AgentAccept); err != nil {
		t.Fatal(err)
	}
	r.waitOnline("web")

	// Upgraded: its first key-agreement key is taken.
	first, _ := secret.GenerateKey()
	f.hello(0, first.PublicKey().Bytes())
	waitFor(t, "the first key-agreement key recorded", func() bool {
		a, err := r.store.GetAgent(r.ctx, "test", "web")
		return err == nil && string(a.KeyAgreementKey) == string(first.PublicKey().Bytes())
	})

	// Swapped: refused and alerted, the accepted key stands.
	other, _ := secret.GenerateKey()
	f.hello(0, other.PublicKey().Bytes())
	if msg := r.security(); !strings.Contains(msg, "key-agreement key") {
		t.Fatalf("security alert %q, want the swapped key-agreement key named", msg)
	}
	// Dropped (an older agent's hello replayed): refused the same way.
	f.hello(0, nil)
	if msg := r.security(); !strings.Contains(msg, "key-agreement key none") {
		t.Fatalf("security alert %q, want the dropped key-agreement key named", msg)
	}
	a, err := r.store.GetAgent(r.ctx, "test", "web")
	if err != nil || string(a.KeyAgreementKey) != string(first.PublicKey().Bytes()) {
		t.Fatalf("after the refused hellos the agent holds key-agreement key %x, want the accepted one", a.KeyAgreementKey)
	}
}

// TestMasterKeyOfSealedValuesUnderTheKeyring: with a keyring the master
// key of sealed values is stored sealed like the signing key, a key
// rotation seals it again with the rest, and a server holding only the new
// key reads the values stored before (an unchanged set is recognised);
// a server without the key file is refused, saying so. A master key a
// server without a keyring stored in clear is sealed on first use.
func TestMasterKeyOfSealedValuesUnderTheKeyring(t *testing.T) {
	eachStore(t, func(t *testing.T, st store.Store) {
		ctx := context.Background()
		a, b := keyring.NewKey(), keyring.NewKey()
		set := func() []model.Resource {
			return []model.Resource{secretFile("web", "/secret", "PLANTED-rotation-31c7")}
		}
		export := func(cfg server.Config) (model.Version, bool, error) {
			srv, err := server.New(cfg, st, bus.NewLocal(zerolog.Nop()), zerolog.Nop())
			if err != nil {
				t.Fatal(err)
			}
			if _, err := srv.EnsureEnv(ctx, "test", record.DefaultEnvSettings()); err != nil {
				t.Fatal(err)
			}
			return srv.Export(ctx, "test", set(), model.VersionMeta{})
		}
		v1, _, err := export(server.Config{})
		if err != nil {
			t.Fatal(err)
		}
		if v, reused, err := export(server.Config{Keyring: ring(t, a)}); err != nil || !reused || v.Number != v1.Number {
			t.Fatalf("with a keyring after without: version %d reused %v, %v; want version %d reused", v.Number, reused, err, v1.Number)
		}
		all, err := st.Secrets(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if got := ring(t, a).SealedWith(all["sealed-values-master-key"]); got != keyring.KeyID(a) {
			t.Fatalf("master key row sealed with %q, want key %s", got, keyring.KeyID(a))
		}
		done, err := server.Reseal(ctx, st, ring(t, b, a))
		if err != nil || done.From[keyring.KeyID(a)] != 1 {
			t.Fatalf("reseal: %+v, %v; want the master key's row sealed again", done, err)
		}
		v, reused, err := export(server.Config{Keyring: ring(t, b)})
		if err != nil || !reused || v.Number != v1.Number {
			t.Fatalf("after the rotation: version %d reused %v, %v; want version %d reused (same master key)", v.Number, reused, err, v1.Number)
		}
		if _, _, err := export(server.Config{}); err == nil || !strings.Contains(err.Error(), "key file") {
			t.Fatalf("a server without the key file: got %v, want it refused naming the key file", err)
		}
	})
}

// TestRedactedOutputIsNotDeployed: a set copied from redacted output (the
// marker in place of a sensitive value) is refused, saying why.
func TestRedactedOutputIsNotDeployed(t *testing.T) {
	r := newRig(t, record.EnrollOpen)
	_, _, err := r.srv.Export(r.ctx, "test", []model.Resource{secretFile("web", "/secret", model.RedactedValue)}, model.VersionMeta{})
	if !errors.Is(err, model.ErrInvalidResource) || !strings.Contains(err.Error(), "--show-sensitive") {
		t.Fatalf("export of a redacted value: got %v, want ErrInvalidResource saying to compile with --show-sensitive", err)
	}
}
