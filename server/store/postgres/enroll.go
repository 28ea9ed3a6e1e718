package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tetherhq/tether/model"
	"github.com/tetherhq/tether/server/store"
)

// CreateEnrollToken implements store.Store.
func (s *Store) CreateEnrollToken(ctx context.Context, t model.EnrollmentToken) error {
	if err := t.Validate(); err != nil {
		return fmt.Errorf("create enrollment token: %w: %w", store.ErrInvalid, err)
	}
	if t.CreatedAt.IsZero() {
		t.CreatedAt = time.Now()
	}
	_, err := s.pool.Exec(ctx, `INSERT INTO enroll_tokens (id, env, name, hash, max_uses, uses, created_by, created_at, expires_at)
		VALUES ($1, $2, $3, $4, $5, 0, $6, $7, $8)`, t.ID, t.Env, t.Name, t.Hash, t.MaxUses, t.CreatedBy, t.CreatedAt, t.ExpiresAt)
	return s.wrap("create enrollment token "+t.Name, err)
}

const enrollColumns = `id, env, name, hash, max_uses, uses, created_by, created_at, expires_at`

func scanEnrollToken(r pgx.Row) (model.EnrollmentToken, error) {
	var t model.EnrollmentToken
	if err := r.Scan(&t.ID, &t.Env, &t.Name, &t.Hash, &t.MaxUses, &t.Uses, &t.CreatedBy, &t.CreatedAt, &t.ExpiresAt); err != nil {
		return t, err
	}
	t.CreatedAt = t.CreatedAt.UTC()
	if t.ExpiresAt != nil {
		e := t.ExpiresAt.UTC()
		t.ExpiresAt = &e
	}
	return t, nil
}

// ListEnrollTokens implements store.Store.
func (s *Store) ListEnrollTokens(ctx context.Context, env string) ([]model.EnrollmentToken, error) {
	rows, err := s.pool.Query(ctx, `SELECT `+enrollColumns+` FROM enroll_tokens WHERE env = $1 ORDER BY created_at, id`, env)
	if err != nil {
		return nil, s.wrap("list enrollment tokens", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (model.EnrollmentToken, error) { return scanEnrollToken(r) })
	return out, s.wrap("list enrollment tokens", err)
}

// DeleteEnrollToken implements store.Store.
func (s *Store) DeleteEnrollToken(ctx context.Context, env, id string) error {
	tag, err := s.pool.Exec(ctx, `DELETE FROM enroll_tokens WHERE env = $1 AND id = $2`, env, id)
	if err != nil {
		return s.wrap("revoke enrollment token "+id, err)
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("enrollment token %s: %w", id, store.ErrNotFound)
	}
	return nil
}

// UseEnrollToken implements store.Store: one conditional update, so two
// agents racing for a token's last use cannot both have it.
func (s *Store) UseEnrollToken(ctx context.Context, env string, hash []byte, now time.Time) (model.EnrollmentToken, error) {
	t, err := scanEnrollToken(s.pool.QueryRow(ctx, `UPDATE enroll_tokens SET uses = uses + 1
		WHERE env = $1 AND hash = $2 AND (expires_at IS NULL OR expires_at > $3) AND (max_uses = 0 OR uses < max_uses)
		RETURNING `+enrollColumns, env, hash, now))
	if !errors.Is(err, pgx.ErrNoRows) {
		return t, s.wrap("use enrollment token", err)
	}
	t, err = scanEnrollToken(s.pool.QueryRow(ctx, `SELECT `+enrollColumns+` FROM enroll_tokens WHERE env = $1 AND hash = $2`, env, hash))
	if err != nil {
		return t, s.wrap("enrollment token", err)
	}
	return t, fmt.Errorf("%w: %s", store.ErrConflict, t.Unusable(now))
}
