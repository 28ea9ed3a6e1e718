package server

import (
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/tetherhq/tether/server/clientlimit"
)

// Metrics are the server's Prometheus metrics, on a registry of its own.
type Metrics struct {
	reg      *prometheus.Registry
	requests *prometheus.CounterVec
	latency  *prometheus.HistogramVec
	events   *prometheus.CounterVec
	results  prometheus.Counter
	batches  prometheus.Histogram
	commit   prometheus.Histogram
	security prometheus.Counter
	// securityHeld counts security alerts counted and summed up instead
	// of stored one by one (a flood).
	securityHeld prometheus.Counter
	leading      prometheus.Gauge
	// brokerClosed counts agents' broker connections closed, by reason.
	brokerClosed *prometheus.CounterVec
	fanouts      prometheus.Histogram
	// compiles counts server-side compiles, by outcome.
	compiles *prometheus.CounterVec

	// listeners are the HTTP listeners whose connections are reported, by
	// name (observeListener).
	listenersMu sync.Mutex
	listeners   map[string]*clientlimit.Listener
}

func newMetrics() *Metrics {
	m := &Metrics{
		reg: prometheus.NewRegistry(),
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "tether_api_requests_total",
			Help: "API requests served, by route, method and status."}, []string{"route", "method", "status"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "tether_api_request_seconds",
			Help: "API request latency, by route.", Buckets: prometheus.ExponentialBuckets(0.001, 4, 8)}, []string{"route"}),
		events: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "tether_ingest_events_total",
			Help: "Agent events ingested, by kind and outcome (ok, duplicate, rejected, retry; dropped: refused beyond what is dead-lettered in a window; over_rate: beyond the agent's event rate, or its hello rate; repeated: a hello said again whose answer waits in the agent's inbox)."}, []string{"kind", "outcome"}),
		results: prometheus.NewCounter(prometheus.CounterOpts{Name: "tether_ingest_results_total",
			Help: "Resource results recorded."}),
		batches: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "tether_ingest_batch_events",
			Help: "Events written per ingest transaction.", Buckets: prometheus.ExponentialBuckets(1, 2, 10)}),
		commit: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "tether_ingest_commit_seconds",
			Help: "Duration of ingest transactions.", Buckets: prometheus.ExponentialBuckets(0.0005, 2, 12)}),
		leading: prometheus.NewGauge(prometheus.GaugeOpts{Name: "tether_scheduler_leading_environments",
			Help: "Environments whose scheduler this server leads."}),
		fanouts: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "tether_release_fanout_seconds",
			Help: "Duration of releases' fan-outs to agents (run in the background: a release answers at once).", Buckets: prometheus.ExponentialBuckets(0.01, 2, 14)}),
		security: prometheus.NewCounter(prometheus.CounterOpts{Name: "tether_security_alerts_total",
			Help: "Security alerts raised (forged or refused events, refused broker logins), stored or summed up."}),
		securityHeld: prometheus.NewCounter(prometheus.CounterOpts{Name: "tether_security_alerts_held_total",
			Help: "Security alerts beyond those stored one by one per agent and window, summed up in one alert each window."}),
		compiles: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "tether_compiles_total",
			Help: "Server-side compiles, by outcome (released, candidate, unchanged, failed; skipped: nothing changed since the last that succeeded, not compiled again)."}, []string{"outcome"}),
		brokerClosed: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "tether_broker_connections_closed_total",
			Help: "Agents' broker connections the server closed through the management API, by reason (over_limit: beyond the agent's connection limit; revoked: the agent was rejected or revoked)."}, []string{"reason"}),
	}
	m.reg.MustRegister(m.requests, m.latency, m.events, m.results, m.batches, m.commit, m.security, m.securityHeld, m.leading, m.brokerClosed, m.fanouts, m.compiles,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	for _, reason := range []string{"over_limit", "revoked"} {
		m.brokerClosed.WithLabelValues(reason) // listed at 0 from the start
	}
	return m
}

// subscriptionCounter is what a bus may count of the subscriptions the
// broker cancelled or dropped (a server queue deleted on the broker).
type subscriptionCounter interface {
	LostSubscriptions() int64
}

// observeBus exports what b counts, if it does.
func (m *Metrics) observeBus(b any) {
	if c, ok := b.(subscriptionCounter); ok {
		m.reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "tether_bus_lost_subscriptions_total",
			Help: "Subscriptions the broker cancelled or dropped (one per consumer of a queue deleted on the broker), each followed by a declare and a new subscription."},
			func() float64 { return float64(c.LostSubscriptions()) }))
	}
}

// ObserveRequest implements api.Observer.
func (m *Metrics) ObserveRequest(route, method string, status int, d time.Duration) {
	m.requests.WithLabelValues(route, method, strconv.Itoa(status)).Inc()
	m.latency.WithLabelValues(route).Observe(d.Seconds())
}

// fanout observes one fan-out's duration.
func (m *Metrics) fanout(d time.Duration) { m.fanouts.Observe(d.Seconds()) }

// Handler serves the metrics in the Prometheus text format.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{})
}
