package ingest

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/tetherhq/tether/bus"
	"github.com/tetherhq/tether/server/store"
)

// Connection limits on the broker. RabbitMQ bounds the connections of a
// user of its own database (rabbitmqctl set_user_limits), not of the
// users its HTTP authentication backend lets in: every agent is one of
// those. So the server bounds them itself: every ConnectionSweep it lists
// the broker's connections through the management API, groups the
// agents' by agent (environment and name, whatever the key: an agent that
// rolled its key over is still one agent), and closes those beyond
// MaxAgentConnections, newest first. The connections an agent held first —
// its primary and its standby — stay; what a copy of its key opens on top
// is closed. One replica sweeps at a time (a lease in the store), so
// closures are counted and alerted once: the first closure of an agent's
// connections is alerted at once, the next ones summed up in one alert
// every connAlertEvery.

const (
	// connectionsLease is the lease of the replica that sweeps.
	connectionsLease = "broker-connections"
	// connAlertEvery bounds the alerts about one agent's connections.
	connAlertEvery = 10 * time.Minute
	// overLimitReason is what a closed connection's client is told.
	overLimitReason = "tether: more connections of this agent than the server allows"
	// closedListedFor bounds how long a connection the sweep closed is
	// taken for closed while the management API still lists it.
	closedListedFor = time.Minute
)

// closedConns are the connections the sweep closed, by name, with when.
// The management API learns of a closure a moment later: until then it
// lists the connection still, which must neither count against its agent
// again nor be closed, and counted and alerted, once more.
type closedConns map[string]time.Time

// live returns conns without those closed within closedListedFor of now,
// and forgets the closed ones no longer listed (or listed that long: the
// broker holds them after all).
func (c closedConns) live(conns []bus.BrokerConnection, now time.Time) []bus.BrokerConnection {
	listed := make(map[string]bool, len(c))
	out := make([]bus.BrokerConnection, 0, len(conns))
	for _, conn := range conns {
		if at, ok := c[conn.Name]; ok && now.Sub(at) < closedListedFor {
			listed[conn.Name] = true
			continue
		}
		out = append(out, conn)
	}
	for name := range c {
		if !listed[name] {
			delete(c, name)
		}
	}
	return out
}

// agentConns are the connections of one agent the broker holds.
type agentConns struct {
	agentKey
	total int
	// excess are the connections beyond the limit, oldest first.
	excess []bus.BrokerConnection
}

// overLimit returns the agents of conns holding more than limit
// connections, each with the connections beyond: the newest (by opening
// time, then name). Connections of users that are not agents' are none
// of its business.
func overLimit(conns []bus.BrokerConnection, limit int) []agentConns {
	byAgent := map[agentKey][]bus.BrokerConnection{}
	for _, c := range conns {
		l, err := bus.ParseBrokerUser(c.User)
		if err != nil {
			continue
		}
		k := agentKey{l.Env, l.Agent}
		byAgent[k] = append(byAgent[k], c)
	}
	var out []agentConns
	for k, cs := range byAgent {
		if len(cs) <= limit {
			continue
		}
		slices.SortFunc(cs, func(a, b bus.BrokerConnection) int {
			return cmp.Or(a.ConnectedAt.Compare(b.ConnectedAt), cmp.Compare(a.Name, b.Name))
		})
		out = append(out, agentConns{agentKey: k, total: len(cs), excess: cs[limit:]})
	}
	slices.SortFunc(out, func(a, b agentConns) int { return cmp.Or(cmp.Compare(a.env, b.env), cmp.Compare(a.name, b.name)) })
	return out
}

// connAlerts bounds the alerts about agents' connections closed: an
// agent's first closure is alerted at once; those after, within every,
// are held and summed up in one alert once every is over.
type connAlerts struct {
	every time.Duration
	m     map[agentKey]*connAlert
}

type connAlert struct {
	at   time.Time // of the last alert
	held int       // connections closed since, not alerted yet
}

func newConnAlerts(every time.Duration) *connAlerts {
	return &connAlerts{every: every, m: map[agentKey]*connAlert{}}
}

