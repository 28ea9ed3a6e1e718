package postgres

import (
	"context"

	"github.com/jackc/pgx/v5"

	"github.com/tetherhq/tether/model"
	"github.com/tetherhq/tether/server/store"
)

// InsertResources implements store.Bulk: the rows go through COPY into a
// temporary table, then into the real ones in two statements: one round
// trip per table instead of one per resource.
func (c conn) InsertResources(ctx context.Context, v *model.Version, rows *store.Set) error {
	if rows.Len() == 0 {
		return nil
	}
	if _, err := c.h.Exec(ctx, `CREATE TEMP TABLE put_staging
		(resource_id TEXT, agent TEXT, hash BYTEA, key BYTEA, body BYTEA) ON COMMIT DROP`); err != nil {
		return err
	}
	src := pgx.CopyFromSlice(rows.Len(), func(i int) ([]any, error) {
		r := rows.Row(i)
		return []any{r.ID, r.Agent, r.Hash, r.Key, r.Body}, nil
	})
	if _, err := c.h.CopyFrom(ctx, pgx.Identifier{"put_staging"}, []string{"resource_id", "agent", "hash", "key", "body"}, src); err != nil {
		return err
	}
	if _, err := c.h.Exec(ctx, `INSERT INTO resource_bodies (key, body)
		SELECT DISTINCT ON (key) key, body FROM put_staging ORDER BY key
		ON CONFLICT (key) DO NOTHING`); err != nil {
		return err
	}
	_, err := c.h.Exec(ctx, `INSERT INTO version_resources (env, number, resource_id, agent, hash, body_key)
		SELECT $1, $2, resource_id, agent, hash, key FROM put_staging`, v.Env, v.Number)
	return err
}
