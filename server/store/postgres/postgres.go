// Package postgres is the server store: the server's state in PostgreSQL
// through a pgx connection pool. Several servers may share one database:
// migrations run under an advisory lock, every write is one transaction, and
// leadership of an environment's scheduler is an advisory lock held on a
// dedicated connection.
package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tetherhq/tether/schema"
	"github.com/tetherhq/tether/server/store"
)

// Config configures Open.
type Config struct {
	// URL is a PostgreSQL connection string (postgres://user@host/db or
	// key=value form). A search_path parameter selects the schema.
	URL string
	// MaxConns bounds the pool (0: pgx's default, the larger of 4 and the
	// number of CPUs).
	MaxConns int32
	// ConnectTimeout bounds each connection attempt.
	ConnectTimeout time.Duration
	// LeaseCheck is how often a held lease checks its connection.
	LeaseCheck time.Duration
}

// Default returns the configuration for zero fields.
func Default() Config {
	return Config{ConnectTimeout: 5 * time.Second, LeaseCheck: time.Second}
}

// Validate checks the configuration.
func (c Config) Validate() error {
	if c.URL == "" {
		return errors.New("postgres: no connection URL: pass --postgres postgres://user@host/db or set TETHER_POSTGRES")
	}
	if c.MaxConns < 0 || c.ConnectTimeout < 0 || c.LeaseCheck < 0 {
		return errors.New("postgres: negative pool size or timeout")
	}
	return nil
}

// Store is the PostgreSQL store.
type Store struct {
	pool *pgxpool.Pool
	cfg  Config
	// where names the database for error messages, without credentials.
	where string
}

var _ store.Store = (*Store)(nil)

// Advisory lock keys in the two-int space (the one-bigint space holds the
// leases): 'te' << 16 | 'th' as the class, then the purpose.
const (
	lockClass      = 0x74657468
	lockMigrations = 1
	lockBodies     = 2
)

