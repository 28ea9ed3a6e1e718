// Package clientlimit bounds what one client of the server's HTTP listeners
// may hold and do: open connections, in total and per client (Listener),
// and requests per second (Rates, a token bucket per client).
//
// Clients are told apart by address: an IPv4 address, or the /64 network of
// an IPv6 address, since one host commonly holds a whole /64 and could
// otherwise pose as millions of clients.
package clientlimit

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/time/rate"
)

// Client is the key a client is counted under.
type Client = netip.Prefix

// ClientOf returns the key of an address: an IPv4 address, or the /64 of an
// IPv6 one.
func ClientOf(addr netip.Addr) Client {
	addr = addr.Unmap()
	if addr.Is6() {
		p, _ := addr.Prefix(64)
		return p
	}
	return netip.PrefixFrom(addr, addr.BitLen())
}

// ClientOfRemote returns the key of a remote address as net/http and net
// give it ("host:port"). What is not an IP address and port (a Unix
// socket) is one client, the zero key.
func ClientOfRemote(remote string) Client {
	ap, err := netip.ParseAddrPort(remote)
	if err != nil {
		return Client{}
	}
	return ClientOf(ap.Addr())
}

// Listener accepts at most max connections at once, and at most perClient
// from one client. While max are open it stops accepting, so further
// connections wait in the kernel's accept queue, which costs the process
// no file descriptor; a connection beyond a client's share is closed as
// soon as it is accepted. Either way the process holds at most max+1
// client connections, whatever clients do.
//
// With Shed, a connection that has not authenticated a request (Vouch)
// cannot hold its place against one that might: such connections are
// kept within a budget of their own, and when the budget or the listener
// is full, the next connection is accepted and one is closed to make
// room — of the client holding the most unauthenticated connections, the
// oldest (the new one itself if its client holds the most already);
// failing any, the kept-alive connection idle the longest. A
// connection whose client authenticated is never closed while it serves
// a request (an event stream lasts as long as its client reads), so a
// flood of slow or idle connections, from however many addresses, cannot
// keep an authenticated client out: its new connection takes the place
// of an attacker's (see docs/security.md).
type Listener struct {
	net.Listener
	max, perClient int
	// anonymous is the budget of connections not vouched for; 0: no
	// shedding (the listener only waits for room).
	anonymous int
	// room is signalled when a connection closes or may be shed.
	room    chan struct{}
	done    chan struct{}
	closing sync.Once

	mu sync.Mutex
	// held counts the connections held and the one being accepted.
	held    int
	clients map[Client]*client
	conns   map[*conn]struct{}
	// unvouched counts the connections no request authenticated on.
	unvouched int

	open    atomic.Int64
	refused atomic.Uint64
	shed    atomic.Uint64
}

// client is what one client holds.
type client struct {
	conns, unvouched int
}

// NewListener limits inner to max connections, perClient from one client.
func NewListener(inner net.Listener, max, perClient int) *Listener {
	return &Listener{
		Listener:  inner,
		max:       max,
		perClient: perClient,
		room:      make(chan struct{}, 1),
		done:      make(chan struct{}),
		clients:   map[Client]*client{},
		conns:     map[*conn]struct{}{},
	}
}

// Shed makes l keep at most anonymous connections that no request
// authenticated on (Vouch), and shed them first when full, as the
// Listener's description says; it returns l. Call it before serving, and
// serve with the listener's ConnState and ConnContext (Serve does).
func (l *Listener) Shed(anonymous int) *Listener {
	l.anonymous = max(1, min(anonymous, l.max))
	return l
}

// Accept waits until fewer than max connections are open (or, with Shed,
// until one may be shed for a new one), then returns the next connection
// of a client that holds fewer than perClient.
func (l *Listener) Accept() (net.Conn, error) {
	for {
		if err := l.reserve(); err != nil {
			return nil, err
		}
		c, err := l.Listener.Accept()
		if err != nil {
			l.mu.Lock()
			l.held--
			l.mu.Unlock()
			l.signal()
			return nil, err
		}
		key := ClientOfRemote(c.RemoteAddr().String())
		l.mu.Lock()
		cl := l.clients[key]
		if cl != nil && cl.conns >= l.perClient {
			l.held--
			l.mu.Unlock()
			l.signal()
			l.refused.Add(1)
			_ = c.Close()
			continue
		}
		if cl == nil {
			cl = &client{}
			l.clients[key] = cl
		}
		nc := &conn{Conn: c, l: l, key: key, since: time.Now()}
		cl.conns++
		cl.unvouched++
		l.unvouched++
		l.conns[nc] = struct{}{}
		l.open.Add(1)
		if l.anonymous > 0 {
			err := l.makeRoom(nc)
			if errors.Is(err, errShedNew) {
				continue
			}
			if err != nil {
				return nil, err
			}
		}
		l.mu.Unlock()
		return nc, nil
	}
}

// errShedNew: the connection just accepted was closed to make room, its
// client holding the most unauthenticated connections already.
var errShedNew = errors.New("shed at once")

