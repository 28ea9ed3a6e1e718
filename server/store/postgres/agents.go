package postgres

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tetherhq/tether/model"
	"github.com/tetherhq/tether/server/store"
)

// UpsertAgent implements store.Store.
func (s *Store) UpsertAgent(ctx context.Context, a model.Agent) error {
	if err := model.ValidateAgentName(a.Name); err != nil {
		return fmt.Errorf("upsert agent: %w: %w", store.ErrInvalid, err)
	}
	if a.State == "" {
		a.State = model.AgentPending
	}
	now := time.Now()
	if a.FirstSeen.IsZero() {
		a.FirstSeen = now
	}
	if a.LastSeen.IsZero() {
		a.LastSeen = now
	}
	labels, facts, kinds, err := store.EncodeAgent(&a)
	if err != nil {
		return fmt.Errorf("upsert agent: %w", err)
	}
	_, err = s.pool.Exec(ctx, `
		INSERT INTO agents (env, name, state, public_key, labels, facts, kinds, generation, paused, first_seen, last_seen, online)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)
		ON CONFLICT (env, name) DO UPDATE SET
			state = excluded.state, public_key = excluded.public_key, labels = excluded.labels,
			facts = excluded.facts, kinds = excluded.kinds, generation = excluded.generation,
			paused = excluded.paused, last_seen = excluded.last_seen, online = excluded.online`,
		a.Env, a.Name, a.State, a.PublicKey, string(labels), string(facts), string(kinds), a.Generation, a.Paused, a.FirstSeen, a.LastSeen, a.Connected)
	return s.wrap("upsert agent "+a.Name, err)
}

const agentColumns = `env, name, state, public_key, labels, facts, kinds, generation, paused, first_seen, last_seen, online`

func scanAgent(r pgx.Row) (model.Agent, error) {
	var a model.Agent
	var labels, facts, kinds []byte
	if err := r.Scan(&a.Env, &a.Name, &a.State, &a.PublicKey, &labels, &facts, &kinds, &a.Generation, &a.Paused, &a.FirstSeen, &a.LastSeen, &a.Connected); err != nil {
		return a, err
	}
	a.FirstSeen, a.LastSeen = a.FirstSeen.UTC(), a.LastSeen.UTC()
	return a, store.DecodeAgent(&a, labels, facts, kinds)
}

// GetAgent implements store.Store.
func (s *Store) GetAgent(ctx context.Context, env, name string) (model.Agent, error) {
	a, err := scanAgent(s.pool.QueryRow(ctx, `SELECT `+agentColumns+` FROM agents WHERE env = $1 AND name = $2`, env, name))
	return a, s.wrap("agent "+name, err)
}

