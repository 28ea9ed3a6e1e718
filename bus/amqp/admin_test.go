package amqp

import (
	"context"
	"crypto/ed25519"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/tetherhq/tether/bus"
)

// TestCloseAgentConnections closes, through a management API that lists
// the connections of two keys of one agent, another agent and the server,
// the connections of one key, then those of any key of the agent: nothing
// else is closed.
func TestCloseAgentConnections(t *testing.T) {
	pub := func(k []byte) ed25519.PublicKey { return ed25519.PrivateKey(k).Public().(ed25519.PublicKey) }
	user := func(env, name string, key []byte) string {
		return bus.BrokerLogin{Env: env, Agent: name, Key: pub(key)}.User()
	}
	oldKey, newKey, other := mustKey(t), mustKey(t), mustKey(t)
	conns := map[string]string{
		"c-old":    user("prod", "web", oldKey),
		"c-old-2":  user("prod", "web", oldKey),
		"c-new":    user("prod", "web", newKey),
		"c-web-10": user("prod", "web-10", oldKey), // a name that extends web's
		"c-stage":  user("stage", "web", other),
		"c-server": "tether-server",
	}
	var mu sync.Mutex
	var closed []string
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if u, p, ok := r.BasicAuth(); !ok || u != "admin" || p != "secret" {
			http.Error(w, "unauthorised", http.StatusUnauthorized)
			return
		}
		mu.Lock()
		defer mu.Unlock()
		switch {
		case r.Method == http.MethodGet && r.URL.Path == "/api/connections":
			var list []connection
			for name, u := range conns {
				list = append(list, connection{Name: name, User: u})
			}
			_ = json.NewEncoder(w).Encode(list)
		case r.Method == http.MethodDelete && strings.HasPrefix(r.URL.Path, "/api/connections/"):
			name := strings.TrimPrefix(r.URL.Path, "/api/connections/")
			if _, ok := conns[name]; !ok {
				http.NotFound(w, r)
				return
			}
			delete(conns, name)
			closed = append(closed, name)
			w.WriteHeader(http.StatusNoContent)
		default:
			http.NotFound(w, r)
		}
	}))
	defer api.Close()
	a, err := NewAdmin(strings.Replace(api.URL, "http://", "http://admin:secret@", 1))
	if err != nil {
		t.Fatal(err)
	}
	check := func(key ed25519.PublicKey, want ...string) {
		t.Helper()
		mu.Lock()
		closed = nil
		mu.Unlock()
		n, err := a.CloseAgentConnections(context.Background(), "prod", "web", key)
		if err != nil {
			t.Fatal(err)
		}
		mu.Lock()
		defer mu.Unlock()
		slices.Sort(closed)
		if n != len(want) || !slices.Equal(closed, want) {
			t.Fatalf("closed %d: %v, want %v", n, closed, want)
		}
	}
	check(pub(oldKey), "c-old", "c-old-2")
	check(nil, "c-new")
	check(nil)
	mu.Lock()
	defer mu.Unlock()
	if len(conns) != 3 {
		t.Fatalf("left open %v, want the other agents' and the server's", conns)
	}
}
