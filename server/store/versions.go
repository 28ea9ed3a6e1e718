package store

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"time"

	"github.com/tetherhq/tether/model"
	"github.com/tetherhq/tether/server/record"
)

// ResourceRow is one resource of a new version as stored: its body (the
// resource's JSON) is stored once under its key (the body's SHA-256).
type ResourceRow struct {
	ID, Agent string
	// Hash is the resource's intent hash.
	Hash []byte
	Key  []byte
	Body []byte
}

// PutVersion implements Store.
func (s *SQL) PutVersion(ctx context.Context, env string, meta model.VersionMeta, resources []model.Resource) (model.Version, error) {
	set := NewSet()
	if err := set.Add(resources); err != nil {
		return model.Version{}, fmt.Errorf("put version: %w", err)
	}
	return s.PutSet(ctx, env, meta, set)
}

// PutSet implements Store.
func (s *SQL) PutSet(ctx context.Context, env string, meta model.VersionMeta, set *Set) (model.Version, error) {
	if err := set.Check(); err != nil {
		return model.Version{}, fmt.Errorf("put version: %w", err)
	}
	v := model.Version{
		Env:       env,
		State:     model.VersionCandidate,
		Meta:      meta,
		SetHash:   set.Hash(),
		Count:     set.Len(),
		CreatedAt: time.Now().UTC().Truncate(time.Microsecond), // as PostgreSQL keeps it
	}
	metaJSON, err := json.Marshal(meta)
	if err != nil {
		return model.Version{}, err
	}
	err = s.db.Tx(ctx, func(tx Tx) error {
		if err := s.lockEnv(ctx, tx, env); err != nil {
			return err
		}
		if err := run(ctx, tx, s.d.ShareBodies); err != nil {
			return err
		}
		if err := tx.QueryRow(ctx, `SELECT COALESCE(MAX(number), 0) + 1 FROM versions WHERE env = $1`, env).Scan(&v.Number); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `INSERT INTO versions (env, number, state, set_hash, resource_count, meta, created_at, waits_known)
			VALUES ($1, $2, $3, $4, $5, $6, $7, $8)`, env, v.Number, v.State, v.SetHash[:], v.Count, metaJSON, v.CreatedAt, true); err != nil {
			return err
		}
		if err := insertWaits(ctx, tx, env, v.Number, set.waitList()); err != nil {
			return err
		}
		return tx.InsertResources(ctx, &v, set)
	})
	if err != nil {
		return model.Version{}, wrap("put version of "+env, err)
	}
	return v, nil
}

const versionColumns = `env, number, state, set_hash, resource_count, meta, created_at, released_at`

func scanVersion(r Row) (model.Version, error) {
	var v model.Version
	var setHash, meta []byte
	if err := r.Scan(&v.Env, &v.Number, &v.State, &setHash, &v.Count, &meta, timeCol{&v.CreatedAt}, nullTimeCol{&v.ReleasedAt}); err != nil {
		return v, err
	}
	copy(v.SetHash[:], setHash)
	if err := json.Unmarshal(meta, &v.Meta); err != nil {
		return v, fmt.Errorf("%w: metadata of version %d: %w", ErrCorrupt, v.Number, err)
	}
	return v, nil
}

// GetVersion implements Store.
func (s *SQL) GetVersion(ctx context.Context, env string, n int64, withResources bool) (model.Version, error) {
	op := fmt.Sprintf("version %d of %s", n, env)
	v, err := scanVersion(s.db.QueryRow(ctx, `SELECT `+versionColumns+` FROM versions WHERE env = $1 AND number = $2`, env, n))
	if err != nil {
		return model.Version{}, wrap(op, err)
	}
	if withResources {
		if v.Resources, err = s.resources(ctx, env, n, ""); err != nil {
			return model.Version{}, wrap(op, err)
		}
	}
	return v, nil
}