// Open connects, checks the database answers and applies pending
// migrations. Two servers opening one database at once migrate it once.
func Open(ctx context.Context, cfg Config) (*Store, error) {
	def := Default()
	if cfg.ConnectTimeout == 0 {
		cfg.ConnectTimeout = def.ConnectTimeout
	}
	if cfg.LeaseCheck == 0 {
		cfg.LeaseCheck = def.LeaseCheck
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	pc, err := pgxpool.ParseConfig(cfg.URL)
	if err != nil {
		return nil, fmt.Errorf("postgres: %w: connection URL: %v", store.ErrInvalid, redactErr(err))
	}
	if cfg.MaxConns > 0 {
		pc.MaxConns = cfg.MaxConns
	}
	pc.ConnConfig.ConnectTimeout = cfg.ConnectTimeout
	where := fmt.Sprintf("%s:%d/%s", pc.ConnConfig.Host, pc.ConnConfig.Port, pc.ConnConfig.Database)
	pool, err := pgxpool.NewWithConfig(ctx, pc)
	if err != nil {
		return nil, fmt.Errorf("postgres %s: %w", where, err)
	}
	s := &Store{pool: pool, cfg: cfg, where: where}
	if err := pool.Ping(ctx); err != nil {
		pool.Close()
		return nil, s.wrap("connect", err)
	}
	if err := s.migrate(ctx); err != nil {
		pool.Close()
		return nil, err
	}
	return s, nil
}

// redactErr keeps a parse error from echoing a password.
func redactErr(err error) string {
	msg := err.Error()
	if i := strings.Index(msg, "password"); i >= 0 {
		return msg[:i] + "…"
	}
	return msg
}

// Close implements store.Store.
func (s *Store) Close() error {
	s.pool.Close()
	return nil
}

// Ping checks the database answers.
func (s *Store) Ping(ctx context.Context) error { return s.wrap("ping", s.pool.Ping(ctx)) }

// SchemaVersion returns the newest applied migration.
func (s *Store) SchemaVersion(ctx context.Context) (int, error) {
	var v int
	err := s.pool.QueryRow(ctx, `SELECT COALESCE(MAX(version), 0) FROM schema_migrations`).Scan(&v)
	return v, s.wrap("schema version", err)
}

func (s *Store) migrate(ctx context.Context) error {
	migrations, err := schema.Postgres()
	if err != nil {
		return err
	}
	return s.tx(ctx, "migrate", func(tx pgx.Tx) error {
		// Held to the end of the transaction: a second server waits here,
		// then finds nothing left to do.
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1, $2)`, lockClass, lockMigrations); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `CREATE TABLE IF NOT EXISTS schema_migrations (
			version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at TIMESTAMPTZ NOT NULL)`); err != nil {
			return err
		}
		var current int
		if err := tx.QueryRow(ctx, `SELECT COALESCE(MAX(version), 0) FROM schema_migrations`).Scan(&current); err != nil {
			return err
		}
		if current > len(migrations) {
			return fmt.Errorf("database %s has schema version %d, newer than this tether knows (%d): upgrade tether", s.where, current, len(migrations))
		}
		for _, m := range migrations[current:] {
			if _, err := tx.Exec(ctx, m.SQL); err != nil {
				return fmt.Errorf("migration %d (%s): %w", m.Version, m.Name, err)
			}
			if _, err := tx.Exec(ctx, `INSERT INTO schema_migrations (version, name, applied_at) VALUES ($1, $2, now())`, m.Version, m.Name); err != nil {
				return err
			}
		}
		return nil
	})
}

// tx runs fn in a transaction, committing if it returns nil.
func (s *Store) tx(ctx context.Context, op string, fn func(pgx.Tx) error) error {
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return s.wrap(op, err)
	}
	if err := fn(tx); err != nil {
		_ = tx.Rollback(context.WithoutCancel(ctx))
		return s.wrap(op, err)
	}
	return s.wrap(op, tx.Commit(ctx))
}

// wrap adds the operation and classifies PostgreSQL failures.
func (s *Store) wrap(op string, err error) error {
	if err == nil {
		return nil
	}
	for _, known := range []error{store.ErrNotFound, store.ErrExists, store.ErrConflict, store.ErrInvalid, store.ErrUnavailable, store.ErrCorrupt} {
		if errors.Is(err, known) {
			return fmt.Errorf("%s: %w", op, err)
		}
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("%s: %w", op, err)
	}
	if errors.Is(err, pgx.ErrNoRows) {
		return fmt.Errorf("%s: %w", op, store.ErrNotFound)
	}
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		switch {
		case pe.Code == "23505":
			return fmt.Errorf("%s: %w: %s", op, store.ErrExists, pe.Message)
		case pe.Code == "23503":
			return fmt.Errorf("%s: %w: %s", op, store.ErrNotFound, pe.Message)
		case pe.Code == "23514", pe.Code == "23502", strings.HasPrefix(pe.Code, "22"):
			return fmt.Errorf("%s: %w: %s", op, store.ErrInvalid, pe.Message)
		case pe.Code == "40001", pe.Code == "40P01":
			return fmt.Errorf("%s: %w: %s: retry", op, store.ErrConflict, pe.Message)
		case strings.HasPrefix(pe.Code, "08"), strings.HasPrefix(pe.Code, "57P"), pe.Code == "53300":
			return fmt.Errorf("%s: %w: PostgreSQL at %s: %s", op, store.ErrUnavailable, s.where, pe.Message)
		}
		return fmt.Errorf("%s: %w", op, err)
	}
	if unreachable(err) {
		return fmt.Errorf("%s: %w: PostgreSQL at %s cannot be reached (%v): is it running?", op, store.ErrUnavailable, s.where, err)
	}
	return fmt.Errorf("%s: %w", op, err)
}

// unreachable reports whether err says the database could not be talked to.
func unreachable(err error) bool {
	var ne net.Error
	var ce *pgconn.ConnectError
	return errors.As(err, &ce) || errors.As(err, &ne) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE) ||
		pgconn.SafeToRetry(err) || strings.Contains(err.Error(), "closed pool") || strings.Contains(err.Error(), "conn closed")
}

// jsonb encodes v for a JSONB column.
func jsonb(v any) (string, error) {
	b, err := json.Marshal(v)
	return string(b), err
}
