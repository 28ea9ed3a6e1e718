package sqlite

import (
	"context"

	"github.com/tetherhq/tether/model"
	"github.com/tetherhq/tether/server/store"
)

// InsertResources implements store.Bulk: two prepared statements, run once
// per resource.
func (c conn) InsertResources(ctx context.Context, v *model.Version, rows *store.Set) error {
	bodies, err := c.h.PrepareContext(ctx, `INSERT INTO resource_bodies (key, body) VALUES ($1, $2) ON CONFLICT (key) DO NOTHING`)
	if err != nil {
		return err
	}
	defer bodies.Close()
	refs, err := c.h.PrepareContext(ctx, `INSERT INTO version_resources (env, number, resource_id, agent, hash, body_key)
		VALUES ($1, $2, $3, $4, $5, $6)`)
	if err != nil {
		return err
	}
	defer refs.Close()
	for i := range rows.Len() {
		r := rows.Row(i)
		if _, err := bodies.ExecContext(ctx, r.Key, r.Body); err != nil {
			return err
		}
		if _, err := refs.ExecContext(ctx, v.Env, v.Number, r.ID, r.Agent, r.Hash, r.Key); err != nil {
			return err
		}
	}
	return nil
}
