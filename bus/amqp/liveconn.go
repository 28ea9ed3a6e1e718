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
// read deadline amqp091-go keeps. The library extends that deadline (one
// and a half heartbeat intervals, as negotiated: 30 s at the default 20 s)
// from its heartbeat goroutine after each frame read; that goroutine also
// writes the heartbeats, under the lock every publish of the connection
// takes. With the broker slowing publishers down (flow control: it stops
// reading their sockets for a while) and dozens of agents publishing on one
// connection, it waits its turn for longer than that: the deadline goes
// stale while frames keep arriving, the read times out ("i/o timeout"),
// and the connection is dropped — its agents' claims and subscriptions
// with it, more work for a broker already behind.
//
// A read deadline that passes is taken for a silent broker only when
// nothing was read for the library's own window and no write has been
// blocked for less than flowHold; else the deadline is moved on and the
// read goes on.
type liveConn struct {
	net.Conn
	// writing is when the write under way started (since liveEpoch), 0
	// when none is: amqp091-go writes one frame at a time, under a lock.
	writing atomic.Int64
	// read is when a read last returned data (the connection's start
	// before any): one goroutine reads.
	read time.Time
	// window is how long the broker may send nothing (nanoseconds; set
	// from the heartbeat negotiated, once connected); hold is flowHold
	// (shorter in tests).
	window atomic.Int64
	hold   time.Duration
	// open is set once the AMQP handshake is done (amqp091-go clears
	// the handshake's deadline): the handshake's deadline is kept as set.
	open atomic.Bool
}

// liveEpoch makes the writes' start times monotonic (a step of the wall
// clock moves none of them).
var liveEpoch = time.Now()

func newLiveConn(c net.Conn, heartbeat time.Duration) *liveConn {
	l := &liveConn{Conn: c, hold: flowHold, read: time.Now()}
	l.setHeartbeat(heartbeat)
	return l
}

// setHeartbeat sets the window from a heartbeat interval: amqp091-go's,
// three half intervals. Without heartbeats there is no window, and the
// connection's deadlines are left as they are.
func (c *liveConn) setHeartbeat(heartbeat time.Duration) {
	c.window.Store(int64(3 * heartbeat / 2))
}

// SetDeadline notes the end of the handshake, when amqp091-go clears the
// deadline it set for it.
func (c *liveConn) SetDeadline(t time.Time) error {
	if t.IsZero() {
		c.open.Store(true)
	}
	return c.Conn.SetDeadline(t)
}

// readsHeld counts the read deadlines this process's connections moved on
// instead of dropping the connection.
var readsHeld atomic.Int64

// ReadsHeld returns how many times this process's buses read on past a
// deadline that had gone stale (frames read within the window) or while
// the broker held their writes (flow control): each would have dropped a
// connection before.
func ReadsHeld() int64 { return readsHeld.Load() }

func (c *liveConn) Write(p []byte) (int, error) {
	c.writing.Store(max(int64(time.Since(liveEpoch)), 1))
	defer c.writing.Store(0)
	return c.Conn.Write(p)
}

func (c *liveConn) Read(p []byte) (int, error) {
	called := time.Now()
	for {
		n, err := c.Conn.Read(p)
		if n > 0 {
			c.read = time.Now()
		}
		window := time.Duration(c.window.Load())
		if n > 0 || !errors.Is(err, os.ErrDeadlineExceeded) || !c.open.Load() || window <= 0 {
			return n, err
		}
		quiet := time.Since(c.read)
		var blocked time.Duration // how long the write under way has been
		if started := c.writing.Load(); started != 0 {
			blocked = time.Since(liveEpoch) - time.Duration(started)
		}
		var until time.Time
		switch {
		case quiet < window:
			// Frames came within the window: the deadline went stale.
			until = time.Now().Add(window - quiet)
		case blocked > 0 && blocked <= c.hold:
			// The broker reads nothing of ours: busy, not gone.
			until = time.Now().Add(window)
		default:
			// Said with the loss: how long the broker was silent, how
			// long this process waited for it, and whether a write was
			// blocked.
			what := "no write blocked"
			if blocked > 0 {
				what = "a write blocked for " + blocked.Round(time.Second).String()
			}
			return n, fmt.Errorf("%w (nothing read for %s, this read waited %s, %s)", err,
				quiet.Round(time.Second), time.Since(called).Round(time.Second), what)
		}
		readsHeld.Add(1)
		if err := c.Conn.SetReadDeadline(until); err != nil {
			return 0, err
		}
	}
}
