package bench

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/tetherhq/tether/bus/amqp/rabbitnode"
	"github.com/tetherhq/tether/model/testenv"
	"github.com/tetherhq/tether/server/store/postgres/pgtest"
)

// needRabbitMQ skips (or fails, where tests must run) a scenario that
// could not start its node for want of rabbitmq-server.
func needRabbitMQ(t *testing.T, err error) {
	t.Helper()
	if errors.Is(err, rabbitnode.ErrNoRabbitMQ) {
		testenv.Need(t, false, err.Error())
	}
}

// The broker-auth scenario at a tiny size: every phase ran for every
// agent, and the server answered the questions of the agents' own logins
// (and none for the broker's own user), refusing none.
func TestBrokerAuthScenario(t *testing.T) {
	pg := pgtest.URL(t)
	const agents, first = 20, 5
	res, err := RunBrokerAuth(context.Background(), BrokerAuthOptions{Postgres: pg, Agents: agents, FirstContact: first, Timeout: 2 * time.Minute})
	needRabbitMQ(t, err)
	if err != nil {
		t.Fatal(err)
	}
	want := []struct {
		name   string
		agents int
		asked  []string // kinds of question asked at least once per agent
	}{
		{"connect", agents, []string{"user", "vhost"}},
		{"first event", agents, []string{"resource", "topic"}},
		{"first contact", first, []string{"user", "vhost", "resource", "topic"}},
		{"connect, broker's user, TLS", agents, nil},
		{"connect, broker's user, plain", agents, nil},
	}
	if len(res.Phases) != len(want) {
		t.Fatalf("got %d phases (%+v), want %d", len(res.Phases), res.Phases, len(want))
	}
	for i, w := range want {
		p := res.Phases[i]
		if p.Name != w.name || p.Agents != w.agents {
			t.Errorf("phase %d: got %s of %d agents, want %s of %d", i, p.Name, p.Agents, w.name, w.agents)
		}
		if p.Refused != 0 {
			t.Errorf("%s: the server refused %d questions, want none", p.Name, p.Refused)
		}
		for _, k := range w.asked {
			if p.ByKind[k] < int64(w.agents) {
				t.Errorf("%s: got %d %s questions, want at least %d (one per agent)", p.Name, p.ByKind[k], k, w.agents)
			}
		}
		if w.asked == nil && p.Questions != 0 {
			t.Errorf("%s: got %d questions (%v), want none: the broker's own user is not the server's business", p.Name, p.Questions, p.ByKind)
		}
	}
	if fc := res.Phases[2]; fc.RecordedSeconds < fc.Seconds {
		t.Errorf("first contact: recorded after %.3f s, before the last hello was confirmed (%.3f s)", fc.RecordedSeconds, fc.Seconds)
	}
	if res.OpenFiles < agents {
		t.Errorf("got %d open files with %d agents connected, want at least one each", res.OpenFiles, agents)
	}
}

// The ingest-tls scenario at a tiny size: one round of each setup, every
// event ingested, questions asked of the server only for per-agent logins.
func TestIngestTLSScenario(t *testing.T) {
	pg := pgtest.URL(t)
	res, err := RunIngestTLS(context.Background(), IngestTLSOptions{Postgres: pg, Events: 200, Agents: 5, Consumers: 2, Rounds: 1, Timeout: 2 * time.Minute})
	needRabbitMQ(t, err)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Runs) != 3 || res.Runs[0].Setup != setupNames[plainShared] || res.Runs[1].Setup != setupNames[tlsShared] || res.Runs[2].Setup != setupNames[tlsOwn] {
		t.Fatalf("got runs %+v, want plain, TLS with a shared user, TLS with per-agent logins", res.Runs)
	}
	for _, x := range []IngestSide{res.Plain, res.TLSShared} {
		if x.Questions != 0 {
			t.Errorf("%s: got %d questions to the server, want none", x.Setup, x.Questions)
		}
	}
	// Per agent: its login (user, vhost), its first publish (resource,
	// topic).
	if res.TLSAuth.Questions < 4*5 {
		t.Errorf("TLS setup: got %d questions to the server, want at least 4 per agent (20)", res.TLSAuth.Questions)
	}
	for _, x := range []IngestSide{res.Plain, res.TLSShared, res.TLSAuth} {
		if x.IngestRate <= 0 || x.PublishRate <= 0 || x.PerTransaction < 1 {
			t.Errorf("%s: got ingest %.0f/s, publish %.0f/s, %.1f per transaction: want figures of a run that took place", x.Setup, x.IngestRate, x.PublishRate, x.PerTransaction)
		}
	}
	if res.IngestRatio <= 0 || res.PublishRatio <= 0 || res.TLSIngestRatio <= 0 || res.TLSPublishRatio <= 0 {
		t.Errorf("got ratios ingest %.2f, publish %.2f, TLS alone %.2f and %.2f, want all above 0",
			res.IngestRatio, res.PublishRatio, res.TLSIngestRatio, res.TLSPublishRatio)
	}
}
