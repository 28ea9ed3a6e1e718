package ingest

import (
	"bytes"
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/tetherhq/tether/bus"
	"github.com/tetherhq/tether/server/record"
)

// Floods: one sender — a compromised host with its own key, or anyone
// publishing forgeries under names — must not cost the server more than a
// bounded amount, nor fill its store with alerts, nor hold back other
// agents' events. Per sender (environment and agent name), within each
// window (a minute by default):
//   - at most alertsPerWindow security alerts are stored and streamed; the
//     others are counted, and one summary alert says how many, once the
//     window is over;
//   - at most deadPerWindow refused events are dead-lettered (kept for
//     inspection); the others are dropped at once, counted;
//   - an agent's accepted events pass at most at rate a second (with a
//     burst of ten seconds' worth); the others are dropped, counted, and
//     alerted (within the bound above);
//   - a known agent's hellos — each one written, answered, its inbox
//     declared and what it misses sent — pass at most one a second after
//     a burst of helloBurst; the others are dropped, counted and alerted.
//
// Each costs a map lookup under one lock: dropping is cheaper than
// verifying, so a flood drains from the shared queue at the speed of
// signature checks, not of database writes.

const (
	alertsPerWindow = 5
	deadPerWindow   = 100
	// Discovery of agents the server did not know, per environment; an
	// enrollment token is not bound by it.
	discoveriesPerMinute = 120
	discoveryBurst       = 1000
	// discoveryName is the sender an environment's discoveries count
	// under (not an agent name: those start with a letter or digit).
	discoveryName = "(discovery)"
	// maxSenders bounds the senders tracked; beyond, forged names share
	// one entry (a flood of invented names is one flood).
	maxSenders = 10000
	// Hellos of an agent the server knows, signed by its key: an honest
	// agent says hello when it starts or reconnects, and again, slower
	// and slower, until it is enrolled.
	helloBurst = 60
	helloRate  = 1.0 // a second
)

// floodGuard tracks senders. Its zero value is not usable: newFloodGuard.
type floodGuard struct {
	window time.Duration
	rate   float64 // accepted events a second per agent
	burst  float64

	mu      sync.Mutex
	senders map[string]*sender
}

type sender struct {
	env, agent string
	start      time.Time // of the current window
	alerts     int       // stored in this window
	suppressed int       // alerts not stored in this window
	last       string    // the last suppressed alert's text
	dead       int       // refused events dead-lettered in this window
	events     bucket    // the agent's accepted events (allow), or its environment's discoveries
	hellos     bucket    // the agent's hellos signed by its key
}

// bucket is a token bucket. Its zero value is full.
type bucket struct {
	tokens   float64 // what may pass at once, as of refilled
	used     bool    // tokens holds a count (else the bucket is full)
	refilled time.Time
}

func newFloodGuard(window time.Duration, rate float64) *floodGuard {
	return &floodGuard{window: window, rate: rate, burst: 10 * rate, senders: map[string]*sender{}}
}

// of returns the sender env/agent, its window rolled to now. Called with
// g.mu held.
func (g *floodGuard) of(env, agent string, now time.Time) *sender {
	key := env + "/" + agent
	s, ok := g.senders[key]
	if !ok {
		if len(g.senders) >= maxSenders {
			g.sweep(now)
		}
		if len(g.senders) >= maxSenders {
			key, env, agent = "*", "", ""
			if s, ok = g.senders[key]; ok {
				return g.roll(s, now)
			}
		}
		s = &sender{env: env, agent: agent, start: now}
		g.senders[key] = s
	}
	return g.roll(s, now)
}

// roll starts a new window when the current one is over; a window whose
// suppressed alerts were not summed up yet stays until summaries takes it.
func (g *floodGuard) roll(s *sender, now time.Time) *sender {
	if now.Sub(s.start) >= g.window && s.suppressed == 0 {
		s.start, s.alerts, s.dead = now, 0, 0
	}
	return s
}

// sweep forgets senders idle for a whole window with nothing to sum up.
func (g *floodGuard) sweep(now time.Time) {
	for k, s := range g.senders {
		if now.Sub(s.start) >= g.window && s.suppressed == 0 && now.Sub(s.events.refilled) >= g.window && now.Sub(s.hellos.refilled) >= g.window {
			delete(g.senders, k)
		}
	}
}

