// Package clientlimit bounds what one client of the server's HTTP listeners
// may hold and do: open connections, in total and per client (Listener),
// and requests per second (Rates, a token bucket per client).
//
// Clients are told apart by address: an IPv4 address, or the /64 network of
// an IPv6 address, since one host commonly holds a whole /64 and could
// otherwise pose as millions of clients.
package clientlimit

import (
	"net"
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
type Listener struct {
	net.Listener
	perClient int
	// slots holds a token per open connection (and one for the connection
	// being accepted): Accept waits for room before it accepts.
	slots   chan struct{}
	done    chan struct{}
	closing sync.Once

	mu      sync.Mutex
	clients map[Client]int

	open    atomic.Int64
	refused atomic.Uint64
}

// NewListener limits inner to max connections, perClient from one client.
func NewListener(inner net.Listener, max, perClient int) *Listener {
	return &Listener{
		Listener:  inner,
		perClient: perClient,
		slots:     make(chan struct{}, max),
		done:      make(chan struct{}),
		clients:   map[Client]int{},
	}
}

// Accept waits until fewer than max connections are open, then returns the
// next connection of a client that holds fewer than perClient.
func (l *Listener) Accept() (net.Conn, error) {
	for {
		select {
		case l.slots <- struct{}{}:
		case <-l.done:
			return nil, net.ErrClosed
		}
		c, err := l.Listener.Accept()
		if err != nil {
			<-l.slots
			return nil, err
		}
		key := ClientOfRemote(c.RemoteAddr().String())
		l.mu.Lock()
		if l.clients[key] >= l.perClient {
			l.mu.Unlock()
			<-l.slots
			l.refused.Add(1)
			_ = c.Close()
			continue
		}
		l.clients[key]++
		l.mu.Unlock()
		l.open.Add(1)
		return &conn{Conn: c, l: l, key: key}, nil
	}
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

func (l *Listener) release(key Client) {
	l.mu.Lock()
	if l.clients[key]--; l.clients[key] <= 0 {
		delete(l.clients, key)
	}
	l.mu.Unlock()
	l.open.Add(-1)
	<-l.slots
}

// conn gives its slot back when closed, once however often it is closed.
type conn struct {
	net.Conn
	l       *Listener
	key     Client
	closing sync.Once
}

func (c *conn) Close() error {
	err := c.Conn.Close()
	c.closing.Do(func() { c.l.release(c.key) })
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
