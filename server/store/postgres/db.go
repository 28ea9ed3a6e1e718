package postgres

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"syscall"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tetherhq/tether/model"
	"github.com/tetherhq/tether/server/store"
)

// handle runs statements: the pool, or a transaction.
type handle interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
	SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults
	CopyFrom(ctx context.Context, table pgx.Identifier, columns []string, rows pgx.CopyFromSource) (int64, error)
}

// conn is the database as store.SQL uses it, in a transaction or not.
type conn struct {
	h handle
	// where names the database for messages, without credentials.
	where string
}

var _ store.Tx = conn{}

// Exec implements store.Conn.
func (c conn) Exec(ctx context.Context, query string, args ...any) (int64, error) {
	tag, err := c.h.Exec(ctx, query, args...)
	if err != nil {
		return 0, c.classify(err)
	}
	return tag.RowsAffected(), nil
}

// Query implements store.Conn.
func (c conn) Query(ctx context.Context, query string, args ...any) (store.Rows, error) {
	rows, err := c.h.Query(ctx, query, args...)
	if err != nil {
		return nil, c.classify(err)
	}
	return store.ClassifiedRows(rows, rows.Close, c.classify), nil
}

// QueryRow implements store.Conn.
func (c conn) QueryRow(ctx context.Context, query string, args ...any) store.Row {
	return store.Classified(c.h.QueryRow(ctx, query, args...), c.classify)
}

// database is the pool as a store.Database.
type database struct {
	conn
	pool *pgxpool.Pool
}

// Tx implements store.Database.
func (d database) Tx(ctx context.Context, fn func(store.Tx) error) error {
	tx, err := d.pool.Begin(ctx)
	if err != nil {
		return d.classify(err)
	}
	if err := fn(conn{h: tx, where: d.where}); err != nil {
		_ = tx.Rollback(context.WithoutCancel(ctx))
		return d.classify(err)
	}
	return d.classify(tx.Commit(ctx))
}

// wrap says which operation failed, and what the failure means.
func (c conn) wrap(op string, err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("%s: %w", op, c.classify(err))
}

// classify says what a failure means (store.Classify).
func (c conn) classify(err error) error { return store.Classify(err, pgx.ErrNoRows, c.explain) }

// explain says what a failure of PostgreSQL means.
func (c conn) explain(err error) error {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		switch {
		case pe.Code == "23505":
			return fmt.Errorf("%w: %s", model.ErrExists, pe.Message)
		case pe.Code == "23503":
			return fmt.Errorf("%w: %s", model.ErrNotFound, pe.Message)
		case pe.Code == "23514", pe.Code == "23502", strings.HasPrefix(pe.Code, "22"):
			return fmt.Errorf("%w: %s", model.ErrInvalid, pe.Message)
		case pe.Code == "40001", pe.Code == "40P01":
			return fmt.Errorf("%w: %s: retry", model.ErrConflict, pe.Message)
		case strings.HasPrefix(pe.Code, "08"), strings.HasPrefix(pe.Code, "57P"), pe.Code == "53300":
			return fmt.Errorf("%w: PostgreSQL at %s: %s", model.ErrUnavailable, c.where, pe.Message)
		}
		return err
	}
	if unreachable(err) {
		return fmt.Errorf("%w: PostgreSQL at %s cannot be reached (%v): is it running?", model.ErrUnavailable, c.where, err)
	}
	return err
}

// unreachable reports whether err says the database could not be talked to.
func unreachable(err error) bool {
	var ne net.Error
	var ce *pgconn.ConnectError
	return errors.As(err, &ce) || errors.As(err, &ne) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE) ||
		pgconn.SafeToRetry(err) || strings.Contains(err.Error(), "closed pool") || strings.Contains(err.Error(), "conn closed")
}
