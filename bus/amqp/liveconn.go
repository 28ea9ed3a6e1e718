package amqp

import (
	"errors"
	"fmt"
	"net"
	"os"
	"sync/atomic"
	"time"
)

// flowHold bounds how long a connection whose writes are blocked is kept
// although the broker sends nothing: a broker that stopped reading from it
// (flow control, a memory or disk alarm) is busy, not gone; past this, or
// once the write fails (TCP gives up on a peer that is gone), the
// connection is dropped and dialled again.
const flowHold = 3 * time.Minute

// liveConn judges a broker connection dead by what it reads, not by the
// read deadline amqp091-go keeps. The library extends that deadline (three
// heartbeat intervals) from its heartbeat goroutine after each frame read;
// that goroutine also writes the heartbeats, under the lock every publish
// of the connection takes. With the broker slowing publishers down (flow
// control: it stops reading their sockets for a while) and dozens of
// agents publishing on one connection, it waits its turn for a minute and
// more: the deadline goes stale while frames keep arriving, the read
// times out ("i/o timeout"), and the connection is dropped — its agents'
// claims and subscriptions with it, more work for a broker already behind.
//
// A read deadline that passes is taken for a silent broker only when
// nothing was read for the window (three heartbeat intervals, the
// library's own measure) and no write has been blocked for less than
// flowHold; else the deadline is moved on and the read goes on.
type liveConn struct {
	net.Conn
	// writing is when the write under way started (UnixNano), 0 when none
	// is: amqp091-go writes one frame at a time, under a lock.
	writing atomic.Int64
	// read is when a read last returned data (UnixNano; the connection's
	// start before any): one goroutine reads.
	read int64
	// window is how long the broker may send nothing (three heartbeat
	// intervals); hold is flowHold (both shorter in tests).
	window, hold time.Duration
	// open is set once the AMQP handshake is done (amqp091-go clears
	// the handshake's deadline): the handshake's deadline is kept as set.
	open atomic.Bool
}

// SetDeadline notes the end of the handshake, when amqp091-go clears the
// deadline it set for it.
func (c *liveConn) SetDeadline(t time.Time) error {
	if t.IsZero() {
		c.open.Store(true)
	}
	return c.Conn.SetDeadline(t)
}

func newLiveConn(c net.Conn, heartbeat time.Duration) *liveConn {
	return &liveConn{Conn: c, window: 3 * heartbeat, hold: flowHold, read: time.Now().UnixNano()}
}

// readsHeld counts the read deadlines this process's connections moved on
// instead of dropping the connection.
var readsHeld atomic.Int64

// ReadsHeld returns how many times this process's buses read on past a
// deadline that had gone stale (frames read within three heartbeat
// intervals) or while the broker held their writes (flow control): each
// would have dropped a connection before.
func ReadsHeld() int64 { return readsHeld.Load() }

func (c *liveConn) Write(p []byte) (int, error) {
	c.writing.Store(time.Now().UnixNano())
	defer c.writing.Store(0)
	return c.Conn.Write(p)
}

func (c *liveConn) Read(p []byte) (int, error) {
	called := time.Now()
	for {
		n, err := c.Conn.Read(p)
		if n > 0 {
			c.read = time.Now().UnixNano()
		}
		if n > 0 || !errors.Is(err, os.ErrDeadlineExceeded) || !c.open.Load() {
			return n, err
		}
		now := time.Now()
		quiet := now.Sub(time.Unix(0, c.read))
		started := c.writing.Load()
		var until time.Time
		switch {
		case quiet < c.window:
			// Frames came within the window: the deadline went stale.
			until = time.Unix(0, c.read).Add(c.window)
		case started != 0 && now.Sub(time.Unix(0, started)) <= c.hold:
			// The broker reads nothing of ours: busy, not gone.
			until = now.Add(c.window)
		default:
			// Said with the loss: how long the broker was silent, how
			// long this process waited for it, and whether a write was
			// blocked.
			blocked := "no write blocked"
			if started != 0 {
				blocked = "a write blocked for " + now.Sub(time.Unix(0, started)).Round(time.Second).String()
			}
			return n, fmt.Errorf("%w (nothing read for %s, this read waited %s, %s)", err,
				quiet.Round(time.Second), now.Sub(called).Round(time.Second), blocked)
		}
		readsHeld.Add(1)
		if err := c.Conn.SetReadDeadline(until); err != nil {
			return 0, err
		}
	}
}
