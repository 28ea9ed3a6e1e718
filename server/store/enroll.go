package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/tetherhq/tether/model"
	"github.com/tetherhq/tether/server/record"
)

// CreateEnrollToken implements Store. A token of an unknown environment
// fails the foreign key: model.ErrNotFound.
func (s *SQL) CreateEnrollToken(ctx context.Context, t record.EnrollmentToken) error {
	if err := t.Validate(); err != nil {
		return fmt.Errorf("create enrollment token: %w: %w", model.ErrInvalid, err)
	}
	if t.CreatedAt.IsZero() {
		t.CreatedAt = time.Now()
	}
	_, err := s.db.Exec(ctx, `INSERT INTO enroll_tokens (id, env, name, hash, max_uses, uses, created_by, created_at, expires_at, host, own_agent)
		VALUES ($1, $2, $3, $4, $5, 0, $6, $7, $8, $9, $10)`, t.ID, t.Env, t.Name, t.Hash, t.MaxUses, t.CreatedBy, t.CreatedAt, t.ExpiresAt, t.Host, t.OwnAgent)
	return wrap("create enrollment token "+t.Name, err)
}

const enrollColumns = `id, env, name, hash, max_uses, uses, created_by, created_at, expires_at, host, own_agent`

func scanEnrollToken(r Row) (record.EnrollmentToken, error) {
	var t record.EnrollmentToken
	err := r.Scan(&t.ID, &t.Env, &t.Name, &t.Hash, &t.MaxUses, &t.Uses, &t.CreatedBy, timeCol{&t.CreatedAt}, nullTimeCol{&t.ExpiresAt}, &t.Host, &t.OwnAgent)
	return t, err
}

// ListEnrollTokens implements Store.
func (s *SQL) ListEnrollTokens(ctx context.Context, env string) ([]record.EnrollmentToken, error) {
	out, err := queryAll(ctx, s.db, scanEnrollToken, `SELECT `+enrollColumns+` FROM enroll_tokens WHERE env = $1 ORDER BY created_at, id`, env)
	return out, wrap("list enrollment tokens", err)
}

// DeleteEnrollToken implements Store.
func (s *SQL) DeleteEnrollToken(ctx context.Context, env, id string) error {
	n, err := s.db.Exec(ctx, `DELETE FROM enroll_tokens WHERE env = $1 AND id = $2`, env, id)
	if err != nil {
		return wrap("revoke enrollment token "+id, err)
	}
	if n == 0 {
		return fmt.Errorf("enrollment token %s: %w", id, model.ErrNotFound)
	}
	return nil
}

// EnrollToken implements Store.
func (s *SQL) EnrollToken(ctx context.Context, env string, hash []byte) (record.EnrollmentToken, error) {
	t, err := scanEnrollToken(s.db.QueryRow(ctx, `SELECT `+enrollColumns+` FROM enroll_tokens WHERE env = $1 AND hash = $2`, env, hash))
	return t, wrap("enrollment token", err)
}

// UseEnrollToken implements Store: one conditional update, so two agents
// racing for a token's last use cannot both have it, and a token bound to
// a host, or to the server's own agent, is not spent by another agent.
func (s *SQL) UseEnrollToken(ctx context.Context, env string, hash []byte, agent string, now time.Time) (record.EnrollmentToken, error) {
	t, err := scanEnrollToken(s.db.QueryRow(ctx, `UPDATE enroll_tokens SET uses = uses + 1
		WHERE env = $1 AND hash = $2 AND (expires_at IS NULL OR expires_at > $3) AND (max_uses = 0 OR uses < max_uses)
			AND (host = '' OR host = $4) AND (own_agent = '' OR own_agent = $4)
		RETURNING `+enrollColumns, env, hash, now, agent))
	if !errors.Is(err, model.ErrNotFound) {
		return t, wrap("use enrollment token", err)
	}
	if t, err = s.EnrollToken(ctx, env, hash); err != nil {
		return t, err
	}
	bound := t.BoundTo()
	if why := t.Unusable(now); why != "" || bound == agent {
		return t, fmt.Errorf("%w: %s", model.ErrConflict, why)
	}
	what := "host"
	if t.OwnAgent != "" {
		what = "the server's own agent"
	}
	return t, fmt.Errorf("%w: token %s is bound to %s %s: only the agent named %s enrolls with it", model.ErrConflict, t.Name, what, bound, bound)
}
