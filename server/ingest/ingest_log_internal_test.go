package ingest

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tetherhq/tether/bus"
	"github.com/tetherhq/tether/model"
	"github.com/tetherhq/tether/server/event"
	"github.com/tetherhq/tether/server/record"
	"github.com/tetherhq/tether/server/store/sqlite"
)

// TestIngestLogsInItsTransaction: the events ingest causes (a report's
// results, folded into one row, its deploy's end, drift alerts) are in
// the event log, with their webhook deliveries queued, when the commit of
// what they tell returns: nothing waits for the stream's asynchronous
// append, which is not running here (a crash after the commit loses none).
// Local subscribers get each result alone; a redelivered report adds
// nothing.
func TestIngestLogsInItsTransaction(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	st, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "t.db"), sqlite.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	s := newTestIngester(t, st)
	if _, err := s.EnsureEnv(ctx, "prod", record.DefaultEnvSettings()); err != nil {
		t.Fatal(err)
	}
	pub, key, err := bus.GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	if err := st.UpsertAgent(ctx, record.Agent{Env: "prod", Name: "web", State: record.AgentAccepted, PublicKey: pub, FirstSeen: time.Now(), LastSeen: time.Now()}); err != nil {
		t.Fatal(err)
	}
	for _, kind := range []string{"compliance.drift", record.EventResult} {
		u, secret := "https://hooks.example/x", "0123456789abcdef0123"
		kinds := []string{kind}
		if _, err := s.CreateWebhook(ctx, "prod", record.WebhookRequest{Name: strings.ReplaceAll(kind, ".", "-"), URL: &u, Secret: &secret, Kinds: &kinds}, "test"); err != nil {
			t.Fatal(err)
		}
	}
	go s.committer.run(ctx)
	sub := s.Subscribe()
	defer sub.Close()

	signer := bus.NewSigner(key, 0)
	seal := func(kind bus.Kind, body any) *bus.Envelope {
		e, err := signer.Seal(kind, "prod", "web", body)
		if err != nil {
			t.Fatal(err)
		}
		return e
	}
	var ids []model.ID
	var results []model.Result
	for _, p := range []string{"/a", "/b", "/c"} {
		id := model.ID{Type: "file", Agent: "web", Key: "path", Value: p}
		ids = append(ids, id)
		results = append(results, model.Result{ID: id, State: model.StateDeployed})
	}
	status := seal(bus.KindResourceStatus, bus.ResourceStatus{Generation: 1, DeployID: "d1", Results: results, Done: true})
	drift := seal(bus.KindCompliance, bus.Compliance{Generation: 1, Reports: []bus.DriftReport{{ID: ids[0], Compliance: model.NonCompliant}}})
	for _, e := range []*bus.Envelope{status, drift} {
		if err := s.ingest(ctx, e); err != nil {
			t.Fatal(err)
		}
	}
	logged, err := st.EventsAfter(ctx, 0, "", 0)
	if err != nil {
		t.Fatal(err)
	}
	var kinds []string
	for _, e := range logged {
		kinds = append(kinds, e.Kind)
	}
	if strings.Join(kinds, " ") != "resource.results deploy.done compliance.drift" {
		t.Fatalf("the log when the commits returned: %v, want resource.results deploy.done compliance.drift", kinds)
	}
	for _, want := range []event.Kind{event.Result, event.Result, event.Result, event.DeployDone, event.Drift} {
		e, err := sub.Next(ctx)
		if err != nil || e.Kind != want {
			t.Fatalf("subscriber got %s (%v), want %s", e.Kind, err, want)
		}
	}
	if n, err := st.CountDeliveries(ctx, record.DeliveryPending); err != nil || n != 4 {
		t.Fatalf("webhook deliveries queued: %d (%v), want 3 results and the drift", n, err)
	}
	// A redelivery (another copy of the message: the in-memory
	// deduplication does not know it) is deduplicated by the store.
	s.dedup = bus.NewDedup(16)
	if err := s.ingest(ctx, drift); err != nil {
		t.Fatal(err)
	}
	if again, err := st.EventsAfter(ctx, 0, "", 0); err != nil || len(again) != 3 {
		t.Fatalf("after a redelivery: %d events (%v), want 3", len(again), err)
	}
}
