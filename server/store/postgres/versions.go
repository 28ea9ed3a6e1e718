package postgres

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tetherhq/tether/model"
	"github.com/tetherhq/tether/server/store"
)

// CreateEnv implements store.Store.
func (s *Store) CreateEnv(ctx context.Context, env model.Environment) error {
	if err := model.ValidateEnvName(env.Name); err != nil {
		return fmt.Errorf("create environment: %w: %w", store.ErrInvalid, err)
	}
	settings, err := jsonb(env.Settings)
	if err != nil {
		return err
	}
	if env.CreatedAt.IsZero() {
		env.CreatedAt = time.Now()
	}
	_, err = s.pool.Exec(ctx, `INSERT INTO environments (name, settings, created_at) VALUES ($1, $2, $3)`,
		env.Name, settings, env.CreatedAt)
	return s.wrap(fmt.Sprintf("create environment %q", env.Name), err)
}

const envColumns = `name, settings, created_at`

func scanEnv(r pgx.Row) (model.Environment, error) {
	var env model.Environment
	var settings []byte
	if err := r.Scan(&env.Name, &settings, &env.CreatedAt); err != nil {
		return env, err
	}
	env.CreatedAt = env.CreatedAt.UTC()
	if err := json.Unmarshal(settings, &env.Settings); err != nil {
		return env, fmt.Errorf("%w: settings of %s: %w", store.ErrCorrupt, env.Name, err)
	}
	return env, nil
}

// GetEnv implements store.Store.
func (s *Store) GetEnv(ctx context.Context, name string) (model.Environment, error) {
	env, err := scanEnv(s.pool.QueryRow(ctx, `SELECT `+envColumns+` FROM environments WHERE name = $1`, name))
	return env, s.wrap(fmt.Sprintf("environment %q", name), err)
}

// ListEnvs implements store.Store.
func (s *Store) ListEnvs(ctx context.Context) ([]model.Environment, error) {
	rows, err := s.pool.Query(ctx, `SELECT `+envColumns+` FROM environments ORDER BY name`)
	if err != nil {
		return nil, s.wrap("list environments", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (model.Environment, error) { return scanEnv(r) })
	return out, s.wrap("list environments", err)
}

// UpdateEnvSettings implements store.Store.
func (s *Store) UpdateEnvSettings(ctx context.Context, name string, fn func(*model.EnvSettings) error) (model.Environment, error) {
	var env model.Environment
	err := s.tx(ctx, fmt.Sprintf("update settings of %q", name), func(tx pgx.Tx) error {
		var err error
		env, err = scanEnv(tx.QueryRow(ctx, `SELECT `+envColumns+` FROM environments WHERE name = $1 FOR UPDATE`, name))
		if err != nil {
			return err
		}
		if err := fn(&env.Settings); err != nil {
			return fmt.Errorf("%w: %w", store.ErrInvalid, err)
		}
		if err := env.Settings.Validate(); err != nil {
			return fmt.Errorf("%w: %w", store.ErrInvalid, err)
		}
		settings, err := jsonb(env.Settings)
		if err != nil {
			return err
		}
		_, err = tx.Exec(ctx, `UPDATE environments SET settings = $1 WHERE name = $2`, settings, name)
		return err
	})
	return env, err
}

// DeleteEnv implements store.Store.
func (s *Store) DeleteEnv(ctx context.Context, name string) error {
	return s.tx(ctx, fmt.Sprintf("delete environment %q", name), func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, `DELETE FROM environments WHERE name = $1`, name)
		if err != nil {
			return err
		}
		if tag.RowsAffected() == 0 {
			return fmt.Errorf("environment %q: %w", name, store.ErrNotFound)
		}
		if _, err := tx.Exec(ctx, `DELETE FROM ingested WHERE env = $1`, name); err != nil {
			return err
		}
		return deleteUnusedBodies(ctx, tx)
	})
}

