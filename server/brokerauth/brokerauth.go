// Package brokerauth is the server's answer to RabbitMQ's HTTP
// authentication backend (rabbitmq_auth_backend_http, behind
// rabbitmq_auth_backend_cache): every agent logs in to the broker as itself,
// with a short-lived login signed by its key, and the broker asks this
// package whether the login holds and what that agent may do. The answers
// come from the server's store, so accepting, rejecting or revoking an
// agent changes its rights on the broker within the cache's lifetime.
//
// An agent may read its own inbox (never declare, delete or bind it: the
// server declares it) and hold its own primary claim, and publish to the
// events exchange with routing keys <env>.<agent>.<kind> only: no other
// queue, no binding, no exchange, no other agent's routing key. One the server does not know yet may only publish its hello. The
// server logs in as a user of the broker's own database, which the broker
// asks first; this backend never grants anything to a user that is not an
// agent's.
package brokerauth

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/rs/zerolog"

	"github.com/tetherhq/tether/bus"
	"github.com/tetherhq/tether/model"
	"github.com/tetherhq/tether/server/record"
)

// Config configures the backend.
type Config struct {
	// Namespace prefixes the broker's exchange and queue names, as the
	// bus's (tether: tether.events, tether.agent.<env>.<agent>, …).
	Namespace string
	// VHost is the virtual host agents may use.
	VHost string
	// Skew is how far from the server's clock a login's time may be.
	Skew time.Duration
	// AlertEvery bounds the security alerts about one agent name's
	// refused logins to one per period: a host that keeps trying with the
	// wrong key raises one alert, not one per attempt.
	AlertEvery time.Duration
}

// Default returns the configuration for the default namespace.
func Default() Config {
	return Config{Namespace: "tether", VHost: "/", Skew: 30 * time.Minute, AlertEvery: 10 * time.Minute}
}

// ErrConfig is wrapped by every error Validate returns.
var ErrConfig = errors.New("invalid broker authentication configuration")

// Validate checks the configuration.
func (c Config) Validate() error {
	switch {
	case c.Namespace == "":
		return fmt.Errorf("%w: empty namespace", ErrConfig)
	case c.VHost == "":
		return fmt.Errorf("%w: empty virtual host", ErrConfig)
	case c.Skew < time.Minute:
		return fmt.Errorf("%w: login clock skew %v: want at least 1m", ErrConfig, c.Skew)
	case c.AlertEvery <= 0:
		return fmt.Errorf("%w: alert period %v: want more than 0", ErrConfig, c.AlertEvery)
	}
	return nil
}

// Agents finds an agent's record.
type Agents interface {
	GetAgent(ctx context.Context, env, name string) (record.Agent, error)
}

// Alerter raises a security alert about an agent name.
type Alerter interface {
	SecurityAlert(ctx context.Context, env, agent, what string)
}

// Backend answers the broker's questions. Make one with New.
type Backend struct {
	cfg    Config
	agents Agents
	alert  Alerter
	log    zerolog.Logger
	now    func() time.Time

	mu      sync.Mutex
	alerted map[string]time.Time // env/name → last alert
	counts  Counts
	// strangers bounds the logins of unknown keys per source (sourceOf).
	strangers *buckets
}

// Logins of keys the server does not know, per source (an IPv4 address,
// an IPv6 /64: see sourceOf): a burst of StrangerBurst (a site's hosts
// installed at once behind one NAT), then one per strangerEvery.
const (
	StrangerBurst = 200
	strangerEvery = 2 * time.Second
	// strangerName is the name alerts about them go under (not an agent
	// name: those start with a letter or digit).
	strangerName = "(unknown keys)"
)

// sourceOf is what strangers' logins from ip are counted by: the address
// for IPv4, its /64 for IPv6 (a subscriber is given a whole /64, and may
// pick any address of it), ip as it is when it is no address.
func sourceOf(ip string) string {
	a, err := netip.ParseAddr(ip)
	if err != nil {
		return ip
	}
	a = a.Unmap().WithZone("")
	if a.Is4() {
		return a.String()
	}
	p, err := a.Prefix(64)
	if err != nil {
		return ip
	}
	return p.String()
}