// ListAgents implements store.Store.
func (s *Store) ListAgents(ctx context.Context, env string) ([]model.Agent, error) {
	rows, err := s.pool.Query(ctx, `SELECT `+agentColumns+` FROM agents WHERE env = $1 ORDER BY name`, env)
	if err != nil {
		return nil, s.wrap("list agents", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (model.Agent, error) { return scanAgent(r) })
	return out, s.wrap("list agents", err)
}

// RecordResults implements store.Store. Whatever the number of batches it
// takes four statements: mark the batches ingested, update the statuses,
// append the action log, commit.
func (s *Store) RecordResults(ctx context.Context, batches []store.ResultBatch) ([]bool, error) {
	for i := range batches {
		if err := store.CheckBatch(&batches[i]); err != nil {
			return nil, fmt.Errorf("record results: %w", err)
		}
	}
	fresh := make([]bool, len(batches))
	err := s.tx(ctx, "record results", func(tx pgx.Tx) error {
		clear(fresh)
		if err := markIngested(ctx, tx, batches, fresh); err != nil {
			return err
		}
		var st, verified statusRows
		var act struct {
			env, id, agent, kind, deploy, state, message []string
			changes                                      []*string
			version, dur                                 []int64
		}
		batch := &pgx.Batch{}
		for bi := range batches {
			if !fresh[bi] {
				continue
			}
			b := &batches[bi]
			seq := int64(b.Seq)
			for i := range b.Results {
				r := &b.Results[i]
				id := r.ID.String()
				switch {
				case !r.DryRun:
					st = append(st, statusRow{b.Env, id, string(r.State), r.Message, b.Version, seq, false, store.AppliedHash(r)})
				case r.State == model.StateDeployed:
					verified = append(verified, statusRow{b.Env, id, string(store.Verified(r)), "", b.Version, seq, true, nil})
				}
				if !store.Logged(r) {
					continue
				}
				changes, err := store.EncodeChanges(r)
				if err != nil {
					return err
				}
				var cp *string
				if changes != nil {
					c := string(changes)
					cp = &c
				}
				act.env = append(act.env, b.Env)
				act.id = append(act.id, id)
				act.agent = append(act.agent, b.Agent)
				act.kind = append(act.kind, string(store.ActionKindOf(r)))
				act.deploy = append(act.deploy, b.DeployID)
				act.state = append(act.state, string(r.State))
				act.message = append(act.message, r.Message)
				act.changes = append(act.changes, cp)
				act.version = append(act.version, b.Version)
				act.dur = append(act.dur, int64(r.Duration))
			}
			if err := queueAlerts(batch, b.Alerts); err != nil {
				return err
			}
			for _, a := range b.Alerts {
				if store.SetsCompliance(&a) {
					verified = append(verified, statusRow{b.Env, a.ID.String(), string(a.Compliance), "", a.Version, seq, false, nil})
				}
			}
		}
		if len(st) > 0 {
			// A result only updates a status row of its version or an
			// older one, or of a newer version with the same desired
			// state: a late result of an old deploy never overwrites a
			// newer state, nor one from a later message of the agent;
			// nor does it set a compliance a later report set.
			env, id, state, msg, ver, seq, _, hash := st.columns()
			batch.Queue(`UPDATE resource_status rs SET
					state = u.state,
					compliance = CASE WHEN u.seq != 0 AND rs.compliance_seq > u.seq THEN rs.compliance
						ELSE CASE u.state WHEN 'deployed' THEN 'compliant' WHEN 'failed' THEN 'non_compliant' ELSE rs.compliance END END,
					last_verified = CASE WHEN u.state = 'deployed' AND (u.seq = 0 OR rs.compliance_seq <= u.seq) THEN now() ELSE rs.last_verified END,
					compliance_seq = CASE WHEN u.state IN ('deployed', 'failed') THEN GREATEST(rs.compliance_seq, u.seq) ELSE rs.compliance_seq END,
					message = u.message, updated_at = now(), seq = GREATEST(rs.seq, u.seq)
				FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::bigint[], $6::bigint[], $7::bytea[]) AS u(env, id, state, message, version, seq, hash)
				WHERE rs.env = u.env AND rs.resource_id = u.id AND (rs.version <= u.version OR rs.hash = u.hash) AND (u.seq = 0 OR rs.seq <= u.seq)`,
				env, id, state, msg, ver, seq, hash)
		}
		if len(verified) > 0 {
			// A verification of the version a resource holds sets its
			// compliance only: a dry run's only when the resource is
			// deployed, a drift report's also while its deploy's result
			// is on the way.
			env, id, compliance, _, ver, seq, deployedOnly, _ := verified.columns()
			batch.Queue(`UPDATE resource_status rs SET
					compliance = u.compliance, last_verified = now(), compliance_seq = GREATEST(rs.compliance_seq, u.seq)
				FROM unnest($1::text[], $2::text[], $3::text[], $4::bigint[], $5::bigint[], $6::bool[]) AS u(env, id, compliance, version, seq, deployed_only)
				WHERE rs.env = u.env AND rs.resource_id = u.id AND rs.version = u.version
					AND (NOT u.deployed_only OR rs.state = 'deployed') AND (u.seq = 0 OR rs.compliance_seq <= u.seq)`,
				env, id, compliance, ver, seq, deployedOnly)
		}
		if len(act.id) > 0 {
			batch.Queue(`INSERT INTO actions (env, resource_id, agent, kind, deploy_id, version, state, changes, message, at, duration_ns)
				SELECT env, id, agent, kind, deploy, version, state, changes::jsonb, message, now(), dur
				FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::bigint[], $7::text[], $8::text[], $9::text[], $10::bigint[])
					WITH ORDINALITY AS u(env, id, agent, kind, deploy, version, state, changes, message, dur, n)
				ORDER BY n`,
				act.env, act.id, act.agent, act.kind, act.deploy, act.version, act.state, act.changes, act.message, act.dur)
		}
		if batch.Len() == 0 {
			return nil
		}
		return tx.SendBatch(ctx, batch).Close()
	})
	if err != nil {
		return nil, err
	}
	return fresh, nil
}

// statusRow is one resource's status update: a result's state, or a
// verification's compliance (in state; deployedOnly: applies to deployed
// resources only).
type statusRow struct {
	env, id, state, message string
	version, seq            int64
	deployedOnly            bool
	// hash is the desired state a result is about (nil: not said).
	hash []byte
}

type statusRows []statusRow

// columns returns the rows as unnest arrays, one row per resource: of
// several updates of one resource the one from the agent's latest message
// wins (the latest in the list among equals). Rows come sorted, so
// concurrent ingests lock rows in one order and never deadlock.
func (rows statusRows) columns() (env, id, state, msg []string, ver, seq []int64, deployedOnly []bool, hash [][]byte) {
	slices.SortStableFunc(rows, func(a, b statusRow) int {
		return cmp.Or(cmp.Compare(a.env, b.env), cmp.Compare(a.id, b.id), cmp.Compare(a.seq, b.seq))
	})
	for i, r := range rows {
		if i+1 < len(rows) && rows[i+1].env == r.env && rows[i+1].id == r.id {
			continue
		}
		env, id, state, msg = append(env, r.env), append(id, r.id), append(state, r.state), append(msg, r.message)
		ver, seq, deployedOnly = append(ver, r.version), append(seq, r.seq), append(deployedOnly, r.deployedOnly)
		hash = append(hash, r.hash)
	}
	return env, id, state, msg, ver, seq, deployedOnly, hash
}

// markIngested records the batches' (env, agent, seq) and sets fresh[i] for
// each batch seen for the first time; batches without a seq are always fresh.
func markIngested(ctx context.Context, tx pgx.Tx, batches []store.ResultBatch, fresh []bool) error {
	type key struct {
		env, agent string
		seq        int64
	}
	first := map[key]int{}
	var env, agent []string
	var seq []int64
	for i := range batches {
		b := &batches[i]
		if b.Seq == 0 {
			fresh[i] = true
			continue
		}
		k := key{b.Env, b.Agent, int64(b.Seq)}
		if _, dup := first[k]; dup {
			continue
		}
		first[k] = i
		env, agent, seq = append(env, k.env), append(agent, k.agent), append(seq, k.seq)
	}
	if len(seq) == 0 {
		return nil
	}
	rows, err := tx.Query(ctx, `INSERT INTO ingested (env, agent, seq, at)
		SELECT env, agent, seq, now() FROM unnest($1::text[], $2::text[], $3::bigint[]) AS u(env, agent, seq)
		ON CONFLICT DO NOTHING RETURNING env, agent, seq`, env, agent, seq)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		var k key
		if err := rows.Scan(&k.env, &k.agent, &k.seq); err != nil {
			return err
		}
		fresh[first[k]] = true
	}
	return rows.Err()
}

