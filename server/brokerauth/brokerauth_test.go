package brokerauth

import (
	"context"
	"crypto/ed25519"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/tetherhq/tether/bus"
	"github.com/tetherhq/tether/model"
	"github.com/tetherhq/tether/server/record"
)

type agents map[string]record.Agent

func (a agents) GetAgent(_ context.Context, env, name string) (record.Agent, error) {
	r, ok := a[env+"/"+name]
	if !ok {
		return record.Agent{}, model.ErrNotFound
	}
	return r, nil
}

type alerts struct {
	mu   sync.Mutex
	said []string
}

func (a *alerts) SecurityAlert(_ context.Context, env, agent, what string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.said = append(a.said, env+"/"+agent+": "+what)
}

func key(t *testing.T) ed25519.PrivateKey {
	t.Helper()
	_, k, err := ed25519.GenerateKey(nil)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func pub(k ed25519.PrivateKey) ed25519.PublicKey { return k.Public().(ed25519.PublicKey) }

// ask puts one question to the backend over HTTP, as the broker does.
func ask(t *testing.T, srv *httptest.Server, path string, form url.Values) string {
	t.Helper()
	resp, err := http.PostForm(srv.URL+"/broker"+path, form)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var b strings.Builder
	buf := make([]byte, 64)
	n, _ := resp.Body.Read(buf)
	b.Write(buf[:n])
	return b.String()
}

func TestRights(t *testing.T) {
	accepted, pending, rejected, stranger, thief := key(t), key(t), key(t), key(t), key(t)
	rolling, rolled, left := key(t), key(t), key(t)
	later := time.Now().Add(time.Hour)
	dir := agents{
		"prod/web-1": {Env: "prod", Name: "web-1", State: record.AgentAccepted, PublicKey: pub(accepted)},
		// web-2 rolled its key over to rolling and has not switched yet;
		// web-3 switched to rolled and left its previous key behind.
		"prod/web-2": {Env: "prod", Name: "web-2", State: record.AgentAccepted, PublicKey: pub(rolling), PreviousKey: pub(thief)},
		"prod/web-3": {Env: "prod", Name: "web-3", State: record.AgentAccepted, PublicKey: pub(rolled), PreviousKey: pub(left), PreviousUntil: &later},
		"prod/new-1": {Env: "prod", Name: "new-1", State: record.AgentPending, PublicKey: pub(pending)},
		"prod/bad-1": {Env: "prod", Name: "bad-1", State: record.AgentRejected, PublicKey: pub(rejected)},
	}
	al := &alerts{}
	b, err := New(Config{}, dir, al, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(b)
	defer srv.Close()
	user := func(k ed25519.PrivateKey, env, name string) string {
		return bus.BrokerLogin{Env: env, Agent: name, Key: pub(k)}.User()
	}

	logins := []struct {
		name     string
		key      ed25519.PrivateKey
		env, as  string
		issued   time.Time
		password string // overrides the signed one
		want     string
	}{
		{"accepted agent", accepted, "prod", "web-1", time.Now(), "", "allow"},
		{"pending agent", pending, "prod", "new-1", time.Now(), "", "allow"},
		{"unknown name: may say hello", stranger, "prod", "new-2", time.Now(), "", "allow"},
		{"pending name, another key: may say hello (a token may enroll it)", thief, "prod", "new-1", time.Now(), "", "allow"},
		{"rejected agent", rejected, "prod", "bad-1", time.Now(), "", "deny"},
		{"accepted name, another key", thief, "prod", "web-1", time.Now(), "", "deny"},
		{"rolling over: the new key", rolling, "prod", "web-2", time.Now(), "", "allow"},
		{"rolling over: the previous key, until the agent switches", thief, "prod", "web-2", time.Now(), "", "allow"},
		{"rolled over: the new key", rolled, "prod", "web-3", time.Now(), "", "allow"},
		{"rolled over: the previous key, once the agent switched", left, "prod", "web-3", time.Now(), "", "deny"},
		{"stale login", accepted, "prod", "web-1", time.Now().Add(-time.Hour), "", "deny"},
		{"login from the future", accepted, "prod", "web-1", time.Now().Add(time.Hour), "", "deny"},
		{"password not signed", accepted, "prod", "web-1", time.Now(), "v1.1.AAAA", "deny"},
		{"shared password", accepted, "prod", "web-1", time.Now(), "guest", "deny"},
	}
	for _, c := range logins {
		t.Run("login/"+c.name, func(t *testing.T) {
			u, p := bus.LoginCredentials(c.key, c.env, c.as, c.issued)
			if c.password != "" {
				p = c.password
			}
			if got := ask(t, srv, "/user", url.Values{"username": {u}, "password": {p}}); got != c.want {
				t.Fatalf("got %q, want %q", got, c.want)
			}
		})
	}
	if got := ask(t, srv, "/user", url.Values{"username": {"guest"}, "password": {"guest"}}); got != "deny" {
		t.Fatalf("login as guest: got %q, want deny", got)
	}
	al.mu.Lock()
	if len(al.said) != 2 || !strings.Contains(al.said[0], "prod/web-1") || !strings.Contains(al.said[1], "prod/web-3: broker login of agent web-3 with its previous key") {
		t.Errorf("security alerts: got %q, want one about prod/web-1's key, one about web-3's previous key", al.said)
	}
	al.mu.Unlock()

	web1, new1, new2 := user(accepted, "prod", "web-1"), user(pending, "prod", "new-1"), user(stranger, "prod", "new-2")
	resources := []struct {
		name                       string
		user, resource, what, perm string
		want                       string
	}{
		{"read own inbox", web1, "queue", "tether.agent.prod.web-1", "read", "allow"},
		{"declare, redeclare or delete own inbox", web1, "queue", "tether.agent.prod.web-1", "configure", "deny"},
		{"bind to own inbox", web1, "queue", "tether.agent.prod.web-1", "write", "deny"},
		{"read another's inbox", web1, "queue", "tether.agent.prod.web-2", "read", "deny"},
		{"delete another's inbox", web1, "queue", "tether.agent.prod.web-2", "configure", "deny"},
		{"read another environment's inbox of the same name", web1, "queue", "tether.agent.stage.web-1", "read", "deny"},
		{"own claim", web1, "queue", "tether.primary.prod.web-1", "configure", "allow"},
		{"another's claim", web1, "queue", "tether.primary.prod.web-2", "configure", "deny"},
		{"consume own claim (nudges)", web1, "queue", "tether.primary.prod.web-1", "read", "allow"},
		{"consume another's claim", web1, "queue", "tether.primary.prod.web-2", "read", "deny"},
		{"bind own claim", web1, "queue", "tether.primary.prod.web-1", "write", "deny"},
		{"stranger consumes the claim of its name", new2, "queue", "tether.primary.prod.new-2", "read", "deny"},
		{"server events queue", web1, "queue", "tether.server.events", "read", "deny"},
		{"purge the compliance queue", web1, "queue", "tether.server.compliance", "read", "deny"},
		{"dead-letter queue", web1, "queue", "tether.dead", "configure", "deny"},
		{"a tap queue", web1, "queue", "tap", "configure", "deny"},
		{"publish events", web1, "exchange", "tether.events", "write", "allow"},
		{"bind to events", web1, "exchange", "tether.events", "read", "deny"},
		{"declare events", web1, "exchange", "tether.events", "configure", "deny"},
		{"publish commands", web1, "exchange", "tether.cmd", "write", "deny"},
		{"bind to commands", web1, "exchange", "tether.cmd", "read", "deny"},
		{"publish to the default exchange", web1, "exchange", "amq.default", "write", "deny"},
		{"publish dead letters", web1, "exchange", "tether.dead", "write", "deny"},
		{"pending reads its inbox", new1, "queue", "tether.agent.prod.new-1", "read", "allow"},
		{"pending declares its inbox", new1, "queue", "tether.agent.prod.new-1", "configure", "deny"},
		{"stranger reads the inbox of its name", new2, "queue", "tether.agent.prod.new-2", "read", "deny"},
		{"stranger claims", new2, "queue", "tether.primary.prod.new-2", "configure", "deny"},
		{"stranger publishes events", new2, "exchange", "tether.events", "write", "allow"},
		{"thief reads the pending agent's inbox", user(thief, "prod", "new-1"), "queue", "tether.agent.prod.new-1", "read", "deny"},
		{"rejected agent", user(rejected, "prod", "bad-1"), "exchange", "tether.events", "write", "deny"},
		{"the server's user is not ours to answer", "tether-server", "queue", "tether.server.events", "read", "deny"},
	}
	for _, c := range resources {
		t.Run("resource/"+c.name, func(t *testing.T) {
			got := ask(t, srv, "/resource", url.Values{"username": {c.user}, "vhost": {"/"}, "resource": {c.resource}, "name": {c.what}, "permission": {c.perm}})
			if got != c.want {
				t.Fatalf("%s %s %s: got %q, want %q", c.perm, c.resource, c.what, got, c.want)
			}
		})
	}
	if got := ask(t, srv, "/resource", url.Values{"username": {web1}, "vhost": {"other"}, "resource": {"queue"}, "name": {"tether.agent.prod.web-1"}, "permission": {"read"}}); got != "deny" {
		t.Fatalf("another vhost: got %q, want deny", got)
	}

	topics := []struct {
		name      string
		user, key string
		want      string
	}{
		{"own status", web1, "prod.web-1.resource.status", "allow"},
		{"own compliance", web1, "prod.web-1.compliance", "allow"},
		{"another's status", web1, "prod.web-2.resource.status", "deny"},
		{"a name that extends its own", web1, "prod.web-1.x.hello", "deny"},
		{"another environment", web1, "stage.web-1.hello", "deny"},
		{"an unknown kind", web1, "prod.web-1.desired.full", "deny"},
		{"a wildcard", web1, "prod.web-1.#", "deny"},
		{"pending says hello", new1, "prod.new-1.hello", "allow"},
		{"pending reports refusals", new1, "prod.new-1.security", "allow"},
		{"pending sends status", new1, "prod.new-1.resource.status", "deny"},
		{"stranger says hello", new2, "prod.new-2.hello", "allow"},
		{"stranger says hello for another name", new2, "prod.web-1.hello", "deny"},
		{"stranger sends facts", new2, "prod.new-2.facts", "deny"},
	}
	for _, c := range topics {
		t.Run("topic/"+c.name, func(t *testing.T) {
			got := ask(t, srv, "/topic", url.Values{"username": {c.user}, "vhost": {"/"}, "resource": {"topic"}, "name": {"tether.events"}, "permission": {"write"}, "routing_key": {c.key}})
			if got != c.want {
				t.Fatalf("routing key %s: got %q, want %q", c.key, got, c.want)
			}
		})
	}
	if got := ask(t, srv, "/topic", url.Values{"username": {web1}, "vhost": {"/"}, "resource": {"topic"}, "name": {"tether.cmd"}, "permission": {"write"}, "routing_key": {"prod.web-1.hello"}}); got != "deny" {
		t.Fatalf("topic on another exchange: got %q, want deny", got)
	}
	for _, c := range []struct{ vhost, want string }{{"/", "allow"}, {"other", "deny"}} {
		if got := ask(t, srv, "/vhost", url.Values{"username": {web1}, "vhost": {c.vhost}, "ip": {"10.0.0.1"}}); got != c.want {
			t.Fatalf("vhost %s: got %q, want %q", c.vhost, got, c.want)
		}
	}
	if got := ask(t, srv, "/vhost", url.Values{"username": {user(rejected, "prod", "bad-1")}, "vhost": {"/"}, "ip": {"10.0.0.1"}}); got != "deny" {
		t.Fatalf("vhost for a rejected agent: got %q, want deny", got)
	}
	if c := b.Counts(); c.Allowed == 0 || c.Refused == 0 {
		t.Errorf("counts: got %+v, want both answers counted", c)
	}
}

// Alerts about one name's refused logins come once per period.
func TestAlertsAggregated(t *testing.T) {
	owner, thief := key(t), key(t)
	dir := agents{"prod/web-1": {Env: "prod", Name: "web-1", State: record.AgentAccepted, PublicKey: pub(owner)}}
	al := &alerts{}
	b, err := New(Config{AlertEvery: time.Hour}, dir, al, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	b.now = func() time.Time { return now }
	for range 1000 {
		u, p := bus.LoginCredentials(thief, "prod", "web-1", now)
		if ok, err := b.User(context.Background(), u, p); ok || err != nil {
			t.Fatalf("login with another key: got %v, %v, want refused", ok, err)
		}
	}
	if len(al.said) != 1 {
		t.Fatalf("1000 refused logins: got %d alerts, want 1", len(al.said))
	}
	now = now.Add(time.Hour)
	u, p := bus.LoginCredentials(thief, "prod", "web-1", now)
	_, _ = b.User(context.Background(), u, p)
	if len(al.said) != 2 {
		t.Fatalf("a period later: got %d alerts, want 2", len(al.said))
	}
}

func TestConfig(t *testing.T) {
	for _, c := range []Config{{Skew: time.Second}, {AlertEvery: -1}} {
		if _, err := New(c, agents{}, nil, zerolog.Nop()); err == nil {
			t.Errorf("%+v: got no error, want one", c)
		}
	}
}

// Logins of keys the server does not know are bounded per source address;
// known agents are not, nor other addresses.
func TestStrangersBoundedPerAddress(t *testing.T) {
	owner := key(t)
	dir := agents{"prod/web-1": {Env: "prod", Name: "web-1", State: record.AgentAccepted, PublicKey: pub(owner)}}
	al := &alerts{}
	b, err := New(Config{}, dir, al, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	b.now = func() time.Time { return now }
	ctx := context.Background()
	stranger := func(i int) string {
		return bus.BrokerLogin{Env: "prod", Agent: fmt.Sprintf("fake-%d", i), Key: pub(key(t))}.User()
	}
	allowed := 0
	for i := range 500 {
		if ok, _ := b.VHost(ctx, stranger(i), "/", "203.0.113.7"); ok {
			allowed++
		}
	}
	if allowed != StrangerBurst {
		t.Fatalf("500 strangers from one address: %d let in, want %d", allowed, StrangerBurst)
	}
	if ok, _ := b.VHost(ctx, stranger(1000), "/", "198.51.100.1"); !ok {
		t.Fatal("a stranger from another address refused")
	}
	if ok, _ := b.VHost(ctx, bus.BrokerLogin{Env: "prod", Agent: "web-1", Key: pub(owner)}.User(), "/", "203.0.113.7"); !ok {
		t.Fatal("an accepted agent behind the flooding address refused")
	}
	now = now.Add(strangerEvery)
	if ok, _ := b.VHost(ctx, stranger(2000), "/", "203.0.113.7"); !ok {
		t.Fatal("a stranger refused after the address's bucket refilled by one")
	}
	if len(al.said) != 1 || !strings.Contains(al.said[0], "203.0.113.7") {
		t.Fatalf("alerts: %q, want one naming the address", al.said)
	}
}

func TestSourceOf(t *testing.T) {
	for _, tc := range []struct{ ip, want string }{
		{"203.0.113.7", "203.0.113.7"},
		{"::ffff:203.0.113.7", "203.0.113.7"},
		{"2001:db8:1:2:aaaa::1", "2001:db8:1:2::/64"},
		{"2001:db8:1:2:ffff:ffff:ffff:ffff", "2001:db8:1:2::/64"},
		{"2001:db8:1:3::1", "2001:db8:1:3::/64"},
		{"fe80::1%eth0", "fe80::/64"},
		{"::1", "::/64"},
		{"not an address", "not an address"},
		{"", ""},
	} {
		if got := sourceOf(tc.ip); got != tc.want {
			t.Errorf("sourceOf(%q): got %q, want %q", tc.ip, got, tc.want)
		}
	}
}

// strangerBackend is a backend that knows no agent, at a clock the test
// moves.
func strangerBackend(t *testing.T) (b *Backend, al *alerts, now *time.Time) {
	t.Helper()
	al = &alerts{}
	b, err := New(Config{}, agents{}, al, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	clock := time.Now()
	b.now = func() time.Time { return clock }
	return b, al, &clock
}

// An IPv6 subscriber holds a whole /64: its logins count together,
// whichever addresses of it they come from.
func TestStrangersBoundedPerIPv6Prefix(t *testing.T) {
	b, al, _ := strangerBackend(t)
	ctx := context.Background()
	k := pub(key(t))
	user := func(i int) string {
		return bus.BrokerLogin{Env: "prod", Agent: fmt.Sprintf("fake-%d", i), Key: k}.User()
	}
	allowed := 0
	for i := range 500 {
		if ok, _ := b.VHost(ctx, user(i), "/", fmt.Sprintf("2001:db8:7:9:%x::%x", i, i+1)); ok {
			allowed++
		}
	}
	if allowed != StrangerBurst {
		t.Fatalf("500 strangers from 500 addresses of one /64: %d let in, want %d", allowed, StrangerBurst)
	}
	if ok, _ := b.VHost(ctx, user(1000), "/", "2001:db8:7:a::1"); !ok {
		t.Fatal("a stranger from the next /64 refused")
	}
	if len(al.said) != 1 || !strings.Contains(al.said[0], "2001:db8:7:9::/64") {
		t.Fatalf("alerts: %q, want one naming the /64", al.said)
	}
}

// Beyond maxBuckets sources tracked at once, new sources share one
// bucket: a spray of sources neither lets each new one in with a full
// bucket of its own nor pushes out the buckets being drained. Once the
// sprayed buckets have refilled, they are forgotten and new sources get
// their own again.
func TestStrangerBucketsOverflow(t *testing.T) {
	b, al, now := strangerBackend(t)
	ctx := context.Background()
	k := pub(key(t))
	user := func(i int) string {
		return bus.BrokerLogin{Env: "prod", Agent: fmt.Sprintf("fake-%d", i), Key: k}.User()
	}
	ipv4 := func(i int) string { return fmt.Sprintf("10.%d.%d.%d", i>>16&255, i>>8&255, i&255) }
	// One source drains its bucket but for one login; then a spray of
	// sources, one login each, fills the table.
	drained := "192.0.2.1"
	for i := range StrangerBurst - 1 {
		if ok, _ := b.VHost(ctx, user(i), "/", drained); !ok {
			t.Fatalf("login %d from %s refused within the burst", i, drained)
		}
	}
	for i := range maxBuckets - 1 {
		if ok, _ := b.VHost(ctx, user(i), "/", ipv4(i)); !ok {
			t.Fatalf("the first login from %s refused", ipv4(i))
		}
	}
	allowed := 0
	for i := range 3 * StrangerBurst {
		if ok, _ := b.VHost(ctx, user(i), "/", ipv4(maxBuckets+i)); ok {
			allowed++
		}
	}
	if allowed != StrangerBurst {
		t.Fatalf("%d new sources beyond the %d tracked: %d logins let in, want the shared bucket's %d", 3*StrangerBurst, maxBuckets, allowed, StrangerBurst)
	}
	if len(al.said) != 1 || !strings.Contains(al.said[0], "more than 10000 sources") {
		t.Fatalf("alerts: %q, want one about the sources beyond those tracked", al.said)
	}
	// The drained source's bucket was kept through the spray.
	if ok, _ := b.VHost(ctx, user(0), "/", drained); !ok {
		t.Fatalf("%s refused its last login after the spray", drained)
	}
	if ok, _ := b.VHost(ctx, user(0), "/", drained); ok {
		t.Fatalf("%s let in beyond its burst after the spray: its bucket was reset", drained)
	}
	// A refill period on, the sprayed buckets are full again (the
	// drained one is not): they go, and a new source has its own.
	*now = now.Add(strangerEvery)
	for i := range StrangerBurst {
		if ok, _ := b.VHost(ctx, user(i), "/", "198.51.100.77"); !ok {
			t.Fatalf("login %d from a new source refused once the sprayed buckets refilled", i)
		}
	}
	if ok, _ := b.VHost(ctx, user(1), "/", drained); !ok {
		t.Fatalf("%s refused a refill period on: want the one login its bucket regained", drained)
	}
	if ok, _ := b.VHost(ctx, user(2), "/", drained); ok {
		t.Fatalf("%s let in twice a refill period on: its bucket was reset", drained)
	}
}
