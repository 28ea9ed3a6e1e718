package server_test

import (
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/tetherhq/tether/bus"
	"github.com/tetherhq/tether/bus/amqp"
	"github.com/tetherhq/tether/bus/amqp/amqptest"
	"github.com/tetherhq/tether/server"
	"github.com/tetherhq/tether/server/brokerauth"
	"github.com/tetherhq/tether/server/record"
	"github.com/tetherhq/tether/server/store"
)

// fakeManagement is RabbitMQ's management API as far as the server uses
// it: it lists connections and closes them.
type fakeManagement struct {
	mu      sync.Mutex
	conns   []fakeConn
	closed  []string // names, in order
	reasons []string
	lists   int // GET /api/connections answered
	// linger is how many more lists show a closed connection, as the
	// broker's does a moment after the closure (it closes such a one
	// again without complaint).
	linger int
}

type fakeConn struct {
	Name        string `json:"name"`
	User        string `json:"user"`
	ConnectedAt int64  `json:"connected_at"`
	Channels    int    `json:"channels"`
	// listed is how many more lists show it once closed (linger).
	listed int
	gone   bool
}

func (f *fakeManagement) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if user, pw, ok := r.BasicAuth(); !ok || user != "admin" || pw != "secret" {
		http.Error(w, `{"error":"not_authorised"}`, http.StatusUnauthorized)
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	switch name, isOne := strings.CutPrefix(r.URL.EscapedPath(), "/api/connections/"); {
	case r.Method == http.MethodGet && r.URL.Path == "/api/connections":
		f.lists++
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(f.conns)
		for i := range f.conns {
			if f.conns[i].gone {
				f.conns[i].listed--
			}
		}
		f.conns = slices.DeleteFunc(f.conns, func(c fakeConn) bool { return c.gone && c.listed <= 0 })
	case r.Method == http.MethodDelete && isOne:
		name, _ = url.PathUnescape(name)
		i := slices.IndexFunc(f.conns, func(c fakeConn) bool { return c.Name == name })
		if i < 0 {
			http.Error(w, `{"error":"Object Not Found"}`, http.StatusNotFound)
			return
		}
		if !f.conns[i].gone {
			f.conns[i].gone, f.conns[i].listed = true, f.linger
		}
		f.conns = slices.DeleteFunc(f.conns, func(c fakeConn) bool { return c.gone && c.listed <= 0 })
		f.closed = append(f.closed, name)
		f.reasons = append(f.reasons, r.Header.Get("X-Reason"))
		w.WriteHeader(http.StatusNoContent)
	default:
		http.NotFound(w, r)
	}
}

func (f *fakeManagement) open(name string, l bus.BrokerLogin, at time.Time) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.conns = append(f.conns, fakeConn{Name: name, User: l.User(), ConnectedAt: at.UnixMilli(), Channels: 3})
}

// state says which connections are open (closed ones still listed are
// not), which were closed (once per closure asked), and how many lists
// were answered.
func (f *fakeManagement) state() (open, closed []string, lists int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, c := range f.conns {
		if !c.gone {
			open = append(open, c.Name)
		}
	}
	return open, slices.Clone(f.closed), f.lists
}