// closed records n connections of k closed, and reports whether to alert
// now (else they are held).
func (a *connAlerts) closed(k agentKey, n int, now time.Time) bool {
	if c, ok := a.m[k]; ok && now.Sub(c.at) < a.every {
		c.held += n
		return false
	}
	a.m[k] = &connAlert{at: now}
	return true
}

// due returns the agents whose held closures are to be summed up now,
// with how many, and forgets agents quiet for a whole period.
func (a *connAlerts) due(now time.Time) map[agentKey]int {
	out := map[agentKey]int{}
	for k, c := range a.m {
		if now.Sub(c.at) < a.every {
			continue
		}
		if c.held == 0 {
			delete(a.m, k)
			continue
		}
		out[k] = c.held
		c.at, c.held = now, 0
	}
	return out
}

// boundConnections sweeps the broker's connections every ConnectionSweep
// while this replica holds the sweeping lease, until ctx ends.
func (in *Ingester) boundConnections(ctx context.Context) {
	tick := time.NewTicker(in.cfg.ConnectionSweep)
	defer tick.Stop()
	var lease store.Lease
	defer func() {
		if lease != nil {
			lease.Release()
		}
	}()
	alerts := newConnAlerts(connAlertEvery)
	closed := closedConns{}
	failing := false
	for {
		var now time.Time
		select {
		case <-ctx.Done():
			return
		case now = <-tick.C:
		}
		if lease != nil {
			select {
			case <-lease.Lost():
				lease.Release()
				lease = nil
			default:
			}
		}
		if lease == nil {
			l, ok, err := in.store.Lead(ctx, connectionsLease)
			if err != nil || !ok {
				continue // another replica sweeps, or the store is away
			}
			lease = l
		}
		err := in.sweepConnections(ctx, alerts, closed, now)
		switch {
		case err != nil && ctx.Err() == nil && !failing:
			in.log.Warn().Err(err).Msg("cannot count agents' broker connections through the management API; trying again")
			failing = true
		case err == nil && failing:
			in.log.Info().Msg("counting agents' broker connections again")
			failing = false
		}
	}
}

// sweepConnections closes the agents' connections beyond the limit, and
// raises the alerts due. gone are the connections closed by earlier
// sweeps, which the listing may still show.
func (in *Ingester) sweepConnections(ctx context.Context, alerts *connAlerts, gone closedConns, now time.Time) error {
	conns, err := in.cfg.Broker.Connections(ctx)
	if err != nil {
		return err
	}
	limit := in.cfg.MaxAgentConnections
	for _, over := range overLimit(gone.live(conns, now), limit) {
		closed := 0
		for _, c := range over.excess {
			if err := in.cfg.Broker.CloseConnection(ctx, c.Name, overLimitReason); err != nil {
				in.log.Warn().Err(err).Str("env", over.env).Str("agent", over.name).Str("connection", c.Name).
					Msg("cannot close a broker connection beyond the agent's limit; trying again on the next sweep")
				continue
			}
			gone[c.Name] = now
			closed++
		}
		if closed == 0 {
			continue
		}
		in.metrics.BrokerClosed("over_limit", closed)
		in.log.Info().Str("env", over.env).Str("agent", over.name).Int("connections", over.total).Int("closed", closed).
			Msg("closed the agent's newest broker connections, beyond its limit")
		if alerts.closed(over.agentKey, closed, now) {
			in.SecurityAlert(ctx, over.env, over.name, fmt.Sprintf(
				"agent %s held %d broker connections, more than the %d allowed: the %d newest were closed "+
					"(is a copy of its key in other hands, or do more processes than a primary and a standby run it?)",
				over.name, over.total, limit, closed))
		}
	}
	for k, n := range alerts.due(now) {
		in.SecurityAlert(ctx, k.env, k.name, fmt.Sprintf("%d more broker connections of agent %s, beyond the %d allowed, were closed within %s",
			n, k.name, limit, alerts.every))
	}
	return nil
}
