package postgres

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"
)

// ListenEvents calls wake whenever a process appends to the event log
// (NOTIFY, on a connection of its own), until ctx ends; and once each
// time it (re)connects, since appends while it was not listening were not
// told. A lost connection is reconnected after a pause; it returns
// ctx.Err().
func (s *Store) ListenEvents(ctx context.Context, wake func()) error {
	pause := time.Second
	for ctx.Err() == nil {
		// A lost connection is not reported: the next one wakes the
		// followers as it starts, covering what was appended meanwhile,
		// and followers read the log anyway when their own process
		// appends.
		_ = s.listen(ctx, wake)
		select {
		case <-ctx.Done():
		case <-time.After(pause):
		}
	}
	return ctx.Err()
}

func (s *Store) listen(ctx context.Context, wake func()) error {
	conn, err := pgx.ConnectConfig(ctx, s.pool.Config().ConnConfig.Copy())
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	var schema string
	if err := conn.QueryRow(ctx, `SELECT current_schema()`).Scan(&schema); err != nil {
		return err
	}
	if _, err := conn.Exec(ctx, `LISTEN `+pgx.Identifier{eventsChannel + schema}.Sanitize()); err != nil {
		return err
	}
	wake()
	for {
		if _, err := conn.WaitForNotification(ctx); err != nil {
			return err
		}
		wake()
	}
}
