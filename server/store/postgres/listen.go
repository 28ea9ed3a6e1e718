package postgres

import (
	"context"
	"crypto/md5"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
)

// agentsChannel names the channel the agents table's trigger tells changes
// of agents' records on: tether_agents_ and the MD5 of the schema's name,
// as the trigger names it (within PostgreSQL's 63 bytes whatever the name).
func agentsChannel(schema string) string {
	sum := md5.Sum([]byte(schema))
	return "tether_agents_" + hex.EncodeToString(sum[:])
}

// ListenCheck is how often a listener for agents' changes proves that its
// connection still hears: it notifies itself and waits that long for its
// own notice. A connection cut without a word (a database host gone, a
// network partition) is otherwise seen only when TCP gives up, minutes
// later, and a pooler that drops notices never: meanwhile a server would
// trust copies of agents no change is told about.
const ListenCheck = 5 * time.Second

// pingPayload starts the payload of a listener's notice to itself (its
// backend's process ID follows): never a change.
const pingPayload = "ping "

// ListenEvents calls wake whenever a process appends to the event log
// (NOTIFY, on a connection of its own), until ctx ends; and once each
// time it (re)connects, since appends while it was not listening were not
// told. A lost connection is reconnected after a pause; it returns
// ctx.Err().
func (s *Store) ListenEvents(ctx context.Context, wake func()) error {
	return s.listenLoop(ctx, func(schema string) string { return eventsChannel + schema }, func(bool) {},
		func(conn *pgx.Conn, _ string, _ func()) error {
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
// last sequence number, generation held). listening(true) is called once
// the connection is seen to hear notices (changes made before were not
// told: a copy held from before is to be read again), listening(false)
// when it no longer does: it is lost, or a notice it sent itself did not
// come back within ListenCheck. It reconnects after a pause, and returns
// ctx.Err().
func (s *Store) ListenAgents(ctx context.Context, listening func(bool), changed func(env, name string)) error {
	return s.listenLoop(ctx, agentsChannel, listening, func(conn *pgx.Conn, channel string, live func()) error {
		self := conn.PgConn().PID()
		ping := pingPayload + strconv.FormatUint(uint64(self), 10)
		var sent, heard time.Time // the notice to itself out (zero: none), the last back
		for {
			if sent.IsZero() && time.Since(heard) >= ListenCheck {
				if _, err := conn.Exec(ctx, `SELECT pg_notify($1, $2)`, channel, ping); err != nil {
					return err
				}
				sent = time.Now()
			}
			wait := heard.Add(ListenCheck)
			if !sent.IsZero() {
				wait = sent.Add(ListenCheck)
			}
			wctx, cancel := context.WithDeadline(ctx, wait)
			n, err := conn.WaitForNotification(wctx)
			cancel()
			switch {
			case ctx.Err() != nil:
				return ctx.Err()
			case err != nil && wctx.Err() == nil:
				return err
			case err != nil && !sent.IsZero():
				return fmt.Errorf("a notice to itself did not come back within %v", ListenCheck)
			case err != nil:
				continue // time to check again
			case n.Payload == ping && n.PID == self:
				sent, heard = time.Time{}, time.Now()
				live()
				continue
			case len(n.Payload) >= len(pingPayload) && n.Payload[:len(pingPayload)] == pingPayload:
				continue // another server's check
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
// until ctx ends. follow calls live once the connection is seen to hear;
// listening(true) is called then, the first time on each connection, and
// listening(false) once it is lost after that.
func (s *Store) listenLoop(ctx context.Context, channel func(schema string) string, listening func(bool), follow func(conn *pgx.Conn, channel string, live func()) error) error {
	pause := time.Second
	for ctx.Err() == nil {
		on := false
		live := func() {
			if !on {
				on = true
				listening(true)
			}
		}
		// A lost connection is not reported: the next one starts by
		// telling that it listens again.
		_ = s.listen(ctx, channel, func(conn *pgx.Conn, name string) error { return follow(conn, name, live) })
		if on {
			listening(false)
		}
		select {
		case <-ctx.Done():
		case <-time.After(pause):
		}
	}
	return ctx.Err()
}

func (s *Store) listen(ctx context.Context, channel func(schema string) string, follow func(conn *pgx.Conn, channel string) error) error {
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
	if _, err := conn.Exec(ctx, `LISTEN `+pgx.Identifier{name}.Sanitize()); err != nil {
		return err
	}
	return follow(conn, name)
}
