package bench

import (
	"context"
	"crypto/ed25519"
	"fmt"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/tetherhq/tether/bus"
	"github.com/tetherhq/tether/model"
	"github.com/tetherhq/tether/server/record"
	"github.com/tetherhq/tether/server/store"
	"github.com/tetherhq/tether/server/store/postgres"
)

// The server-mode scenarios each work in a schema and a broker namespace of
// their own, created for the run and dropped after it.

// newSchema creates a fresh schema and returns its URL and a drop func.
func newSchema(ctx context.Context, base string) (string, func(), error) {
	url, _, drop, err := newNamedSchema(ctx, base)
	return url, drop, err
}

// newNamedSchema is newSchema, returning the schema's name too.
func newNamedSchema(ctx context.Context, base string) (string, string, func(), error) {
	name := "tether_bench_" + strings.ReplaceAll(uuid.NewString()[:8], "-", "")
	if err := postgres.CreateSchema(ctx, base, name); err != nil {
		return "", "", nil, fmt.Errorf("create a schema for the benchmark (is PostgreSQL running? --postgres): %w", err)
	}
	return postgres.WithSchema(base, name), name, func() { _ = postgres.DropSchema(context.WithoutCancel(ctx), base, name) }, nil
}

// newStore opens a store on a fresh schema; closing drops the schema.
func newStore(ctx context.Context, base string) (*postgres.Store, string, func(), error) {
	url, drop, err := newSchema(ctx, base)
	if err != nil {
		return nil, "", nil, err
	}
	st, err := postgres.Open(ctx, postgres.Config{URL: url})
	if err != nil {
		drop()
		return nil, "", nil, err
	}
	return st, url, func() { st.Close(); drop() }, nil
}

// resourcesPerAgent is the size of each agent's slice in the fleet of the
// server-side scenarios.
const resourcesPerAgent = 100

// storeFleet stores a released version of agents × 100 files in env and
// the agents, accepted, with keys of their own; it returns their signers
// and their keys.
func storeFleet(ctx context.Context, st store.Store, env string, agents int) ([]*bus.Signer, []ed25519.PrivateKey, []model.Resource, error) {
	if err := st.CreateEnv(ctx, record.Environment{Name: env, Settings: quietSettings(), CreatedAt: time.Now().UTC()}); err != nil {
		return nil, nil, nil, err
	}
	keys, err := storeAgents(ctx, st, env, 0, agents)
	if err != nil {
		return nil, nil, nil, err
	}
	var rs []model.Resource
	signers := make([]*bus.Signer, agents)
	for a := range agents {
		name := agentName(a)
		for i := range resourcesPerAgent {
			path := fmt.Sprintf("/etc/app/%03d.conf", i)
			rs = append(rs, model.Resource{ID: model.ID{Type: "file", Agent: name, Key: "path", Value: path},
				Attributes: model.Attributes{"path": path, "content": "v1 " + path, "mode": "0644"}})
		}
		signers[a] = bus.NewSigner(keys[a], 0)
	}
	v, err := st.PutVersion(ctx, env, model.VersionMeta{Compiler: "tether bench"}, rs)
	if err != nil {
		return nil, nil, nil, err
	}
	_, err = st.Release(ctx, env, v.Number)
	return signers, keys, rs, err
}

// agentName is the name of the scenarios' agent number i.
func agentName(i int) string { return fmt.Sprintf("host%04d", i) }

// storeAgents stores agents from..from+n-1 of env (an existing
// environment), accepted, with keys of their own, and returns the keys.
func storeAgents(ctx context.Context, st store.Store, env string, from, n int) ([]ed25519.PrivateKey, error) {
	keys := make([]ed25519.PrivateKey, n)
	for i := range n {
		pub, key, err := bus.GenerateKey()
		if err != nil {
			return nil, err
		}
		keys[i] = key
		now := time.Now().UTC()
		if err := st.UpsertAgent(ctx, record.Agent{Env: env, Name: agentName(from + i), State: record.AgentAccepted, PublicKey: pub, FirstSeen: now, LastSeen: now}); err != nil {
			return nil, err
		}
	}
	return keys, nil
}

// quietSettings are an environment's settings with nothing scheduled: the
// scenario alone decides what runs.
func quietSettings() record.EnvSettings {
	s := record.DefaultEnvSettings()
	s.AutoDeploy, s.DeployInterval, s.RepairInterval = false, 0, 0
	return s
}
