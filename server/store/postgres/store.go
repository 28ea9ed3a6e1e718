// Package postgres is the server store: the server's state in PostgreSQL
// through a pgx connection pool. Several servers may share one database:
// migrations run under an advisory lock, every write is one transaction, and
// leadership of an environment's scheduler is an advisory lock held on a
// dedicated connection. Its queries are store.SQL's, shared with the SQLite
// store.
package postgres

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"regexp"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tetherhq/tether/model"
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

// ErrConfig is wrapped by every error Validate returns.
var ErrConfig = errors.New("invalid PostgreSQL configuration")

// Validate checks the configuration.
func (c Config) Validate() error {
	if c.URL == "" {
		return fmt.Errorf("%w: no connection URL: pass --postgres postgres://user@host/db or set TETHER_POSTGRES", ErrConfig)
	}
	if c.MaxConns < 0 || c.ConnectTimeout < 0 || c.LeaseCheck < 0 {
		return fmt.Errorf("%w: negative pool size or timeout", ErrConfig)
	}
	return nil
}

// Store is the PostgreSQL store.
type Store struct {
	store.SQL
	pool *pgxpool.Pool
	cfg  Config
	db   database
}

var _ store.Store = (*Store)(nil)

// Advisory lock keys in the two-int space (the one-bigint space holds the
// leases): 'te' << 16 | 'th' as the class, then the purpose.
const (
	lockClass      = 0x74657468
	lockMigrations = 1
	lockBodies     = 2
	lockEvents     = 3
	lockPending    = 4
)

// eventsChannel is the channel NOTIFY wakes followers of the event log
// on, followed by the schema's name: servers of other schemas of the
// database are not woken.
const eventsChannel = "tether_events_"

// dialect: rows and bodies are locked, since several servers share the
// database.
var dialect = store.Dialect{
	ForUpdate:      ` FOR NO KEY UPDATE`,
	ShareBodies:    fmt.Sprintf(`SELECT pg_advisory_xact_lock_shared(%d, %d)`, lockClass, lockBodies),
	LockBodies:     fmt.Sprintf(`SELECT pg_advisory_xact_lock(%d, %d)`, lockClass, lockBodies),
	LockMigrations: fmt.Sprintf(`SELECT pg_advisory_xact_lock(%d, %d)`, lockClass, lockMigrations),
	SkipLocked:     ` FOR UPDATE SKIP LOCKED`,
	EachText:       `jsonb_each_text`,
	LabelValue:     `(labels ->> %s)`,
	// The lock, and the notice sent at commit, in one statement: the
	// lock is held to the end of the transaction, the fewer round trips
	// after it the better.
	LockEvents: fmt.Sprintf(`SELECT pg_advisory_xact_lock(%d, %d), pg_notify('`+eventsChannel+`' || current_schema(), '')`,
		lockClass, lockEvents),
	ShareEvents: fmt.Sprintf(`SELECT pg_advisory_xact_lock_shared(%d, %d)`, lockClass, lockEvents),
	LockPending: fmt.Sprintf(`SELECT pg_advisory_xact_lock(%d, %d)`, lockClass, lockPending),
	EventsGiven: `SELECT CASE WHEN is_called THEN last_value ELSE 0 END FROM event_log_id_seq`,
	MigrationsTable: `CREATE TABLE IF NOT EXISTS schema_migrations (
		version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at TIMESTAMPTZ NOT NULL)`,
}

// Open connects, checks the database answers and applies pending
// migrations. Two servers opening one database at once migrate it once.
func Open(ctx context.Context, cfg Config) (*Store, error) {
	return open(ctx, cfg, schema.Postgres)
}