// makeRoom sheds what nc needs shed: an unauthenticated connection when
// these are over their budget, and one more when the listener holds more
// than max. When the room it was accepted for went meanwhile (the
// connection to shed served an authenticated request), it waits for a
// connection to close or to turn idle. l.mu is held, and held again
// when it returns nil.
func (l *Listener) makeRoom(nc *conn) error {
	shed := func(v *conn) {
		l.mu.Unlock()
		l.shed.Add(1)
		_ = v.Conn.Close()
		l.mu.Lock()
	}
	if l.unvouched > l.anonymous || l.held > l.max {
		// A client that holds the most unauthenticated connections
		// already loses the new one rather than an older one: closing
		// it costs less than a connection being served, and leaves the
		// others' places alone.
		if own := l.clients[nc.key].unvouched - 1; own > 0 && own >= l.mostUnvouched(nc.key) {
			l.detach(nc)
			l.mu.Unlock()
			l.shed.Add(1)
			_ = nc.Close()
			return errShedNew
		}
	}
	if l.unvouched > l.anonymous {
		if v := l.victim(nc, true); v != nil {
			shed(v)
		}
	}
	for l.held > l.max {
		if v := l.victim(nc, false); v != nil {
			shed(v)
			continue
		}
		l.mu.Unlock()
		select {
		case <-l.room:
		case <-l.done:
			_ = nc.Close()
			return net.ErrClosed
		}
		l.mu.Lock()
	}
	return nil
}

// reserve waits for room for one more connection: fewer than max held,
// or, with Shed, one that may be shed.
func (l *Listener) reserve() error {
	for {
		l.mu.Lock()
		if l.held < l.max || (l.anonymous > 0 && l.sheddable()) {
			l.held++
			l.mu.Unlock()
			return nil
		}
		l.mu.Unlock()
		select {
		case <-l.room:
		case <-l.done:
			return net.ErrClosed
		}
	}
}

// sheddable reports whether a connection may be shed; l.mu is held.
func (l *Listener) sheddable() bool {
	if l.unvouched > 0 {
		return true
	}
	for c := range l.conns {
		if c.idle && !c.hijacked {
			return true
		}
	}
	return false
}

// mostUnvouched returns the most unauthenticated connections a client
// other than except holds; l.mu is held.
func (l *Listener) mostUnvouched(except Client) int {
	most := 0
	for key, cl := range l.clients {
		if key != except {
			most = max(most, cl.unvouched)
		}
	}
	return most
}

// victim picks the connection to shed for the new one (never it) and
// detaches it, so that it counts no more; l.mu is held. It picks the
// oldest unvouched connection of the client holding the most of them,
// else (unless onlyUnvouched) the vouched connection idle the longest.
func (l *Listener) victim(except *conn, onlyUnvouched bool) *conn {
	most := 0
	for _, cl := range l.clients {
		most = max(most, cl.unvouched)
	}
	var v *conn
	if most > 0 {
		for c := range l.conns {
			if c != except && !c.vouched && l.clients[c.key].unvouched == most && (v == nil || c.since.Before(v.since)) {
				v = c
			}
		}
		if v == nil { // the new connection's client was the only holder
			for c := range l.conns {
				if c != except && !c.vouched && (v == nil || c.since.Before(v.since)) {
					v = c
				}
			}
		}
	}
	if v == nil && !onlyUnvouched {
		for c := range l.conns {
			if c != except && c.vouched && c.idle && !c.hijacked && (v == nil || c.since.Before(v.since)) {
				v = c
			}
		}
	}
	if v != nil {
		l.detach(v)
	}
	return v
}

// detach stops counting c; l.mu is held. It reports whether c was
// counted.
func (l *Listener) detach(c *conn) bool {
	if _, ok := l.conns[c]; !ok {
		return false
	}
	delete(l.conns, c)
	cl := l.clients[c.key]
	cl.conns--
	if !c.vouched {
		cl.unvouched--
		l.unvouched--
	}
	if cl.conns <= 0 {
		delete(l.clients, c.key)
	}
	l.held--
	l.open.Add(-1)
	return true
}

// Close stops accepting, including an Accept waiting for room.
func (l *Listener) Close() error {
	l.closing.Do(func() { close(l.done) })
	return l.Listener.Close()
}

// Open returns how many connections are open.
func (l *Listener) Open() int { return int(l.open.Load()) }

// Refused returns how many connections were closed at once because their
// client held its share.
func (l *Listener) Refused() uint64 { return l.refused.Load() }

// Sheds returns how many connections were closed to make room for newer
// ones (Shed).
func (l *Listener) Sheds() uint64 { return l.shed.Load() }

// Unvouched returns how many open connections no request authenticated
// on.
func (l *Listener) Unvouched() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.unvouched
}

// signal tells a waiting Accept that room may have been made.
func (l *Listener) signal() {
	select {
	case l.room <- struct{}{}:
	default:
	}
}

func (l *Listener) release(c *conn) {
	l.mu.Lock()
	l.detach(c)
	l.mu.Unlock()
	l.signal()
}