// deleteUnusedBodies drops bodies no version uses. It excludes concurrent
// PutVersions (which take the same lock shared), so a body one of them is
// about to reference is never deleted under it.
func deleteUnusedBodies(ctx context.Context, tx pgx.Tx) error {
	if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1, $2)`, lockClass, lockBodies); err != nil {
		return err
	}
	_, err := tx.Exec(ctx, `DELETE FROM resource_bodies b WHERE NOT EXISTS
		(SELECT 1 FROM version_resources vr WHERE vr.body_key = b.key)`)
	return err
}

// lockEnv locks an environment's row for the transaction: versions of one
// environment are numbered one at a time, and a deleted environment is
// reported as missing.
func lockEnv(ctx context.Context, tx pgx.Tx, env string) error {
	var one int
	err := tx.QueryRow(ctx, `SELECT 1 FROM environments WHERE name = $1 FOR UPDATE`, env).Scan(&one)
	if err == pgx.ErrNoRows {
		return fmt.Errorf("environment %q: %w", env, store.ErrNotFound)
	}
	return err
}

// PutVersion implements store.Store. The rows go through COPY into a
// temporary table, then into the real ones in two statements: one round
// trip per table instead of one per resource.
func (s *Store) PutVersion(ctx context.Context, env string, meta model.VersionMeta, resources []model.Resource) (model.Version, error) {
	if err := model.ValidateSet(resources); err != nil {
		return model.Version{}, fmt.Errorf("put version: %w: %w", store.ErrInvalid, err)
	}
	rows := make([][]any, len(resources))
	hashes := make([]model.Hash, len(resources))
	for i := range resources {
		r := &resources[i]
		h, err := r.Hash()
		if err != nil {
			return model.Version{}, fmt.Errorf("put version: %w: %w", store.ErrInvalid, err)
		}
		body, err := json.Marshal(r)
		if err != nil {
			return model.Version{}, fmt.Errorf("put version: encode %s: %w", r.ID, err)
		}
		key := sha256.Sum256(body)
		rows[i] = []any{r.ID.String(), r.ID.Agent, h[:], key[:], body}
		hashes[i] = h
	}
	v := model.Version{
		Env:       env,
		State:     model.VersionCandidate,
		Meta:      meta,
		SetHash:   model.SetHashOf(hashes),
		Count:     len(resources),
		CreatedAt: time.Now().UTC().Truncate(time.Microsecond),
	}
	metaJSON, err := jsonb(meta)
	if err != nil {
		return model.Version{}, err
	}
	err = s.tx(ctx, "put version of "+env, func(tx pgx.Tx) error {
		if err := lockEnv(ctx, tx, env); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock_shared($1, $2)`, lockClass, lockBodies); err != nil {
			return err
		}
		if err := tx.QueryRow(ctx, `SELECT COALESCE(MAX(number), 0) + 1 FROM versions WHERE env = $1`, env).Scan(&v.Number); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `INSERT INTO versions (env, number, state, set_hash, resource_count, meta, created_at)
			VALUES ($1, $2, $3, $4, $5, $6, $7)`, env, v.Number, v.State, v.SetHash[:], v.Count, metaJSON, v.CreatedAt); err != nil {
			return err
		}
		if len(rows) == 0 {
			return nil
		}
		if _, err := tx.Exec(ctx, `CREATE TEMP TABLE put_staging
			(resource_id TEXT, agent TEXT, hash BYTEA, key BYTEA, body BYTEA) ON COMMIT DROP`); err != nil {
			return err
		}
		if _, err := tx.CopyFrom(ctx, pgx.Identifier{"put_staging"}, []string{"resource_id", "agent", "hash", "key", "body"},
			pgx.CopyFromRows(rows)); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `INSERT INTO resource_bodies (key, body)
			SELECT DISTINCT ON (key) key, body FROM put_staging ORDER BY key
			ON CONFLICT (key) DO NOTHING`); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `INSERT INTO version_resources (env, number, resource_id, agent, hash, body_key)
			SELECT $1, $2, resource_id, agent, hash, key FROM put_staging`, env, v.Number)
		return err
	})
	if err != nil {
		return model.Version{}, err
	}
	return v, nil
}

const versionColumns = `env, number, state, set_hash, resource_count, meta, created_at, released_at`

func scanVersion(r pgx.Row) (model.Version, error) {
	var v model.Version
	var setHash, meta []byte
	if err := r.Scan(&v.Env, &v.Number, &v.State, &setHash, &v.Count, &meta, &v.CreatedAt, &v.ReleasedAt); err != nil {
		return v, err
	}
	copy(v.SetHash[:], setHash)
	v.CreatedAt = v.CreatedAt.UTC()
	if v.ReleasedAt != nil {
		t := v.ReleasedAt.UTC()
		v.ReleasedAt = &t
	}
	if err := json.Unmarshal(meta, &v.Meta); err != nil {
		return v, fmt.Errorf("%w: metadata of version %d: %w", store.ErrCorrupt, v.Number, err)
	}
	return v, nil
}

