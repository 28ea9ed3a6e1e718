package amqp

import (
	"errors"
	"io"
	"net"
	"os"
	"testing"
	"time"
)

// A read deadline that passes while the broker is not silent does not end
// the read: not when frames were read within the window (the deadline went
// stale: amqp091-go's heartbeat goroutine, which extends it, was held up),
// not while a write is blocked (the broker reads nothing: flow control).
// With the broker silent for the window and no write blocked, or a write
// blocked past the bound, it ends the read as before; before the
// handshake is done, its deadline stands; and the window is amqp091-go's,
// one and a half heartbeat intervals.
func TestLiveConnReadsOnWhileTheBrokerIsNotSilent(t *testing.T) {
	client, broker := net.Pipe()
	defer client.Close()
	defer broker.Close()
	c := &liveConn{Conn: client, hold: time.Minute, read: time.Now()}
	c.window.Store(int64(time.Second))
	buf := make([]byte, 16)
	expired := func(what string) {
		t.Helper()
		if _, err := c.Read(buf); !errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatalf("%s: %v; want the deadline exceeded", what, err)
		}
	}
	// sendLater has the broker send frame after d.
	sendLater := func(frame string, d time.Duration) {
		go func() {
			time.Sleep(d)
			_, _ = broker.Write([]byte(frame))
		}()
	}
	got := func(what, want string) {
		t.Helper()
		n, err := c.Read(buf)
		if err != nil || string(buf[:n]) != want {
			t.Fatalf("%s: %q, %v; want %q", what, buf[:n], err, want)
		}
	}

	// The handshake's deadline stands, whatever the window.
	if err := c.SetDeadline(time.Now().Add(20 * time.Millisecond)); err != nil {
		t.Fatal(err)
	}
	expired("the handshake's deadline")
	if err := c.SetDeadline(time.Time{}); err != nil { // amqp091-go, connected
		t.Fatal(err)
	}

	// A frame, then a deadline already past when the next read
	// starts (stale): the next frame, within the window, is read.
	sendLater("start", 0)
	got("a frame", "start")
	if err := c.SetReadDeadline(time.Now().Add(-time.Second)); err != nil {
		t.Fatal(err)
	}
	sendLater("heartbeat", 50*time.Millisecond)
	got("read on a stale deadline", "heartbeat")

	// Silent for the window, nothing written: the read ends.
	if err := c.SetReadDeadline(time.Now().Add(20 * time.Millisecond)); err != nil {
		t.Fatal(err)
	}
	expired("read with the broker silent for the window")

	// A write the broker does not read (a pipe holds nothing): past the
	// window, frames sent later are still read.
	wrote := make(chan error, 1)
	go func() {
		_, err := c.Write([]byte("publish"))
		wrote <- err
	}()
	waitWriting(t, c)
	if err := c.SetReadDeadline(time.Now().Add(20 * time.Millisecond)); err != nil {
		t.Fatal(err)
	}
	sendLater("heartbeat", 2500*time.Millisecond) // more than twice the window
	got("read while a write was blocked", "heartbeat")
	if _, err := io.ReadFull(broker, make([]byte, len("publish"))); err != nil {
		t.Fatal(err)
	}
	if err := <-wrote; err != nil {
		t.Fatalf("the write: %v", err)
	}

	// Blocked past the bound, silent for the window: the read ends.
	c.hold = 1200 * time.Millisecond
	go func() { _, _ = c.Write([]byte("publish")) }()
	waitWriting(t, c)
	if err := c.SetReadDeadline(time.Now().Add(20 * time.Millisecond)); err != nil {
		t.Fatal(err)
	}
	expired("read with a write blocked past the bound")
	if ReadsHeld() == 0 {
		t.Fatal("no read held counted")
	}
}

func TestLiveConnWindowIsTheLibrarys(t *testing.T) {
	c := newLiveConn(nil, 20*time.Second)
	if got := time.Duration(c.window.Load()); got != 30*time.Second {
		t.Fatalf("window for a heartbeat of 20s: %v; want 30s, as amqp091-go's deadline", got)
	}
	c.setHeartbeat(0)
	if got := c.window.Load(); got != 0 {
		t.Fatalf("window without heartbeats: %v; want none", got)
	}
}

// waitWriting waits until c has a write under way.
func waitWriting(t *testing.T, c *liveConn) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); c.writing.Load() == 0; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the write never started")
		}
	}
}
