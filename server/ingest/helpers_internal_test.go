package ingest

import (
	"context"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/tetherhq/tether/bus"
	"github.com/tetherhq/tether/server/event"
	"github.com/tetherhq/tether/server/record"
	"github.com/tetherhq/tether/server/scheduler"
	"github.com/tetherhq/tether/server/store"
)

// testIngester is an ingester over st and an in-process bus, configured
// as the server's defaults configure it, whose feed appends nothing to the
// event log in the background (as when the stream's append is not
// running): only what a transaction logged is in it.
type testIngester struct {
	*Ingester
}

func newTestIngester(t *testing.T, st store.Store) testIngester {
	t.Helper()
	_, key, err := bus.GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	b := bus.NewLocal(zerolog.Nop())
	signer := bus.NewSigner(key, uint64(time.Now().UnixNano()))
	in := New(Config{MaxBatch: 256, Writers: 2, AgentCacheTTL: 5 * time.Second, AgentCacheListenTTL: 10 * time.Minute, AgentEventRate: 200, FloodWindow: time.Minute,
		MaxAgentConnections: 2, ConnectionSweep: 5 * time.Second}, Services{
		Store: st, Bus: b, Sched: scheduler.New(st, b, signer, nil, zerolog.Nop()), Signer: signer,
		Feed: event.NewFeed(func(event.Event) {}, func() {}), Trigger: func(context.Context, string, record.Trigger) {}, Log: zerolog.Nop(),
	})
	return testIngester{in}
}

// Subscribe follows the ingester's live events.
func (s testIngester) Subscribe() *event.Subscription { return s.feed.Subscribe() }

// EnsureEnv creates the environment name with settings.
func (s testIngester) EnsureEnv(ctx context.Context, name string, settings record.EnvSettings) (record.Environment, error) {
	if err := s.store.CreateEnv(ctx, record.Environment{Name: name, Settings: settings, CreatedAt: time.Now().UTC()}); err != nil {
		return record.Environment{}, err
	}
	return s.store.GetEnv(ctx, name)
}

// CreateWebhook creates a webhook of env as req asks (URL, secret and
// kinds given).
func (s testIngester) CreateWebhook(ctx context.Context, env string, req record.WebhookRequest, by string) (record.Webhook, error) {
	w := record.Webhook{Env: env, Name: req.Name, URL: *req.URL, Secret: *req.Secret, Kinds: *req.Kinds, Enabled: true, CreatedBy: by}
	if err := record.ValidateWebhook(w); err != nil {
		return w, err
	}
	return s.store.CreateWebhook(ctx, w)
}