// GetVersion implements store.Store.
func (s *Store) GetVersion(ctx context.Context, env string, n int64, withResources bool) (model.Version, error) {
	op := fmt.Sprintf("version %d of %s", n, env)
	v, err := scanVersion(s.pool.QueryRow(ctx, `SELECT `+versionColumns+` FROM versions WHERE env = $1 AND number = $2`, env, n))
	if err != nil {
		return model.Version{}, s.wrap(op, err)
	}
	if withResources {
		if v.Resources, err = s.resources(ctx, env, n, ""); err != nil {
			return model.Version{}, s.wrap(op, err)
		}
	}
	return v, nil
}

// resources loads the resources of version n (of one agent if agent != ""),
// decoding the bodies as one JSON array.
func (s *Store) resources(ctx context.Context, env string, n int64, agent string) ([]model.Resource, error) {
	q := `SELECT b.body FROM version_resources vr JOIN resource_bodies b ON b.key = vr.body_key
		WHERE vr.env = $1 AND vr.number = $2`
	args := []any{env, n}
	if agent != "" {
		q += ` AND vr.agent = $3`
		args = append(args, agent)
	}
	rows, err := s.pool.Query(ctx, q, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var bodies store.Bodies
	for rows.Next() {
		bodies.Add(rows.RawValues()[0])
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	return bodies.Resources()
}

func (s *Store) oneVersion(ctx context.Context, op, where string, args ...any) (model.Version, error) {
	v, err := scanVersion(s.pool.QueryRow(ctx, `SELECT `+versionColumns+` FROM versions WHERE `+where, args...))
	return v, s.wrap(op, err)
}

// LatestVersion implements store.Store.
func (s *Store) LatestVersion(ctx context.Context, env string) (model.Version, error) {
	return s.oneVersion(ctx, "latest version of "+env, `env = $1 ORDER BY number DESC LIMIT 1`, env)
}

// ReleasedVersion implements store.Store.
func (s *Store) ReleasedVersion(ctx context.Context, env string) (model.Version, error) {
	return s.oneVersion(ctx, "released version of "+env, `env = $1 AND state = 'released'`, env)
}

// ListVersions implements store.Store.
func (s *Store) ListVersions(ctx context.Context, env string) ([]model.Version, error) {
	rows, err := s.pool.Query(ctx, `SELECT `+versionColumns+` FROM versions WHERE env = $1 ORDER BY number DESC`, env)
	if err != nil {
		return nil, s.wrap("list versions", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (model.Version, error) { return scanVersion(r) })
	return out, s.wrap("list versions", err)
}

// Release implements store.Store.
func (s *Store) Release(ctx context.Context, env string, n int64) (model.Version, error) {
	op := fmt.Sprintf("release version %d of %s", n, env)
	err := s.tx(ctx, op, func(tx pgx.Tx) error {
		if err := lockEnv(ctx, tx, env); err != nil {
			return err
		}
		var state model.VersionState
		if err := tx.QueryRow(ctx, `SELECT state FROM versions WHERE env = $1 AND number = $2`, env, n).Scan(&state); err != nil {
			return err
		}
		switch state {
		case model.VersionReleased:
			return nil
		case model.VersionRetired:
			return fmt.Errorf("%w: version %d is retired; export it again to roll back", store.ErrConflict, n)
		}
		if _, err := tx.Exec(ctx, `UPDATE versions SET state = 'retired' WHERE env = $1 AND state = 'released'`, env); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `UPDATE versions SET state = 'released', released_at = now() WHERE env = $1 AND number = $2`, env, n); err != nil {
			return err
		}
		// New or changed resources become available; unchanged ones keep
		// their state and compliance.
		if _, err := tx.Exec(ctx, `
			INSERT INTO resource_status AS rs (env, resource_id, agent, version, hash, state, compliance, updated_at)
			SELECT env, resource_id, agent, number, hash, 'available', 'unknown', now() FROM version_resources
			WHERE env = $1 AND number = $2
			ON CONFLICT (env, resource_id) DO UPDATE SET
				agent = excluded.agent,
				version = excluded.version,
				state = CASE WHEN rs.hash = excluded.hash AND rs.state != 'orphaned' THEN rs.state ELSE 'available' END,
				compliance = CASE WHEN rs.hash = excluded.hash AND rs.state != 'orphaned' THEN rs.compliance ELSE 'unknown' END,
				message = CASE WHEN rs.hash = excluded.hash AND rs.state != 'orphaned' THEN rs.message ELSE '' END,
				updated_at = CASE WHEN rs.hash = excluded.hash AND rs.state != 'orphaned' THEN rs.updated_at ELSE excluded.updated_at END,
				hash = excluded.hash`, env, n); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `UPDATE resource_status SET state = 'orphaned', message = 'left the model', updated_at = now()
			WHERE env = $1 AND version != $2 AND state != 'orphaned'`, env, n)
		return err
	})
	if err != nil {
		return model.Version{}, err
	}
	return s.GetVersion(ctx, env, n, false)
}

// AgentSlice implements store.Store.
func (s *Store) AgentSlice(ctx context.Context, env string, n int64, agent string) (model.Slice, error) {
	rs, err := s.resources(ctx, env, n, agent)
	if err != nil {
		return model.Slice{}, s.wrap(fmt.Sprintf("slice of %s in version %d", agent, n), err)
	}
	return model.Slice{Agent: agent, Generation: n, Resources: rs}, nil
}

// ResourceHashes implements store.Store.
func (s *Store) ResourceHashes(ctx context.Context, env string, n int64) ([]store.ResourceHash, error) {
	if _, err := s.GetVersion(ctx, env, n, false); err != nil {
		return nil, err
	}
	op := fmt.Sprintf("resource hashes of version %d of %s", n, env)
	rows, err := s.pool.Query(ctx, `SELECT resource_id, hash, number FROM version_resources WHERE env = $1 AND number = $2`, env, n)
	if err != nil {
		return nil, s.wrap(op, err)
	}
	out, err := collectHashes(rows)
	store.SortHashes(out)
	return out, s.wrap(op, err)
}

func collectHashes(rows pgx.Rows) ([]store.ResourceHash, error) {
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (store.ResourceHash, error) {
		var rh store.ResourceHash
		var id string
		var hash []byte
		if err := r.Scan(&id, &hash, &rh.Version); err != nil {
			return rh, err
		}
		var err error
		if rh.ID, err = model.ParseID(id); err != nil {
			return rh, fmt.Errorf("%w: %w", store.ErrCorrupt, err)
		}
		copy(rh.Hash[:], hash)
		return rh, nil
	})
}

