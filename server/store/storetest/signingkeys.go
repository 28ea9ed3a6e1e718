package storetest

import (
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/tetherhq/tether/model"
	"github.com/tetherhq/tether/server/record"
	"github.com/tetherhq/tether/server/store"
)

// testSigningKeys: a rollover of the server's signing key is made,
// switched and retired in whole steps; concurrent steps see each other;
// agents' server keys are kept by every upsert.
func testSigningKeys(t *testing.T, s store.Store) {
	if _, err := s.SigningKeys(ctx); !errors.Is(err, model.ErrNotFound) {
		t.Fatalf("signing keys before any: %v, want ErrNotFound", err)
	}
	if _, err := s.UpdateSigningKeys(ctx, func(*record.SigningKeys) error { return nil }); !errors.Is(err, model.ErrNotFound) {
		t.Fatalf("update signing keys before any: %v, want ErrNotFound", err)
	}
	if _, err := s.Secret(ctx, record.SigningKeySecret, func() ([]byte, error) { return []byte("sealed current"), nil }); err != nil {
		t.Fatal(err)
	}
	ks, err := s.SigningKeys(ctx)
	if err != nil || string(ks.Current) != "sealed current" || ks.Rollover != nil {
		t.Fatalf("signing keys: %+v, %v; want the current one, no rollover", ks, err)
	}

	// Two replicas make a next key at once: one wins, the other sees it.
	made := time.Now().Truncate(time.Microsecond)
	var wg sync.WaitGroup
	errs := make([]error, 2)
	for i := range errs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, errs[i] = s.UpdateSigningKeys(ctx, func(ks *record.SigningKeys) error {
				if ks.Rollover != nil {
					return model.ErrConflict
				}
				ks.Rollover = &record.SigningKeyRollover{PublicKey: []byte{byte(i)}, PrivateKey: []byte("sealed next"), MadeAt: made}
				return nil
			})
		}()
	}
	wg.Wait()
	if n := slices.IndexFunc(errs, func(e error) bool { return e == nil }); n < 0 || !errors.Is(errs[1-n], model.ErrConflict) {
		t.Fatalf("two rollovers made at once: %v; want one made, the other ErrConflict", errs)
	}
	ks, err = s.SigningKeys(ctx)
	if err != nil || ks.Rollover == nil || string(ks.Rollover.PrivateKey) != "sealed next" || !ks.Rollover.MadeAt.Equal(made) || ks.Rollover.SwitchAt != nil {
		t.Fatalf("after new: %+v, %v", ks.Rollover, err)
	}

	// fn's error changes nothing.
	boom := errors.New("boom")
	if _, err := s.UpdateSigningKeys(ctx, func(ks *record.SigningKeys) error {
		ks.Current, ks.Rollover = []byte("lost"), nil
		return boom
	}); !errors.Is(err, boom) {
		t.Fatalf("update failing: %v, want its error", err)
	}
	at := made.Add(time.Minute)
	if _, err := s.UpdateSigningKeys(ctx, func(ks *record.SigningKeys) error { ks.Rollover.SwitchAt = &at; return nil }); err != nil {
		t.Fatal(err)
	}
	if ks, err = s.SigningKeys(ctx); err != nil || string(ks.Current) != "sealed current" || ks.Rollover == nil || ks.Rollover.SwitchAt == nil || !ks.Rollover.SwitchAt.Equal(at) {
		t.Fatalf("after switch: %+v, %v; want the switch time %v", ks, err, at)
	}
	// Retire: the next key becomes the current one, in one step.
	if _, err := s.UpdateSigningKeys(ctx, func(ks *record.SigningKeys) error {
		ks.Current, ks.Rollover = []byte("sealed next as current"), nil
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if ks, err = s.SigningKeys(ctx); err != nil || string(ks.Current) != "sealed next as current" || ks.Rollover != nil {
		t.Fatalf("after retire: %+v, %v", ks, err)
	}
	if all, _ := s.Secrets(ctx); string(all[record.SigningKeySecret]) != "sealed next as current" {
		t.Fatalf("secret %s after retire: %q", record.SigningKeySecret, all[record.SigningKeySecret])
	}
	if _, err := s.UpdateSigningKeys(ctx, func(ks *record.SigningKeys) error { ks.Current = nil; return nil }); !errors.Is(err, model.ErrInvalid) {
		t.Fatalf("removing the current key: %v, want ErrInvalid", err)
	}

	// An agent's server keys: written and read by upserts, none as none.
	mustEnv(t, s, "prod")
	a := record.Agent{Env: "prod", Name: "web-1", PublicKey: []byte{1}}
	if err := s.UpsertAgent(ctx, a); err != nil {
		t.Fatal(err)
	}
	if got, err := s.GetAgent(ctx, "prod", "web-1"); err != nil || got.ServerKeys != nil {
		t.Fatalf("agent that named no server keys: %v, %v; want none", got.ServerKeys, err)
	}
	a.ServerKeys, a.ServerKeysSeq = []string{"SHA256:one", "SHA256:two"}, 5
	if err := s.UpsertAgent(ctx, a); err != nil {
		t.Fatal(err)
	}
	if got, err := s.ListAgents(ctx, "prod"); err != nil || len(got) != 1 || !slices.Equal(got[0].ServerKeys, a.ServerKeys) || got[0].ServerKeysSeq != 5 {
		t.Fatalf("agents: %+v, %v; want server keys %v said at 5", got, err, a.ServerKeys)
	}
	// An earlier word, written late, does not overwrite a later one.
	late := a
	late.ServerKeys, late.ServerKeysSeq = []string{"SHA256:one"}, 3
	if err := s.UpsertAgent(ctx, late); err != nil {
		t.Fatal(err)
	}
	if got, _ := s.GetAgent(ctx, "prod", "web-1"); !slices.Equal(got.ServerKeys, a.ServerKeys) {
		t.Fatalf("server keys after an earlier word written late: %v, want %v kept", got.ServerKeys, a.ServerKeys)
	}
	a.ServerKeys, a.ServerKeysSeq = []string{"SHA256:two"}, 7
	if err := s.UpsertAgent(ctx, a); err != nil {
		t.Fatal(err)
	}
	if got, _ := s.GetAgent(ctx, "prod", "web-1"); !slices.Equal(got.ServerKeys, a.ServerKeys) {
		t.Fatalf("server keys after a later word: %v, want %v", got.ServerKeys, a.ServerKeys)
	}
	// A new key starts the agent's sequence over: its next word holds.
	if err := s.ResetSequence(ctx, "prod", "web-1"); err != nil {
		t.Fatal(err)
	}
	a.ServerKeys, a.ServerKeysSeq = []string{"SHA256:three"}, 1
	if err := s.UpsertAgent(ctx, a); err != nil {
		t.Fatal(err)
	}
	if got, _ := s.GetAgent(ctx, "prod", "web-1"); !slices.Equal(got.ServerKeys, a.ServerKeys) {
		t.Fatalf("server keys after the sequence started over: %v, want %v", got.ServerKeys, a.ServerKeys)
	}
}
