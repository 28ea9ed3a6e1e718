package server_test

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/tetherhq/tether/bus"
	"github.com/tetherhq/tether/bus/amqp/amqptest"
	"github.com/tetherhq/tether/server"
	"github.com/tetherhq/tether/server/record"
	"github.com/tetherhq/tether/server/store/sqlite"
)

// brokerQueue is what rabbitmqctl says of a queue.
type brokerQueue struct {
	Name    string `json:"name"`
	Durable bool   `json:"durable"`
	Type    string `json:"type"`
}

// queuesOf lists the queues of a private node whose names start with
// prefix, as the broker itself says (rabbitmqctl: no statistics lag).
func queuesOf(t *testing.T, n *amqptest.Node, prefix string) []brokerQueue {
	t.Helper()
	out, err := n.Ctl(context.Background(), "list_queues", "-q", "--formatter", "json", "name", "durable", "type")
	if err != nil {
		t.Fatalf("rabbitmqctl list_queues: %v\n%s", err, out)
	}
	var all, keep []brokerQueue
	if err := json.Unmarshal(out, &all); err != nil {
		t.Fatalf("rabbitmqctl list_queues: %v\n%s", err, out)
	}
	for _, q := range all {
		if strings.HasPrefix(q.Name, prefix) {
			keep = append(keep, q)
		}
	}
	return keep
}

// brokerMemory is the node's memory in MB, as rabbitmqctl status says (for
// the log: no test asserts a figure of it).
func brokerMemory(t *testing.T, n *amqptest.Node) float64 {
	t.Helper()
	out, err := n.Ctl(context.Background(), "status", "--formatter", "json")
	if err != nil {
		return 0
	}
	var st struct {
		Memory struct {
			Total struct {
				RSS float64 `json:"rss"`
			} `json:"total"`
		} `json:"memory"`
	}
	_ = json.Unmarshal(out, &st)
	return st.Memory.Total.RSS / 1e6
}

