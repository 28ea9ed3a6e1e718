package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/tetherhq/tether/model"
	"github.com/tetherhq/tether/server/store"
)

// CreateEnrollToken implements store.Store.
func (s *Store) CreateEnrollToken(ctx context.Context, t model.EnrollmentToken) error {
	if err := t.Validate(); err != nil {
		return fmt.Errorf("create enrollment token: %w: %w", store.ErrInvalid, err)
	}
	if err := s.requireEnv(ctx, s.db, t.Env); err != nil {
		return s.wrap("create enrollment token", err)
	}
	if t.CreatedAt.IsZero() {
		t.CreatedAt = time.Now()
	}
	var expires sql.NullInt64
	if t.ExpiresAt != nil {
		expires = sql.NullInt64{Int64: nanos(*t.ExpiresAt), Valid: true}
	}
	_, err := s.db.ExecContext(ctx, `INSERT INTO enroll_tokens (id, env, name, hash, max_uses, uses, created_by, created_at, expires_at)
		VALUES (?, ?, ?, ?, ?, 0, ?, ?, ?)`, t.ID, t.Env, t.Name, t.Hash, t.MaxUses, t.CreatedBy, nanos(t.CreatedAt), expires)
	if isConstraint(err) {
		return fmt.Errorf("create enrollment token %s: %w", t.Name, store.ErrExists)
	}
	return s.wrap("create enrollment token "+t.Name, err)
}

const enrollColumns = `id, env, name, hash, max_uses, uses, created_by, created_at, expires_at`

func scanEnrollToken(r scanner) (model.EnrollmentToken, error) {
	var t model.EnrollmentToken
	var created int64
	var expires sql.NullInt64
	if err := r.Scan(&t.ID, &t.Env, &t.Name, &t.Hash, &t.MaxUses, &t.Uses, &t.CreatedBy, &created, &expires); err != nil {
		return t, err
	}
	t.CreatedAt = fromNanos(created)
	if expires.Valid {
		e := fromNanos(expires.Int64)
		t.ExpiresAt = &e
	}
	return t, nil
}

// ListEnrollTokens implements store.Store.
func (s *Store) ListEnrollTokens(ctx context.Context, env string) ([]model.EnrollmentToken, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT `+enrollColumns+` FROM enroll_tokens WHERE env = ? ORDER BY created_at, id`, env)
	if err != nil {
		return nil, s.wrap("list enrollment tokens", err)
	}
	defer rows.Close()
	var out []model.EnrollmentToken
	for rows.Next() {
		t, err := scanEnrollToken(rows)
		if err != nil {
			return nil, s.wrap("list enrollment tokens", err)
		}
		out = append(out, t)
	}
	return out, s.wrap("list enrollment tokens", rows.Err())
}

// DeleteEnrollToken implements store.Store.
func (s *Store) DeleteEnrollToken(ctx context.Context, env, id string) error {
	res, err := s.db.ExecContext(ctx, `DELETE FROM enroll_tokens WHERE env = ? AND id = ?`, env, id)
	if err != nil {
		return s.wrap("revoke enrollment token "+id, err)
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return fmt.Errorf("enrollment token %s: %w", id, store.ErrNotFound)
	}
	return nil
}

// UseEnrollToken implements store.Store: one conditional update, so two
// agents racing for a token's last use cannot both have it.
func (s *Store) UseEnrollToken(ctx context.Context, env string, hash []byte, now time.Time) (model.EnrollmentToken, error) {
	t, err := scanEnrollToken(s.db.QueryRowContext(ctx, `UPDATE enroll_tokens SET uses = uses + 1
		WHERE env = ? AND hash = ? AND (expires_at IS NULL OR expires_at > ?) AND (max_uses = 0 OR uses < max_uses)
		RETURNING `+enrollColumns, env, hash, nanos(now)))
	if !errors.Is(err, sql.ErrNoRows) {
		return t, s.wrap("use enrollment token", err)
	}
	t, err = scanEnrollToken(s.db.QueryRowContext(ctx, `SELECT `+enrollColumns+` FROM enroll_tokens WHERE env = ? AND hash = ?`, env, hash))
	if err != nil {
		return t, s.wrap("enrollment token", err)
	}
	return t, fmt.Errorf("%w: %s", store.ErrConflict, t.Unusable(now))
}
