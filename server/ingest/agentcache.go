package ingest

import (
	"context"
	"hash/fnv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tetherhq/tether/server/record"
	"github.com/tetherhq/tether/server/store"
)

// agentCache holds agents' keys and states for the ingest path, so an
// event costs no read of its agent. Changes made through this server are
// seen at once. Changes made through another replica are told by the store
// where it can (ListenAgents: PostgreSQL tells every server of a change of
// an agent's record at its commit): while it listens, a copy is trusted
// for listenTTL (a bound, should a notice be lost); else for ttl.
type agentCache struct {
	store     store.Store
	ttl       time.Duration
	listenTTL time.Duration
	listening atomic.Bool
	mu        sync.Mutex
	m         map[agentKey]cachedAgent
	// forgets count what was forgotten, by stripe of agents (forget), and
	// epoch the times an environment or everything was: a copy read
	// before a forget of its stripe or a new epoch is not kept after it
	// (putRead).
	forgets [64]uint64
	epoch   uint64
}

// cacheMark is what was forgotten by some instant (agentCache.since).
type cacheMark struct{ epoch, forgets uint64 }

// hash spreads agents over stripes (agentLocks, agentCache.forgets).
func (k agentKey) hash() uint32 {
	h := fnv.New32a()
	h.Write([]byte(k.env))
	h.Write([]byte{0})
	h.Write([]byte(k.name))
	return h.Sum32()
}

// stripe is the forgets stripe of env/name.
func (k agentKey) stripe() int { return int(k.hash() % 64) }

type agentKey struct{ env, name string }

type cachedAgent struct {
	agent record.Agent
	at    time.Time
}

// agentLocks serialise this server's read-modify-write of one agent's
// record: events of one agent are handled by several consumers at once,
// and a heartbeat read before a status (or an operator's reject) was
// written would write the older copy back over it.
type agentLocks [64]sync.Mutex

// lock locks env/name's stripe and returns its unlock.
func (l *agentLocks) lock(env, name string) func() {
	m := &l[agentKey{env, name}.hash()%uint32(len(l))]
	m.Lock()
	return m.Unlock
}

func newAgentCache(st store.Store, ttl, listenTTL time.Duration) *agentCache {
	return &agentCache{store: st, ttl: ttl, listenTTL: listenTTL, m: map[agentKey]cachedAgent{}}
}

// get returns the agent, and whether it is the cache's copy (not read
// from the store just now).
func (c *agentCache) get(ctx context.Context, env, name string) (a record.Agent, cached bool, err error) {
	k := agentKey{env, name}
	ttl := c.ttl
	if c.listening.Load() {
		ttl = c.listenTTL
	}
	c.mu.Lock()
	e, ok := c.m[k]
	since := cacheMark{c.epoch, c.forgets[k.stripe()]}
	c.mu.Unlock()
	if ok && time.Since(e.at) < ttl {
		return e.agent, true, nil
	}
	a, err = c.store.GetAgent(ctx, env, name)
	if err != nil {
		return a, false, err
	}
	c.putRead(a, since)
	return a, false, nil
}

// since marks what was forgotten of env/name by now, taken before reading
// or writing its record whose copy is then kept (putRead).
func (c *agentCache) since(env, name string) cacheMark {
	c.mu.Lock()
	defer c.mu.Unlock()
	return cacheMark{c.epoch, c.forgets[agentKey{env, name}.stripe()]}
}

// putRead keeps a, read or written after since was taken, unless a was
// forgotten since (or another agent of its stripe, or everything): a
// change told meanwhile may be newer than a.
func (c *agentCache) putRead(a record.Agent, since cacheMark) {
	k := agentKey{a.Env, a.Name}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.epoch != since.epoch || c.forgets[k.stripe()] != since.forgets {
		return
	}
	if len(c.m) > 1<<16 { // bounded: start over rather than grow without end
		clear(c.m)
	}
	c.m[k] = cachedAgent{agent: a, at: time.Now()}
}

// update changes the cached copy of env/name, if there is one, with fn;
// it keeps its age.
func (c *agentCache) update(env, name string, fn func(*record.Agent)) {
	c.mu.Lock()
	defer c.mu.Unlock()
	k := agentKey{env, name}
	if e, ok := c.m[k]; ok {
		fn(&e.agent)
		c.m[k] = e
	}
}

func (c *agentCache) forget(env, name string) {
	k := agentKey{env, name}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.forgets[k.stripe()]++
	delete(c.m, k)
}

// setListening says whether changes made elsewhere are told (ListenAgents):
// every copy is dropped either way, as changes may have gone untold.
func (c *agentCache) setListening(on bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.epoch++
	clear(c.m)
	c.listening.Store(on)
}

func (c *agentCache) forgetEnv(env string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.epoch++
	for k := range c.m {
		if k.env == env {
			delete(c.m, k)
		}
	}
}
