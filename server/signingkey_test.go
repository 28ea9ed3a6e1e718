package server_test

import (
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/tetherhq/tether/agent"
	"github.com/tetherhq/tether/bus"
	"github.com/tetherhq/tether/model"
	"github.com/tetherhq/tether/server"
	"github.com/tetherhq/tether/server/record"
	"github.com/tetherhq/tether/server/scheduler"
	"github.com/tetherhq/tether/server/store"
	"github.com/tetherhq/tether/server/store/postgres/pgtest"
)

// keyedRig is a rig whose server keeps its signing key sealed in the store
// with a key file's key, as `tether server` does, and reads its signing
// keys often.
func keyedRig(t *testing.T, enrollment record.Enrollment) *rig {
	t.Helper()
	kr := ring(t, []byte("0123456789abcdef0123456789abcdef"))
	settings := record.DefaultEnvSettings()
	settings.AutoDeploy, settings.Enrollment = false, enrollment
	r := startRigWith(t, func(c *server.Config, st store.Store) {
		key, err := server.SigningKey(context.Background(), st, kr, zerolog.Nop())
		if err != nil {
			t.Fatal(err)
		}
		*c = server.Config{Key: key, Keyring: kr, SigningKeyRefresh: 20 * time.Millisecond}
	}, map[string]record.EnvSettings{"test": settings})
	return r
}

// serverAgent is the configuration of an agent with a state directory
// that pins the server's key it is given.
func serverAgent(name, dir string, pin ed25519.PublicKey) agent.Config {
	return agent.Config{Env: "test", Name: name, StateDir: dir, ServerKey: pin, Heartbeat: 20 * time.Millisecond}
}

// deployTo deploys the released version to one agent and returns its
// results.
func (r *rig) deployTo(name string) map[model.ID]model.Result {
	r.t.Helper()
	return r.deploy(scheduler.DeployRequest{Agents: []string{name}})
}

