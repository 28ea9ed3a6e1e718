package server

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/tetherhq/tether/server/api"
	"github.com/tetherhq/tether/server/clientlimit"
	"github.com/tetherhq/tether/server/console"
)

// HTTPConfig configures the server's HTTP listeners. Its settings are named
// here as in the server's configuration file (the flags of tether server).
type HTTPConfig struct {
	// API holds the REST API's body limits, timeouts and rate limits.
	API api.Config
	// MaxConns (max-conns) bounds the connections the API listener holds
	// open; more wait in the kernel's accept queue. MaxConnsPerClient
	// (max-conns-per-client) bounds those of one client address; more are
	// closed at once.
	MaxConns          int
	MaxConnsPerClient int
	// MaxAnonymousConns (max-anonymous-conns) bounds the API listener's
	// connections on which no request has authenticated yet (a new
	// connection, a client without a token, a slow one); when these or
	// the listener are full, the next connection is accepted and one of
	// them closed to make room: of the client holding the most, the
	// oldest; failing any, an authenticated client's kept-alive idle
	// connection. A connection serving an authenticated request (an
	// event stream included) is never closed so. 0: a quarter of
	// MaxConns.
	MaxAnonymousConns int
	// TLSCert and TLSKey (tls-cert, tls-key): serve the API over HTTPS.
	TLSCert, TLSKey string
	// ShutdownGrace is how long requests in progress may finish when the
	// server stops.
	ShutdownGrace time.Duration
}

// DefaultHTTP returns the configuration of a server facing untrusted
// clients.
func DefaultHTTP() HTTPConfig {
	return HTTPConfig{API: api.Default(), MaxConns: 1024, MaxConnsPerClient: 64, ShutdownGrace: 10 * time.Second}
}

// Validate checks the configuration.
func (c HTTPConfig) Validate() error {
	if err := c.API.Validate(); err != nil {
		return err
	}
	switch {
	case c.MaxConns < 1 || c.MaxConnsPerClient < 1 || c.MaxConnsPerClient > c.MaxConns:
		return fmt.Errorf("%w: max-conns %d, max-conns-per-client %d: want 1 <= max-conns-per-client <= max-conns", api.ErrConfig, c.MaxConns, c.MaxConnsPerClient)
	case c.MaxAnonymousConns < 0 || c.MaxAnonymousConns > c.MaxConns:
		return fmt.Errorf("%w: max-anonymous-conns %d, max-conns %d: want 0 (a quarter of max-conns) to max-conns", api.ErrConfig, c.MaxAnonymousConns, c.MaxConns)
	case (c.TLSCert == "") != (c.TLSKey == ""):
		return fmt.Errorf("%w: tls-cert and tls-key go together", api.ErrConfig)
	case c.ShutdownGrace < 0:
		return fmt.Errorf("%w: shutdown grace %v: want 0 or more", api.ErrConfig, c.ShutdownGrace)
	}
	return nil
}

// anonymousConns is MaxAnonymousConns, or its default.
func (c HTTPConfig) anonymousConns() int {
	if c.MaxAnonymousConns > 0 {
		return c.MaxAnonymousConns
	}
	return max(1, c.MaxConns/4)
}

// The operations listener serves probes and scrapers, a few connections
// each, on a network operators trust: it has small caps of its own.
const (
	opsMaxConns          = 64
	opsMaxConnsPerClient = 16
)

// HTTP serves a server's REST API, and its health checks and metrics.
type HTTP struct {
	cfg HTTPConfig
	srv *Server
	log zerolog.Logger
	// authLn and auth, when set, answer the broker's authentication
	// questions (see ServeBrokerAuth).
	authLn net.Listener
	auth   http.Handler
}

// ServeBrokerAuth makes Serve also answer RabbitMQ's HTTP authentication
// backend on ln, with b. The listener belongs on a network only the
// broker reaches: the answers say which agents exist.
func (h *HTTP) ServeBrokerAuth(ln net.Listener, b http.Handler) *HTTP {
	h.authLn, h.auth = ln, b
	return h
}

// NewHTTP returns the HTTP front of srv; cfg is validated (Validate).
func NewHTTP(cfg HTTPConfig, srv *Server, log zerolog.Logger) *HTTP {
	return &HTTP{cfg: cfg, srv: srv, log: log}
}