// buckets are token buckets by key, at most maxBuckets of them. A full
// bucket is forgotten when room is needed (a new one is the same); when
// none is full, new keys share one overflow bucket: a spray of new
// sources cannot push out, and so reset, the buckets of those draining
// theirs.
type buckets struct {
	mu        sync.Mutex
	burst     float64
	every     time.Duration
	bucket    map[string]*bucket
	overflow  bucket
	lastSweep time.Time
}

type bucket struct {
	tokens float64
	at     time.Time
}

const maxBuckets = 10000

func newBuckets(burst int, every time.Duration) *buckets {
	return &buckets{burst: float64(burst), every: every, bucket: map[string]*bucket{},
		overflow: bucket{tokens: float64(burst)}}
}

// take takes a token of key's bucket, or of the overflow bucket (shared
// reports which).
func (bs *buckets) take(key string, now time.Time) (ok, shared bool) {
	bs.mu.Lock()
	defer bs.mu.Unlock()
	b, found := bs.bucket[key]
	if !found && len(bs.bucket) >= maxBuckets && now.Sub(bs.lastSweep) >= bs.every {
		// At most once a refill period: a bucket that was not full at
		// the last sweep may be by now.
		bs.lastSweep = now
		for k, o := range bs.bucket {
			if bs.refill(o, now) >= bs.burst {
				delete(bs.bucket, k)
			}
		}
	}
	switch {
	case found:
	case len(bs.bucket) < maxBuckets:
		b = &bucket{tokens: bs.burst, at: now}
		bs.bucket[key] = b
	default:
		b, shared = &bs.overflow, true
	}
	b.tokens, b.at = bs.refill(b, now), now
	if b.tokens < 1 {
		return false, shared
	}
	b.tokens--
	return true, shared
}

// refill is what b holds at now.
func (bs *buckets) refill(b *bucket, now time.Time) float64 {
	if b.at.IsZero() {
		return b.tokens
	}
	return min(bs.burst, b.tokens+now.Sub(b.at).Seconds()/bs.every.Seconds())
}

// Counts are the backend's answers so far.
type Counts struct {
	Allowed, Refused int64
}

