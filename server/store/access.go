package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/tetherhq/tether/model"
	"github.com/tetherhq/tether/server/record"
)

// CreateToken implements Store. A token of an unknown environment fails the
// foreign key: model.ErrNotFound.
func (s *SQL) CreateToken(ctx context.Context, t record.Token) error {
	if err := t.Validate(); err != nil {
		return fmt.Errorf("create token: %w: %w", model.ErrInvalid, err)
	}
	env := sql.NullString{String: t.Env, Valid: t.Env != ""}
	if t.CreatedAt.IsZero() {
		t.CreatedAt = time.Now()
	}
	owner := sql.NullString{String: t.Owner, Valid: t.Owner != ""}
	// The organization must exist (SQLite has no foreign key for it).
	n, err := s.db.Exec(ctx, `INSERT INTO tokens (id, name, role, env, hash, created_by, created_at, expires_at, org, owner)
		SELECT $1, $2, $3, $4, $5, $6, $7, $8, name, $10 FROM orgs WHERE name = $9`,
		t.ID, t.Name, t.Role, env, t.Hash, t.CreatedBy, t.CreatedAt, t.ExpiresAt, record.OrgOr(t.Org), owner)
	if err == nil && n == 0 {
		err = fmt.Errorf("organization %q: %w", record.OrgOr(t.Org), model.ErrNotFound)
	}
	return wrap("create token "+t.Name, err)
}

const tokenColumns = `id, name, role, env, hash, created_by, created_at, expires_at, org, owner`

func scanToken(r Row) (record.Token, error) {
	var t record.Token
	var env, owner sql.NullString
	err := r.Scan(&t.ID, &t.Name, &t.Role, &env, &t.Hash, &t.CreatedBy, timeCol{&t.CreatedAt}, nullTimeCol{&t.ExpiresAt}, &t.Org, &owner)
	t.Env, t.Owner = env.String, owner.String
	return t, err
}

// TokenByHash implements Store.
func (s *SQL) TokenByHash(ctx context.Context, hash []byte) (record.Token, error) {
	t, err := scanToken(s.db.QueryRow(ctx, `SELECT `+tokenColumns+` FROM tokens WHERE hash = $1`, hash))
	return t, wrap("token", err)
}

// ListTokens implements Store.
func (s *SQL) ListTokens(ctx context.Context) ([]record.Token, error) {
	out, err := queryAll(ctx, s.db, scanToken, `SELECT `+tokenColumns+` FROM tokens ORDER BY created_at, id`)
	return out, wrap("list tokens", err)
}

// DeleteToken implements Store.
func (s *SQL) DeleteToken(ctx context.Context, id string) error {
	n, err := s.db.Exec(ctx, `DELETE FROM tokens WHERE id = $1`, id)
	if err != nil {
		return wrap("revoke token "+id, err)
	}
	if n == 0 {
		return fmt.Errorf("token %s: %w", id, model.ErrNotFound)
	}
	return nil
}

// RecordAudit implements Store.
func (s *SQL) RecordAudit(ctx context.Context, e record.AuditEntry) error {
	if e.At.IsZero() {
		e.At = time.Now()
	}
	// An entry without an organization is of its environment's, or of
	// the default one.
	_, err := s.db.Exec(ctx, `INSERT INTO audit (at, actor, action, env, target, detail, org)
		VALUES ($1, $2, $3, $4, $5, $6, COALESCE(NULLIF($7, ''), (SELECT org FROM environments WHERE name = $4), 'default'))`,
		e.At, e.Actor, e.Action, e.Env, e.Target, e.Detail, e.Org)
	return wrap("audit", err)
}

// Audit implements Store.
func (s *SQL) Audit(ctx context.Context, f record.AuditFilter) ([]record.AuditEntry, error) {
	var a args
	q := `SELECT seq, at, actor, action, env, target, detail, org FROM audit WHERE true`
	if f.Env != "" {
		q += ` AND env = ` + a.add(f.Env)
	}
	if f.Org != "" {
		q += ` AND org = ` + a.add(f.Org)
	}
	q += ` ORDER BY seq DESC LIMIT ` + a.add(limitOf(f.Limit))
	out, err := queryAll(ctx, s.db, func(r Row) (record.AuditEntry, error) {
		var e record.AuditEntry
		err := r.Scan(&e.Seq, timeCol{&e.At}, &e.Actor, &e.Action, &e.Env, &e.Target, &e.Detail, &e.Org)
		return e, err
	}, q, a...)
	return out, wrap("audit", err)
}

// Secret implements Store.
func (s *SQL) Secret(ctx context.Context, name string, create func() ([]byte, error)) ([]byte, error) {
	var v []byte
	err := s.db.QueryRow(ctx, `SELECT value FROM secrets WHERE name = $1`, name).Scan(&v)
	if err == nil {
		return v, nil
	}
	if !errors.Is(err, model.ErrNotFound) {
		return nil, wrap("secret "+name, err)
	}
	if v, err = create(); err != nil {
		return nil, err
	}
	if _, err := s.db.Exec(ctx, `INSERT INTO secrets (name, value) VALUES ($1, $2) ON CONFLICT DO NOTHING`, name, v); err != nil {
		return nil, wrap("secret "+name, err)
	}
	err = s.db.QueryRow(ctx, `SELECT value FROM secrets WHERE name = $1`, name).Scan(&v)
	return v, wrap("secret "+name, err)
}

// Secrets implements Store.
func (s *SQL) Secrets(ctx context.Context) (map[string][]byte, error) {
	type secret struct {
		name  string
		value []byte
	}
	rows, err := queryAll(ctx, s.db, func(r Row) (secret, error) {
		var v secret
		err := r.Scan(&v.name, &v.value)
		return v, err
	}, `SELECT name, value FROM secrets ORDER BY name`)
	if err != nil {
		return nil, wrap("secrets", err)
	}
	out := make(map[string][]byte, len(rows))
	for _, r := range rows {
		out[r.name] = r.value
	}
	return out, nil
}

// ReplaceSecret implements Store. The value is compared and replaced in
// one statement, so two servers replacing one secret at once (both sealing
// it on an upgrade) cannot overwrite each other.
func (s *SQL) ReplaceSecret(ctx context.Context, name string, old, value []byte) error {
	n, err := s.db.Exec(ctx, `UPDATE secrets SET value = $3 WHERE name = $1 AND value = $2`, name, old, value)
	if err != nil {
		return wrap("replace secret "+name, err)
	}
	if n > 0 {
		return nil
	}
	var exists bool
	if err := s.db.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM secrets WHERE name = $1)`, name).Scan(&exists); err != nil {
		return wrap("replace secret "+name, err)
	}
	if !exists {
		return fmt.Errorf("replace secret %s: %w", name, model.ErrNotFound)
	}
	return fmt.Errorf("replace secret %s: %w: it changed since it was read", name, model.ErrConflict)
}