// resources loads the resources of version n (of one agent if agent != "").
func (s *SQL) resources(ctx context.Context, env string, n int64, agent string) ([]model.Resource, error) {
	q := `SELECT b.body FROM version_resources vr JOIN resource_bodies b ON b.key = vr.body_key
		WHERE vr.env = $1 AND vr.number = $2`
	args := []any{env, n}
	if agent != "" {
		q += ` AND vr.agent = $3`
		args = append(args, agent)
	}
	rows, err := s.db.Query(ctx, q, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var all bodies
	for rows.Next() {
		var body []byte
		if err := rows.Scan(&body); err != nil {
			return nil, err
		}
		all.add(body)
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	return all.resources()
}

// LatestVersion implements Store.
func (s *SQL) LatestVersion(ctx context.Context, env string) (model.Version, error) {
	v, err := scanVersion(s.db.QueryRow(ctx, `SELECT `+versionColumns+` FROM versions WHERE env = $1 ORDER BY number DESC LIMIT 1`, env))
	return v, wrap("latest version of "+env, err)
}

// ReleasedVersion implements Store.
func (s *SQL) ReleasedVersion(ctx context.Context, env string) (model.Version, error) {
	v, err := scanVersion(s.db.QueryRow(ctx, `SELECT `+versionColumns+` FROM versions WHERE env = $1 AND state = 'released'`, env))
	return v, wrap("released version of "+env, err)
}

// ListVersions implements Store.
func (s *SQL) ListVersions(ctx context.Context, env string) ([]model.Version, error) {
	out, err := queryAll(ctx, s.db, scanVersion, `SELECT `+versionColumns+` FROM versions WHERE env = $1 ORDER BY number DESC`, env)
	return out, wrap("list versions", err)
}

// Release implements Store.
func (s *SQL) Release(ctx context.Context, env string, n int64) (model.Version, error) {
	err := s.db.Tx(ctx, func(tx Tx) error {
		if err := s.lockEnv(ctx, tx, env); err != nil {
			return err
		}
		// Locked: a prune meanwhile waits, and then keeps it released.
		var state model.VersionState
		if err := tx.QueryRow(ctx, `SELECT state FROM versions WHERE env = $1 AND number = $2`+s.d.ForUpdate, env, n).Scan(&state); err != nil {
			return err
		}
		switch state {
		case model.VersionReleased:
			return nil
		case model.VersionRetired:
			return fmt.Errorf("%w: version %d is retired; export it again to roll back", model.ErrConflict, n)
		}
		if _, err := tx.Exec(ctx, `UPDATE versions SET state = 'retired' WHERE env = $1 AND state = 'released'`, env); err != nil {
			return err
		}
		// Every status of env changes (its version, or orphaned): locked
		// in order first, not as the statements below meet them.
		if err := s.lockStatuses(ctx, tx, env, ""); err != nil {
			return err
		}
		for _, q := range []string{
			`UPDATE versions SET state = 'released', released_at = now() WHERE env = $1 AND number = $2`,
			// New or changed resources become available; unchanged ones
			// keep their state and compliance.
			`INSERT INTO resource_status AS rs (env, resource_id, agent, version, hash, state, compliance, updated_at)
			SELECT env, resource_id, agent, number, hash, 'available', 'unknown', now() FROM version_resources
			WHERE env = $1 AND number = $2
			ON CONFLICT (env, resource_id) DO UPDATE SET
				agent = excluded.agent,
				version = excluded.version,
				state = CASE WHEN rs.hash = excluded.hash AND rs.state != 'orphaned' THEN rs.state ELSE 'available' END,
				compliance = CASE WHEN rs.hash = excluded.hash AND rs.state != 'orphaned' THEN rs.compliance ELSE 'unknown' END,
				message = CASE WHEN rs.hash = excluded.hash AND rs.state != 'orphaned' THEN rs.message ELSE '' END,
				updated_at = CASE WHEN rs.hash = excluded.hash AND rs.state != 'orphaned' THEN rs.updated_at ELSE excluded.updated_at END,
				hash = excluded.hash`,
			`UPDATE resource_status SET state = 'orphaned', message = 'left the model', updated_at = now()
			WHERE env = $1 AND version != $2 AND state != 'orphaned'`,
		} {
			if _, err := tx.Exec(ctx, q, env, n); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return model.Version{}, wrap(fmt.Sprintf("release version %d of %s", n, env), err)
	}
	return s.GetVersion(ctx, env, n, false)
}

// AgentSlice implements Store.
func (s *SQL) AgentSlice(ctx context.Context, env string, n int64, agent string) (model.Slice, error) {
	rs, err := s.resources(ctx, env, n, agent)
	if err != nil {
		return model.Slice{}, wrap(fmt.Sprintf("slice of %s in version %d", agent, n), err)
	}
	return model.Slice{Agent: agent, Generation: n, Resources: rs}, nil
}

// ResourceHashes implements Store.
func (s *SQL) ResourceHashes(ctx context.Context, env string, n int64) ([]record.ResourceHash, error) {
	if _, err := s.GetVersion(ctx, env, n, false); err != nil {
		return nil, err
	}
	out, err := queryAll(ctx, s.db, scanHash, `SELECT resource_id, hash, number FROM version_resources WHERE env = $1 AND number = $2`, env, n)
	slices.SortFunc(out, func(a, b record.ResourceHash) int { return a.ID.Compare(b.ID) })
	return out, wrap(fmt.Sprintf("resource hashes of version %d of %s", n, env), err)
}

// scanHash reads a (resource_id, hash, version) row.
func scanHash(r Row) (record.ResourceHash, error) {
	var rh record.ResourceHash
	err := r.Scan(idCol{&rh.ID}, hashCol{&rh.Hash}, &rh.Version)
	return rh, err
}

// Resource implements Store.
func (s *SQL) Resource(ctx context.Context, env string, n int64, id model.ID) (model.Resource, error) {
	var body []byte
	err := s.db.QueryRow(ctx, `SELECT b.body FROM version_resources vr JOIN resource_bodies b ON b.key = vr.body_key
		WHERE vr.env = $1 AND vr.number = $2 AND vr.resource_id = $3`, env, n, id.String()).Scan(&body)
	if err != nil {
		return model.Resource{}, wrap(fmt.Sprintf("resource %s of version %d", id, n), err)
	}
	var r model.Resource
	if err := model.DecodeJSON(body, &r); err != nil {
		return r, fmt.Errorf("resource %s: %w: %w", id, ErrCorrupt, err)
	}
	return r, nil
}

// ResourceHistory implements Store.
func (s *SQL) ResourceHistory(ctx context.Context, env string, id model.ID) ([]record.ResourceHash, error) {
	out, err := queryAll(ctx, s.db, scanHash, `SELECT resource_id, hash, number FROM version_resources
		WHERE env = $1 AND resource_id = $2 ORDER BY number DESC`, env, id.String())
	return out, wrap("history of "+id.String(), err)
}

// PruneVersions implements Store.
func (s *SQL) PruneVersions(ctx context.Context, env string, keep int) (int, error) {
	if keep <= 0 {
		return 0, nil
	}
	var deleted int64
	err := s.db.Tx(ctx, func(tx Tx) error {
		var err error
		deleted, err = tx.Exec(ctx, `DELETE FROM versions WHERE env = $1 AND state != 'released' AND number NOT IN
			(SELECT number FROM versions WHERE env = $1 ORDER BY number DESC LIMIT $2)
			AND number NOT IN (SELECT version FROM agent_pins WHERE env = $1)`, env, keep)
		if err != nil || deleted == 0 {
			return err
		}
		return s.deleteUnusedBodies(ctx, tx)
	})
	if err != nil {
		return 0, wrap("prune versions of "+env, err)
	}
	return int(deleted), nil
}

// deleteUnusedBodies drops the bodies no version uses.
func (s *SQL) deleteUnusedBodies(ctx context.Context, c Conn) error {
	if err := run(ctx, c, s.d.LockBodies); err != nil {
		return err
	}
	_, err := c.Exec(ctx, `DELETE FROM resource_bodies WHERE NOT EXISTS
		(SELECT 1 FROM version_resources vr WHERE vr.body_key = resource_bodies.key)`)
	return err
}

// bodies gathers stored resource bodies and decodes them at once, as one
// JSON array: one decoder and one buffer for a whole set instead of one per
// resource.
type bodies struct {
	buf bytes.Buffer
	n   int
}

func (b *bodies) add(body []byte) {
	if b.n == 0 {
		b.buf.WriteByte('[')
	} else {
		b.buf.WriteByte(',')
	}
	b.buf.Write(body)
	b.n++
}

// resources decodes the bodies added, sorted by ID.
func (b *bodies) resources() ([]model.Resource, error) {
	out := make([]model.Resource, 0, b.n)
	if b.n == 0 {
		return out, nil
	}
	b.buf.WriteByte(']')
	if err := model.DecodeJSON(b.buf.Bytes(), &out); err != nil {
		return nil, fmt.Errorf("%w: resource bodies: %w", ErrCorrupt, err)
	}
	model.SortResources(out)
	return out, nil
}
