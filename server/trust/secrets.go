package trust

import (
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"
	"maps"
	"slices"

	"github.com/rs/zerolog"

	"github.com/tetherhq/tether/bus"
	"github.com/tetherhq/tether/model"
	"github.com/tetherhq/tether/model/secret"
	"github.com/tetherhq/tether/server/record"
)

// Sealer seals the secrets the server keeps in its store with a key the
// store does not hold (a keyring.Ring), so that reading the database is
// not enough to read them.
type Sealer interface {
	// Seal encrypts plaintext, bound to aad.
	Seal(plaintext, aad []byte) ([]byte, error)
	// Open decrypts what Seal returned for the same aad.
	Open(ciphertext, aad []byte) ([]byte, error)
	// KeyID names the key Seal uses.
	KeyID() string
	// SealedWith names the key that sealed ciphertext ("" : none did).
	SealedWith(ciphertext []byte) string
}

// SecretStore keeps the installation's secrets as bytes (store.Store).
type SecretStore interface {
	Secret(ctx context.Context, name string, create func() ([]byte, error)) ([]byte, error)
	Secrets(ctx context.Context) (map[string][]byte, error)
	ReplaceSecret(ctx context.Context, name string, old, value []byte) error
	UpdateSigningKeys(ctx context.Context, fn func(*record.SigningKeys) error) (record.SigningKeys, error)
}

// signingKeySecret is the secret holding the server's ed25519 signing key,
// which every replica shares and every agent pins.
const signingKeySecret = record.SigningKeySecret

// secretAAD binds a sealed secret to its row: a value copied under
// another name does not open.
func secretAAD(name string) []byte { return []byte("tether/secrets/" + name) }

// inClear reports whether a secret's stored value is the clear form older
// servers wrote. Only the signing key was ever stored so, and the master key
// of sealed values by a server without a keyring (the embedded mode);
// sealed, their 64 and 32 bytes take 100 and 68, so the forms cannot be
// confused.
func inClear(name string, value []byte) bool {
	return name == signingKeySecret && len(value) == ed25519.PrivateKeySize ||
		name == masterKeyName && len(value) == secret.KeySize
}

// SigningKey returns the server's signing key from st, sealed with ring:
// on the first start of an installation it is generated and stored sealed;
// a key an older server stored in clear is sealed in place (logged once),
// so that from then on the database holds it only sealed.
func SigningKey(ctx context.Context, st SecretStore, ring Sealer, log zerolog.Logger) (ed25519.PrivateKey, error) {
	aad := secretAAD(signingKeySecret)
	stored, err := st.Secret(ctx, signingKeySecret, func() ([]byte, error) {
		_, key, err := bus.GenerateKey()
		if err != nil {
			return nil, err
		}
		return ring.Seal(key, aad)
	})
	if err != nil {
		return nil, fmt.Errorf("server signing key: %w", err)
	}
	if inClear(signingKeySecret, stored) {
		// Another server upgrading at the same time may seal it first
		// (ErrConflict): it is sealed either way.
		if err := seal(ctx, st, ring, signingKeySecret, stored, stored); err != nil && !errors.Is(err, model.ErrConflict) {
			return nil, fmt.Errorf("server signing key: %w", err)
		}
		log.Warn().Str("key_id", ring.KeyID()).
			Msg("the server's signing key was in clear in the database (as older tether servers kept it): it is sealed now; older database backups still hold it in clear")
		return ed25519.PrivateKey(stored), nil
	}
	key, err := ring.Open(stored, aad)
	if err != nil {
		return nil, fmt.Errorf("server signing key in the database: %w", err)
	}
	if len(key) != ed25519.PrivateKeySize {
		return nil, fmt.Errorf("server signing key in the database: %d bytes once opened: want an ed25519 private key (%d): restore the secrets table from a backup", len(key), ed25519.PrivateKeySize)
	}
	if id := ring.SealedWith(stored); id != ring.KeyID() {
		log.Info().Str("sealed_with", id).Str("key_id", ring.KeyID()).
			Msg("the signing key is sealed with an older key of the key file: once every server has this key file, seal it again with the first key (tether server rotate-key)")
	}
	return ed25519.PrivateKey(key), nil
}

// seal replaces the secret name, which holds stored, by plain sealed with
// ring; ErrConflict if it no longer holds stored.
func seal(ctx context.Context, st SecretStore, ring Sealer, name string, stored, plain []byte) error {
	sealed, err := ring.Seal(plain, secretAAD(name))
	if err != nil {
		return err
	}
	return st.ReplaceSecret(ctx, name, stored, sealed)
}

// Resealed says what Reseal did.
type Resealed struct {
	// Key is the key every secret is sealed with now.
	Key string
	// From counts the secrets sealed again, by the key that had sealed
	// them ("" : they were in clear).
	From map[string]int
	// Kept counts the secrets sealed with Key already.
	Kept int
}

// Reseal seals every secret of st with ring's first key: the step of a key
// rotation between putting a new key first in the key file and removing
// the old one. A secret is opened with whichever key of ring sealed it; one
// sealed with a key ring lacks stops Reseal with that key's id, the
// secrets before it done. It is safe to run while servers run (they read
// their secrets when they start) and to run again.
func Reseal(ctx context.Context, st SecretStore, ring Sealer) (Resealed, error) {
	done := Resealed{Key: ring.KeyID(), From: map[string]int{}}
	all, err := st.Secrets(ctx)
	if err != nil {
		return done, fmt.Errorf("seal the secrets again: %w", err)
	}
	for _, name := range slices.Sorted(maps.Keys(all)) {
		stored := all[name]
		from, plain := "", stored
		if !inClear(name, stored) {
			if from = ring.SealedWith(stored); from == done.Key {
				done.Kept++
				continue
			}
			if plain, err = ring.Open(stored, secretAAD(name)); err != nil {
				return done, fmt.Errorf("secret %s: %w", name, err)
			}
		}
		if err := seal(ctx, st, ring, name, stored, plain); errors.Is(err, model.ErrConflict) {
			return done, fmt.Errorf("secret %s changed while it was sealed again (a server sealing it as it started?): run the rotation again: %w", name, err)
		} else if err != nil {
			return done, fmt.Errorf("secret %s: %w", name, err)
		}
		done.From[from]++
	}
	// The next signing key of a rollover under way, sealed in its own
	// table.
	_, err = st.UpdateSigningKeys(ctx, func(ks *record.SigningKeys) error {
		r := ks.Rollover
		if r == nil {
			return nil
		}
		from := ring.SealedWith(r.PrivateKey)
		if from == done.Key {
			done.Kept++
			return nil
		}
		plain, err := ring.Open(r.PrivateKey, rolloverAAD(r.PublicKey))
		if err != nil {
			return fmt.Errorf("the next signing key: %w", err)
		}
		if r.PrivateKey, err = ring.Seal(plain, rolloverAAD(r.PublicKey)); err != nil {
			return err
		}
		done.From[from]++
		return nil
	})
	if err != nil && !errors.Is(err, model.ErrNotFound) {
		return done, fmt.Errorf("seal the secrets again: %w", err)
	}
	return done, nil
}