// New returns a backend; cfg's zero fields take Default's values.
func New(cfg Config, agents Agents, alert Alerter, log zerolog.Logger) (*Backend, error) {
	def := Default()
	if cfg.Namespace == "" {
		cfg.Namespace = def.Namespace
	}
	if cfg.VHost == "" {
		cfg.VHost = def.VHost
	}
	if cfg.Skew == 0 {
		cfg.Skew = def.Skew
	}
	if cfg.AlertEvery == 0 {
		cfg.AlertEvery = def.AlertEvery
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Backend{cfg: cfg, agents: agents, alert: alert, now: time.Now, alerted: map[string]time.Time{},
		strangers: newBuckets(StrangerBurst, strangerEvery),
		log:       log.With().Str("component", "broker-auth").Logger()}, nil
}

// Counts returns how many questions were answered each way.
func (b *Backend) Counts() Counts {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.counts
}

// role is what the server knows of a login.
type role int

const (
	// refused: rejected, revoked, or a name accepted with another key.
	refused role = iota
	// stranger: a name the server does not know, or a pending name
	// presented with another key (an enrollment token may still make it
	// this key's): it may say hello, nothing else.
	stranger
	// pending: the key of an agent waiting for an operator: hello, its
	// refusals, and reading its inbox, where its acceptance will come.
	pending
	// accepted: an enrolled agent.
	accepted
)

// roleOf looks the login's agent up. A refusal of a name the server knows
// under another key raises a security alert (at most one per AlertEvery).
func (b *Backend) roleOf(ctx context.Context, l bus.BrokerLogin) (role, error) {
	a, err := b.agents.GetAgent(ctx, l.Env, l.Agent)
	switch {
	case errors.Is(err, model.ErrNotFound):
		return stranger, nil
	case err != nil:
		return refused, err
	}
	// An agent that rolled its key over logs in with its previous key
	// until it switches: it hears of the new key's acceptance over that
	// login. Once the server heard from it with the new key, the old
	// login is refused.
	same := bytes.Equal(a.PublicKey, l.Key) ||
		(a.State == record.AgentAccepted && !a.Switched() && a.PreviousHolds(l.Key, b.now()))
	switch {
	case same && a.State == record.AgentAccepted:
		return accepted, nil
	case same && a.State == record.AgentPending:
		return pending, nil
	case !same && a.State == record.AgentPending:
		return stranger, nil
	case bytes.Equal(a.PreviousKey, l.Key):
		b.securityAlert(ctx, l, fmt.Sprintf("broker login of agent %s with its previous key %s, which it left for %s, refused (is the old key in other hands?)",
			a.Name, bus.Fingerprint(l.Key), bus.Fingerprint(a.PublicKey)))
	case !same:
		b.securityAlert(ctx, l, fmt.Sprintf("broker login of %s agent %s with another key (%s, not %s) refused",
			a.State, a.Name, bus.Fingerprint(l.Key), bus.Fingerprint(a.PublicKey)))
	}
	return refused, nil
}

func (b *Backend) securityAlert(ctx context.Context, l bus.BrokerLogin, what string) {
	key := l.Env + "/" + l.Agent
	b.mu.Lock()
	last, seen := b.alerted[key]
	now := b.now()
	fresh := !seen || now.Sub(last) >= b.cfg.AlertEvery
	if fresh {
		b.alerted[key] = now
		if len(b.alerted) > 10000 { // forget the oldest period's
			for k, t := range b.alerted {
				if now.Sub(t) >= b.cfg.AlertEvery {
					delete(b.alerted, k)
				}
			}
		}
	}
	b.mu.Unlock()
	if fresh && b.alert != nil {
		b.alert.SecurityAlert(ctx, l.Env, l.Agent, what)
	}
}

// Names of the broker's resources, as the bus names them.
func (b *Backend) eventsExchange() string { return b.cfg.Namespace + ".events" }
func (b *Backend) inbox(l bus.BrokerLogin) string {
	return b.cfg.Namespace + ".agent." + l.Env + "." + l.Agent
}
func (b *Backend) claim(l bus.BrokerLogin) string {
	return b.cfg.Namespace + ".primary." + l.Env + "." + l.Agent
}

// User answers whether a login holds.
func (b *Backend) User(ctx context.Context, user, password string) (bool, error) {
	l, err := bus.CheckLogin(user, password, b.now(), b.cfg.Skew)
	if err != nil {
		b.log.Debug().Err(err).Msg("broker login refused")
		return false, nil
	}
	r, err := b.roleOf(ctx, l)
	if err != nil {
		return false, err
	}
	if r == refused {
		b.log.Debug().Stringer("login", l).Msg("broker login refused: the agent is rejected, or known under another key")
	}
	return r != refused, nil
}

// VHost answers whether user, connecting from ip, may use vhost (the
// broker asks when a connection opens). Logins of strangers — keys the
// server does not know — are bounded per source (an IPv4 address, an
// IPv6 /64): each may say hello and become a pending agent, and invented
// ones must not flood the server.
func (b *Backend) VHost(ctx context.Context, user, vhost, ip string) (bool, error) {
	if vhost != b.cfg.VHost {
		return false, nil
	}
	l, err := bus.ParseBrokerUser(user)
	if err != nil {
		return false, nil
	}
	r, err := b.roleOf(ctx, l)
	if err != nil || r == refused {
		return false, err
	}
	if r != stranger {
		return true, nil
	}
	source := sourceOf(ip)
	ok, shared := b.strangers.take(source, b.now())
	switch {
	case !ok && shared:
		b.securityAlert(ctx, bus.BrokerLogin{Env: l.Env, Agent: strangerName}, fmt.Sprintf(
			"logins of keys the server does not know come from more than %d sources at once: those of new sources (now %s) share %d logins, "+
				"then one every %s; beyond, refused", maxBuckets, source, StrangerBurst, strangerEvery))
	case !ok:
		b.securityAlert(ctx, bus.BrokerLogin{Env: l.Env, Agent: strangerName}, fmt.Sprintf(
			"more than %d logins of keys the server does not know from %s (then one every %s): refused",
			StrangerBurst, source, strangerEvery))
	}
	return ok, nil
}

// Resource answers whether user may have permission (configure, write,
// read) on the queue or exchange name in vhost.
func (b *Backend) Resource(ctx context.Context, user, vhost, resource, name, permission string) (bool, error) {
	l, err := bus.ParseBrokerUser(user)
	if err != nil || vhost != b.cfg.VHost {
		return false, nil
	}
	r, err := b.roleOf(ctx, l)
	if err != nil || r == refused {
		return false, err
	}
	switch resource {
	case "exchange":
		// Publishing to the events exchange; the routing key is the
		// topic question's.
		return name == b.eventsExchange() && permission == "write", nil
	case "queue":
		if r < pending {
			return false, nil
		}
		switch name {
		case b.inbox(l):
			// Consuming it, nothing else: the server declares it, with
			// its arguments (a bound, no dead-letter exchange). With
			// configure an agent could delete it and declare it again
			// unbounded, or dead-lettering where it likes; binding
			// needs write, which no agent has. Looking for it (a
			// passive declare) needs no right.
			return permission == "read", nil
		case b.claim(l):
			// An exclusive queue of its own, declared to hold the
			// claim, and consumed for the server's nudges (the inbox
			// is there).
			return permission == "configure" || permission == "read", nil
		}
	}
	return false, nil
}

// Topic answers whether user may publish to the topic exchange name with
// routingKey.
func (b *Backend) Topic(ctx context.Context, user, vhost, name, permission, routingKey string) (bool, error) {
	l, err := bus.ParseBrokerUser(user)
	if err != nil || vhost != b.cfg.VHost || name != b.eventsExchange() || permission != "write" {
		return false, nil
	}
	r, err := b.roleOf(ctx, l)
	if err != nil || r == refused {
		return false, err
	}
	kind, ok := strings.CutPrefix(routingKey, bus.CommandKey(l.Env, l.Agent)+".")
	if !ok {
		return false, nil
	}
	return slices.Contains(kindsOf(r), bus.Kind(kind)), nil
}

// kindsOf lists the event kinds a role may publish.
func kindsOf(r role) []bus.Kind {
	switch r {
	case stranger:
		return []bus.Kind{bus.KindHello}
	case pending:
		return []bus.Kind{bus.KindHello, bus.KindSecurity}
	case accepted:
		return bus.EventKinds()
	}
	return nil
}

// ServeHTTP answers the broker's four questions at /user, /vhost,
// /resource and /topic (any prefix before them), as form values of a POST
// or query parameters of a GET: "allow" or "deny". A question the server
// cannot answer (its store away) is denied: the broker asks again once its
// cache expires.
func (b *Backend) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	if err := req.ParseForm(); err != nil {
		http.Error(w, "bad request", http.StatusBadRequest)
		return
	}
	v := req.Form.Get
	ctx := req.Context()
	var ok bool
	var err error
	path := req.URL.Path
	switch {
	case strings.HasSuffix(path, "/user"):
		ok, err = b.User(ctx, v("username"), v("password"))
	case strings.HasSuffix(path, "/vhost"):
		ok, err = b.VHost(ctx, v("username"), v("vhost"), v("ip"))
	case strings.HasSuffix(path, "/resource"):
		ok, err = b.Resource(ctx, v("username"), v("vhost"), v("resource"), v("name"), v("permission"))
	case strings.HasSuffix(path, "/topic"):
		ok, err = b.Topic(ctx, v("username"), v("vhost"), v("name"), v("permission"), v("routing_key"))
	default:
		http.NotFound(w, req)
		return
	}
	if err != nil {
		b.log.Warn().Err(err).Str("question", path).Msg("cannot answer the broker; denied")
		ok = false
	}
	b.mu.Lock()
	if ok {
		b.counts.Allowed++
	} else {
		b.counts.Refused++
	}
	b.mu.Unlock()
	w.Header().Set("Content-Type", "text/plain")
	if ok {
		_, _ = w.Write([]byte("allow"))
		return
	}
	_, _ = w.Write([]byte("deny"))
}

var _ http.Handler = (*Backend)(nil)
