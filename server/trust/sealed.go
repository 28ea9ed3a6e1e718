package trust

import (
	"context"
	"errors"
	"fmt"

	"github.com/tetherhq/tether/model"
	"github.com/tetherhq/tether/model/secret"
	"github.com/tetherhq/tether/server/record"
)

// The master key of sealed values is kept in the store's secrets, shared
// by every replica: sealed by the server's keyring (secretAAD, as every
// secret, so that tether server rotate-key seals it again with the rest),
// or, by a server without one (the embedded mode, whose store is a file
// beside the model), as it is.
const masterKeyName = "sealed-values-master-key"

// sealer returns the sealer of sensitive values, reading its master key
// from the store (making it, the first time any replica needs it) once.
func (k *Keys) sealer(ctx context.Context) (*secret.Sealer, error) {
	k.sealMu.Lock()
	defer k.sealMu.Unlock()
	if k.sealing != nil {
		return k.sealing, nil
	}
	ring := k.cfg.Keyring
	aad := secretAAD(masterKeyName)
	stored, err := k.store.Secret(ctx, masterKeyName, func() ([]byte, error) {
		key, err := secret.GenerateMasterKey()
		if err != nil || ring == nil {
			return key, err
		}
		return ring.Seal(key, aad)
	})
	if err != nil {
		return nil, fmt.Errorf("master key of sealed values: %w", err)
	}
	master := stored
	switch {
	case inClear(masterKeyName, stored) && ring != nil:
		// Made by a server without a keyring: sealed in place (another
		// server doing it at once makes ErrConflict: sealed either way).
		if err := seal(ctx, k.store, ring, masterKeyName, stored, stored); err != nil && !errors.Is(err, model.ErrConflict) {
			return nil, fmt.Errorf("master key of sealed values: %w", err)
		}
		k.log.Warn().Str("key_id", ring.KeyID()).Msg("the master key of sealed values was in clear in the database: it is sealed now; older database backups still hold it in clear")
	case inClear(masterKeyName, stored):
	case ring == nil:
		return nil, errors.New("the master key of sealed values is sealed with a key file, and this server has none: start it with the key file (--key-file)")
	default:
		if master, err = ring.Open(stored, aad); err != nil {
			return nil, fmt.Errorf("master key of sealed values in the database: %w", err)
		}
	}
	sealer, err := secret.NewSealer(master)
	if err != nil {
		return nil, err
	}
	k.sealing = sealer
	return sealer, nil
}

// SealAtRest seals every sensitive value of resources in clear under the
// server's key: the only form they are hashed, stored and sent in. A
// sensitive value that is the redaction marker itself is refused: such a
// set was copied from redacted output (tether compile -o json without
// --show-sensitive) and would deploy the marker.
func (k *Keys) SealAtRest(ctx context.Context, resources []model.Resource) error {
	var sealer *secret.Sealer
	for i := range resources {
		r := &resources[i]
		names := r.ClearSensitive()
		if len(names) == 0 {
			continue
		}
		for _, n := range names {
			if v, ok := r.Attributes[n].(string); ok && v == model.RedactedValue {
				return fmt.Errorf("%w %s: the sensitive attribute %s holds the redaction marker %q, not a value: "+
					"the resources were taken from redacted output; compile with --show-sensitive, or export the model itself",
					model.ErrInvalidResource, r.ID, n, model.RedactedValue)
			}
		}
		if sealer == nil {
			var err error
			if sealer, err = k.sealer(ctx); err != nil {
				return err
			}
		}
		if err := sealer.SealAtRest(r); err != nil {
			return fmt.Errorf("%w: %w", model.ErrInvalid, err)
		}
	}
	return nil
}

// SealFor is the scheduler's Sealer: resources' sealed values sealed
// again to the agent's key-agreement key, read from the store (the key of
// its latest hello). An agent without one (older than sealed values) is
// sent nothing sensitive: record.ErrNoKeyAgreement. The slice given is
// never changed: a copy is returned when anything is sealed.
func (k *Keys) SealFor(ctx context.Context, env, agent string, resources []model.Resource) ([]model.Resource, error) {
	var out []model.Resource
	var key []byte
	var sealer *secret.Sealer
	for i := range resources {
		if len(resources[i].Sealed) == 0 {
			continue
		}
		if out == nil {
			a, err := k.store.GetAgent(ctx, env, agent)
			if err != nil {
				return nil, err
			}
			if len(a.KeyAgreementKey) == 0 {
				err := fmt.Errorf("agent %s: %w: it runs a tether agent older than sealed values, and its desired state holds sensitive values (%s): "+
					"they are never sent in clear; upgrade the agent, and it gets them on its next start", agent, record.ErrNoKeyAgreement, resources[i].ID)
				k.failUnsendable(ctx, env, agent, resources)
				return nil, err
			}
			if sealer, err = k.sealer(ctx); err != nil {
				return nil, err
			}
			key = a.KeyAgreementKey
			out = make([]model.Resource, len(resources))
			copy(out, resources)
		}
		r, err := sealer.ForAgent(resources[i], key)
		if err != nil {
			return nil, fmt.Errorf("agent %s: %w", agent, err)
		}
		out[i] = r
	}
	if out == nil {
		return resources, nil
	}
	return out, nil
}

// failUnsendable records the resources with sealed values of an agent
// that cannot be sent them as failed, saying why, so that the status of
// each (and the action log) names the reason. Failing to is logged: the
// fan-out's answer says it too.
func (k *Keys) failUnsendable(ctx context.Context, env, agent string, resources []model.Resource) {
	var results []model.Result
	for i := range resources {
		r := &resources[i]
		if len(r.Sealed) == 0 {
			continue
		}
		h, err := r.Hash()
		if err != nil {
			continue
		}
		results = append(results, model.Result{ID: r.ID, State: model.StateFailed, Hash: h,
			Message: "not sent: the agent has no key-agreement key (a tether agent older than sealed values) and sensitive values are never sent in clear: upgrade the agent"})
	}
	if err := k.recordFailed(ctx, env, agent, results); err != nil {
		k.log.Warn().Err(err).Str("env", env).Str("agent", agent).Msg("cannot record why resources were not sent")
	}
}

// SealValue seals a value kept outside resources (a secret setting) for
// purpose, under the server's master key (secret.Sealer.SealValue).
func (k *Keys) SealValue(ctx context.Context, purpose, plain string) (string, error) {
	sealer, err := k.sealer(ctx)
	if err != nil {
		return "", err
	}
	return sealer.SealValue(purpose, []byte(plain))
}

// OpenValue opens a value SealValue sealed for purpose.
func (k *Keys) OpenValue(ctx context.Context, purpose, sealed string) (string, error) {
	sealer, err := k.sealer(ctx)
	if err != nil {
		return "", err
	}
	plain, err := sealer.OpenValue(purpose, sealed)
	return string(plain), err
}
