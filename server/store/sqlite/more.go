package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	sqlite3 "modernc.org/sqlite"
	sqlitelib "modernc.org/sqlite/lib"

	"github.com/tetherhq/tether/model"
	"github.com/tetherhq/tether/server/store"
)

// UpdateEnvSettings implements store.Store.
func (s *Store) UpdateEnvSettings(ctx context.Context, name string, fn func(*model.EnvSettings) error) (model.Environment, error) {
	var env model.Environment
	err := s.tx(ctx, "update settings of "+name, func(tx *sql.Tx) error {
		var err error
		env, err = scanEnv(tx.QueryRowContext(ctx, `SELECT name, settings, created_at FROM environments WHERE name = ?`, name))
		if err != nil {
			return err
		}
		if err := fn(&env.Settings); err != nil {
			return fmt.Errorf("%w: %w", store.ErrInvalid, err)
		}
		if err := env.Settings.Validate(); err != nil {
			return fmt.Errorf("%w: %w", store.ErrInvalid, err)
		}
		b, err := json.Marshal(env.Settings)
		if err != nil {
			return err
		}
		_, err = tx.ExecContext(ctx, `UPDATE environments SET settings = ? WHERE name = ?`, b, name)
		return err
	})
	return env, err
}

// DeleteEnv implements store.Store.
func (s *Store) DeleteEnv(ctx context.Context, name string) error {
	return s.tx(ctx, "delete environment "+name, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, `DELETE FROM environments WHERE name = ?`, name)
		if err != nil {
			return err
		}
		if n, _ := res.RowsAffected(); n == 0 {
			return fmt.Errorf("environment %q: %w", name, store.ErrNotFound)
		}
		for _, q := range []string{`DELETE FROM resource_status WHERE env = ?`, `DELETE FROM ingested WHERE env = ?`} {
			if _, err := tx.ExecContext(ctx, q, name); err != nil {
				return err
			}
		}
		return deleteUnusedBodies(ctx, tx)
	})
}

func deleteUnusedBodies(ctx context.Context, tx *sql.Tx) error {
	_, err := tx.ExecContext(ctx, `DELETE FROM resource_bodies WHERE NOT EXISTS
		(SELECT 1 FROM version_resources vr WHERE vr.body_key = resource_bodies.key)`)
	return err
}

// ResourceHashes implements store.Store.
func (s *Store) ResourceHashes(ctx context.Context, env string, n int64) ([]store.ResourceHash, error) {
	op := fmt.Sprintf("resource hashes of version %d of %s", n, env)
	if _, err := s.GetVersion(ctx, env, n, false); err != nil {
		return nil, err
	}
	rows, err := s.db.QueryContext(ctx, `SELECT resource_id, hash, number FROM version_resources WHERE env = ? AND number = ?`, env, n)
	if err != nil {
		return nil, s.wrap(op, err)
	}
	out, err := scanHashes(rows)
	store.SortHashes(out)
	return out, s.wrap(op, err)
}

// scanHashes reads (resource_id, hash, version) rows.
func scanHashes(rows *sql.Rows) ([]store.ResourceHash, error) {
	defer rows.Close()
	var out []store.ResourceHash
	for rows.Next() {
		var rh store.ResourceHash
		var id string
		var hash []byte
		if err := rows.Scan(&id, &hash, &rh.Version); err != nil {
			return nil, err
		}
		var err error
		if rh.ID, err = model.ParseID(id); err != nil {
			return nil, fmt.Errorf("%w: %w", store.ErrCorrupt, err)
		}
		copy(rh.Hash[:], hash)
		out = append(out, rh)
	}
	return out, rows.Err()
}

// Resource implements store.Store.
func (s *Store) Resource(ctx context.Context, env string, n int64, id model.ID) (model.Resource, error) {
	var body []byte
	err := s.db.QueryRowContext(ctx, `SELECT b.body FROM version_resources vr JOIN resource_bodies b ON b.key = vr.body_key
		WHERE vr.env = ? AND vr.number = ? AND vr.resource_id = ?`, env, n, id.String()).Scan(&body)
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
	rows, err := s.db.QueryContext(ctx, `SELECT resource_id, hash, number FROM version_resources
		WHERE env = ? AND resource_id = ? ORDER BY number DESC`, env, id.String())
	if err != nil {
		return nil, s.wrap("history of "+id.String(), err)
	}
	out, err := scanHashes(rows)
	return out, s.wrap("history of "+id.String(), err)
}

// PruneVersions implements store.Store.
func (s *Store) PruneVersions(ctx context.Context, env string, keep int) (int, error) {
	if keep <= 0 {
		return 0, nil
	}
	var deleted int64
	err := s.tx(ctx, "prune versions of "+env, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, `DELETE FROM versions WHERE env = ?1 AND state != 'released' AND number NOT IN
			(SELECT number FROM versions WHERE env = ?1 ORDER BY number DESC LIMIT ?2)`, env, keep)
		if err != nil {
			return err
		}
		if deleted, err = res.RowsAffected(); err != nil || deleted == 0 {
			return err
		}
		return deleteUnusedBodies(ctx, tx)
	})
	return int(deleted), err
}

