package clientlimit_test

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/netip"
	"testing"
	"time"

	"github.com/tetherhq/tether/server/clientlimit"
)

func TestClientOf(t *testing.T) {
	tests := []struct{ remote, want string }{
		{"192.0.2.7:443", "192.0.2.7/32"},
		{"[::ffff:192.0.2.7]:443", "192.0.2.7/32"},
		{"[2001:db8:1:2:3:4:5:6]:443", "2001:db8:1:2::/64"},
		{"[2001:db8:1:2:ffff::1]:80", "2001:db8:1:2::/64"},
		{"@unix", "invalid Prefix"},
	}
	for _, tt := range tests {
		t.Run(tt.remote, func(t *testing.T) {
			if got := clientlimit.ClientOfRemote(tt.remote).String(); got != tt.want {
				t.Fatalf("got %s, want %s", got, tt.want)
			}
		})
	}
}

// dialFrom connects to addr from the loopback address from (127.0.0.0/8
// is all loopback on Linux), so one test can play several clients.
func dialFrom(t *testing.T, from, addr string) net.Conn {
	t.Helper()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}, Timeout: 10 * time.Second}
	c, err := d.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// closedByServer reports whether the server closed c (EOF or reset) rather
// than keeping it open within wait.
func closedByServer(c net.Conn, wait time.Duration) bool {
	_ = c.SetReadDeadline(time.Now().Add(wait))
	_, err := c.Read(make([]byte, 1))
	var ne net.Error
	return err != nil && !(errors.As(err, &ne) && ne.Timeout())
}

func TestListener(t *testing.T) {
	inner, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l := clientlimit.NewListener(inner, 3, 2)
	defer l.Close()
	accepted := make(chan net.Conn, 10)
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				close(accepted)
				return
			}
			accepted <- c
		}
	}()
	addr := inner.Addr().String()
	next := func() net.Conn {
		t.Helper()
		select {
		case c := <-accepted:
			return c
		case <-time.After(10 * time.Second):
			t.Fatal("no connection accepted")
			return nil
		}
	}

	// A client gets two connections; its third is closed at once.
	dialFrom(t, "127.0.0.1", addr)
	dialFrom(t, "127.0.0.1", addr)
	s1, s2 := next(), next()
	a3 := dialFrom(t, "127.0.0.1", addr)
	if !closedByServer(a3, 10*time.Second) {
		t.Fatal("a client's third connection stayed open, want it closed (per-client limit 2)")
	}
	if got := l.Refused(); got != 1 {
		t.Fatalf("got %d refused, want 1", got)
	}
	// Another client takes the last slot; a third client waits.
	dialFrom(t, "127.0.0.2", addr)
	next()
	if got := l.Open(); got != 3 {
		t.Fatalf("got %d open, want 3", got)
	}
	dialFrom(t, "127.0.0.3", addr)
	select {
	case c := <-accepted:
		t.Fatalf("accepted %v beyond the limit of 3", c.RemoteAddr())
	case <-time.After(200 * time.Millisecond):
	}
	// Closing one (twice: counted once) lets the waiting one in.
	s1.Close()
	s1.Close()
	if s4 := next(); s4.RemoteAddr().(*net.TCPAddr).IP.String() != "127.0.0.3" {
		t.Fatalf("got %v, want the waiting client 127.0.0.3", s4.RemoteAddr())
	}
	// The first client, back below its share, may connect again.
	s2.Close()
	dialFrom(t, "127.0.0.1", addr)
	if s5 := next(); s5.RemoteAddr().(*net.TCPAddr).IP.String() != "127.0.0.1" {
		t.Fatalf("got %v, want 127.0.0.1 again", s5.RemoteAddr())
	}
	if got := l.Open(); got != 3 {
		t.Fatalf("got %d open, want 3 (127.0.0.1, .2, .3)", got)
	}
	// Close ends an Accept that waits for room.
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	for range accepted {
	}
}

func TestRates(t *testing.T) {
	r := clientlimit.NewRates(1, 3)
	a := netip.MustParsePrefix("192.0.2.1/32")
	b := netip.MustParsePrefix("192.0.2.2/32")
	now := time.Unix(1_000_000, 0)
	for i := range 3 {
		if ok, _ := r.Take(a, now); !ok {
			t.Fatalf("take %d of a burst of 3 refused", i+1)
		}
	}
	ok, wait := r.Take(a, now)
	if ok || wait <= 0 || wait > time.Second {
		t.Fatalf("fourth take: got %v with wait %v, want refused with a wait of at most 1s", ok, wait)
	}
	if got := r.Wait(a, now); got <= 0 {
		t.Fatalf("wait of an empty bucket: got %v, want > 0", got)
	}
	if ok, _ := r.Take(b, now); !ok {
		t.Fatal("another client was refused: buckets are per client")
	}
	if got := r.Wait(a, now.Add(time.Second)); got != 0 {
		t.Fatalf("wait after a second: got %v, want 0 (one token refilled)", got)
	}
	if ok, _ := r.Take(a, now.Add(time.Second)); !ok {
		t.Fatal("take after a refill refused")
	}

	// Many clients: the full buckets are forgotten by a later sweep.
	for i := range 2000 {
		c := netip.PrefixFrom(netip.AddrFrom4([4]byte{10, 0, byte(i >> 8), byte(i)}), 32)
		r.Take(c, now)
	}
	if got := r.Clients(); got < 2000 {
		t.Fatalf("got %d buckets, want at least 2000", got)
	}
	later := now.Add(time.Hour)
	r.Take(netip.MustParsePrefix("198.51.100.1/32"), later)
	if got := r.Clients(); got > 1 {
		t.Fatalf("got %d buckets after an hour, want the full ones forgotten (1 left)", got)
	}
}