// alert reports whether a security alert about env/agent is stored now,
// and whether it is the first one held back in this window.
func (g *floodGuard) alert(env, agent, what string, now time.Time) (store, firstHeld bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	s := g.of(env, agent, now)
	if s.alerts < alertsPerWindow {
		s.alerts++
		return true, false
	}
	s.suppressed++
	s.last = what
	return false, s.suppressed == 1
}

// deadLetter reports whether an event of env/agent the server refused is
// dead-lettered (else it is dropped).
func (g *floodGuard) deadLetter(env, agent string, now time.Time) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	s := g.of(env, agent, now)
	if s.dead < deadPerWindow {
		s.dead++
		return true
	}
	return false
}

// allow reports whether an accepted agent's event is within its rate.
func (g *floodGuard) allow(env, agent string, now time.Time) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.of(env, agent, now).events.take(g.rate, g.burst, now)
}

// hello reports whether a hello of the known agent env/agent, signed by
// its key, is within its hello rate.
func (g *floodGuard) hello(env, agent string, now time.Time) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.of(env, agent, now).hellos.take(helloRate, helloBurst, now)
}

// discover reports whether one more agent may be discovered in env now:
// at most discoveriesPerMinute, with bursts of discoveryBurst (a fleet
// installed at once), so that invented names cannot fill the agent list.
func (g *floodGuard) discover(env string, now time.Time) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.of(env, discoveryName, now).events.take(discoveriesPerMinute/60, discoveryBurst, now)
}

// take takes one token of b, refilled at rate a second up to burst. Called
// with the guard's lock held.
func (b *bucket) take(rate, burst float64, now time.Time) bool {
	if !b.used {
		b.tokens, b.used = burst, true
	} else {
		b.tokens = min(burst, b.tokens+now.Sub(b.refilled).Seconds()*rate)
	}
	b.refilled = now
	if b.tokens < 1 {
		return false
	}
	b.tokens--
	return true
}

// helloOverRate reports whether a hello is beyond its agent's hello rate:
// then it is dropped, counted and alerted. Only hellos the server would
// answer at a cost count: of an agent it knows, signed (verified before)
// by the key it knows
// (its previous key too, while that holds), so nobody without the key can
// spend an agent's hellos. The others are refused further on, or bounded
// as discoveries.
func (in *Ingester) helloOverRate(ctx context.Context, e *bus.Envelope, body bus.Hello) bool {
	a, _, err := in.agents.get(ctx, e.Env, e.Agent)
	if err != nil {
		return false // unknown (bounded as a discovery), or the store away (hello fails on its own)
	}
	now := time.Now()
	if !(bytes.Equal(body.PublicKey, a.PublicKey) || a.PreviousHolds(body.PublicKey, now)) || in.flood.hello(e.Env, e.Agent, now) {
		return false
	}
	in.count(e.Kind, "over_rate")
	in.security(ctx, e, fmt.Sprintf("agent %s says hello more than %d times at once, then once a second: the excess is dropped", a.Name, helloBurst))
	return true
}

// summary is what one sender's held-back alerts come to.
type summary struct {
	env, agent string
	count      int
	last       string
}

// summaries returns the alerts held back in windows over by now, and
// starts those senders' next windows.
func (g *floodGuard) summaries(now time.Time) []summary {
	g.mu.Lock()
	defer g.mu.Unlock()
	var out []summary
	for _, s := range g.senders {
		if s.suppressed > 0 && now.Sub(s.start) >= g.window {
			out = append(out, summary{env: s.env, agent: s.agent, count: s.suppressed, last: s.last})
			s.suppressed, s.last = 0, ""
			g.roll(s, now)
		}
	}
	return out
}

// sumUpAlerts stores, every second until ctx ends, one alert per sender
// whose held-back alerts' window is over.
func (in *Ingester) sumUpAlerts(ctx context.Context) {
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-tick.C:
			for _, sum := range in.flood.summaries(now) {
				who := "agent " + sum.agent
				switch sum.agent {
				case "":
					who = "invented agent names (too many to track one by one)"
				case unknownSigner:
					who = "events no key the server knows signed"
				}
				msg := fmt.Sprintf("%d more security alerts about %s within %s were counted, not stored one by one; the last: %s",
					sum.count, who, in.flood.window, sum.last)
				in.log.Warn().Str("env", sum.env).Str("agent", sum.agent).Int("alerts", sum.count).Msg("security: " + msg)
				alert := record.Alert{At: now.UTC(), Env: sum.env, Agent: sum.agent, Kind: record.AlertSecurity, Message: msg}
				in.storeAlert(ctx, alert)
			}
		}
	}
}