// RecordAlerts implements store.Store.
func (s *Store) RecordAlerts(ctx context.Context, alerts []model.Alert) error {
	for i := range alerts {
		if err := store.CheckAlert(&alerts[i]); err != nil {
			return fmt.Errorf("record alerts: %w", err)
		}
	}
	return s.tx(ctx, "record alerts", func(tx *sql.Tx) error { return insertAlerts(ctx, tx, alerts) })
}

func insertAlerts(ctx context.Context, tx *sql.Tx, alerts []model.Alert) error {
	for _, a := range alerts {
		var id sql.NullString
		if a.ID != nil {
			id = sql.NullString{String: a.ID.String(), Valid: true}
		}
		var changes []byte
		if len(a.Changes) > 0 {
			var err error
			if changes, err = json.Marshal(a.Changes); err != nil {
				return fmt.Errorf("%w: %w", store.ErrInvalid, err)
			}
		}
		if a.At.IsZero() {
			a.At = time.Now()
		}
		if _, err := tx.ExecContext(ctx, `INSERT INTO alerts (env, agent, kind, resource_id, message, changes, compliance, version, at)
			VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)`, a.Env, a.Agent, a.Kind, id, a.Message, changes, a.Compliance, a.Version, nanos(a.At)); err != nil {
			if isConstraint(err) {
				return fmt.Errorf("alert for environment %q: %w", a.Env, store.ErrNotFound)
			}
			return err
		}
	}
	return nil
}

func isConstraint(err error) bool {
	var se *sqlite3.Error
	return errors.As(err, &se) && se.Code()&0xff == sqlitelib.SQLITE_CONSTRAINT
}

// Alerts implements store.Store.
func (s *Store) Alerts(ctx context.Context, f store.AlertFilter) ([]model.Alert, error) {
	q := `SELECT seq, env, agent, kind, resource_id, message, changes, compliance, version, at FROM alerts WHERE 1 = 1`
	var args []any
	for _, c := range []struct{ col, v string }{{"env", f.Env}, {"agent", f.Agent}, {"kind", string(f.Kind)}} {
		if c.v != "" {
			q += ` AND ` + c.col + ` = ?`
			args = append(args, c.v)
		}
	}
	q += ` ORDER BY seq DESC LIMIT ?`
	args = append(args, limitOf(f.Limit))
	rows, err := s.db.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, s.wrap("alerts", err)
	}
	defer rows.Close()
	var out []model.Alert
	for rows.Next() {
		var a model.Alert
		var id sql.NullString
		var changes []byte
		var at int64
		if err := rows.Scan(&a.Seq, &a.Env, &a.Agent, &a.Kind, &id, &a.Message, &changes, &a.Compliance, &a.Version, &at); err != nil {
			return nil, s.wrap("alerts", err)
		}
		a.At = fromNanos(at)
		if err := store.DecodeAlert(&a, id.String, changes); err != nil {
			return nil, s.wrap("alerts", err)
		}
		out = append(out, a)
	}
	return out, s.wrap("alerts", rows.Err())
}

func limitOf(n int) int {
	if n <= 0 {
		return 100
	}
	return n
}

// CreateToken implements store.Store.
func (s *Store) CreateToken(ctx context.Context, t model.Token) error {
	if err := t.Validate(); err != nil {
		return fmt.Errorf("create token: %w: %w", store.ErrInvalid, err)
	}
	var env sql.NullString
	if t.Env != "" {
		env = sql.NullString{String: t.Env, Valid: true}
		if err := s.requireEnv(ctx, s.db, t.Env); err != nil {
			return s.wrap("create token", err)
		}
	}
	var expires sql.NullInt64
	if t.ExpiresAt != nil {
		expires = sql.NullInt64{Int64: nanos(*t.ExpiresAt), Valid: true}
	}
	if t.CreatedAt.IsZero() {
		t.CreatedAt = time.Now()
	}
	_, err := s.db.ExecContext(ctx, `INSERT INTO tokens (id, name, role, env, hash, created_by, created_at, expires_at)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?)`, t.ID, t.Name, t.Role, env, t.Hash, t.CreatedBy, nanos(t.CreatedAt), expires)
	if isConstraint(err) {
		return fmt.Errorf("create token %s: %w", t.Name, store.ErrExists)
	}
	return s.wrap("create token "+t.Name, err)
}

const tokenColumns = `id, name, role, env, hash, created_by, created_at, expires_at`

func scanToken(r scanner) (model.Token, error) {
	var t model.Token
	var env sql.NullString
	var created int64
	var expires sql.NullInt64
	if err := r.Scan(&t.ID, &t.Name, &t.Role, &env, &t.Hash, &t.CreatedBy, &created, &expires); err != nil {
		return t, err
	}
	t.Env, t.CreatedAt = env.String, fromNanos(created)
	if expires.Valid {
		e := fromNanos(expires.Int64)
		t.ExpiresAt = &e
	}
	return t, nil
}

