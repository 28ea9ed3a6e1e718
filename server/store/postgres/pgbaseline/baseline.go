// Package pgbaseline writes status results to PostgreSQL as bare pgx
// would, with none of the store's work: the baseline `tether bench ingest`
// measures the server's ingest path against. It is benchmark code, kept out
// of the production store; only the benchmarks import it.
package pgbaseline

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tetherhq/tether/model"
	"github.com/tetherhq/tether/server/store"
)

// WriteBare writes what RecordResults writes for batches (the deduplication
// marks and the resource statuses), as bare pgx would: chunk batches per
// transaction, one connection, no validation, no ordering, no action log.
// It is the baseline `tether bench ingest` measures the server's ingest
// path against; it returns the time the writes took.
func WriteBare(ctx context.Context, url string, batches []store.ResultBatch, chunk int) (time.Duration, error) {
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return 0, fmt.Errorf("baseline: %w: %v", model.ErrUnavailable, err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	chunk = max(chunk, 1)
	start := time.Now()
	for lo := 0; lo < len(batches); lo += chunk {
		part := batches[lo:min(lo+chunk, len(batches))]
		var menv, magent []string
		var mseq []int64
		var env, id, state, msg []string
		var ver, seq []int64
		for _, b := range part {
			menv, magent, mseq = append(menv, b.Env), append(magent, b.Agent), append(mseq, int64(b.Seq))
			for _, r := range b.Results {
				env, id, state, msg = append(env, b.Env), append(id, r.ID.String()), append(state, string(r.State)), append(msg, r.Message)
				ver, seq = append(ver, b.Version), append(seq, int64(b.Seq))
			}
		}
		err := pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
			batch := &pgx.Batch{}
			batch.Queue(`INSERT INTO ingested (env, agent, seq, at)
				SELECT env, agent, seq, now() FROM unnest($1::text[], $2::text[], $3::bigint[]) AS u(env, agent, seq)
				ON CONFLICT DO NOTHING`, menv, magent, mseq)
			batch.Queue(`UPDATE resource_status rs SET state = u.state, message = u.message, updated_at = now(), seq = u.seq
				FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::bigint[], $6::bigint[]) AS u(env, id, state, message, version, seq)
				WHERE rs.env = u.env AND rs.resource_id = u.id`, env, id, state, msg, ver, seq)
			return tx.SendBatch(ctx, batch).Close()
		})
		if err != nil {
			return 0, fmt.Errorf("baseline: %w", err)
		}
	}
	return time.Since(start), nil
}
