package server_test

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/tetherhq/tether/bus"
	"github.com/tetherhq/tether/bus/amqp/amqptest"
	"github.com/tetherhq/tether/model"
	"github.com/tetherhq/tether/server"
	"github.com/tetherhq/tether/server/notify"
	"github.com/tetherhq/tether/server/record"
	"github.com/tetherhq/tether/server/store/postgres"
	"github.com/tetherhq/tether/server/store/postgres/pgtest"
)

// alertReceiver is a webhook receiver that verifies each delivery and
// counts it by delivery ID and by what it says (resource, compliance).
type alertReceiver struct {
	*httptest.Server
	secret string
	mu     sync.Mutex
	ids    map[string]int
	alerts map[string]int
	bad    int
}

func newAlertReceiver(t *testing.T, secret string) *alertReceiver {
	r := &alertReceiver{secret: secret, ids: map[string]int{}, alerts: map[string]int{}}
	r.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		body, _ := io.ReadAll(req.Body)
		id, err := notify.Verify(req.Header, body, r.secret, time.Now(), 5*time.Minute)
		var b struct {
			Type string `json:"type"`
			Data struct {
				Alert *record.Alert `json:"alert"`
			} `json:"data"`
		}
		r.mu.Lock()
		defer r.mu.Unlock()
		if err != nil || json.Unmarshal(body, &b) != nil || b.Data.Alert == nil || b.Data.Alert.ID == nil {
			r.bad++
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		r.ids[id]++
		r.alerts[b.Data.Alert.ID.String()+" "+string(b.Data.Alert.Compliance)]++
	}))
	t.Cleanup(r.Close)
	return r
}

func (r *alertReceiver) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.alerts)
}

// TestAlertsReachWebhooksAcrossRestart runs two replicas on PostgreSQL and
// RabbitMQ. Drift alerts ingested by either reach a webhook exactly once,
// although one replica restarts between two rounds of them; a receiver
// that never answers and one that cannot be reached hold back neither the
// healthy one nor ingest, and their deliveries wait for a retry. Each
// replica's event stream shows the events the other published.
func TestAlertsReachWebhooksAcrossRestart(t *testing.T) {
	ctx := context.Background()
	url := pgtest.Fresh(t)
	cfg := amqptest.Config(t)
	open := func() *server.Server {
		st, err := postgres.Open(ctx, postgres.Config{URL: url})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { st.Close() })
		srv, err := server.New(server.Config{Consumers: 2,
			Webhooks: notify.SenderConfig{Timeout: 500 * time.Millisecond, Poll: 50 * time.Millisecond, FirstRetry: time.Hour,
				Policy: notify.Policy{Allow: []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}}}},
			st, amqptest.Open(t, cfg), zerolog.Nop())
		if err != nil {
			t.Fatal(err)
		}
		return srv
	}
	a, b := open(), open()
	if _, err := a.EnsureEnv(ctx, "prod", quietSettings()); err != nil {
		t.Fatal(err)
	}
	const n = 20
	v, rs := releaseFiles(t, a, n)
	stA, err := postgres.Open(ctx, postgres.Config{URL: url})
	if err != nil {
		t.Fatal(err)
	}
	defer stA.Close()
	web := newFakeAgent(t, stA, "prod", "web")

	secret, _ := notify.NewSecret()
	good := newAlertReceiver(t, secret)
	hang := make(chan struct{})
	slow := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		select {
		case <-hang:
		case <-req.Context().Done():
		}
	}))
	defer slow.Close()
	defer close(hang) // before Close, which waits for the handlers
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	down := "http://" + l.Addr().String()
	l.Close()
	hooks := map[string]record.Webhook{}
	for _, h := range []struct{ name, url string }{{"slow", slow.URL}, {"down", down}, {"good", good.URL}} {
		u := h.url
		s := secret
		w, err := a.CreateWebhook(ctx, "prod", record.WebhookRequest{Name: h.name, URL: &u, Secret: &s}, "test")
		if err != nil {
			t.Fatal(err)
		}
		hooks[h.name] = w
	}

	stopA := runServer(t, a)
	runServer(t, b)

	// Each replica streams what the other publishes.
	for _, pair := range []struct {
		name     string
		from, on *server.Server
		agent    string
	}{{"A to B", a, b, "web"}, {"B to A", b, a, "web"}} {
		fctx, cancel := context.WithTimeout(ctx, patience)
		seen := make(chan struct{})
		var once sync.Once
		go func() {
			_ = pair.on.Follow(fctx, "prod", "", func(string, bool) error {
				go func() {
					if _, err := pair.from.AgentAction(ctx, "prod", pair.agent, record.AgentPause); err != nil {
						t.Error(err)
					}
				}()
				return nil
			}, func(id, kind string, data []byte) error {
				if kind == string(server.EventAgentChanged) {
					once.Do(func() { close(seen) })
				}
				return nil
			})
		}()
		select {
		case <-seen:
		case <-fctx.Done():
			t.Fatalf("%s: the event was not streamed", pair.name)
		}
		cancel()
	}

	drift := func(c model.Compliance) {
		var events []*bus.Envelope
		for _, r := range rs {
			rep := bus.DriftReport{ID: r.ID, Compliance: c}
			if c == model.NonCompliant {
				rep.Changes = model.Changes{"content": {Current: "hacked", Desired: "x"}}
			}
			events = append(events, web.seal(t, "prod", bus.KindCompliance, bus.Compliance{Generation: v.Number, Reports: []bus.DriftReport{rep}}))
		}
		publish(t, amqptest.Open(t, cfg), events)
	}
	drift(model.NonCompliant)
	waitFor(t, "the first round's alerts at the receiver", func() bool { return good.count() == n })
	// A restarts (gracefully) while the slow webhook's attempts hang.
	stopA()
	a = open()
	runServer(t, a)
	drift(model.Compliant)
	waitFor(t, "the second round's alerts at the receiver", func() bool { return good.count() == 2*n })
	// Ingest went on: every resource is compliant again.
	waitFor(t, "every resource compliant", func() bool {
		sts, err := stA.Statuses(ctx, "prod", record.StatusFilter{Compliance: model.NonCompliant})
		return err == nil && len(sts) == 0
	})
	good.mu.Lock()
	for key, c := range good.alerts {
		if c != 1 {
			t.Errorf("alert %s received %d times, want once", key, c)
		}
	}
	for id, c := range good.ids {
		if c != 1 {
			t.Errorf("delivery %s received %d times, want once", id, c)
		}
	}
	if good.bad != 0 {
		t.Errorf("%d deliveries did not verify", good.bad)
	}
	good.mu.Unlock()
	for _, name := range []string{"slow", "down"} {
		waitFor(t, name+"'s first delivery failed and waiting for a retry", func() bool {
			log, err := a.WebhookDeliveries(ctx, "prod", hooks[name].ID, 1000)
			if err != nil || len(log) != 2*n {
				t.Fatalf("%s: %d deliveries queued (%v), want %d", name, len(log), err, 2*n)
			}
			oldest := log[len(log)-1]
			return oldest.State == record.DeliveryPending && oldest.Attempts > 0 && oldest.Error != "" && oldest.NextAt.After(time.Now())
		})
	}
}