// ConnState follows the connections' states for shedding: an
// http.Server serving the listener sets it as its ConnState.
func (l *Listener) ConnState(nc net.Conn, state http.ConnState) {
	c := unwrap(nc)
	if c == nil {
		return
	}
	l.mu.Lock()
	switch state {
	case http.StateActive:
		c.idle = false
	case http.StateIdle:
		c.idle = true
		if c.vouched {
			c.since = time.Now()
		}
	case http.StateHijacked:
		c.hijacked = true
	}
	l.mu.Unlock()
	if state == http.StateIdle {
		l.signal()
	}
}

// ConnContext puts the connection into the context of its requests, for
// Vouch: an http.Server serving the listener sets it as its ConnContext.
func (l *Listener) ConnContext(ctx context.Context, nc net.Conn) context.Context {
	if c := unwrap(nc); c != nil {
		return context.WithValue(ctx, connKey{}, c)
	}
	return ctx
}

type connKey struct{}

// Vouch marks the connection a request came on (its context) as used by
// an authenticated client: it is no longer shed to make room, but when it
// is kept alive idle.
func Vouch(ctx context.Context) {
	c, _ := ctx.Value(connKey{}).(*conn)
	if c == nil {
		return
	}
	l := c.l
	l.mu.Lock()
	defer l.mu.Unlock()
	if c.vouched {
		return
	}
	c.vouched = true
	if _, ok := l.conns[c]; ok {
		l.clients[c.key].unvouched--
		l.unvouched--
	}
}

// unwrap finds the listener's connection under a TLS one.
func unwrap(nc net.Conn) *conn {
	for {
		switch c := nc.(type) {
		case *conn:
			return c
		case interface{ NetConn() net.Conn }:
			nc = c.NetConn()
		default:
			return nil
		}
	}
}

// conn gives its slot back when closed, once however often it is closed.
// Its state is the listener's, under its lock.
type conn struct {
	net.Conn
	l       *Listener
	key     Client
	closing sync.Once
	// since is when it was accepted, or, once vouched for, when it last
	// went idle.
	since                   time.Time
	vouched, idle, hijacked bool
}

func (c *conn) Close() error {
	err := c.Conn.Close()
	c.closing.Do(func() { c.l.release(c) })
	return err
}

// CloseWrite lets net/http half-close a connection it is done writing to, as
// it does for a bare TCP connection.
func (c *conn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}

// Rates keeps a token bucket per client: each holds at most burst tokens
// and gains perSecond a second. Buckets that are full again are forgotten
// (a new bucket is full too), so memory follows the clients active
// lately; should those ever exceed maxClients, the newcomers share one
// bucket rather than grow the table.
type Rates struct {
	limit rate.Limit
	burst int

	mu        sync.Mutex
	buckets   map[Client]*rate.Limiter
	shared    *rate.Limiter
	lastSweep time.Time
}

// maxClients bounds the buckets Rates keeps; sweepEvery is how often, at
// most, it forgets full buckets once it holds more than sweepAbove.
const (
	maxClients = 100_000
	sweepAbove = 1024
	sweepEvery = time.Minute
)

// NewRates returns per-client buckets of burst tokens refilled at perSecond.
func NewRates(perSecond float64, burst int) *Rates {
	return &Rates{
		limit:   rate.Limit(perSecond),
		burst:   burst,
		buckets: map[Client]*rate.Limiter{},
		shared:  rate.NewLimiter(rate.Limit(perSecond), burst),
	}
}

// Take takes a token from client's bucket at now. When the bucket is empty
// it takes nothing, and returns false and how long until a token is there.
func (r *Rates) Take(client Client, now time.Time) (bool, time.Duration) {
	lim := r.bucket(client, now)
	res := lim.ReserveN(now, 1)
	if d := res.DelayFrom(now); d > 0 {
		res.CancelAt(now)
		return false, d
	}
	return true, 0
}

// Wait returns how long until client's bucket holds a token at now (0: it
// holds one), taking nothing.
func (r *Rates) Wait(client Client, now time.Time) time.Duration {
	lim := r.bucket(client, now)
	if lim.TokensAt(now) >= 1 {
		return 0
	}
	res := lim.ReserveN(now, 1)
	d := res.DelayFrom(now)
	res.CancelAt(now)
	return d
}

// Clients returns how many buckets are kept (for tests and metrics).
func (r *Rates) Clients() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.buckets)
}

func (r *Rates) bucket(client Client, now time.Time) *rate.Limiter {
	r.mu.Lock()
	defer r.mu.Unlock()
	if lim, ok := r.buckets[client]; ok {
		return lim
	}
	if len(r.buckets) > sweepAbove && now.Sub(r.lastSweep) >= sweepEvery {
		r.lastSweep = now
		for k, lim := range r.buckets {
			if lim.TokensAt(now) >= float64(r.burst) {
				delete(r.buckets, k)
			}
		}
	}
	if len(r.buckets) >= maxClients {
		return r.shared
	}
	lim := rate.NewLimiter(r.limit, r.burst)
	r.buckets[client] = lim
	return lim
}
