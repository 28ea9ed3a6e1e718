package postgres

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tetherhq/tether/model"
	"github.com/tetherhq/tether/server/store"
)

// RecordAlerts implements store.Store.
func (s *Store) RecordAlerts(ctx context.Context, alerts []model.Alert) error {
	for i := range alerts {
		if err := store.CheckAlert(&alerts[i]); err != nil {
			return fmt.Errorf("record alerts: %w", err)
		}
	}
	if len(alerts) == 0 {
		return nil
	}
	return s.tx(ctx, "record alerts", func(tx pgx.Tx) error {
		batch := &pgx.Batch{}
		if err := queueAlerts(batch, alerts); err != nil {
			return err
		}
		return tx.SendBatch(ctx, batch).Close()
	})
}

// queueAlerts queues the inserts of alerts.
func queueAlerts(batch *pgx.Batch, alerts []model.Alert) error {
	for _, a := range alerts {
		var id *string
		if a.ID != nil {
			v := a.ID.String()
			id = &v
		}
		var changes *string
		if len(a.Changes) > 0 {
			c, err := jsonb(a.Changes)
			if err != nil {
				return fmt.Errorf("%w: %w", store.ErrInvalid, err)
			}
			changes = &c
		}
		if a.At.IsZero() {
			a.At = time.Now()
		}
		batch.Queue(`INSERT INTO alerts (env, agent, kind, resource_id, message, changes, compliance, version, at)
			VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)`,
			a.Env, a.Agent, string(a.Kind), id, a.Message, changes, string(a.Compliance), a.Version, a.At)
	}
	return nil
}

