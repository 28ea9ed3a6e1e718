package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"

	sqlite3 "modernc.org/sqlite"
	sqlitelib "modernc.org/sqlite/lib"

	"github.com/tetherhq/tether/model"
	"github.com/tetherhq/tether/server/store"
)

// handle runs statements: the store's *sql.DB, or a transaction.
type handle interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
	PrepareContext(ctx context.Context, query string) (*sql.Stmt, error)
}

// conn is the store's database as store.SQL uses it, in a transaction or
// not. The driver binds $N to the Nth argument and stores time.Time
// arguments as Unix nanoseconds (the DSN asks for it).
type conn struct {
	h handle
	// now is the start of the transaction; zero outside one.
	now  time.Time
	path string
}

var _ store.Tx = conn{}

// Exec implements store.Conn.
func (c conn) Exec(ctx context.Context, query string, args ...any) (int64, error) {
	query, args = c.bind(query, args)
	res, err := c.h.ExecContext(ctx, query, args...)
	if err != nil {
		return 0, c.classify(err)
	}
	n, err := res.RowsAffected()
	return n, c.classify(err)
}

// Query implements store.Conn.
func (c conn) Query(ctx context.Context, query string, args ...any) (store.Rows, error) {
	query, args = c.bind(query, args)
	rows, err := c.h.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, c.classify(err)
	}
	return store.ClassifiedRows(rows, func() { rows.Close() }, c.classify), nil
}

// QueryRow implements store.Conn.
func (c conn) QueryRow(ctx context.Context, query string, args ...any) store.Row {
	query, args = c.bind(query, args)
	return store.Classified(c.h.QueryRowContext(ctx, query, args...), c.classify)
}

// bind gives now() a value: SQLite has no such function, so the
// transaction's start is bound in its place, as PostgreSQL's now() is.
func (c conn) bind(query string, args []any) (string, []any) {
	if !strings.Contains(query, "now()") {
		return query, args
	}
	now := c.now
	if now.IsZero() {
		now = time.Now()
	}
	return strings.ReplaceAll(query, "now()", "$now"), append(args[:len(args):len(args)], sql.Named("now", now))
}

// database is the store's *sql.DB as a store.Database.
type database struct {
	conn
	db *sql.DB
}

// Tx implements store.Database.
func (d database) Tx(ctx context.Context, fn func(store.Tx) error) error {
	tx, err := d.db.BeginTx(ctx, nil)
	if err != nil {
		return d.classify(err)
	}
	defer tx.Rollback() // after a commit: sql.ErrTxDone
	if err := fn(conn{h: tx, now: time.Now(), path: d.path}); err != nil {
		return d.classify(err)
	}
	return d.classify(tx.Commit())
}

// classify says what a failure means (store.Classify).
func (c conn) classify(err error) error { return store.Classify(err, sql.ErrNoRows, c.explain) }

// explain says what a failure of SQLite means and what to do, so callers
// (and users) learn what happened.
func (c conn) explain(err error) error {
	var se *sqlite3.Error
	if !errors.As(err, &se) {
		return err
	}
	switch se.Code() & 0xff { // the primary result code
	case sqlitelib.SQLITE_BUSY, sqlitelib.SQLITE_LOCKED:
		return fmt.Errorf("%w: %s is locked by another program (an open sqlite3 shell, another tether?): close it and retry (%v)", store.ErrLocked, c.path, err)
	case sqlitelib.SQLITE_CORRUPT, sqlitelib.SQLITE_NOTADB:
		return fmt.Errorf("%w: %s is damaged or not a Tether store (%v): move it aside or delete it; it only holds deploy history, the model is the source of truth", store.ErrCorrupt, c.path, err)
	case sqlitelib.SQLITE_CONSTRAINT:
		switch se.Code() {
		case sqlitelib.SQLITE_CONSTRAINT_UNIQUE, sqlitelib.SQLITE_CONSTRAINT_PRIMARYKEY:
			return fmt.Errorf("%w: %v", model.ErrExists, err)
		case sqlitelib.SQLITE_CONSTRAINT_FOREIGNKEY:
			return fmt.Errorf("%w: %v", model.ErrNotFound, err)
		case sqlitelib.SQLITE_CONSTRAINT_CHECK, sqlitelib.SQLITE_CONSTRAINT_NOTNULL:
			return fmt.Errorf("%w: %v", model.ErrInvalid, err)
		}
		return fmt.Errorf("%w: %v", model.ErrConflict, err)
	case sqlitelib.SQLITE_READONLY, sqlitelib.SQLITE_CANTOPEN, sqlitelib.SQLITE_PERM:
		return fmt.Errorf("cannot write %s (%v): check the directory's permissions", c.path, err)
	case sqlitelib.SQLITE_FULL:
		return fmt.Errorf("the disk holding %s is full: %w", c.path, err)
	}
	return err
}