// Serve serves the API on ln and, when ops is not nil, /healthz, /readyz
// and /metrics on ops (which then keeps /metrics to itself), until ctx
// ends; then it lets requests in progress finish for ShutdownGrace and
// ends event streams at once. Both listeners are closed when it returns.
//
// Each listener holds a bounded number of connections (MaxConns in total
// and MaxConnsPerClient per client address on ln; 64 and 16 on ops), so
// no client, however many connections it opens, exhausts the process's
// file descriptors, and a separate ops listener keeps the probes
// answering while the API listener is full.
func (h *HTTP) Serve(ctx context.Context, ln, ops net.Listener) error {
	cfg := h.cfg.API
	cfg.SeparateOps = ops != nil
	a := api.New(cfg, APIServices(h.srv, h.srv.metrics.Handler()), h.log)
	con, cerr := console.New(a.Handler(), h.log)
	if cerr != nil {
		return fmt.Errorf("console: %w", cerr)
	}
	a.Mount(con)

	type listener struct {
		name string
		ln   *clientlimit.Listener
		hs   *http.Server
		tls  bool
	}
	// The API and operations listeners shed connections no request
	// authenticated on to make room (the operations listener has no
	// authentication: each new probe takes the place of the oldest
	// connection of the client holding the most).
	ls := []listener{{name: "api", ln: clientlimit.NewListener(ln, h.cfg.MaxConns, h.cfg.MaxConnsPerClient).Shed(h.cfg.anonymousConns()),
		hs: a.HTTPServer(a.Handler()), tls: h.cfg.TLSCert != ""}}
	if ops != nil {
		ls = append(ls, listener{name: "ops", ln: clientlimit.NewListener(ops, opsMaxConns, opsMaxConnsPerClient).Shed(opsMaxConns), hs: a.HTTPServer(a.OpsHandler())})
	}
	for _, l := range ls {
		l.hs.ConnState, l.hs.ConnContext = l.ln.ConnState, l.ln.ConnContext
	}
	if h.authLn != nil {
		hs := &http.Server{Handler: h.auth, ReadHeaderTimeout: 10 * time.Second, ReadTimeout: 10 * time.Second, WriteTimeout: 10 * time.Second}
		ls = append(ls, listener{name: "broker-auth", ln: clientlimit.NewListener(h.authLn, h.cfg.MaxConns, h.cfg.MaxConns), hs: hs})
	}
	for _, l := range ls {
		h.srv.metrics.observeListener(l.name, l.ln)
		l.hs.RegisterOnShutdown(a.EndStreams)
	}

	errs := make(chan error, len(ls))
	var wg sync.WaitGroup
	for _, l := range ls {
		wg.Add(1)
		go func() { // owned here: Shutdown below ends it, wg waits for it
			defer wg.Done()
			var err error
			if l.tls {
				err = l.hs.ServeTLS(l.ln, h.cfg.TLSCert, h.cfg.TLSKey)
			} else {
				err = l.hs.Serve(l.ln)
			}
			if !errors.Is(err, http.ErrServerClosed) {
				errs <- fmt.Errorf("serve the %s listener on %s: %w", l.name, l.ln.Addr(), err)
			}
		}()
	}
	var err error
	select {
	case <-ctx.Done():
	case err = <-errs:
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), h.cfg.ShutdownGrace)
	defer cancel()
	for _, l := range ls {
		if serr := l.hs.Shutdown(sctx); serr != nil {
			h.log.Warn().Err(serr).Str("listener", l.name).Msg("requests still running at shutdown were cut")
			_ = l.hs.Close()
		}
	}
	wg.Wait()
	return err
}

// observeListener exports a listener's open and refused connections; a
// server serving again replaces its listener of that name.
func (m *Metrics) observeListener(name string, l *clientlimit.Listener) {
	m.listenersMu.Lock()
	defer m.listenersMu.Unlock()
	if m.listeners == nil {
		m.listeners = map[string]*clientlimit.Listener{}
	}
	_, known := m.listeners[name]
	m.listeners[name] = l
	if known {
		return
	}
	current := func() *clientlimit.Listener {
		m.listenersMu.Lock()
		defer m.listenersMu.Unlock()
		return m.listeners[name]
	}
	labels := prometheus.Labels{"listener": name}
	m.reg.MustRegister(
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "tether_http_connections", ConstLabels: labels,
			Help: "Client connections the listener holds open."}, func() float64 { return float64(current().Open()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "tether_http_connections_refused_total", ConstLabels: labels,
			Help: "Connections closed at once because their client address held its share (max-conns-per-client)."},
			func() float64 { return float64(current().Refused()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "tether_http_connections_anonymous", ConstLabels: labels,
			Help: "Open connections on which no request authenticated (max-anonymous-conns)."}, func() float64 { return float64(current().Unvouched()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "tether_http_connections_shed_total", ConstLabels: labels,
			Help: "Connections closed to make room for a new one: unauthenticated ones first, then authenticated clients' idle ones."},
			func() float64 { return float64(current().Sheds()) }),
	)
}
