package server_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"
	"github.com/rs/zerolog"

	"github.com/tetherhq/tether/agent"
	"github.com/tetherhq/tether/bus"
	"github.com/tetherhq/tether/bus/amqp/amqptest"
	"github.com/tetherhq/tether/server"
	"github.com/tetherhq/tether/server/brokerauth"
	"github.com/tetherhq/tether/server/record"
	"github.com/tetherhq/tether/server/scheduler"
	"github.com/tetherhq/tether/server/store/sqlite"
)

// alertsOf returns the security alerts stored under agent of environment
// test.
func (r *rig) alertsOf(agent string) []string {
	r.t.Helper()
	as, err := r.store.Alerts(r.ctx, record.AlertFilter{Env: "test", Agent: agent, Kind: record.AlertSecurity, Limit: 1000})
	if err != nil {
		r.t.Fatal(err)
	}
	var out []string
	for _, a := range as {
		out = append(out, a.Message)
	}
	return out
}

// Events signed with alpha's key (stolen) claiming to be beta are filed
// under their sender, not under beta: on the in-process bus, as over a
// shared broker login, the server cannot tell who sent them, only that
// none of beta's keys signed them (an unknown signer). They use up no
// budget of beta's: a real security alert of beta's within the same
// window is stored and streamed as itself.
func TestForgeriesUseNoBudgetOfTheAgentTheyClaim(t *testing.T) {
	settings := record.DefaultEnvSettings()
	settings.AutoDeploy, settings.Enrollment = false, record.EnrollOpen
	// A window of an hour: an alert held back is not summed up within
	// the test.
	r := startRig(t, server.Config{FloodWindow: time.Hour}, map[string]record.EnvSettings{"test": settings})
	alpha, _ := r.startAgentWith(agent.Config{Env: "test", Name: "alpha", ServerKey: r.srv.PublicKey()})
	r.startAgentWith(agent.Config{Env: "test", Name: "beta", ServerKey: r.srv.PublicKey()})
	r.waitOnline("alpha", "beta")
	key := alpha.Journal().Key()
	for i := range 30 {
		r.forge(key, uint64(1000+i), bus.KindHeartbeat, "beta", bus.Heartbeat{})
	}
	waitFor(t, "the forgeries alerted", func() bool { return len(r.alertsOf("")) >= 5 })
	if got := r.alertsOf("beta"); len(got) != 0 {
		t.Fatalf("alerts under beta after forgeries claiming to be it: %q, want none", got)
	}
	for _, m := range r.alertsOf("(unknown signer)") {
		if !strings.Contains(m, "claims to be agent test/beta, signed by none of its keys") {
			t.Fatalf("alert of a forgery: %q, want it to say whom it claims to be", m)
		}
	}

	// A real alert of beta's: it refuses a command no server signed.
	_, stranger, _ := bus.GenerateKey()
	e, err := bus.NewSigner(stranger, 0).Seal(bus.KindPause, "test", "beta", bus.Empty{})
	if err != nil {
		t.Fatal(err)
	}
	if err := r.bus.Send(r.ctx, e, bus.SendOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "beta's own alert stored", func() bool { return len(r.alertsOf("beta")) > 0 })
	if got := r.alertsOf("beta"); len(got) != 1 || !strings.Contains(got[0], "agent beta refused 1 command") {
		t.Fatalf("alerts under beta: %q, want its refusal of the forged pause, as itself", got)
	}
}

// A heartbeat signed with an agent's own key elsewhere (its key in other
// hands), numbered far ahead, no longer makes the agent's events older
// news until it restarts: its next heartbeat, numbered behind, has the
// server tell it to number past, with a security alert, and from then on
// its events count: it is online again and its generation is recorded.
func TestForgedSequenceFreezesNoAgent(t *testing.T) {
	r := newRig(t, record.EnrollOpen)
	f := file("web", "/f", "1")
	r.release(f)
	a, _ := r.startAgentWith(agent.Config{Env: "test", Name: "web", ServerKey: r.srv.PublicKey(), Heartbeat: 200 * time.Millisecond})
	r.waitOnline("web")
	r.deploy(scheduler.DeployRequest{})
	ahead := uint64(r.lastSeq("web")) + bus.MaxSeqJump - 1
	r.forge(a.Journal().Key(), ahead, bus.KindHeartbeat, "web", bus.Heartbeat{})
	waitFor(t, "the forged number taken", func() bool { return uint64(r.lastSeq("web")) >= ahead })
	v2 := r.release(file("web", "/f", "2"))
	r.deploy(scheduler.DeployRequest{})
	waitFor(t, "web's generation recorded past the forged number", func() bool {
		got := r.agentRecord("web")
		return got.Generation == v2.Number && uint64(got.LastSeq) > ahead && got.Connected
	})
	var told []string
	for _, m := range r.alertsOf("web") {
		if strings.Contains(m, "far below the") && strings.Contains(m, "rotate it: tether agent rotate-key web") {
			told = append(told, m)
		}
	}
	if len(told) != 1 {
		t.Fatalf("alerts of web's numbers behind its key's: %q, want one", told)
	}
}

