package server_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/tetherhq/tether/bus"
	"github.com/tetherhq/tether/bus/amqp"
	"github.com/tetherhq/tether/bus/amqp/amqptest"
	"github.com/tetherhq/tether/model"
	"github.com/tetherhq/tether/server"
	"github.com/tetherhq/tether/server/api"
	"github.com/tetherhq/tether/server/record"
	"github.com/tetherhq/tether/server/store/postgres/pgtest"
)

// TestReadyzFollowsTheEventConsumers deletes the server's events queue on
// the broker, as any client with rights there can: /readyz answers 503
// naming the queue and since when while its consumers are not back, an
// event published meanwhile is refused (its agent keeps it in its outbox),
// and once the consumers declared the queue again /readyz answers 200 and
// the event, published again, is ingested.
func TestReadyzFollowsTheEventConsumers(t *testing.T) {
	ctx := context.Background()
	st := pgtest.Open(t)
	cfg := amqptest.Config(t)
	// After a cancel that follows a short subscription the consumers
	// wait ReconnectMin before declaring the queue again: the window in
	// which the test sees it missing. No periodic check declares it
	// meanwhile.
	cfg.ReconnectMin, cfg.ReconnectMax = 5*time.Second, time.Hour
	cfg.TopologyCheck = time.Hour
	b := amqptest.Open(t, cfg)
	const consumers = 2
	srv, err := server.New(server.Config{Consumers: consumers}, st, b, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := srv.EnsureEnv(ctx, "prod", quietSettings()); err != nil {
		t.Fatal(err)
	}
	v, rs := releaseFiles(t, srv, 1)
	web := newFakeAgent(t, st, "prod", "web")
	// The operations listener's /readyz says why a check fails.
	httpSrv := httptest.NewServer(api.New(api.Config{}, server.APIServices(srv, nil), zerolog.Nop()).OpsHandler())
	defer httpSrv.Close()
	readyz := func() (int, map[string]string) {
		resp, err := http.Get(httpSrv.URL + "/readyz")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var body map[string]string
		if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
			t.Fatal(err)
		}
		return resp.StatusCode, body
	}
	events := b.ServerQueue(bus.QueueEvents)

	if code, body := readyz(); code != http.StatusServiceUnavailable || !strings.Contains(body["events_queue"], "no consumer runs") {
		t.Fatalf("/readyz before the server runs: %d %v, want 503 with no consumer of %s", code, body, events)
	}
	runServer(t, srv)
	waitFor(t, "/readyz 200", func() bool { code, _ := readyz(); return code == http.StatusOK })

	deleted := time.Now().Truncate(time.Second)
	if err := amqp.DeleteQueue(ctx, cfg, events); err != nil {
		t.Fatal(err)
	}
	var body map[string]string
	waitFor(t, "/readyz 503 after the queue's deletion", func() bool {
		var code int
		code, body = readyz()
		return code == http.StatusServiceUnavailable
	})
	t.Logf("/readyz while the queue is missing: %v", body)
	got, ok := strings.CutPrefix(body["events_queue"], events+" not consumed since ")
	since, _, _ := strings.Cut(got, " ")
	if at, err := time.Parse(time.RFC3339, since); !ok || err != nil || at.Before(deleted) || at.After(time.Now()) {
		t.Fatalf("/readyz says %q of the events queue, want it named, with since when (the deletion, at %s)", body["events_queue"], deleted.UTC().Format(time.RFC3339))
	}
	if got := body["compliance_queue"]; got != "ok" {
		t.Fatalf("/readyz says %q of the compliance queue, want ok", got)
	}
	status := web.seal(t, "prod", bus.KindResourceStatus, bus.ResourceStatus{DeployID: "d1", Generation: v.Number,
		Results: []model.Result{{ID: rs[0].ID, State: model.StateDeployed}}})
	if err := b.Publish(ctx, status); !errors.Is(err, bus.ErrUnroutable) {
		t.Fatalf("publish with the events queue missing: got %v, want ErrUnroutable", err)
	}

	waitFor(t, "/readyz 200 once the consumers are back", func() bool { code, _ := readyz(); return code == http.StatusOK })
	if err := b.Publish(ctx, status); err != nil {
		t.Fatalf("publish once the consumers are back: %v", err)
	}
	waitFor(t, "the event ingested", func() bool {
		sts, err := st.Statuses(ctx, "prod", record.StatusFilter{State: model.StateDeployed})
		return err == nil && len(sts) == 1
	})
	// One per consumer, more if one was told of the loss after it had
	// subscribed again.
	if lost := serverMetric(t, srv, "tether_bus_lost_subscriptions_total"); lost < consumers {
		t.Fatalf("tether_bus_lost_subscriptions_total is %v, want at least %d", lost, consumers)
	}
}

// serverMetric reads one unlabelled metric off the server's /metrics.
func serverMetric(t *testing.T, srv *server.Server, name string) float64 {
	t.Helper()
	rec := httptest.NewRecorder()
	srv.Metrics().Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	v, ok := metric(rec.Body.String(), name, "")
	if !ok {
		t.Fatalf("%s not in /metrics", name)
	}
	return v
}
