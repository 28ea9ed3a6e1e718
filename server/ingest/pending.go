package ingest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/tetherhq/tether/bus"
	"github.com/tetherhq/tether/model"
	"github.com/tetherhq/tether/server/record"
	"github.com/tetherhq/tether/server/store"
)

// Pending agents. Anyone who reaches the broker may make a key and say
// hello under a name the server does not know: the server records a
// pending agent, for an operator to accept. What that costs is bounded:
//   - nothing on the broker: a pending agent has no inbox (the server
//     declares one when the agent is accepted, and nudges the agent to
//     look for it); what the server has to tell it before — that it is
//     refused — goes through its claim queue, held by its own connection
//     and dropped with it (teller);
//   - at most the environment's max_pending records: beyond, the hellos
//     of agents the server does not know are refused, with one security
//     alert per refusalAlertEvery, not one per hello;
//   - for pending_expiry: a pending agent not heard from for that long is
//     forgotten by the environment's leader (sweepPending), with anything
//     an older server declared for it on the broker.

// teller is a bus that can tell an agent without an inbox something
// (found by type assertion): see bus/amqp's Tell.
type teller interface {
	Tell(ctx context.Context, e *bus.Envelope, ttl time.Duration) error
}

// inboxesDeleter is a bus that deletes many inboxes at once (found by
// type assertion).
type inboxesDeleter interface {
	DeleteInboxes(ctx context.Context, env string, agents []string) error
}

// toldFor is how long what the server tells an agent without an inbox
// waits for it: the agent is told again at its next hello.
const toldFor = time.Minute

// tell has an agent without an inbox hear e, where the bus can; an agent
// not connected hears it at its next hello.
func (in *Ingester) tell(ctx context.Context, e *bus.Envelope) error {
	if t, ok := in.bus.(teller); ok {
		return t.Tell(ctx, e, toldFor)
	}
	return nil
}

// deleteInboxes deletes env's agents' inboxes with what they hold.
func (in *Ingester) deleteInboxes(ctx context.Context, env string, names []string) error {
	if len(names) == 0 {
		return nil
	}
	if d, ok := in.bus.(inboxesDeleter); ok {
		return d.DeleteInboxes(ctx, env, names)
	}
	for _, n := range names {
		if err := in.deleteInbox(ctx, env, n); err != nil {
			return err
		}
	}
	return nil
}

// pendingFullFor is how long an environment found at its max_pending is
// taken to be so without asking the store again: a flood of hellos at the
// cap costs one count a while, not one per hello. (A place freed
// meanwhile, by an operator or the expiry, is taken after it.)
const pendingFullFor = 2 * time.Second

// pendingFull remembers the environments found at their max_pending.
type pendingFull struct {
	mu sync.Mutex
	m  map[string]pendingCount
}

type pendingCount struct {
	n  int
	at time.Time
}

// full reports whether env was found at its cap within pendingFullFor of
// now, and how many agents waited then.
func (c *pendingFull) full(env string, now time.Time) (bool, int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	got, ok := c.m[env]
	return ok && now.Sub(got.at) < pendingFullFor, got.n
}

// found notes that env was found at its cap, n agents waiting, at now.
func (c *pendingFull) found(env string, n int, now time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil || len(c.m) > maxSenders {
		c.m = map[string]pendingCount{}
	}
	c.m[env] = pendingCount{n: n, at: now}
}

// addPending records the pending agent a hello discovered, unless its
// environment's max_pending agents wait already: then the hello is
// refused, with a security alert (one per refusalAlertEvery). The store
// checks the bound and records in one step; an environment it found full
// is refused without asking it again for pendingFullFor.
func (in *Ingester) addPending(ctx context.Context, g *greeting) error {
	max := g.env.Settings.MaxPending
	full, n := in.pending.full(g.a.Env, g.now)
	if !full {
		var err error
		n, err = in.store.AddPendingAgent(ctx, g.a, max)
		switch {
		case err == nil:
			return nil
		case errors.Is(err, model.ErrConflict):
			// Handled again, from the record as it is now.
			return fmt.Errorf("hello of %s/%s: its record was written meanwhile (a hello said again?); trying again", g.a.Env, g.a.Name)
		case !errors.Is(err, store.ErrMaxPending):
			return err
		}
		in.pending.found(g.a.Env, n, g.now)
	}
	e := g.e
	in.refuseDiscovery(ctx, e.Env, "max_pending", fmt.Sprintf("%d agents wait for acceptance in %s, its max_pending: %s, not known to the server, is not recorded (it says hello again later); "+
		"accept or reject those waiting (tether agent list --env %s), or raise max_pending (tether env settings set max_pending N)",
		n, e.Env, e.Agent, e.Env))
	return fmt.Errorf("%w: %s: %d agents wait for acceptance already (max_pending)", bus.ErrReject, e, n)
}

