package server_test

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"errors"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/rs/zerolog"

	"github.com/tetherhq/tether/bus"
	"github.com/tetherhq/tether/server"
	"github.com/tetherhq/tether/server/keyring"
	"github.com/tetherhq/tether/server/store"
	"github.com/tetherhq/tether/server/store/postgres/pgtest"
	"github.com/tetherhq/tether/server/store/sqlite"
)

var (
	_ server.Sealer      = (*keyring.Ring)(nil)
	_ server.SecretStore = store.Store(nil)
)

const signingKeyRow = "server-signing-key"

// eachStore runs fn against the embedded store and PostgreSQL.
func eachStore(t *testing.T, fn func(t *testing.T, st store.Store)) {
	t.Run("sqlite", func(t *testing.T) {
		st, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "tether.db"), sqlite.Config{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { st.Close() })
		fn(t, st)
	})
	t.Run("postgres", func(t *testing.T) { fn(t, pgtest.Open(t)) })
}

func ring(t *testing.T, keys ...[]byte) *keyring.Ring {
	t.Helper()
	r, err := keyring.New(keys...)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// storedKey returns the signing key's row as the database holds it.
func storedKey(t *testing.T, st store.Store) []byte {
	t.Helper()
	all, err := st.Secrets(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return all[signingKeyRow]
}

func signingKey(t *testing.T, st store.Store, r server.Sealer) ed25519.PrivateKey {
	t.Helper()
	k, err := server.SigningKey(context.Background(), st, r, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// The signing key of a new installation is stored sealed, never in clear.
func TestSigningKeyIsStoredSealed(t *testing.T) {
	eachStore(t, func(t *testing.T, st store.Store) {
		a := keyring.NewKey()
		key := signingKey(t, st, ring(t, a))
		row := storedKey(t, st)
		if bytes.Contains(row, key.Seed()) || ring(t, a).SealedWith(row) != keyring.KeyID(a) {
			t.Fatalf("stored row %x: want it sealed with key %s, without the key in clear", row, keyring.KeyID(a))
		}
		if again := signingKey(t, st, ring(t, a)); !again.Equal(key) {
			t.Fatal("a second start got another signing key")
		}
		if !bytes.Equal(storedKey(t, st), row) {
			t.Fatal("a second start rewrote the sealed row")
		}
	})
}

// A database written by an older server, its signing key in clear, is
// sealed on the first start; the key (and so what agents pinned) is the
// same.
func TestClearSigningKeyIsSealedOnStart(t *testing.T) {
	eachStore(t, func(t *testing.T, st store.Store) {
		ctx := context.Background()
		// As older servers stored it.
		_, clear, err := bus.GenerateKey()
		if err != nil {
			t.Fatal(err)
		}
		if _, err := st.Secret(ctx, signingKeyRow, func() ([]byte, error) { return clear, nil }); err != nil {
			t.Fatal(err)
		}
		a := keyring.NewKey()
		var logged bytes.Buffer
		key, err := server.SigningKey(ctx, st, ring(t, a), zerolog.New(&logged))
		if err != nil {
			t.Fatal(err)
		}
		if !key.Equal(ed25519.PrivateKey(clear)) {
			t.Fatal("the upgrade changed the signing key")
		}
		row := storedKey(t, st)
		if bytes.Contains(row, clear.Seed()) || ring(t, a).SealedWith(row) != keyring.KeyID(a) {
			t.Fatalf("row after the upgrade %x: want it sealed with key %s", row, keyring.KeyID(a))
		}
		if !strings.Contains(logged.String(), "was in clear") {
			t.Fatalf("log %q: want the upgrade logged", logged.String())
		}
		srv, err := server.New(server.Config{Key: signingKey(t, st, ring(t, a))}, st, bus.NewLocal(zerolog.Nop()), zerolog.Nop())
		if err != nil {
			t.Fatal(err)
		}
		if !srv.PublicKey().Equal(ed25519.PrivateKey(clear).Public()) {
			t.Fatal("the server restarted after the upgrade signs with another key")
		}
	})
}

// Servers upgrading one database at once all get the one key, sealed.
func TestConcurrentUpgrade(t *testing.T) {
	eachStore(t, func(t *testing.T, st store.Store) {
		ctx := context.Background()
		_, clear, _ := bus.GenerateKey()
		if _, err := st.Secret(ctx, signingKeyRow, func() ([]byte, error) { return clear, nil }); err != nil {
			t.Fatal(err)
		}
		r := ring(t, keyring.NewKey())
		var wg sync.WaitGroup
		errs := make(chan error, 4)
		for range 4 {
			wg.Go(func() {
				k, err := server.SigningKey(ctx, st, r, zerolog.Nop())
				if err == nil && !k.Equal(ed25519.PrivateKey(clear)) {
					err = errors.New("another key")
				}
				errs <- err
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			if err != nil {
				t.Fatal(err)
			}
		}
		if r.SealedWith(storedKey(t, st)) != r.KeyID() {
			t.Fatal("the row is not sealed after concurrent upgrades")
		}
	})
}

// Rotation: sealed with A; B put first, everything sealed again; A
// removed: the server still gets the same signing key.
func TestRotation(t *testing.T) {
	eachStore(t, func(t *testing.T, st store.Store) {
		ctx := context.Background()
		a, b := keyring.NewKey(), keyring.NewKey()
		key := signingKey(t, st, ring(t, a))

		done, err := server.Reseal(ctx, st, ring(t, b, a))
		if err != nil {
			t.Fatal(err)
		}
		if done.Key != keyring.KeyID(b) || done.From[keyring.KeyID(a)] != 1 || done.Kept != 0 {
			t.Fatalf("reseal: %+v; want one secret from %s to %s", done, keyring.KeyID(a), keyring.KeyID(b))
		}
		if again, err := server.Reseal(ctx, st, ring(t, b, a)); err != nil || len(again.From) != 0 || again.Kept != 1 {
			t.Fatalf("reseal again: %+v, %v; want nothing to do", again, err)
		}
		if got := signingKey(t, st, ring(t, b)); !got.Equal(key) {
			t.Fatal("after rotation, without the old key, the signing key changed")
		}
		// The old key alone no longer opens it, and says which key it needs.
		_, err = server.SigningKey(ctx, st, ring(t, a), zerolog.Nop())
		if !errors.Is(err, keyring.ErrUnknownKey) || !strings.Contains(err.Error(), keyring.KeyID(b)) {
			t.Fatalf("old key only: %v; want ErrUnknownKey naming %s", err, keyring.KeyID(b))
		}
	})
}

// Reseal seals a clear row left by an older server too.
func TestResealSealsAClearKey(t *testing.T) {
	eachStore(t, func(t *testing.T, st store.Store) {
		ctx := context.Background()
		_, clear, _ := bus.GenerateKey()
		if _, err := st.Secret(ctx, signingKeyRow, func() ([]byte, error) { return clear, nil }); err != nil {
			t.Fatal(err)
		}
		a := keyring.NewKey()
		done, err := server.Reseal(ctx, st, ring(t, a))
		if err != nil || done.From[""] != 1 {
			t.Fatalf("reseal: %+v, %v; want one secret sealed from clear", done, err)
		}
		if got := signingKey(t, st, ring(t, a)); !got.Equal(ed25519.PrivateKey(clear)) {
			t.Fatal("the signing key changed")
		}
	})
}

// A sealed row that does not open stops the start with the key it needs.
func TestSigningKeyThatDoesNotOpen(t *testing.T) {
	eachStore(t, func(t *testing.T, st store.Store) {
		ctx := context.Background()
		a := keyring.NewKey()
		signingKey(t, st, ring(t, a))
		row := storedKey(t, st)

		_, err := server.SigningKey(ctx, st, ring(t, keyring.NewKey()), zerolog.Nop())
		if !errors.Is(err, keyring.ErrUnknownKey) || !strings.Contains(err.Error(), keyring.KeyID(a)) {
			t.Fatalf("another key: %v; want ErrUnknownKey naming %s", err, keyring.KeyID(a))
		}
		if _, err := server.Reseal(ctx, st, ring(t, keyring.NewKey())); !errors.Is(err, keyring.ErrUnknownKey) {
			t.Fatalf("reseal with another key: %v; want ErrUnknownKey", err)
		}

		tampered := bytes.Clone(row)
		tampered[len(tampered)-1] ^= 1
		if err := st.ReplaceSecret(ctx, signingKeyRow, row, tampered); err != nil {
			t.Fatal(err)
		}
		if _, err := server.SigningKey(ctx, st, ring(t, a), zerolog.Nop()); !errors.Is(err, keyring.ErrTampered) {
			t.Fatalf("a tampered row: %v; want ErrTampered", err)
		}
	})
}