// startFakeManagement serves f and returns the server's admin client of
// it.
func startFakeManagement(t *testing.T, f *fakeManagement) *amqp.Admin {
	t.Helper()
	mgmt := httptest.NewServer(f)
	t.Cleanup(mgmt.Close)
	admin, err := amqp.NewAdmin("http://admin:secret@" + strings.TrimPrefix(mgmt.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	return admin
}

// A connection the sweep closed, which the management API lists a few
// sweeps longer, is closed once: not counted against its agent again,
// not closed, counted and alerted once more.
func TestAgentConnectionsClosedOnceWhileListed(t *testing.T) {
	fake := &fakeManagement{linger: 5}
	admin := startFakeManagement(t, fake)
	web, _, err := bus.GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	login := bus.BrokerLogin{Env: "test", Agent: "web", Key: web}
	t0 := time.Now().Add(-time.Hour)
	names := []string{"10.0.0.1:40001 -> 10.0.0.2:5671", "10.0.0.1:40002 -> 10.0.0.2:5671", "10.0.0.1:40003 -> 10.0.0.2:5671", "10.0.0.1:40004 -> 10.0.0.2:5671"}
	for i, name := range names {
		fake.open(name, login, t0.Add(time.Duration(i)*time.Minute))
	}
	r := startRigWith(t, func(c *server.Config, _ store.Store) {
		c.Broker, c.ConnectionSweep = admin, 20*time.Millisecond
	}, map[string]record.EnvSettings{"test": quietSettings()})

	if msg := r.security(); !strings.Contains(msg, "agent web held 4 broker connections, more than the 2 allowed: the 2 newest were closed") {
		t.Fatalf("security alert %q, want one saying web's 2 newest connections were closed", msg)
	}
	// Until they are listed no more, and two sweeps after.
	waitFor(t, "the closed connections listed no more", func() bool {
		fake.mu.Lock()
		defer fake.mu.Unlock()
		return len(fake.conns) == 2
	})
	_, _, lists := fake.state()
	waitFor(t, "two more sweeps", func() bool { _, _, n := fake.state(); return n > lists+1 })
	open, closed, _ := fake.state()
	if !slices.Equal(open, names[:2]) || !slices.Equal(closed, names[2:]) {
		t.Fatalf("open %q, closed %q; want the two oldest open, the two newest closed once each", open, closed)
	}
	if got := metricWith(t, r.srv, "tether_broker_connections_closed_total", `{reason="over_limit"}`); got != 2 {
		t.Errorf("tether_broker_connections_closed_total{reason=\"over_limit\"} = %v, want 2", got)
	}
	as, err := r.store.Alerts(r.ctx, record.AlertFilter{Env: "test", Agent: "web", Kind: record.AlertSecurity, Limit: 100})
	if err != nil {
		t.Fatal(err)
	}
	if len(as) != 1 {
		t.Fatalf("%d security alerts about web, want 1", len(as))
	}
}

// An agent holding more broker connections than allowed loses its
// newest; other agents and other users keep theirs; the closures are
// counted, and alerted once for the agent, not once per sweep.
func TestAgentConnectionsBounded(t *testing.T) {
	fake := &fakeManagement{}
	admin := startFakeManagement(t, fake)
	pub := func() ed25519.PublicKey {
		k, _, err := bus.GenerateKey()
		if err != nil {
			t.Fatal(err)
		}
		return k
	}
	web, thief, db := pub(), pub(), pub()
	t0 := time.Now().Add(-time.Hour)
	at := func(min int) time.Time { return t0.Add(time.Duration(min) * time.Minute) }
	webLogin, thiefLogin := bus.BrokerLogin{Env: "test", Agent: "web", Key: web}, bus.BrokerLogin{Env: "test", Agent: "web", Key: thief}
	fake.open("10.0.0.1:40001 -> 10.0.0.2:5671", webLogin, at(1))
	fake.open("10.0.0.1:40002 -> 10.0.0.2:5671", webLogin, at(2))
	for i, name := range []string{"203.0.113.9:50003 -> 10.0.0.2:5671", "203.0.113.9:50004 -> 10.0.0.2:5671", "203.0.113.9:50005 -> 10.0.0.2:5671"} {
		fake.open(name, thiefLogin, at(3+i))
	}
	fake.open("10.0.0.3:40001 -> 10.0.0.2:5671", bus.BrokerLogin{Env: "test", Agent: "db", Key: db}, at(1))
	fake.open("10.0.0.3:40002 -> 10.0.0.2:5671", bus.BrokerLogin{Env: "test", Agent: "db", Key: db}, at(2))
	fake.mu.Lock()
	for _, name := range []string{"10.0.0.5:1 -> 10.0.0.2:5671", "10.0.0.5:2 -> 10.0.0.2:5671", "10.0.0.5:3 -> 10.0.0.2:5671"} {
		fake.conns = append(fake.conns, fakeConn{Name: name, User: "tether-server", ConnectedAt: at(0).UnixMilli(), Channels: 17})
	}
	fake.mu.Unlock()

	r := startRigWith(t, func(c *server.Config, _ store.Store) {
		c.Broker, c.ConnectionSweep = admin, 20*time.Millisecond
	}, map[string]record.EnvSettings{"test": quietSettings()})

	if msg := r.security(); !strings.Contains(msg, "agent web held 5 broker connections, more than the 2 allowed: the 3 newest were closed") {
		t.Fatalf("security alert %q, want one saying web's 3 newest connections were closed", msg)
	}
	open, closed, _ := fake.state()
	if want := []string{"203.0.113.9:50003 -> 10.0.0.2:5671", "203.0.113.9:50004 -> 10.0.0.2:5671", "203.0.113.9:50005 -> 10.0.0.2:5671"}; !slices.Equal(closed, want) {
		t.Fatalf("closed %q, want the thief's %q", closed, want)
	}
	if len(open) != 7 {
		t.Fatalf("open after the sweep: %q, want web's two oldest, db's two and the server's three", open)
	}
	fake.mu.Lock()
	reason := fake.reasons[0]
	fake.mu.Unlock()
	if !strings.Contains(reason, "more connections of this agent than the server allows") {
		t.Errorf("X-Reason %q, want the limit named", reason)
	}

	// The thief comes back: closed again, counted, not alerted again
	// within the period.
	fake.open("203.0.113.9:50006 -> 10.0.0.2:5671", thiefLogin, at(10))
	fake.open("203.0.113.9:50007 -> 10.0.0.2:5671", thiefLogin, at(11))
	waitFor(t, "the thief's new connections closed", func() bool { _, closed, _ := fake.state(); return len(closed) == 5 })
	_, _, lists := fake.state()
	waitFor(t, "the next sweep", func() bool { _, _, n := fake.state(); return n > lists+1 })
	if got := metricWith(t, r.srv, "tether_broker_connections_closed_total", `{reason="over_limit"}`); got != 5 {
		t.Errorf("tether_broker_connections_closed_total{reason=\"over_limit\"} = %v, want 5", got)
	}
	as, err := r.store.Alerts(r.ctx, record.AlertFilter{Env: "test", Agent: "web", Kind: record.AlertSecurity, Limit: 100})
	if err != nil {
		t.Fatal(err)
	}
	if len(as) != 1 {
		t.Fatalf("%d security alerts about web, want 1 (the next closures are summed up in 10 minutes)", len(as))
	}
}

// metricWith reads one labelled metric off the server's /metrics: 0 when
// it is not there (a counter of a label not counted yet).
func metricWith(t *testing.T, srv *server.Server, name, labels string) float64 {
	t.Helper()
	rec := httptest.NewRecorder()
	srv.Metrics().Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	v, _ := metric(rec.Body.String(), name, labels)
	return v
}

// On a broker that asks the server about each agent, one agent's
// identity opens five connections: the server, through the broker's
// management API, closes the three newest, telling the client why, and
// the two oldest stay. Each connection may open channel_max channels,
// no more.
func TestAgentConnectionsBoundedOnTheBroker(t *testing.T) {
	var backend atomic.Pointer[brokerauth.Backend]
	auth := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if b := backend.Load(); b != nil {
			b.ServeHTTP(w, r)
			return
		}
		_, _ = w.Write([]byte("deny"))
	}))
	t.Cleanup(auth.Close)
	node := amqptest.StartNode(t, amqptest.NodeOptions{AuthHTTP: auth.URL, Management: true, CacheTTL: time.Second})
	admin, err := amqp.NewAdmin(node.ManagementURL)
	if err != nil {
		t.Fatal(err)
	}
	r := startRigWith(t, func(c *server.Config, _ store.Store) {
		c.Broker, c.ConnectionSweep = admin, 200*time.Millisecond
	}, map[string]record.EnvSettings{"test": quietSettings()})
	b, err := r.srv.BrokerAuth(brokerauth.Config{})
	if err != nil {
		t.Fatal(err)
	}
	backend.Store(b)
	web := newFakeAgent(t, r.store, "test", "web")

	var conns []*amqp091.Connection
	var closed []chan *amqp091.Error
	for i := range 5 {
		user, password := bus.LoginCredentials(web.signer.Key(), "test", "web", time.Now())
		c, err := amqp091.DialConfig(fmt.Sprintf("amqp://%s:%d/", node.Host, node.Port),
			amqp091.Config{SASL: []amqp091.Authentication{&amqp091.PlainAuth{Username: user, Password: password}}})
		if err != nil {
			t.Fatalf("connection %d of web: %v", i+1, err)
		}
		t.Cleanup(func() { c.Close() })
		conns = append(conns, c)
		closed = append(closed, c.NotifyClose(make(chan *amqp091.Error, 1)))
		time.Sleep(20 * time.Millisecond) // distinct opening times: "newest" is well defined
	}
	for i := 2; i < 5; i++ {
		select {
		case e := <-closed[i]:
			if e == nil || !strings.Contains(e.Reason, "more connections of this agent than the server allows") {
				t.Errorf("connection %d closed with %v, want the broker's word naming the limit", i+1, e)
			}
		case <-time.After(patience):
			t.Fatalf("connection %d of web still open %v after it was opened, want it closed (the limit is 2)", i+1, patience)
		}
	}
	for i := range 2 {
		if conns[i].IsClosed() {
			t.Fatalf("connection %d of web (among the two oldest) closed, want it kept", i+1)
		}
	}
	// The management API learns of a closed connection a moment later.
	waitFor(t, "the management API to list web's two connections left, no more", func() bool {
		listed, err := admin.Connections(r.ctx)
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, c := range listed {
			if strings.HasPrefix(c.User, bus.BrokerUserPrefix("test", "web")) {
				n++
				if time.Since(c.ConnectedAt) > 5*time.Minute || time.Since(c.ConnectedAt) < 0 {
					t.Errorf("connection %s: opened at %v, want a moment ago", c.Name, c.ConnectedAt)
				}
			}
		}
		return n == 2
	})
	if got := metricWith(t, r.srv, "tether_broker_connections_closed_total", `{reason="over_limit"}`); got != 3 {
		t.Errorf("tether_broker_connections_closed_total{reason=\"over_limit\"} = %v, want 3", got)
	}

	// channel_max: the broker gives each connection amqptest.ChannelMax
	// channels, whatever the client asks for.
	c := conns[0]
	if int(c.Config.ChannelMax) != amqptest.ChannelMax {
		t.Fatalf("negotiated channel_max %d, want the node's %d", c.Config.ChannelMax, amqptest.ChannelMax)
	}
	opened := 0
	for {
		ch, err := c.Channel()
		if err != nil {
			if !errors.Is(err, amqp091.ErrChannelMax) {
				t.Fatalf("channel %d: %v, want %v", opened+1, err, amqp091.ErrChannelMax)
			}
			break
		}
		defer ch.Close()
		if opened++; opened > 1000 {
			t.Fatal("1000 channels open on one connection of web, want at most channel_max")
		}
	}
	if opened != amqptest.ChannelMax {
		t.Fatalf("web opened %d channels on one connection, want %d", opened, amqptest.ChannelMax)
	}
}
