package sqlite

import (
	"context"
	"encoding/json"

	"github.com/tetherhq/tether/server/store"
)

// BeginIngest implements store.Bulk. The transaction holds the whole file,
// so reading the statuses locks them.
func (c conn) BeginIngest(ctx context.Context, batches []store.ResultBatch, fresh []bool, keys []store.StatusKey) ([]store.Status, error) {
	for i := range batches {
		b := &batches[i]
		if b.Seq == 0 {
			fresh[i] = true
			continue
		}
		n, err := c.Exec(ctx, `INSERT INTO ingested (env, agent, seq, at) VALUES ($1, $2, $3, $4) ON CONFLICT DO NOTHING`,
			b.Env, b.Agent, int64(b.Seq), c.now)
		if err != nil {
			return nil, err
		}
		fresh[i] = n > 0
	}
	// One query per environment, its resources' IDs in a JSON array.
	var out []store.Status
	for lo := 0; lo < len(keys); {
		hi := lo + 1
		for hi < len(keys) && keys[hi].Env == keys[lo].Env {
			hi++
		}
		ids := make([]string, 0, hi-lo)
		for _, k := range keys[lo:hi] {
			ids = append(ids, k.ID)
		}
		list, err := json.Marshal(ids)
		if err != nil {
			return nil, err
		}
		rows, err := c.Query(ctx, `SELECT `+store.StatusColumns+` FROM resource_status
			WHERE env = $1 AND resource_id IN (SELECT value FROM json_each($2))`, keys[lo].Env, list)
		if err != nil {
			return nil, err
		}
		for rows.Next() {
			st, err := store.ScanStatus(rows)
			if err != nil {
				rows.Close()
				return nil, err
			}
			out = append(out, st)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return nil, err
		}
		lo = hi
	}
	return out, nil
}

// WriteIngest implements store.Bulk: prepared statements, run once per row.
func (c conn) WriteIngest(ctx context.Context, in *store.Ingest) error {
	if len(in.Statuses) > 0 {
		stmt, err := c.h.PrepareContext(ctx, `UPDATE resource_status SET
				state = $3, compliance = $4, message = $5, seq = $6, compliance_seq = $7,
				updated_at = CASE WHEN $8 THEN $10 ELSE updated_at END,
				last_verified = CASE WHEN $9 THEN $10 ELSE last_verified END
			WHERE env = $1 AND resource_id = $2`)
		if err != nil {
			return err
		}
		defer stmt.Close()
		for _, st := range in.Statuses {
			if _, err := stmt.ExecContext(ctx, st.Env, st.ID, st.State, st.Compliance, st.Message, st.Seq, st.ComplianceSeq,
				st.Updated, st.Verified, c.now); err != nil {
				return err
			}
		}
	}
	for _, a := range in.LastSeqs {
		// A batch numbered past every event recorded of its agent says
		// the agent lives now; an older one (delivered late, or replayed)
		// does not.
		if _, err := c.Exec(ctx, `UPDATE agents SET last_seq = MAX(last_seq, $1),
				last_seen = CASE WHEN $1 > last_seq THEN MAX(last_seen, $4) ELSE last_seen END
			WHERE env = $2 AND name = $3`, a.Seq, a.Env, a.Agent, c.now.UTC()); err != nil {
			return err
		}
	}
	if len(in.Actions) > 0 {
		stmt, err := c.h.PrepareContext(ctx, `INSERT INTO actions
			(env, resource_id, agent, kind, deploy_id, version, state, changes, message, at, duration_ns)
			VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)`)
		if err != nil {
			return err
		}
		defer stmt.Close()
		for _, a := range in.Actions {
			if _, err := stmt.ExecContext(ctx, a.Env, a.ID, a.Agent, a.Kind, a.DeployID, a.Version, a.State, a.Changes,
				a.Message, c.now, int64(a.Duration)); err != nil {
				return err
			}
		}
	}
	for _, st := range in.Statements {
		if _, err := c.Exec(ctx, st.SQL, st.Args...); err != nil {
			return err
		}
	}
	return nil
}

// MarkSeen implements store.Bulk: a prepared statement, run once per agent.
func (c conn) MarkSeen(ctx context.Context, seen []store.AgentSeen) error {
	stmt, err := c.h.PrepareContext(ctx, `UPDATE agents SET
			online = CASE WHEN $4 > last_seen AND $3 > last_seq THEN 1 ELSE online END,
			last_seen = CASE WHEN $3 > last_seq THEN MAX(last_seen, $4) ELSE last_seen END, last_seq = MAX(last_seq, $3)
		WHERE env = $1 AND name = $2`)
	if err != nil {
		return err
	}
	defer stmt.Close()
	for _, a := range seen {
		if _, err := stmt.ExecContext(ctx, a.Env, a.Agent, a.Seq, a.At); err != nil {
			return err
		}
	}
	return nil
}