// hello is a hello of name with a key of its own.
func strangerHello(t *testing.T, env, name string) *bus.Envelope {
	t.Helper()
	pub, key, err := bus.GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	e, err := bus.NewSigner(key, 0).Seal(bus.KindHello, env, name, bus.Hello{PublicKey: pub, Protocol: bus.Protocol})
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// A flood of hellos under invented names, on a real broker, costs it
// nothing durable: pending agents get no inbox (an accepted one does);
// beyond max_pending they are not recorded, with one security alert for
// the whole flood; and an environment's leader forgets pending agents not
// heard from within pending_expiry. Over a store and a broker an older
// server left (pending agents with durable inboxes), the new server
// deletes those inboxes and forgets the pending agents past their expiry
// as it starts; a restart with pending agents declares nothing for them.
func TestPendingAgentsCostTheBrokerNothing(t *testing.T) {
	node := amqptest.StartNode(t, amqptest.NodeOptions{})
	ctx := context.Background()
	cfg := amqptest.Config(t)
	cfg.URL, cfg.QueueType = node.URL, "quorum"
	inboxes := cfg.Namespace + ".agent."
	st, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "tether.db"), sqlite.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	settings := quietSettings()
	settings.MaxPending = 50
	start := func() (*server.Server, func()) {
		t.Helper()
		srv, err := server.New(server.Config{LeadEvery: 100 * time.Millisecond, PendingSweep: 100 * time.Millisecond}, st, amqptest.Open(t, cfg), zerolog.Nop())
		if err != nil {
			t.Fatal(err)
		}
		if _, err := srv.EnsureEnv(ctx, "test", settings); err != nil {
			t.Fatal(err)
		}
		return srv, runServer(t, srv)
	}
	pending := func() int {
		t.Helper()
		n, err := st.CountAgents(ctx, "test", record.AgentPending)
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	names := func(qs []brokerQueue) []string {
		var out []string
		for _, q := range qs {
			out = append(out, strings.TrimPrefix(q.Name, inboxes))
		}
		return out
	}

	// What an older server left: pending agents, each with a durable
	// inbox, ten of them not heard from for two days; and an accepted
	// agent with its inbox.
	if err := st.CreateEnv(ctx, record.Environment{Name: "test", Settings: settings, CreatedAt: time.Now()}); err != nil {
		t.Fatal(err)
	}
	older := amqptest.Open(t, cfg)
	if err := older.Ready(ctx); err != nil {
		t.Fatal(err)
	}
	web := newFakeAgent(t, st, "test", "web")
	if err := older.DeclareInbox(ctx, "test", web.name); err != nil {
		t.Fatal(err)
	}
	for i := range 20 {
		name, seen := fmt.Sprintf("old-%02d", i), time.Now().Add(-time.Minute)
		if i < 10 {
			seen = time.Now().Add(-48 * time.Hour)
		}
		if err := st.UpsertAgent(ctx, record.Agent{Env: "test", Name: name, State: record.AgentPending, PublicKey: []byte{byte(i)}, FirstSeen: seen, LastSeen: seen}); err != nil {
			t.Fatal(err)
		}
		if err := older.DeclareInbox(ctx, "test", name); err != nil {
			t.Fatal(err)
		}
	}
	if n := len(queuesOf(t, node, inboxes)); n != 21 {
		t.Fatalf("%d inboxes before the upgrade, want 21", n)
	}
	before := brokerMemory(t, node)

	srv, stop := start()
	waitFor(t, "the pending agents' inboxes an older server declared deleted", func() bool {
		return len(queuesOf(t, node, inboxes)) == 1
	})
	if q := queuesOf(t, node, inboxes); q[0].Name != inboxes+"test.web" || !q[0].Durable {
		t.Fatalf("inboxes after the upgrade: %+v, want web's alone, durable", q)
	}
	waitFor(t, "the pending agents not heard from for two days forgotten", func() bool { return pending() == 10 })
	if _, err := st.GetAgent(ctx, "test", "old-00"); err == nil {
		t.Fatal("old-00, not heard from for two days, is still recorded")
	}

	// The flood: 500 hellos under invented names, each with a key of
	// its own.
	pub := amqptest.Open(t, cfg)
	handled := srv.IngestStats().Events
	for i := range 500 {
		if err := pub.Publish(ctx, strangerHello(t, "test", fmt.Sprintf("ghost-%03d", i))); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, "the flood's hellos handled", func() bool { return srv.IngestStats().Events >= handled+500 })
	t.Logf("after a flood of 500 hellos under invented names: %d agents pending, %d inboxes on the broker, broker memory %.0f MB (%.0f MB before)",
		pending(), len(queuesOf(t, node, inboxes)), brokerMemory(t, node), before)
	if n := pending(); n != 50 {
		t.Fatalf("%d agents pending after the flood, want 50 (max_pending)", n)
	}
	if q := queuesOf(t, node, inboxes); len(q) != 1 {
		t.Fatalf("inboxes after a flood of 500 hellos: %v, want web's alone", names(q))
	}
	var capAlerts []string
	alerts, err := st.Alerts(ctx, record.AlertFilter{Env: "test", Kind: record.AlertSecurity, Limit: 1000})
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range alerts {
		if strings.Contains(a.Message, "max_pending") {
			capAlerts = append(capAlerts, a.Message)
		}
	}
	if len(capAlerts) != 1 || !strings.Contains(capAlerts[0], "50 agents wait for acceptance in test") {
		t.Fatalf("security alerts of the cap: %q; want one for the whole flood", capAlerts)
	}

	// Accepted, an agent gets its inbox: durable, of the server's type.
	if _, err := srv.AgentAction(ctx, "test", "ghost-000", record.AgentAccept); err != nil {
		t.Fatal(err)
	}
	q := queuesOf(t, node, inboxes+"test.ghost")
	if len(q) != 1 || q[0].Name != inboxes+"test.ghost-000" || !q[0].Durable || q[0].Type != "quorum" {
		t.Fatalf("inboxes of the flood's names once ghost-000 is accepted: %+v, want ghost-000's, durable and quorum", q)
	}

	// A server restart with 49 pending agents declares nothing for them.
	stop()
	_, stop = start()
	defer stop()
	all, err := st.ListAgents(ctx, "test")
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range all {
		if a.State == record.AgentPending {
			// A day passes: every pending agent was last heard from
			// two days ago.
			a.LastSeen = time.Now().Add(-48 * time.Hour)
			if err := st.DeleteAgent(ctx, "test", a.Name); err != nil {
				t.Fatal(err)
			}
			if err := st.UpsertAgent(ctx, a); err != nil {
				t.Fatal(err)
			}
		}
	}
	waitFor(t, "every pending agent forgotten after its expiry", func() bool { return pending() == 0 })
	got := names(queuesOf(t, node, inboxes))
	slices.Sort(got)
	if strings.Join(got, ",") != "test.ghost-000,test.web" {
		t.Fatalf("inboxes after the pending agents expired: %v, want ghost-000's and web's", got)
	}
}
