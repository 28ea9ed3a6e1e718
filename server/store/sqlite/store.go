// Package sqlite is the embedded store: the server's state in one SQLite file
// (modernc.org/sqlite, pure Go), for `tether deploy` and development. It is
// single-process: Open takes an exclusive lock next to the database file.
// Its queries are store.SQL's, shared with the PostgreSQL store.
package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/tetherhq/tether/schema"
	"github.com/tetherhq/tether/server/store"
)

// Config tunes Open.
type Config struct {
	// BusyTimeout is how long a statement waits for a lock held by another
	// connection before failing with store.ErrLocked (0: the default).
	BusyTimeout time.Duration
}

// Default returns the configuration Open uses for zero fields.
func Default() Config { return Config{BusyTimeout: 5 * time.Second} }

// ErrConfig is wrapped by every error Validate returns.
var ErrConfig = errors.New("invalid SQLite store configuration")

// Validate checks the configuration.
func (c Config) Validate() error {
	if c.BusyTimeout < 0 {
		return fmt.Errorf("%w: busy timeout %v: want 0 (the default) or more", ErrConfig, c.BusyTimeout)
	}
	return nil
}

// Store is the SQLite store.
type Store struct {
	store.SQL
	path string
	db   *sql.DB
	lock *os.File

	leaseMu sync.Mutex
	leases  map[string]*lease
}

var _ store.Store = (*Store)(nil)

// dialect: a transaction holds the whole file (BEGIN IMMEDIATE) and one
// process the store, so there is nothing to lock.
var dialect = store.Dialect{
	EachText:    `json_each`,
	LabelValue:  `json_extract(labels, '$."' || %s || '"')`,
	EventsGiven: `SELECT COALESCE((SELECT seq FROM sqlite_sequence WHERE name = 'event_log'), 0)`,
	MigrationsTable: `CREATE TABLE IF NOT EXISTS schema_migrations (
		version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at INTEGER NOT NULL)`,
}

// Open opens (creating if needed) the store at path, takes the process lock
// and applies pending migrations. Errors name the file and say what to do.
func Open(ctx context.Context, path string, cfg Config) (*Store, error) {
	return open(ctx, path, cfg, schema.SQLite)
}

// open opens the store with the migrations migrations returns.
func open(ctx context.Context, path string, cfg Config, migrations func() ([]schema.Migration, error)) (*Store, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.BusyTimeout == 0 {
		cfg.BusyTimeout = Default().BusyTimeout
	}
	lock, err := takeLock(path + ".lock")
	if err != nil {
		return nil, err
	}
	// Times are stored as Unix nanoseconds.
	dsn := "file:" + path +
		"?_pragma=busy_timeout(" + strconv.FormatInt(cfg.BusyTimeout.Milliseconds(), 10) + ")" +
		"&_pragma=journal_mode(WAL)&_pragma=synchronous(NORMAL)&_pragma=foreign_keys(ON)&_txlock=immediate" +
		"&_time_integer_format=unix_nano"
	db, err := sql.Open("sqlite", dsn)
	if err != nil {
		lock.Close()
		return nil, fmt.Errorf("open store %s: %w", path, err)
	}
	// One connection: the embedded store serves one process, and a single
	// writer never meets SQLITE_BUSY from itself.
	db.SetMaxOpenConns(1)
	s := &Store{path: path, db: db, lock: lock}
	s.SQL = store.NewSQL(database{conn{h: db, path: path}, db}, dialect, "store "+path)
	if err := s.Migrate(ctx, migrations); err != nil {
		s.Close()
		return nil, err
	}
	return s, nil
}

// takeLock holds an exclusive flock on path for the life of the store, so two
// processes never share the embedded store.
func takeLock(path string) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("open store lock %s: %w", path, err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		holder, _ := os.ReadFile(path)
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			who := strings.TrimSpace(string(holder))
			if who != "" {
				who = " (pid " + who + ")"
			}
			return nil, fmt.Errorf("%w: %s is in use by another tether process%s: wait for it to finish, or stop it", store.ErrLocked, strings.TrimSuffix(path, ".lock"), who)
		}
		return nil, fmt.Errorf("lock %s: %w", path, err)
	}
	_ = f.Truncate(0)
	_, _ = f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	return f, nil
}

// Close implements store.Store.
func (s *Store) Close() error {
	err := s.db.Close()
	if s.lock != nil {
		s.lock.Close()
	}
	return err
}

// Ping implements store.Store.
func (s *Store) Ping(ctx context.Context) error {
	if err := s.db.PingContext(ctx); err != nil {
		return fmt.Errorf("ping: %w", conn{path: s.path}.classify(err))
	}
	return nil
}

// Path returns the database file's path.
func (s *Store) Path() string { return s.path }

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