// TokenByHash implements store.Store.
func (s *Store) TokenByHash(ctx context.Context, hash []byte) (model.Token, error) {
	t, err := scanToken(s.db.QueryRowContext(ctx, `SELECT `+tokenColumns+` FROM tokens WHERE hash = ?`, hash))
	return t, s.wrap("token", err)
}

// ListTokens implements store.Store.
func (s *Store) ListTokens(ctx context.Context) ([]model.Token, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT `+tokenColumns+` FROM tokens ORDER BY created_at, id`)
	if err != nil {
		return nil, s.wrap("list tokens", err)
	}
	defer rows.Close()
	var out []model.Token
	for rows.Next() {
		t, err := scanToken(rows)
		if err != nil {
			return nil, s.wrap("list tokens", err)
		}
		out = append(out, t)
	}
	return out, s.wrap("list tokens", rows.Err())
}

// DeleteToken implements store.Store.
func (s *Store) DeleteToken(ctx context.Context, id string) error {
	res, err := s.db.ExecContext(ctx, `DELETE FROM tokens WHERE id = ?`, id)
	if err != nil {
		return s.wrap("revoke token "+id, err)
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return fmt.Errorf("token %s: %w", id, store.ErrNotFound)
	}
	return nil
}

// RecordAudit implements store.Store.
func (s *Store) RecordAudit(ctx context.Context, e model.AuditEntry) error {
	if e.At.IsZero() {
		e.At = time.Now()
	}
	_, err := s.db.ExecContext(ctx, `INSERT INTO audit (at, actor, action, env, target, detail) VALUES (?, ?, ?, ?, ?, ?)`,
		nanos(e.At), e.Actor, e.Action, e.Env, e.Target, e.Detail)
	return s.wrap("audit", err)
}

// Audit implements store.Store.
func (s *Store) Audit(ctx context.Context, f store.AuditFilter) ([]model.AuditEntry, error) {
	q := `SELECT seq, at, actor, action, env, target, detail FROM audit`
	var args []any
	if f.Env != "" {
		q += ` WHERE env = ?`
		args = append(args, f.Env)
	}
	q += ` ORDER BY seq DESC LIMIT ?`
	args = append(args, limitOf(f.Limit))
	rows, err := s.db.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, s.wrap("audit", err)
	}
	defer rows.Close()
	var out []model.AuditEntry
	for rows.Next() {
		var e model.AuditEntry
		var at int64
		if err := rows.Scan(&e.Seq, &at, &e.Actor, &e.Action, &e.Env, &e.Target, &e.Detail); err != nil {
			return nil, s.wrap("audit", err)
		}
		e.At = fromNanos(at)
		out = append(out, e)
	}
	return out, s.wrap("audit", rows.Err())
}

// Lead implements store.Store. The embedded store belongs to one process
// (Open holds a file lock), so leadership is decided in memory.
func (s *Store) Lead(ctx context.Context, name string) (store.Lease, bool, error) {
	if err := ctx.Err(); err != nil {
		return nil, false, err
	}
	s.leaseMu.Lock()
	defer s.leaseMu.Unlock()
	if s.leases == nil {
		s.leases = map[string]*lease{}
	}
	if _, held := s.leases[name]; held {
		return nil, false, nil
	}
	l := &lease{lost: make(chan struct{})}
	l.release = func() {
		s.leaseMu.Lock()
		delete(s.leases, name)
		s.leaseMu.Unlock()
	}
	s.leases[name] = l
	return l, true, nil
}

type lease struct {
	once    sync.Once
	lost    chan struct{}
	release func()
}

func (l *lease) Lost() <-chan struct{} { return l.lost }

func (l *lease) Release() {
	l.once.Do(func() {
		l.release()
		close(l.lost)
	})
}

// Secret implements store.Store.
func (s *Store) Secret(ctx context.Context, name string, create func() ([]byte, error)) ([]byte, error) {
	var v []byte
	err := s.db.QueryRowContext(ctx, `SELECT value FROM secrets WHERE name = ?`, name).Scan(&v)
	if err == nil {
		return v, nil
	}
	if !errors.Is(err, sql.ErrNoRows) {
		return nil, s.wrap("secret "+name, err)
	}
	if v, err = create(); err != nil {
		return nil, err
	}
	if _, err := s.db.ExecContext(ctx, `INSERT INTO secrets (name, value) VALUES (?, ?) ON CONFLICT DO NOTHING`, name, v); err != nil {
		return nil, s.wrap("secret "+name, err)
	}
	err = s.db.QueryRowContext(ctx, `SELECT value FROM secrets WHERE name = ?`, name).Scan(&v)
	return v, s.wrap("secret "+name, err)
}