// Resource implements store.Store.
func (s *Store) Resource(ctx context.Context, env string, n int64, id model.ID) (model.Resource, error) {
	var body []byte
	err := s.pool.QueryRow(ctx, `SELECT b.body FROM version_resources vr JOIN resource_bodies b ON b.key = vr.body_key
		WHERE vr.env = $1 AND vr.number = $2 AND vr.resource_id = $3`, env, n, id.String()).Scan(&body)
	if err != nil {
		return model.Resource{}, s.wrap(fmt.Sprintf("resource %s of version %d", id, n), err)
	}
	var r model.Resource
	if err := model.DecodeJSON(body, &r); err != nil {
		return r, fmt.Errorf("resource %s: %w: %w", id, store.ErrCorrupt, err)
	}
	return r, nil
}

// ResourceHistory implements store.Store.
func (s *Store) ResourceHistory(ctx context.Context, env string, id model.ID) ([]store.ResourceHash, error) {
	rows, err := s.pool.Query(ctx, `SELECT resource_id, hash, number FROM version_resources
		WHERE env = $1 AND resource_id = $2 ORDER BY number DESC`, env, id.String())
	if err != nil {
		return nil, s.wrap("history of "+id.String(), err)
	}
	out, err := collectHashes(rows)
	return out, s.wrap("history of "+id.String(), err)
}

// PruneVersions implements store.Store.
func (s *Store) PruneVersions(ctx context.Context, env string, keep int) (int, error) {
	if keep <= 0 {
		return 0, nil
	}
	var deleted int64
	err := s.tx(ctx, "prune versions of "+env, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, `DELETE FROM versions WHERE env = $1 AND state != 'released' AND number NOT IN
			(SELECT number FROM versions WHERE env = $1 ORDER BY number DESC LIMIT $2)`, env, keep)
		if err != nil {
			return err
		}
		if deleted = tag.RowsAffected(); deleted == 0 {
			return nil
		}
		return deleteUnusedBodies(ctx, tx)
	})
	return int(deleted), err
}
