package server

import (
	"context"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/tetherhq/tether/model"
	"github.com/tetherhq/tether/server/record"
)

// fleetCounter is what the fleet gauges read.
type fleetCounter interface {
	FleetCounts(ctx context.Context) (record.FleetCounts, error)
}

// fleetGauges exports the fleet's counts as gauges, read from the store
// at most once per TTL (a scrape in between gets the counts cached): three
// grouped counts, however many agents and resources.
type fleetGauges struct {
	store fleetCounter
	ttl   time.Duration
	log   zerolog.Logger

	resources, agents, drift, deliveries *prometheus.Desc

	mu     sync.Mutex
	at     time.Time
	counts record.FleetCounts
	failed bool
}

// fleetTTL is how long the fleet's counts are cached.
const fleetTTL = 5 * time.Second

func newFleetGauges(st fleetCounter, log zerolog.Logger) *fleetGauges {
	return &fleetGauges{store: st, ttl: fleetTTL, log: log,
		resources: prometheus.NewDesc("tether_fleet_resources", "Resources of the fleet, by environment, state and compliance (their statuses as the store holds them; cached for 5s).",
			[]string{"env", "state", "compliance"}, nil),
		agents: prometheus.NewDesc("tether_fleet_agents", "Agents, by environment and status: online, offline (accepted, not connected), pending (awaiting acceptance), rejected (cached for 5s).",
			[]string{"env", "status"}, nil),
		drift: prometheus.NewDesc("tether_fleet_open_alerts", "Open drift alerts, by environment: resources out of compliance (non_compliant) now (cached for 5s).",
			[]string{"env"}, nil),
		deliveries: prometheus.NewDesc("tether_webhook_deliveries", "Webhook deliveries kept, by state: pending (queued or to retry), delivered, failed (given up) (cached for 5s).",
			[]string{"state"}, nil),
	}
}

// Describe implements prometheus.Collector.
func (g *fleetGauges) Describe(ch chan<- *prometheus.Desc) {
	ch <- g.resources
	ch <- g.agents
	ch <- g.drift
	ch <- g.deliveries
}

// Collect implements prometheus.Collector. When the store does not
// answer, the last counts read are shown (none before the first), and the
// failure is logged once until it answers again.
func (g *fleetGauges) Collect(ch chan<- prometheus.Metric) {
	c := g.read()
	drift := map[string]int{}
	for _, r := range c.Resources {
		ch <- prometheus.MustNewConstMetric(g.resources, prometheus.GaugeValue, float64(r.N), r.Env, r.State, r.Compliance)
		if _, ok := drift[r.Env]; !ok {
			drift[r.Env] = 0
		}
		if r.Compliance == string(model.NonCompliant) {
			drift[r.Env] += r.N
		}
	}
	for env, n := range drift {
		ch <- prometheus.MustNewConstMetric(g.drift, prometheus.GaugeValue, float64(n), env)
	}
	for _, a := range c.Agents {
		ch <- prometheus.MustNewConstMetric(g.agents, prometheus.GaugeValue, float64(a.N), a.Env, a.Status)
	}
	for _, s := range []record.DeliveryState{record.DeliveryPending, record.DeliveryDelivered, record.DeliveryFailed} {
		ch <- prometheus.MustNewConstMetric(g.deliveries, prometheus.GaugeValue, float64(c.Deliveries[s]), string(s))
	}
}

func (g *fleetGauges) read() record.FleetCounts {
	g.mu.Lock()
	defer g.mu.Unlock()
	if !g.at.IsZero() && time.Since(g.at) < g.ttl {
		return g.counts
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	c, err := g.store.FleetCounts(ctx)
	if err != nil {
		if !g.failed {
			g.log.Warn().Err(err).Msg("fleet gauges: the store did not answer; /metrics shows the last counts read")
			g.failed = true
		}
		return g.counts
	}
	g.failed = false
	g.at, g.counts = time.Now(), c
	return c
}