// waitPinned waits until the agent's journal takes the server key want
// alone.
func waitPinned(t *testing.T, a *agent.Agent, want ed25519.PublicKey) {
	t.Helper()
	deadline := time.Now().Add(patience)
	for !(a.Journal().ServerKey().Equal(want) && a.Journal().NextServerKey() == nil) {
		if time.Now().After(deadline) {
			t.Fatalf("agent pins %s (next %v), want %s alone", model.Fingerprint(a.Journal().ServerKey()), a.Journal().NextServerKey(), model.Fingerprint(want))
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func refusedStep(err error) (*record.SigningKeyStepError, bool) {
	var e *record.SigningKeyStepError
	return e, errors.As(err, &e)
}

// The server's signing key rolls over while its agents run: a running
// agent takes the next key as it is announced and alone after the switch,
// across restarts; an agent away through the whole of it catches up at its
// next hello while the old key is kept; both keep deploying; the old key
// is retired; every step refuses what its state does not allow.
func TestServerSigningKeyRotation(t *testing.T) {
	r := keyedRig(t, record.EnrollManual)
	old := r.srv.PublicKey()
	webDir, dbDir := t.TempDir(), t.TempDir()
	cacheDir := t.TempDir()
	r.release(file("web", "/f", "1"), file("db", "/f", "1"), file("cache", "/f", "1"))
	web, stopWeb := r.startAccepted(serverAgent("web", webDir, old))
	_, stopDB := r.startAccepted(serverAgent("db", dbDir, old))
	_, stopCache := r.startAccepted(serverAgent("cache", cacheDir, old))
	for _, name := range []string{"web", "db", "cache"} {
		r.deployTo(name)
	}
	// db and cache are away through the whole rollover: db's inbox keeps
	// what it is sent meanwhile, cache's is lost (what it held expired).
	stopDB()
	stopCache()

	st, err := r.srv.SigningKeyStatus(r.ctx)
	if err != nil || st.Phase != record.SigningKeySteady || st.Signing.Fingerprint != model.Fingerprint(old) || st.Agents != 3 || st.Ready != 3 {
		t.Fatalf("status before a rollover: %+v, %v; want steady, 3 of 3 ready", st, err)
	}
	for name, step := range map[string]func() error{
		"switch": func() error { _, err := r.srv.SwitchSigningKey(r.ctx, true); return err },
		"retire": func() error { _, err := r.srv.RetireSigningKey(r.ctx, true); return err },
	} {
		if _, ok := refusedStep(step()); !ok {
			t.Fatalf("%s with no rollover under way: want it refused", name)
		}
	}

	st, err = r.srv.NewSigningKey(r.ctx)
	if err != nil || st.Phase != record.SigningKeyAnnounced || st.Next == nil || st.Signing.Fingerprint != model.Fingerprint(old) || st.Sent != 3 {
		t.Fatalf("new: %+v, %v; want announced to the 3 agents, the old key signing", st, err)
	}
	next := ed25519.PublicKey(st.Next.PublicKey)
	if _, err := r.srv.NewSigningKey(r.ctx); err == nil {
		t.Fatal("a second rollover was made while one is under way")
	}
	r.waitRecord("web", "its acknowledgement of the next key", func(a record.Agent) bool {
		return slices.Contains(a.ServerKeys, model.Fingerprint(next))
	})
	if k := web.Journal().NextServerKey(); !k.Equal(next) {
		t.Fatalf("web's next server key %v, want %s", k, model.Fingerprint(next))
	}
	st, _ = r.srv.SigningKeyStatus(r.ctx)
	if st.Ready != 1 || st.WaitingCount != 2 || st.Waiting[0].Agent != "cache" || st.Waiting[1].Agent != "db" {
		t.Fatalf("status after the announcement: %+v; want web ready, cache and db waiting", st)
	}
	if _, err := r.srv.RetireSigningKey(r.ctx, true); err == nil {
		t.Fatal("the old key was retired before the switch")
	}
	if e, ok := refusedStep(first(r.srv.SwitchSigningKey(r.ctx, false))); !ok || !e.NotReady || !strings.Contains(e.Message, "test/db") {
		t.Fatalf("switch while db has not taken the next key: %v; want it refused, naming it", e)
	}

	// web restarted between its acknowledgement and the switch keeps both
	// keys.
	stopWeb()
	web, stopWeb = r.startAccepted(serverAgent("web", webDir, old))
	if k := web.Journal().NextServerKey(); !k.Equal(next) {
		t.Fatalf("after a restart web's next server key is %v, want %s", k, model.Fingerprint(next))
	}
	r.release(file("web", "/f", "2"), file("db", "/f", "2"), file("cache", "/f", "2"))
	r.deployTo("web")

	st, err = r.srv.SwitchSigningKey(r.ctx, true)
	if err != nil || st.Phase != record.SigningKeySwitched || st.Signing.Fingerprint != model.Fingerprint(next) || st.Previous == nil || st.Previous.Fingerprint != model.Fingerprint(old) {
		t.Fatalf("switch --force: %+v, %v; want switched to the next key, the old one kept", st, err)
	}
	if !r.srv.PublicKey().Equal(next) {
		t.Fatal("the server does not sign with the next key after the switch")
	}
	waitPinned(t, web, next)
	r.release(file("web", "/f", "3"), file("db", "/f", "3"), file("cache", "/f", "3"))
	if res := r.deployTo("web"); len(res) != 1 {
		t.Fatalf("deploy to web after the switch: %d results, want 1", len(res))
	}

	// Restarted after the switch, its configuration still naming the old
	// key: it takes the new one alone.
	stopWeb()
	web, stopWeb = r.startAccepted(serverAgent("web", webDir, old))
	defer stopWeb()
	waitPinned(t, web, next)

	// db, away through it all, catches up at its hello: the rollover signed
	// by the old key, then the new key alone.
	db, _ := r.startAccepted(serverAgent("db", dbDir, old))
	waitPinned(t, db, next)
	if res := r.deployTo("db"); len(res) != 1 {
		t.Fatalf("deploy to db after it caught up: %d results, want 1", len(res))
	}
	if prev := db.Journal().PreviousServerKey(); !prev.Equal(old) {
		t.Fatalf("db's previous server key %v, want the old one", prev)
	}
	r.waitRecord("db", "its word that it takes the new key alone", func(a record.Agent) bool {
		return slices.Equal(a.ServerKeys, []string{model.Fingerprint(next)})
	})

	// cache comes back to an empty inbox: the answer to its hello brings
	// the rollover, signed by the old key, then the new key.
	r.bus.DeleteQueue(bus.InboxName("test", "cache"))
	cache, _ := r.startAccepted(serverAgent("cache", cacheDir, old))
	waitPinned(t, cache, next)
	if res := r.deployTo("cache"); len(res) != 1 {
		t.Fatalf("deploy to cache after it caught up: %d results, want 1", len(res))
	}

	st, err = r.srv.RetireSigningKey(r.ctx, false)
	if err != nil || st.Phase != record.SigningKeySteady || st.Signing.Fingerprint != model.Fingerprint(next) || st.Previous != nil || st.Ready != 3 {
		t.Fatalf("retire: %+v, %v; want the new key alone, every agent ready", st, err)
	}
	ks, err := r.store.SigningKeys(r.ctx)
	if err != nil || ks.Rollover != nil {
		t.Fatalf("signing keys stored after retire: %+v, %v; want no rollover", ks, err)
	}
	r.release(file("web", "/f", "4"), file("db", "/f", "4"), file("cache", "/f", "4"))
	for _, name := range []string{"web", "db", "cache"} {
		if res := r.deployTo(name); len(res) != 1 {
			t.Fatalf("deploy to %s after the retirement: %d results, want 1", name, len(res))
		}
	}
}

func first[T any](_ T, err error) error { return err }

// A server.rollover not made by the server for this very agent reaches a
// running agent: it is refused, the agent reports it, and the server
// raises a security alert naming it.
func TestForgedServerRolloverIsAlerted(t *testing.T) {
	r := keyedRig(t, record.EnrollManual)
	key, err := server.SigningKey(r.ctx, r.store, ring(t, []byte("0123456789abcdef0123456789abcdef")), zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	current := r.srv.PublicKey()
	_, stranger, _ := bus.GenerateKey()
	_, next, _ := bus.GenerateKey()
	nextPub := next.Public().(ed25519.PublicKey)
	proof := func(env, name string, k ed25519.PrivateKey) []byte { return bus.ProveServerKey(k, env, name, current) }
	cases := []struct {
		name string
		sign ed25519.PrivateKey
		body func(agent string) bus.ServerRollover
	}{
		{"signed by another key", stranger, func(a string) bus.ServerRollover {
			return bus.ServerRollover{Key: current, NextKey: nextPub, Proof: proof("test", a, next)}
		}},
		{"without the next key's proof", key, func(string) bus.ServerRollover { return bus.ServerRollover{Key: current, NextKey: nextPub} }},
		{"with a proof by another key", key, func(a string) bus.ServerRollover {
			return bus.ServerRollover{Key: current, NextKey: nextPub, Proof: proof("test", a, stranger)}
		}},
		{"with another agent's proof", key, func(string) bus.ServerRollover {
			return bus.ServerRollover{Key: current, NextKey: nextPub, Proof: proof("test", "other", next)}
		}},
		{"with another environment's proof", key, func(a string) bus.ServerRollover {
			return bus.ServerRollover{Key: current, NextKey: nextPub, Proof: proof("staging", a, next)}
		}},
	}
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			name := fmt.Sprintf("web-%d", i) // one agent each: an agent reports once a minute
			a, stop := r.startAccepted(serverAgent(name, t.TempDir(), current))
			defer stop()
			e, err := bus.NewSigner(c.sign, 1).Seal(bus.KindServerRollover, "test", name, c.body(name))
			if err != nil {
				t.Fatal(err)
			}
			if err := r.bus.Send(r.ctx, e, bus.SendOptions{}); err != nil {
				t.Fatal(err)
			}
			if msg := r.security(); !strings.Contains(msg, name) || !strings.Contains(msg, "server.rollover") {
				t.Fatalf("security alert %q: want %s's refusal of the server.rollover", msg, name)
			}
			if k := a.Journal().NextServerKey(); k != nil {
				t.Fatalf("the agent took next server key %s", model.Fingerprint(k))
			}
		})
	}
}

// Replicas read the signing keys from the store: a rollover taken through
// one is followed by the other — the next key announced in its answers to
// hellos, the switch at the same instant, the retirement.
func TestSigningKeyRolloverAcrossReplicas(t *testing.T) {
	st := pgtest.Open(t)
	kr := ring(t, []byte("0123456789abcdef0123456789abcdef"))
	ctx := context.Background()
	b := bus.NewLocal(zerolog.Nop())
	t.Cleanup(b.Close)
	replica := func() *server.Server {
		key, err := server.SigningKey(ctx, st, kr, zerolog.Nop())
		if err != nil {
			t.Fatal(err)
		}
		srv, err := server.New(server.Config{Key: key, Keyring: kr, SigningKeyRefresh: 50 * time.Millisecond}, st, b, zerolog.Nop())
		if err != nil {
			t.Fatal(err)
		}
		runServer(t, srv)
		return srv
	}
	a, other := replica(), replica()
	if _, err := a.EnsureEnv(ctx, "test", quietSettings()); err != nil {
		t.Fatal(err)
	}
	old := a.PublicKey()
	wait := func(what string, ok func(record.SigningKeyStatus) bool) {
		t.Helper()
		deadline := time.Now().Add(patience)
		for {
			s, err := other.SigningKeyStatus(ctx)
			if err == nil && ok(s) {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("the other replica: still waiting for %s: %+v, %v", what, s, err)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	st1, err := a.NewSigningKey(ctx)
	if err != nil {
		t.Fatal(err)
	}
	next := ed25519.PublicKey(st1.Next.PublicKey)
	wait("the next key", func(s record.SigningKeyStatus) bool {
		return s.Phase == record.SigningKeyAnnounced && s.Next.Fingerprint == st1.Next.Fingerprint
	})
	if !other.PublicKey().Equal(old) {
		t.Fatal("the other replica signs with the next key before the switch")
	}
	if _, err := other.NewSigningKey(ctx); err == nil {
		t.Fatal("the other replica made a second rollover while one is under way")
	}

	if _, err := a.SwitchSigningKey(ctx, false); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(patience)
	for !other.PublicKey().Equal(next) {
		if time.Now().After(deadline) {
			t.Fatal("the other replica does not sign with the next key after the switch")
		}
		time.Sleep(5 * time.Millisecond)
	}
	if _, err := other.RetireSigningKey(ctx, false); err != nil {
		t.Fatalf("retire through the other replica: %v", err)
	}
	if s, err := a.SigningKeyStatus(ctx); err != nil || s.Phase != record.SigningKeySteady || s.Signing.Fingerprint != model.Fingerprint(next) {
		t.Fatalf("the first replica after the retirement: %+v, %v; want the new key alone", s, err)
	}
	// A replica started now signs with the new key.
	if third := replica(); !third.PublicKey().Equal(next) {
		t.Fatalf("a replica started after the retirement signs with %s", model.Fingerprint(third.PublicKey()))
	}
}

// A rotation of the key file seals the next signing key again too.
func TestResealCoversTheNextSigningKey(t *testing.T) {
	eachStore(t, func(t *testing.T, st store.Store) {
		ctx := context.Background()
		older, newer := []byte("0123456789abcdef0123456789abcdef"), []byte("fedcba9876543210fedcba9876543210")
		kr := ring(t, older)
		key, err := server.SigningKey(ctx, st, kr, zerolog.Nop())
		if err != nil {
			t.Fatal(err)
		}
		srv, err := server.New(server.Config{Key: key, Keyring: kr}, st, bus.NewLocal(zerolog.Nop()), zerolog.Nop())
		if err != nil {
			t.Fatal(err)
		}
		if _, err := srv.NewSigningKey(ctx); err != nil {
			t.Fatal(err)
		}
		rotated := ring(t, newer, older)
		done, err := server.Reseal(ctx, st, rotated)
		if err != nil {
			t.Fatal(err)
		}
		if n := done.From[kr.KeyID()]; n != 2 {
			t.Fatalf("resealed %v: want the current and the next signing keys sealed again", done.From)
		}
		ks, err := st.SigningKeys(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if got := rotated.SealedWith(ks.Rollover.PrivateKey); got != rotated.KeyID() {
			t.Fatalf("next signing key sealed with %s, want %s", got, rotated.KeyID())
		}
		// A server with the new key alone opens both.
		after, err := server.New(server.Config{Keyring: ring(t, newer)}, st, bus.NewLocal(zerolog.Nop()), zerolog.Nop())
		if err != nil {
			t.Fatal(err)
		}
		if err := after.LoadSigningKeys(ctx); err != nil {
			t.Fatalf("load the signing keys with the new key file: %v", err)
		}
		if s, err := after.SigningKeyStatus(ctx); err != nil || s.Phase != record.SigningKeyAnnounced || !after.PublicKey().Equal(pubKey(key)) {
			t.Fatalf("status with the new key file: %+v, %v; want the rollover announced, the old key signing", s, err)
		}
	})
}

func pubKey(k ed25519.PrivateKey) ed25519.PublicKey { return k.Public().(ed25519.PublicKey) }
