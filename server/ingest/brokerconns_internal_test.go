package ingest

import (
	"crypto/ed25519"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/tetherhq/tether/bus"
)

func TestOverLimit(t *testing.T) {
	key := func() ed25519.PublicKey {
		pub, _, err := bus.GenerateKey()
		if err != nil {
			t.Fatal(err)
		}
		return pub
	}
	web, thief, db := key(), key(), key()
	t0 := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	conn := func(name string, env, agent string, k ed25519.PublicKey, at int) bus.BrokerConnection {
		return bus.BrokerConnection{Name: name, User: bus.BrokerLogin{Env: env, Agent: agent, Key: k}.User(), ConnectedAt: t0.Add(time.Duration(at) * time.Second)}
	}
	conns := []bus.BrokerConnection{
		conn("w3", "prod", "web", thief, 30),
		conn("w1", "prod", "web", web, 10),
		conn("w5", "prod", "web", thief, 50),
		conn("w2", "prod", "web", web, 20),
		conn("w4b", "prod", "web", thief, 40),
		conn("w4a", "prod", "web", thief, 40), // same time: by name
		conn("d1", "prod", "db", db, 10),
		conn("d2", "prod", "db", db, 20),
		conn("x1", "dev", "web", web, 10), // another environment's web
		{Name: "s1", User: "tether-server", ConnectedAt: t0},
		{Name: "s2", User: "tether-server", ConnectedAt: t0},
		{Name: "s3", User: "tether-server", ConnectedAt: t0},
		{Name: "bad", User: "agent:prod:web:not-a-key", ConnectedAt: t0},
	}
	for _, tc := range []struct {
		limit int
		want  string
	}{
		{2, "prod/web of 6: [w3 w4a w4b w5]"},
		{1, "prod/db of 2: [d2]; prod/web of 6: [w2 w3 w4a w4b w5]"},
		{6, ""},
	} {
		t.Run(fmt.Sprint(tc.limit), func(t *testing.T) {
			var got []string
			for _, o := range overLimit(conns, tc.limit) {
				var names []string
				for _, c := range o.excess {
					names = append(names, c.Name)
				}
				got = append(got, fmt.Sprintf("%s/%s of %d: %v", o.env, o.name, o.total, names))
			}
			if s := strings.Join(got, "; "); s != tc.want {
				t.Errorf("got %q, want %q", s, tc.want)
			}
		})
	}
}

// The first closure of an agent's connections is alerted at once; the
// next, within the period, are summed up in one alert when it is over;
// an agent quiet for a whole period is forgotten, and alerted at once
// again.
func TestConnAlertsAggregate(t *testing.T) {
	a := newConnAlerts(10 * time.Minute)
	web, db := agentKey{"prod", "web"}, agentKey{"prod", "db"}
	t0 := time.Now()
	if !a.closed(web, 3, t0) {
		t.Fatal("first closure of web: not alerted at once")
	}
	for i := 1; i <= 4; i++ {
		if a.closed(web, 2, t0.Add(time.Duration(i)*time.Minute)) {
			t.Fatalf("closure %d of web within the period alerted at once", i)
		}
	}
	if !a.closed(db, 1, t0.Add(5*time.Minute)) {
		t.Fatal("first closure of db: not alerted at once")
	}
	if due := a.due(t0.Add(9 * time.Minute)); len(due) != 0 {
		t.Fatalf("due within the period: %v, want none", due)
	}
	due := a.due(t0.Add(10 * time.Minute))
	if len(due) != 1 || due[web] != 8 {
		t.Fatalf("due once web's period is over: %v, want web's 8 held closures", due)
	}
	if due := a.due(t0.Add(16 * time.Minute)); len(due) != 0 {
		t.Fatalf("due with nothing held: %v, want none", due)
	}
	// db quiet since its alert, web since its summary: both forgotten.
	if due := a.due(t0.Add(21 * time.Minute)); len(due) != 0 || len(a.m) != 0 {
		t.Fatalf("after a quiet period: due %v, tracked %v; want nothing", due, a.m)
	}
	if !a.closed(web, 1, t0.Add(22*time.Minute)) {
		t.Fatal("web's closure after a quiet period: not alerted at once")
	}
}