// Where each agent logs in to the broker as itself, what alpha's login
// publishes is alpha's, whatever it claims: an event claiming to be beta
// is refused, even signed by beta's key (stolen too), and a number it
// carries is not believed; forgeries claiming to be beta are alerted
// under alpha and use up none of beta's budget; beta's own alert in the
// same window is stored as itself.
func TestForgeriesAreTheirLoginsOnTheBroker(t *testing.T) {
	var backend atomic.Pointer[brokerauth.Backend]
	auth := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if b := backend.Load(); b != nil {
			b.ServeHTTP(w, r)
			return
		}
		_, _ = w.Write([]byte("deny"))
	}))
	t.Cleanup(auth.Close)
	node := amqptest.StartNode(t, amqptest.NodeOptions{AuthHTTP: auth.URL, CacheTTL: time.Second})
	ctx := context.Background()
	cfg := amqptest.Config(t)
	cfg.URL = node.URL
	st, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "tether.db"), sqlite.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	srv, err := server.New(server.Config{FloodWindow: time.Hour}, st, amqptest.Open(t, cfg), zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := srv.EnsureEnv(ctx, "test", quietSettings()); err != nil {
		t.Fatal(err)
	}
	b, err := srv.BrokerAuth(brokerauth.Config{Namespace: cfg.Namespace})
	if err != nil {
		t.Fatal(err)
	}
	backend.Store(b)
	runServer(t, srv)
	alpha, beta := newFakeAgent(t, st, "test", "alpha"), newFakeAgent(t, st, "test", "beta")
	alertsOf := func(agent string) []string {
		t.Helper()
		as, err := st.Alerts(ctx, record.AlertFilter{Env: "test", Agent: agent, Kind: record.AlertSecurity, Limit: 1000})
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, a := range as {
			out = append(out, a.Message)
		}
		return out
	}
	lastSeq := func(name string) int64 {
		t.Helper()
		a, err := st.GetAgent(ctx, "test", name)
		if err != nil {
			t.Fatal(err)
		}
		return a.LastSeq
	}

	// Beta, on its own login: its bus names the login on every event.
	bcfg := cfg
	bcfg.URL, bcfg.Agent = fmt.Sprintf("amqp://%s:%d/", node.Host, node.Port), true
	bcfg.Login = func() (string, string, error) {
		u, p := bus.LoginCredentials(beta.signer.Key(), "test", "beta", time.Now())
		return u, p, nil
	}
	betaBus := amqptest.Open(t, bcfg)
	if err := betaBus.Publish(ctx, beta.seal(t, "test", bus.KindHeartbeat, bus.Heartbeat{})); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "beta's heartbeat taken", func() bool { return lastSeq("beta") == 1 })

	// Alpha's login (its key in other hands, with beta's key too).
	user, password := bus.LoginCredentials(alpha.signer.Key(), "test", "alpha", time.Now())
	conn, err := amqp091.DialConfig(fmt.Sprintf("amqp://%s:%d/", node.Host, node.Port), amqp091.Config{SASL: []amqp091.Authentication{&amqp091.PlainAuth{Username: user, Password: password}}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	publish := func(e *bus.Envelope, userID string) {
		t.Helper()
		body, err := bus.Encode(e)
		if err != nil {
			t.Fatal(err)
		}
		// Alpha's routing key: the broker lets alpha's login publish
		// no other.
		if err := ch.PublishWithContext(ctx, cfg.Namespace+".events", bus.EventKey("test", "alpha", e.Kind), false, false,
			amqp091.Publishing{Body: body, UserId: userID, Type: string(e.Kind)}); err != nil {
			t.Fatal(err)
		}
	}
	// Beta's key stolen too: a heartbeat beta's key signed, numbered far
	// ahead, from alpha's login (which it names): not believed.
	handled := srv.IngestStats().Events
	stolen, err := bus.NewSigner(beta.signer.Key(), uint64(lastSeq("beta"))+bus.MaxSeqJump-2).Seal(bus.KindHeartbeat, "test", "beta", bus.Heartbeat{})
	if err != nil {
		t.Fatal(err)
	}
	publish(stolen, user)
	waitFor(t, "the stolen key's heartbeat handled", func() bool { return srv.IngestStats().Events > handled })
	// Beta's next heartbeat is not older news: it is the latest.
	if err := betaBus.Publish(ctx, beta.seal(t, "test", bus.KindHeartbeat, bus.Heartbeat{})); err != nil {
		t.Fatal(err)
	}
	waitFor(t, fmt.Sprintf("beta's next heartbeat (2) taken as its latest, not the %d its key signed from alpha's login", stolen.Seq),
		func() bool { return lastSeq("beta") == 2 })

	forger := bus.NewSigner(alpha.signer.Key(), 1000)
	for range 20 {
		e, err := forger.Seal(bus.KindHeartbeat, "test", "beta", bus.Heartbeat{})
		if err != nil {
			t.Fatal(err)
		}
		publish(e, "")
	}
	waitFor(t, "the forgeries alerted", func() bool { return len(alertsOf("")) >= 5 })
	if got := alertsOf("beta"); len(got) != 0 {
		t.Fatalf("alerts under beta after alpha's login sent forgeries claiming to be it: %q, want none", got)
	}
	for _, m := range alertsOf("alpha") {
		if !strings.Contains(m, "sent by agent test/alpha (its broker login), claiming to be agent test/beta") {
			t.Fatalf("alert under alpha: %q, want it to name alpha's login and the claim", m)
		}
	}

	// Beta's own alert, in the same window: stored as itself.
	if err := betaBus.Publish(ctx, beta.seal(t, "test", bus.KindSecurity, bus.Security{Refused: []string{"pause (x): forged"}, Count: 1})); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "beta's own alert stored", func() bool { return len(alertsOf("beta")) > 0 })
	if got := alertsOf("beta"); len(got) != 1 || !strings.Contains(got[0], "agent beta refused 1 command") {
		t.Fatalf("alerts under beta: %q, want its own, as itself", got)
	}
}