// ForgetIngested implements store.Store.
func (s *Store) ForgetIngested(ctx context.Context, before time.Time) error {
	_, err := s.pool.Exec(ctx, `DELETE FROM ingested WHERE at < $1`, before)
	return s.wrap("forget ingested", err)
}

// Statuses implements store.Store.
func (s *Store) Statuses(ctx context.Context, env string, f store.StatusFilter) ([]model.ResourceStatus, error) {
	q := `SELECT resource_id, version, hash, state, compliance, last_verified, message, updated_at
		FROM resource_status WHERE env = $1`
	args := []any{env}
	add := func(cond string, v any) {
		args = append(args, v)
		q += fmt.Sprintf(cond, len(args))
	}
	if f.Agent != "" {
		add(` AND agent = $%d`, f.Agent)
	}
	if f.Type != "" {
		add(` AND starts_with(resource_id, $%d)`, f.Type+"[")
	}
	if f.State != "" {
		add(` AND state = $%d`, string(f.State))
	}
	if f.Compliance != "" {
		add(` AND compliance = $%d`, string(f.Compliance))
	}
	rows, err := s.pool.Query(ctx, q, args...)
	if err != nil {
		return nil, s.wrap("statuses", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (model.ResourceStatus, error) {
		var st model.ResourceStatus
		var id string
		var hash []byte
		if err := r.Scan(&id, &st.Version, &hash, &st.State, &st.Compliance, &st.LastVerified, &st.Message, &st.UpdatedAt); err != nil {
			return st, err
		}
		var err error
		if st.ID, err = model.ParseID(id); err != nil {
			return st, fmt.Errorf("%w: %w", store.ErrCorrupt, err)
		}
		copy(st.Hash[:], hash)
		st.UpdatedAt = st.UpdatedAt.UTC()
		if st.LastVerified != nil {
			t := st.LastVerified.UTC()
			st.LastVerified = &t
		}
		return st, nil
	})
	if err != nil {
		return nil, s.wrap("statuses", err)
	}
	slices.SortFunc(out, func(a, b model.ResourceStatus) int { return a.ID.Compare(b.ID) })
	return out, nil
}

// Actions implements store.Store.
func (s *Store) Actions(ctx context.Context, env string, id model.ID, limit int) ([]model.Action, error) {
	return s.actions(ctx, "actions of "+id.String(), `env = $1 AND resource_id = $2 ORDER BY seq DESC LIMIT $3`, env, id.String(), limitOf(limit))
}

// DeployActions implements store.Store.
func (s *Store) DeployActions(ctx context.Context, env, deployID string, limit int) ([]model.Action, error) {
	return s.actions(ctx, "actions of deploy "+deployID, `env = $1 AND deploy_id = $2 ORDER BY seq LIMIT $3`, env, deployID, limitOf(limit))
}

func (s *Store) actions(ctx context.Context, op, where string, args ...any) ([]model.Action, error) {
	rows, err := s.pool.Query(ctx, `SELECT seq, resource_id, kind, deploy_id, version, state, changes, message, at, duration_ns
		FROM actions WHERE `+where, args...)
	if err != nil {
		return nil, s.wrap(op, err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (model.Action, error) {
		var a model.Action
		var id string
		var changes []byte
		var dur int64
		if err := r.Scan(&a.Seq, &id, &a.Kind, &a.DeployID, &a.Version, &a.State, &changes, &a.Message, &a.At, &dur); err != nil {
			return a, err
		}
		a.At, a.Duration = a.At.UTC(), time.Duration(dur)
		return a, store.DecodeAction(&a, id, changes)
	})
	return out, s.wrap(op, err)
}

func limitOf(n int) int {
	if n <= 0 {
		return 100
	}
	return n
}
