package postgres

import (
	"context"
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