// TestListenerSheds: with Shed, connections no request authenticated on
// keep within their budget, and a new connection is accepted by closing
// one: the oldest of the client holding the most, then an authenticated
// client's idle one; an authenticated connection serving a request is
// never closed, and with nothing to close the listener waits for room.
func TestListenerSheds(t *testing.T) {
	inner, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l := clientlimit.NewListener(inner, 4, 3).Shed(2)
	defer l.Close()
	accepted := make(chan net.Conn, 10)
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				close(accepted)
				return
			}
			accepted <- c
		}
	}()
	addr := inner.Addr().String()
	next := func(from string) (client, server net.Conn) {
		t.Helper()
		client = dialFrom(t, from, addr)
		select {
		case server = <-accepted:
			return client, server
		case <-time.After(10 * time.Second):
			t.Fatalf("no connection from %s accepted", from)
			return nil, nil
		}
	}
	vouch := func(c net.Conn) { clientlimit.Vouch(l.ConnContext(context.Background(), c)) }
	stillOpen := func(what string, c net.Conn) {
		t.Helper()
		if closedByServer(c, 100*time.Millisecond) {
			t.Fatalf("%s was closed, want it kept", what)
		}
	}
	closed := func(what string, c net.Conn) {
		t.Helper()
		if !closedByServer(c, 10*time.Second) {
			t.Fatalf("%s stayed open, want it shed", what)
		}
	}

	// Two slow connections from .1 fill the budget of 2; a third from
	// .1, which holds the most, is closed at once; one from .2 takes the
	// place of .1's oldest.
	a1, _ := next("127.0.0.1")
	a2, _ := next("127.0.0.1")
	a3 := dialFrom(t, "127.0.0.1", addr)
	closed(".1's third, over the budget", a3)
	stillOpen(".1's first", a1)
	b1, sb1 := next("127.0.0.2")
	closed(".1's oldest unauthenticated connection", a1)
	stillOpen(".1's other one", a2)
	if got, shed := l.Unvouched(), l.Sheds(); got != 2 || shed != 2 {
		t.Fatalf("unvouched %d, shed %d: want 2 and 2", got, shed)
	}
	// .2 authenticates and serves a request; .3 comes, then .4, which
	// is one unauthenticated connection too many: one of the three
	// clients holding one each goes, the oldest (.1's).
	vouch(sb1)
	l.ConnState(sb1, http.StateActive)
	c1, sc1 := next("127.0.0.3")
	stillOpen(".1's last, within the budget", a2)
	d1, _ := next("127.0.0.4")
	closed(".1's last, the oldest unauthenticated", a2)
	// .3 authenticates and goes idle, .5 authenticates and serves: the
	// listener holds its 4 (b1, c1, d1, e1). .6 takes d1's place (not
	// authenticated), then .7 c1's (authenticated, but idle), never b1's
	// or e1's.
	vouch(sc1)
	l.ConnState(sc1, http.StateIdle)
	e1, se1 := next("127.0.0.5")
	vouch(se1)
	l.ConnState(se1, http.StateActive)
	f1, sf1 := next("127.0.0.6")
	vouch(sf1)
	l.ConnState(sf1, http.StateActive)
	closed("the unauthenticated one", d1)
	g1, _ := next("127.0.0.7")
	closed("the authenticated but idle one", c1)
	stillOpen("the authenticated one serving a request", b1)
	if got := l.Open(); got != 4 {
		t.Fatalf("open %d, want 4 (b1, e1, f1, g1)", got)
	}
	// .8 takes .7's place, unauthenticated.
	h1, sh1 := next("127.0.0.8")
	closed(".7's unauthenticated connection", g1)
	vouch(sh1)
	l.ConnState(sh1, http.StateActive)
	// Four authenticated connections serving requests: .9 waits, until
	// one goes idle and is shed for it.
	i1 := dialFrom(t, "127.0.0.9", addr)
	select {
	case c := <-accepted:
		t.Fatalf("accepted %v while every connection serves an authenticated request", c.RemoteAddr())
	case <-time.After(300 * time.Millisecond):
	}
	l.ConnState(sh1, http.StateIdle)
	select {
	case c := <-accepted:
		if got := c.RemoteAddr().(*net.TCPAddr).IP.String(); got != "127.0.0.9" {
			t.Fatalf("accepted %s, want the waiting 127.0.0.9", got)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the waiting connection was not accepted when one went idle")
	}
	closed(".8's idle connection", h1)
	stillOpen("the new one", i1)
	for _, c := range []net.Conn{b1, e1, f1} {
		stillOpen("an authenticated connection serving a request", c)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	for range accepted {
	}
}
