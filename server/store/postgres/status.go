package postgres

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tetherhq/tether/server/store"
)

// BeginIngest implements store.Bulk: one round trip marks every batch and
// reads and locks every status, however many there are.
func (c conn) BeginIngest(ctx context.Context, batches []store.ResultBatch, fresh []bool, keys []store.StatusKey) ([]store.Status, error) {
	type mark struct {
		env, agent string
		seq        int64
	}
	first := map[mark]int{} // the batch a mark stands for
	var env, agent []string
	var seq []int64
	for i := range batches {
		b := &batches[i]
		if b.Seq == 0 {
			fresh[i] = true
			continue
		}
		m := mark{b.Env, b.Agent, int64(b.Seq)}
		if _, dup := first[m]; dup {
			continue
		}
		first[m] = i
		env, agent, seq = append(env, m.env), append(agent, m.agent), append(seq, m.seq)
	}
	batch := &pgx.Batch{}
	if len(seq) > 0 {
		// In key order: two replicas handed the same redelivered batches
		// wait on each other's marks in one order.
		batch.Queue(`INSERT INTO ingested (env, agent, seq, at)
			SELECT env, agent, seq, now() FROM unnest($1::text[], $2::text[], $3::bigint[]) AS u(env, agent, seq)
			ORDER BY env, agent, seq
			ON CONFLICT DO NOTHING RETURNING env, agent, seq`, env, agent, seq).Query(func(rows pgx.Rows) error {
			for rows.Next() {
				var m mark
				if err := rows.Scan(&m.env, &m.agent, &m.seq); err != nil {
					return err
				}
				fresh[first[m]] = true
			}
			return rows.Err()
		})
	}
	var out []store.Status
	if len(keys) > 0 {
		kenv, kid := make([]string, len(keys)), make([]string, len(keys))
		for i, k := range keys {
			kenv[i], kid[i] = k.Env, k.ID
		}
		batch.Queue(`SELECT `+store.StatusColumns+` FROM resource_status
			WHERE (env, resource_id) IN (SELECT * FROM unnest($1::text[], $2::text[]))
			ORDER BY env, resource_id FOR NO KEY UPDATE`, kenv, kid).Query(func(rows pgx.Rows) error {
			for rows.Next() {
				st, err := store.ScanStatus(rows)
				if err != nil {
					return err
				}
				out = append(out, st)
			}
			return rows.Err()
		})
	}
	if batch.Len() == 0 {
		return nil, nil
	}
	return out, c.h.SendBatch(ctx, batch).Close()
}

