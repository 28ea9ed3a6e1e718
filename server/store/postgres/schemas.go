package postgres

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"regexp"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/tetherhq/tether/server/store"
)

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

func onSchema(ctx context.Context, u, schema string, sql ...string) error {
	if !schemaName.MatchString(schema) {
		return fmt.Errorf("schema %q: %w: want lower-case letters, digits and _", schema, store.ErrInvalid)
	}
	conn, err := pgx.Connect(ctx, u)
	if err != nil {
		return fmt.Errorf("schema %s: %w: %v", schema, store.ErrUnavailable, err)
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

// LeaseHolder returns the database session (backend pid) that holds the
// lease called name (see Store.Lead) in the schema u selects; ok is false
// when nobody holds it.
func LeaseHolder(ctx context.Context, u, name string) (pid uint32, ok bool, err error) {
	conn, err := pgx.Connect(ctx, u)
	if err != nil {
		return 0, false, fmt.Errorf("lease holder: %w: %v", store.ErrUnavailable, err)
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
		return fmt.Errorf("terminate session %d: %w: %v", pid, store.ErrUnavailable, err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	var ok bool
	if err := conn.QueryRow(ctx, `SELECT pg_terminate_backend($1)`, pid).Scan(&ok); err != nil {
		return fmt.Errorf("terminate session %d: %w", pid, err)
	}
	if !ok {
		return fmt.Errorf("terminate session %d: %w: no such session", pid, store.ErrNotFound)
	}
	return nil
}