// Alerts implements store.Store.
func (s *Store) Alerts(ctx context.Context, f store.AlertFilter) ([]model.Alert, error) {
	q := `SELECT seq, env, agent, kind, resource_id, message, changes, compliance, version, at FROM alerts WHERE true`
	var args []any
	for _, c := range []struct{ col, v string }{{"env", f.Env}, {"agent", f.Agent}, {"kind", string(f.Kind)}} {
		if c.v != "" {
			args = append(args, c.v)
			q += fmt.Sprintf(` AND %s = $%d`, c.col, len(args))
		}
	}
	args = append(args, limitOf(f.Limit))
	q += fmt.Sprintf(` ORDER BY seq DESC LIMIT $%d`, len(args))
	rows, err := s.pool.Query(ctx, q, args...)
	if err != nil {
		return nil, s.wrap("alerts", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (model.Alert, error) {
		var a model.Alert
		var id *string
		var changes []byte
		if err := r.Scan(&a.Seq, &a.Env, &a.Agent, &a.Kind, &id, &a.Message, &changes, &a.Compliance, &a.Version, &a.At); err != nil {
			return a, err
		}
		a.At = a.At.UTC()
		var idText string
		if id != nil {
			idText = *id
		}
		return a, store.DecodeAlert(&a, idText, changes)
	})
	return out, s.wrap("alerts", err)
}

// CreateToken implements store.Store.
func (s *Store) CreateToken(ctx context.Context, t model.Token) error {
	if err := t.Validate(); err != nil {
		return fmt.Errorf("create token: %w: %w", store.ErrInvalid, err)
	}
	var env *string
	if t.Env != "" {
		env = &t.Env
	}
	if t.CreatedAt.IsZero() {
		t.CreatedAt = time.Now()
	}
	_, err := s.pool.Exec(ctx, `INSERT INTO tokens (id, name, role, env, hash, created_by, created_at, expires_at)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8)`, t.ID, t.Name, string(t.Role), env, t.Hash, t.CreatedBy, t.CreatedAt, t.ExpiresAt)
	return s.wrap("create token "+t.Name, err)
}

const tokenColumns = `id, name, role, env, hash, created_by, created_at, expires_at`

func scanToken(r pgx.Row) (model.Token, error) {
	var t model.Token
	var env *string
	if err := r.Scan(&t.ID, &t.Name, &t.Role, &env, &t.Hash, &t.CreatedBy, &t.CreatedAt, &t.ExpiresAt); err != nil {
		return t, err
	}
	if env != nil {
		t.Env = *env
	}
	t.CreatedAt = t.CreatedAt.UTC()
	if t.ExpiresAt != nil {
		e := t.ExpiresAt.UTC()
		t.ExpiresAt = &e
	}
	return t, nil
}

// TokenByHash implements store.Store.
func (s *Store) TokenByHash(ctx context.Context, hash []byte) (model.Token, error) {
	t, err := scanToken(s.pool.QueryRow(ctx, `SELECT `+tokenColumns+` FROM tokens WHERE hash = $1`, hash))
	return t, s.wrap("token", err)
}

// ListTokens implements store.Store.
func (s *Store) ListTokens(ctx context.Context) ([]model.Token, error) {
	rows, err := s.pool.Query(ctx, `SELECT `+tokenColumns+` FROM tokens ORDER BY created_at, id`)
	if err != nil {
		return nil, s.wrap("list tokens", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (model.Token, error) { return scanToken(r) })
	return out, s.wrap("list tokens", err)
}

// DeleteToken implements store.Store.
func (s *Store) DeleteToken(ctx context.Context, id string) error {
	tag, err := s.pool.Exec(ctx, `DELETE FROM tokens WHERE id = $1`, id)
	if err != nil {
		return s.wrap("revoke token "+id, err)
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("token %s: %w", id, store.ErrNotFound)
	}
	return nil
}

// RecordAudit implements store.Store.
func (s *Store) RecordAudit(ctx context.Context, e model.AuditEntry) error {
	if e.At.IsZero() {
		e.At = time.Now()
	}
	_, err := s.pool.Exec(ctx, `INSERT INTO audit (at, actor, action, env, target, detail) VALUES ($1, $2, $3, $4, $5, $6)`,
		e.At, e.Actor, e.Action, e.Env, e.Target, e.Detail)
	return s.wrap("audit", err)
}

// Audit implements store.Store.
func (s *Store) Audit(ctx context.Context, f store.AuditFilter) ([]model.AuditEntry, error) {
	q := `SELECT seq, at, actor, action, env, target, detail FROM audit`
	args := []any{limitOf(f.Limit)}
	if f.Env != "" {
		q += ` WHERE env = $2`
		args = append(args, f.Env)
	}
	rows, err := s.pool.Query(ctx, q+` ORDER BY seq DESC LIMIT $1`, args...)
	if err != nil {
		return nil, s.wrap("audit", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (model.AuditEntry, error) {
		var e model.AuditEntry
		err := r.Scan(&e.Seq, &e.At, &e.Actor, &e.Action, &e.Env, &e.Target, &e.Detail)
		e.At = e.At.UTC()
		return e, err
	})
	return out, s.wrap("audit", err)
}

// Lead implements store.Store: a session advisory lock, keyed by the schema
// and name, held on a connection of its own (outside the pool, so leases
// never starve queries). The lease checks its connection every LeaseCheck;
// when the connection breaks PostgreSQL drops the lock, and Lost closes.
func (s *Store) Lead(ctx context.Context, name string) (store.Lease, bool, error) {
	conn, err := pgx.ConnectConfig(ctx, s.pool.Config().ConnConfig.Copy())
	if err != nil {
		return nil, false, s.wrap("lead "+name, err)
	}
	var ok bool
	err = conn.QueryRow(ctx, `SELECT pg_try_advisory_lock(hashtextextended(current_schema() || '/' || $1, 0))`, name).Scan(&ok)
	if err != nil || !ok {
		conn.Close(context.WithoutCancel(ctx))
		return nil, false, s.wrap("lead "+name, err)
	}
	l := &lease{conn: conn, name: name, lost: make(chan struct{}), stop: make(chan struct{}), done: make(chan struct{})}
	go l.watch(s.cfg.LeaseCheck)
	return l, true, nil
}

// lease is a held advisory lock. Its watch goroutine owns the connection
// until Release stops it; Release then unlocks and closes.
type lease struct {
	conn     *pgx.Conn
	name     string
	lost     chan struct{}
	stop     chan struct{}
	done     chan struct{}
	lostOnce sync.Once
	relOnce  sync.Once
}

func (l *lease) watch(every time.Duration) {
	defer close(l.done)
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-l.stop:
			return
		case <-t.C:
			ctx, cancel := context.WithTimeout(context.Background(), every+5*time.Second)
			err := l.conn.Ping(ctx)
			cancel()
			if err != nil {
				l.markLost()
				return
			}
		}
	}
}

func (l *lease) markLost() { l.lostOnce.Do(func() { close(l.lost) }) }

func (l *lease) Lost() <-chan struct{} { return l.lost }

func (l *lease) Release() {
	l.relOnce.Do(func() {
		close(l.stop)
		<-l.done
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		// Closing the session drops its advisory locks, unlock or not.
		_ = l.conn.Close(ctx)
		l.markLost()
	})
}

// Secret implements store.Store.
func (s *Store) Secret(ctx context.Context, name string, create func() ([]byte, error)) ([]byte, error) {
	var v []byte
	err := s.pool.QueryRow(ctx, `SELECT value FROM secrets WHERE name = $1`, name).Scan(&v)
	if err == nil {
		return v, nil
	}
	if err != pgx.ErrNoRows {
		return nil, s.wrap("secret "+name, err)
	}
	if v, err = create(); err != nil {
		return nil, err
	}
	if _, err := s.pool.Exec(ctx, `INSERT INTO secrets (name, value) VALUES ($1, $2) ON CONFLICT DO NOTHING`, name, v); err != nil {
		return nil, s.wrap("secret "+name, err)
	}
	err = s.pool.QueryRow(ctx, `SELECT value FROM secrets WHERE name = $1`, name).Scan(&v)
	return v, s.wrap("secret "+name, err)
}