// open opens the store with the migrations migrations returns.
func open(ctx context.Context, cfg Config, migrations func() ([]schema.Migration, error)) (*Store, error) {
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
		return nil, fmt.Errorf("postgres: %w: connection URL: %v", model.ErrInvalid, redactErr(err))
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
	s := &Store{pool: pool, cfg: cfg, db: database{conn{h: pool, where: where}, pool}}
	s.SQL = store.NewSQL(s.db, dialect, "database "+where)
	if err := pool.Ping(ctx); err != nil {
		pool.Close()
		return nil, s.db.wrap("connect", err)
	}
	if err := s.Migrate(ctx, migrations); err != nil {
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

// Ping implements store.Store.
func (s *Store) Ping(ctx context.Context) error { return s.db.wrap("ping", s.pool.Ping(ctx)) }

// Lead implements store.Store: a session advisory lock, keyed by the schema
// and name, held on a connection of its own (outside the pool, so leases
// never starve queries). The lease checks its connection every LeaseCheck;
// when the connection breaks PostgreSQL drops the lock, and Lost closes.
func (s *Store) Lead(ctx context.Context, name string) (store.Lease, bool, error) {
	conn, err := pgx.ConnectConfig(ctx, s.pool.Config().ConnConfig.Copy())
	if err != nil {
		return nil, false, s.db.wrap("lead "+name, err)
	}
	var ok bool
	err = conn.QueryRow(ctx, `SELECT pg_try_advisory_lock(hashtextextended(current_schema() || '/' || $1, 0))`, name).Scan(&ok)
	if err != nil || !ok {
		conn.Close(context.WithoutCancel(ctx))
		return nil, false, s.db.wrap("lead "+name, err)
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
		// Unlock first: closing the session drops its locks too, but only
		// once the server has ended the session, after Close returns, so
		// a Lead right after this could still find the lock held.
		_, _ = l.conn.Exec(ctx, `SELECT pg_advisory_unlock_all()`)
		_ = l.conn.Close(ctx)
		l.markLost()
	})
}

// LeaseHolder returns the database session (backend pid) that holds the
// lease called name (see Store.Lead) in the schema u selects; ok is false
// when nobody holds it.
func LeaseHolder(ctx context.Context, u, name string) (pid uint32, ok bool, err error) {
	conn, err := pgx.Connect(ctx, u)
	if err != nil {
		return 0, false, fmt.Errorf("lease holder: %w: %v", model.ErrUnavailable, err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	// A single-key advisory lock shows its key split in two halves.
	err = conn.QueryRow(ctx, `SELECT pid FROM pg_locks
		WHERE locktype = 'advisory' AND granted AND objsubid = 1
		AND ((classid::bigint << 32) | objid::bigint) = hashtextextended(current_schema() || '/' || $1, 0)`, name).Scan(&pid)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, fmt.Errorf("lease holder: %w", err)
	}
	return pid, true, nil
}

// TerminateSession ends a database session, as a crash or a network cut
// would: its transactions roll back and its leases are lost. Fault tests
// use it; so can an operator fencing off a hung replica.
func TerminateSession(ctx context.Context, u string, pid uint32) error {
	conn, err := pgx.Connect(ctx, u)
	if err != nil {
		return fmt.Errorf("terminate session %d: %w: %v", pid, model.ErrUnavailable, err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	var ok bool
	if err := conn.QueryRow(ctx, `SELECT pg_terminate_backend($1)`, pid).Scan(&ok); err != nil {
		return fmt.Errorf("terminate session %d: %w", pid, err)
	}
	if !ok {
		return fmt.Errorf("terminate session %d: %w: no such session", pid, model.ErrNotFound)
	}
	return nil
}

var schemaName = regexp.MustCompile(`^[a-z_][a-z0-9_]{0,62}$`)

// WithSchema returns the connection string u with its search_path set to
// schema: every table of the store is then created and read there, so
// several installations (or test runs, or benchmarks) share one database.
func WithSchema(u, schema string) string {
	if strings.HasPrefix(u, "postgres://") || strings.HasPrefix(u, "postgresql://") {
		p, err := url.Parse(u)
		if err == nil {
			q := p.Query()
			q.Set("search_path", schema)
			p.RawQuery = q.Encode()
			return p.String()
		}
	}
	return strings.TrimSpace(u) + " search_path=" + schema
}

// CreateSchema creates an empty schema in the database at u.
func CreateSchema(ctx context.Context, u, schema string) error {
	return onSchema(ctx, u, schema, `CREATE SCHEMA `)
}

// DropSchema drops a schema and everything in it.
func DropSchema(ctx context.Context, u, schema string) error {
	return onSchema(ctx, u, schema, `DROP SCHEMA IF EXISTS `, ` CASCADE`)
}

// SchemaSize returns the bytes a schema's tables take on disk, with their
// indexes and TOAST (the sum of pg_total_relation_size).
func SchemaSize(ctx context.Context, u, schema string) (int64, error) {
	conn, err := pgx.Connect(ctx, u)
	if err != nil {
		return 0, fmt.Errorf("schema %s: %w: %v", schema, model.ErrUnavailable, err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	var n int64
	err = conn.QueryRow(ctx, `SELECT coalesce(sum(pg_total_relation_size(c.oid)), 0)::bigint
		FROM pg_class c JOIN pg_namespace s ON s.oid = c.relnamespace
		WHERE s.nspname = $1 AND c.relkind IN ('r', 'p', 'm')`, schema).Scan(&n)
	if err != nil {
		return 0, fmt.Errorf("schema %s: size: %w", schema, err)
	}
	return n, nil
}

// TableSize is what one table of a schema takes: its rows (as counted)
// and its bytes on disk with indexes and TOAST.
type TableSize struct {
	Table string `json:"table"`
	Rows  int64  `json:"rows"`
	Bytes int64  `json:"bytes"`
}

// TableSizes returns the sizes of a schema's tables, largest first.
func TableSizes(ctx context.Context, u, schema string) ([]TableSize, error) {
	if !schemaName.MatchString(schema) {
		return nil, fmt.Errorf("schema %q: %w: want lower-case letters, digits and _", schema, model.ErrInvalid)
	}
	conn, err := pgx.Connect(ctx, u)
	if err != nil {
		return nil, fmt.Errorf("schema %s: %w: %v", schema, model.ErrUnavailable, err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	rows, err := conn.Query(ctx, `SELECT c.relname, pg_total_relation_size(c.oid)::bigint
		FROM pg_class c JOIN pg_namespace s ON s.oid = c.relnamespace
		WHERE s.nspname = $1 AND c.relkind = 'r' ORDER BY 2 DESC`, schema)
	if err != nil {
		return nil, fmt.Errorf("schema %s: table sizes: %w", schema, err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (TableSize, error) {
		var t TableSize
		return t, r.Scan(&t.Table, &t.Bytes)
	})
	if err != nil {
		return nil, fmt.Errorf("schema %s: table sizes: %w", schema, err)
	}
	for i := range out {
		q := `SELECT count(*) FROM ` + pgx.Identifier{schema, out[i].Table}.Sanitize()
		if err := conn.QueryRow(ctx, q).Scan(&out[i].Rows); err != nil {
			return nil, fmt.Errorf("schema %s: rows of %s: %w", schema, out[i].Table, err)
		}
	}
	return out, nil
}

// ActionSpan returns how many deploy actions of the version of env a
// schema's action log has (a result logged: one that changed, failed or
// skipped something) past the first transaction that recorded any, and
// the start times of that first transaction and of the last: after /
// (last - first) is about the rate they were recorded at once they came.
func ActionSpan(ctx context.Context, u, schema, env string, version int64) (after int64, first, last time.Time, err error) {
	if !schemaName.MatchString(schema) {
		return 0, first, last, fmt.Errorf("schema %q: %w: want lower-case letters, digits and _", schema, model.ErrInvalid)
	}
	conn, err := pgx.Connect(ctx, u)
	if err != nil {
		return 0, first, last, fmt.Errorf("schema %s: %w: %v", schema, model.ErrUnavailable, err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	// The first transaction's start is a scalar subquery, run once (a
	// join with it, on a table whose statistics are not in yet, was
	// planned as a nested loop: the whole log read again per row).
	actions := pgx.Identifier{schema, "actions"}.Sanitize()
	q := `SELECT count(*) FILTER (WHERE at > (SELECT min(at) FROM ` + actions + ` WHERE env = $1 AND version = $2 AND kind = 'deploy')),
			coalesce(min(at), now()), coalesce(max(at), now())
		FROM ` + actions + ` WHERE env = $1 AND version = $2 AND kind = 'deploy'`
	if err := conn.QueryRow(ctx, q, env, version).Scan(&after, &first, &last); err != nil {
		return 0, first, last, fmt.Errorf("schema %s: actions of version %d: %w", schema, version, err)
	}
	return after, first, last, nil
}

func onSchema(ctx context.Context, u, schema string, sql ...string) error {
	if !schemaName.MatchString(schema) {
		return fmt.Errorf("schema %q: %w: want lower-case letters, digits and _", schema, model.ErrInvalid)
	}
	conn, err := pgx.Connect(ctx, u)
	if err != nil {
		return fmt.Errorf("schema %s: %w: %v", schema, model.ErrUnavailable, err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	q := sql[0] + pgx.Identifier{schema}.Sanitize()
	if len(sql) > 1 {
		q += sql[1]
	}
	if _, err := conn.Exec(ctx, q); err != nil {
		return fmt.Errorf("schema %s: %w", schema, err)
	}
	return nil
}
