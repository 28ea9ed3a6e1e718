package server

import (
	"context"
	"crypto/ed25519"

	"github.com/rs/zerolog"

	"github.com/tetherhq/tether/server/record"
	"github.com/tetherhq/tether/server/trust"
)

// The server's signing keys, their rollover and the sealing of sensitive
// values live in package trust (s.keys); these are the names the server's
// callers have always used.
type (
	// Sealer seals the secrets the server keeps in its store with a key
	// the store does not hold (a keyring.Ring).
	Sealer = trust.Sealer
	// SecretStore keeps the installation's secrets as bytes (store.Store).
	SecretStore = trust.SecretStore
	// Resealed says what Reseal did.
	Resealed = trust.Resealed
)

// ServerRolloverExpiry bounds how long the messages of a rollover step
// wait in the inbox of an agent that is not connected.
const ServerRolloverExpiry = trust.RolloverExpiry

// SigningKey returns the server's signing key from st, sealed with ring
// (see trust.SigningKey).
func SigningKey(ctx context.Context, st SecretStore, ring Sealer, log zerolog.Logger) (ed25519.PrivateKey, error) {
	return trust.SigningKey(ctx, st, ring, log)
}

// Reseal seals every secret of st with ring's first key (see
// trust.Reseal).
func Reseal(ctx context.Context, st SecretStore, ring Sealer) (Resealed, error) {
	return trust.Reseal(ctx, st, ring)
}

// LoadSigningKeys reads the signing keys from the store and signs with the
// one in force (Run does it every SigningKeyRefresh).
func (s *Server) LoadSigningKeys(ctx context.Context) error { return s.keys.Load(ctx) }

// SigningKeyStatus says where a rollover of the signing key stands, and
// which accepted agents are not ready for its next step.
func (s *Server) SigningKeyStatus(ctx context.Context) (record.SigningKeyStatus, error) {
	return s.keys.Status(ctx)
}

// NewSigningKey makes the server's next signing key, keeps it sealed in
// the store, and announces it to every accepted agent.
func (s *Server) NewSigningKey(ctx context.Context) (record.SigningKeyStatus, error) {
	return s.keys.NewKey(ctx)
}

// SwitchSigningKey makes every server sign with the next key, from
// SigningKeyRefresh × 2 from now, once every accepted agent took it (or
// force).
func (s *Server) SwitchSigningKey(ctx context.Context, force bool) (record.SigningKeyStatus, error) {
	return s.keys.Switch(ctx, force)
}

// RetireSigningKey forgets the key the servers signed with before the
// switch, once every accepted agent takes the new one (or force).
func (s *Server) RetireSigningKey(ctx context.Context, force bool) (record.SigningKeyStatus, error) {
	return s.keys.Retire(ctx, force)
}