// WriteIngest implements store.Bulk: one round trip, one statement per
// table however many rows, and the statements given.
func (c conn) WriteIngest(ctx context.Context, in *store.Ingest) error {
	batch := &pgx.Batch{}
	if n := len(in.Statuses); n > 0 {
		env, id, state, compliance, msg := make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n)
		seq, cseq := make([]int64, n), make([]int64, n)
		updated, verified := make([]bool, n), make([]bool, n)
		for i, st := range in.Statuses {
			env[i], id[i], state[i], compliance[i], msg[i] = st.Env, st.ID, string(st.State), string(st.Compliance), st.Message
			seq[i], cseq[i], updated[i], verified[i] = st.Seq, st.ComplianceSeq, st.Updated, st.Verified
		}
		batch.Queue(`UPDATE resource_status rs SET
				state = u.state, compliance = u.compliance, message = u.message, seq = u.seq, compliance_seq = u.compliance_seq,
				updated_at = CASE WHEN u.updated THEN now() ELSE rs.updated_at END,
				last_verified = CASE WHEN u.verified THEN now() ELSE rs.last_verified END
			FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::bigint[], $7::bigint[], $8::bool[], $9::bool[])
				AS u(env, id, state, compliance, message, seq, compliance_seq, updated, verified)
			WHERE rs.env = u.env AND rs.resource_id = u.id`,
			env, id, state, compliance, msg, seq, cseq, updated, verified)
	}
	if n := len(in.LastSeqs); n > 0 {
		env, agent, seq := make([]string, n), make([]string, n), make([]int64, n)
		for i, a := range in.LastSeqs {
			env[i], agent[i], seq[i] = a.Env, a.Agent, a.Seq
		}
		// A batch numbered past every event recorded of its agent says
		// the agent lives now; an older one (delivered late, or replayed)
		// does not. The rows are locked in order first (lockAgents).
		batch.Queue(`WITH u AS (SELECT * FROM unnest($1::text[], $2::text[], $3::bigint[]) AS u(env, agent, seq)), `+lockAgents+`
			UPDATE agents a SET last_seq = GREATEST(a.last_seq, u.seq),
				last_seen = CASE WHEN u.seq > a.last_seq THEN GREATEST(a.last_seen, now()) ELSE a.last_seen END
			FROM u JOIN locked l ON l.env = u.env AND l.name = u.agent
			WHERE a.env = u.env AND a.name = u.agent`, env, agent, seq)
	}
	if n := len(in.Actions); n > 0 {
		env, id, agent, kind, deploy, state, msg := make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n)
		changes := make([]*string, n)
		version, dur := make([]int64, n), make([]int64, n)
		for i, a := range in.Actions {
			env[i], id[i], agent[i], kind[i], deploy[i], state[i], msg[i] = a.Env, a.ID, a.Agent, string(a.Kind), a.DeployID, string(a.State), a.Message
			if a.Changes != nil {
				c := string(a.Changes)
				changes[i] = &c
			}
			version[i], dur[i] = a.Version, int64(a.Duration)
		}
		batch.Queue(`INSERT INTO actions (env, resource_id, agent, kind, deploy_id, version, state, changes, message, at, duration_ns)
			SELECT env, id, agent, kind, deploy, version, state, changes::jsonb, message, now(), dur
			FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::bigint[], $7::text[], $8::text[], $9::text[], $10::bigint[])
				WITH ORDINALITY AS u(env, id, agent, kind, deploy, version, state, changes, message, dur, n)
			ORDER BY n`,
			env, id, agent, kind, deploy, version, state, changes, msg, dur)
	}
	for _, st := range in.Statements {
		batch.Queue(st.SQL, st.Args...)
	}
	if batch.Len() == 0 {
		return nil
	}
	return c.h.SendBatch(ctx, batch).Close()
}

// MarkSeen implements store.Bulk: one statement however many agents.
func (c conn) MarkSeen(ctx context.Context, seen []store.AgentSeen) error {
	n := len(seen)
	env, agent, seq, at := make([]string, n), make([]string, n), make([]int64, n), make([]time.Time, n)
	for i, a := range seen {
		env[i], agent[i], seq[i], at[i] = a.Env, a.Agent, a.Seq, a.At
	}
	// Only an event numbered past every one recorded of its agent says
	// it lives: a captured event replayed moves nothing. The rows are
	// locked in order first (lockAgents).
	_, err := c.h.Exec(ctx, `WITH u AS (SELECT * FROM unnest($1::text[], $2::text[], $3::bigint[], $4::timestamptz[]) AS u(env, agent, seq, at)), `+lockAgents+`
		UPDATE agents a SET
			online = CASE WHEN u.at > a.last_seen AND u.seq > a.last_seq THEN true ELSE a.online END,
			last_seen = CASE WHEN u.seq > a.last_seq THEN GREATEST(a.last_seen, u.at) ELSE a.last_seen END,
			last_seq = GREATEST(a.last_seq, u.seq)
		FROM u JOIN locked l ON l.env = u.env AND l.name = u.agent
		WHERE a.env = u.env AND a.name = u.agent`, env, agent, seq, at)
	return err
}

// lockAgents is a common table expression, locked, that locks the rows of
// the agents named by u (env, agent) in the order of their keys, before a
// statement updates them: an UPDATE locks rows in the order its plan
// meets them, so two statements updating many agents at once (an ingest
// transaction's sequence numbers and the heartbeats' seen-marks, or two
// replicas' ingests) could each hold a row the other waits for — a
// deadlock, found by PostgreSQL after a second and ended by failing one.
// Materialized: a row-locking query is run once, whole, before the update.
const lockAgents = `locked AS MATERIALIZED (SELECT a.env, a.name FROM agents a JOIN u ON a.env = u.env AND a.name = u.agent
	ORDER BY a.env, a.name FOR NO KEY UPDATE OF a)`
