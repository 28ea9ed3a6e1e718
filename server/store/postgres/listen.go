package postgres

import (
	"context"
	"encoding/json"
	"time"

	"github.com/jackc/pgx/v5"
)

// agentsChannel is the channel the agents table's trigger tells changes of
// agents' records on, followed by the schema's name (cut to PostgreSQL's 63
// bytes, as the trigger cuts it).
const agentsChannel = "tether_agents_"

// ListenEvents calls wake whenever a process appends to the event log
// (NOTIFY, on a connection of its own), until ctx ends; and once each
// time it (re)connects, since appends while it was not listening were not
// told. A lost connection is reconnected after a pause; it returns
// ctx.Err().
func (s *Store) ListenEvents(ctx context.Context, wake func()) error {
	return s.listenLoop(ctx, func(schema string) string { return eventsChannel + schema }, func(bool) {}, func(conn *pgx.Conn) error {
		wake()
		for {
			if _, err := conn.WaitForNotification(ctx); err != nil {
				return err
			}
			wake()
		}
	})
}

// ListenAgents tells of changes of agents' records made by any process on
// the schema, until ctx ends: changed(env, name) after each commit that
// changed an agent's state, keys, labels, facts, pause, note or versions,
// or deleted it (not for the marks its events leave: last seen, online,
// last sequence number, generation held). listening(true) is called each
// time it starts listening (changes made before were not told: a copy held
// from before is to be read again), listening(false) when the connection
// is lost; it is reconnected after a pause. It returns ctx.Err().
func (s *Store) ListenAgents(ctx context.Context, listening func(bool), changed func(env, name string)) error {
	return s.listenLoop(ctx, func(schema string) string { return agentsChannel + schema }, listening, func(conn *pgx.Conn) error {
		listening(true)
		for {
			n, err := conn.WaitForNotification(ctx)
			if err != nil {
				return err
			}
			var who []string
			if json.Unmarshal([]byte(n.Payload), &who) != nil || len(who) != 2 {
				// Not the trigger's: someone's NOTIFY on the channel.
				// Whatever it meant, every copy is read again.
				listening(true)
				continue
			}
			changed(who[0], who[1])
		}
	})
}

// listenLoop listens on the channel named for the schema and runs follow
// on the connection, again after a pause whenever the connection is lost,
// until ctx ends. listening(false) is called after each loss.
func (s *Store) listenLoop(ctx context.Context, channel func(schema string) string, listening func(bool), follow func(*pgx.Conn) error) error {
	pause := time.Second
	for ctx.Err() == nil {
		// A lost connection is not reported: the next one starts by
		// telling that it listens again.
		_ = s.listen(ctx, channel, follow)
		listening(false)
		select {
		case <-ctx.Done():
		case <-time.After(pause):
		}
	}
	return ctx.Err()
}

func (s *Store) listen(ctx context.Context, channel func(schema string) string, follow func(*pgx.Conn) error) error {
	conn, err := pgx.ConnectConfig(ctx, s.pool.Config().ConnConfig.Copy())
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	var schema string
	if err := conn.QueryRow(ctx, `SELECT current_schema()`).Scan(&schema); err != nil {
		return err
	}
	name := channel(schema)
	if len(name) > 63 {
		name = name[:63] // PostgreSQL's bound on identifiers, as NOTIFY's sender cuts it
	}
	if _, err := conn.Exec(ctx, `LISTEN `+pgx.Identifier{name}.Sanitize()); err != nil {
		return err
	}
	return follow(conn)
}