// refusalAlertEvery is how often refusals of one kind in one environment
// (discoveries beyond the rate, or beyond max_pending) raise a security
// alert: the first at once, then one per period saying how many more.
const refusalAlertEvery = 10 * time.Minute

// refusalAlerts gates the alerts of refused discoveries.
type refusalAlerts struct {
	mu   sync.Mutex
	last map[string]time.Time
	held map[string]int
}

// pass reports whether a refusal of key raises an alert now, and how many
// refusals of key were held back since the last one.
func (g *refusalAlerts) pass(key string, now time.Time) (bool, int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.last == nil || len(g.last) > maxSenders {
		g.last, g.held = map[string]time.Time{}, map[string]int{}
	}
	if last, ok := g.last[key]; ok && now.Sub(last) < refusalAlertEvery {
		g.held[key]++
		return false, 0
	}
	held := g.held[key]
	g.last[key], g.held[key] = now, 0
	return true, held
}

// refuseDiscovery raises the security alert of a refused discovery in env
// (reason names the kind, what says it), at most one per
// refusalAlertEvery and kind.
func (in *Ingester) refuseDiscovery(ctx context.Context, env, reason, what string) {
	in.metrics.Security()
	ok, held := in.refusals.pass(env+"/"+reason, time.Now())
	if !ok {
		in.metrics.SecurityHeld()
		return
	}
	if held > 0 {
		what += fmt.Sprintf(" (%d more refused since the last alert of this kind)", held)
	}
	in.alertSecurity(ctx, env, discoveryName, what, what)
}

// pendingPage is how many pending agents one statement forgets.
const pendingPage = 500

// SweepPending forgets env's pending agents not heard from for expiry, and
// deletes what an older server declared for them on the broker. Once per
// leadership (first) it also deletes the inboxes of every pending agent:
// servers before this one declared an inbox at every pending agent's
// hello, which stays on the broker until deleted.
func (in *Ingester) SweepPending(ctx context.Context, env string, expiry time.Duration, first bool) {
	before, total := time.Now().Add(-expiry), 0
	for ctx.Err() == nil {
		names, err := in.store.ExpirePendingAgents(ctx, env, before, pendingPage)
		if err != nil {
			if ctx.Err() == nil {
				in.log.Warn().Err(err).Str("env", env).Msg("cannot forget the pending agents not heard from; retrying in a minute")
			}
			return
		}
		for _, n := range names {
			in.agents.forget(env, n)
		}
		if err := in.deleteInboxes(ctx, env, names); err != nil && ctx.Err() == nil {
			in.log.Warn().Err(err).Str("env", env).Msg("cannot delete the inboxes of forgotten pending agents (declared by an older server); they go with the environment")
		}
		total += len(names)
		if len(names) < pendingPage {
			break
		}
	}
	if total > 0 {
		in.log.Info().Str("env", env).Int("agents", total).Dur("pending_expiry", expiry).
			Msg("forgot pending agents not heard from within pending_expiry")
	}
	if !first {
		return
	}
	cleaned := 0
	for after := ""; ctx.Err() == nil; {
		page, err := in.store.ListAgentsAfter(ctx, env, after, pendingPage)
		if err != nil {
			if ctx.Err() == nil {
				in.log.Warn().Err(err).Str("env", env).Msg("cannot list the pending agents whose inboxes an older server declared; trying again at the next lead")
			}
			return
		}
		var names []string
		for _, a := range page {
			if a.State == record.AgentPending {
				names = append(names, a.Name)
			}
		}
		if err := in.deleteInboxes(ctx, env, names); err != nil {
			if ctx.Err() == nil {
				in.log.Warn().Err(err).Str("env", env).Msg("cannot delete the inboxes an older server declared for pending agents; trying again at the next lead")
			}
			return
		}
		cleaned += len(names)
		if len(page) < pendingPage {
			break
		}
		after = page[len(page)-1].Name
	}
	if cleaned > 0 {
		in.log.Info().Str("env", env).Int("agents", cleaned).
			Msg("no inbox for pending agents: deleted those an older server declared (each agent gets one when it is accepted)")
	}
}
