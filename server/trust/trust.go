// Package trust holds what the server trusts and what it signs with: its
// ed25519 signing keys, read from the store by every replica, and their
// rollover (new → switch → retire) announced to the agents; the master
// key of sealed values; and the sealing of sensitive values, at rest under
// the master key and again to one agent's key-agreement key. Every secret
// it keeps in the store is sealed by the server's key file (a Sealer).
//
// It must not ingest, schedule or serve: the server hands it the agents'
// messages about its keys (the answer to a hello, server.rollover.ack),
// the scheduler asks it to seal, the API asks it to take a rollover step.
// It never imports the server: it declares what it needs of the store,
// the bus and the ingest path, and publishes through the Feed it is given.
package trust

import (
	"context"
	"sync"
	"time"

	"github.com/rs/zerolog"

	"github.com/tetherhq/tether/bus"
	"github.com/tetherhq/tether/model"
	"github.com/tetherhq/tether/model/secret"
	"github.com/tetherhq/tether/server/event"
	"github.com/tetherhq/tether/server/record"
)

// Config configures Keys.
type Config struct {
	// Keyring seals the signing keys and the master key of sealed values
	// in the store. Nil (the embedded mode): the signing key is the one
	// configured, never rolled over, and the master key is kept in the
	// store as it is.
	Keyring Sealer
	// Refresh is how often Watch reads the signing keys from the store
	// (the server's SigningKeyRefresh); a switch takes effect twice this
	// long after it is asked, on every replica at once.
	Refresh time.Duration
}

// Store is what Keys reads and writes: the secrets, the signing keys, and
// the agents a rollover is announced to and values are sealed for
// (store.Store).
type Store interface {
	SecretStore
	SigningKeys(ctx context.Context) (record.SigningKeys, error)
	Agents
}

// Agents reads the agents' records.
type Agents interface {
	ListEnvs(ctx context.Context) ([]record.Environment, error)
	ListAgents(ctx context.Context, env string) ([]record.Agent, error)
	GetAgent(ctx context.Context, env, name string) (record.Agent, error)
}

// Sender delivers a command to an agent's inbox (bus.Bus).
type Sender interface {
	Send(ctx context.Context, e *bus.Envelope, opts bus.SendOptions) error
}

// Services are what Keys needs of the server around it.
type Services struct {
	Store Store
	Bus   Sender
	// Signer signs everything the server sends; Keys sets its key at a
	// switch (the scheduler shares it). Its key when Keys is made is the
	// current one until the store says otherwise.
	Signer *bus.Signer
	// Feed takes the events of agents' rollover acknowledgements.
	Feed *event.Feed
	// Touch changes an agent's record as the ingest path does, under the
	// agent's lock, for the message numbered seq; fn says whether it
	// changed anything.
	Touch func(ctx context.Context, env, name string, seq uint64, fn func(*record.Agent) bool) (bool, error)
	// RecordFailed records results of an agent's resources (those not
	// sent it, failed, saying why).
	RecordFailed func(ctx context.Context, env, agent string, results []model.Result) error
	Log          zerolog.Logger
}

// Keys is the server's signing keys and sealing of sensitive values.
type Keys struct {
	cfg          Config
	store        Store
	bus          Sender
	signer       *bus.Signer
	feed         *event.Feed
	touch        func(ctx context.Context, env, name string, seq uint64, fn func(*record.Agent) bool) (bool, error)
	recordFailed func(ctx context.Context, env, agent string, results []model.Result) error
	log          zerolog.Logger

	// mu guards set, the signing keys as last read from the store, and
	// the signer's switches.
	mu  sync.Mutex
	set keySet
	// sealMu guards sealing, the sealer of sensitive values once its
	// master key is read.
	sealMu  sync.Mutex
	sealing *secret.Sealer
}

// New returns the keys of a server that signs with svc.Signer.
func New(cfg Config, svc Services) *Keys {
	return &Keys{cfg: cfg, store: svc.Store, bus: svc.Bus, signer: svc.Signer, feed: svc.Feed, touch: svc.Touch, recordFailed: svc.RecordFailed, log: svc.Log,
		set: keySet{current: svc.Signer.Key()}}
}
