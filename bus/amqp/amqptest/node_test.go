package amqptest_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/tetherhq/tether/bus/amqp"
	"github.com/tetherhq/tether/bus/amqp/amqptest"
)

// authBackend is an HTTP authentication backend that lets in one user
// with one password, and records what the node asked.
type authBackend struct {
	user, password string

	mu    sync.Mutex
	asked []string // "path user"
}

func (a *authBackend) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		http.Error(w, "POST only", http.StatusMethodNotAllowed)
		return
	}
	if err := r.ParseForm(); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	user := r.PostForm.Get("username")
	a.mu.Lock()
	a.asked = append(a.asked, r.URL.Path+" "+user)
	a.mu.Unlock()
	allow := user == a.user
	if r.URL.Path == "/auth/user" {
		allow = allow && r.PostForm.Get("password") == a.password
	}
	if allow {
		fmt.Fprint(w, "allow")
	} else {
		fmt.Fprint(w, "deny")
	}
}

func (a *authBackend) questions() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return slices.Clone(a.asked)
}

// A node with AuthHTTP lets its own administrator in without asking the
// backend, and a user of the backend in only when the backend allows it;
// its management API answers on its own port.
func TestNodeAuthHTTPAndManagement(t *testing.T) {
	backend := &authBackend{user: "agent-web-1", password: "right"}
	srv := httptest.NewServer(backend)
	t.Cleanup(srv.Close)
	n := amqptest.StartNode(t, amqptest.NodeOptions{AuthHTTP: srv.URL + "/auth", Management: true})

	connect := func(t *testing.T, user, password string) error {
		cfg := amqptest.Config(t)
		cfg.URL = fmt.Sprintf("amqp://%s:%s@%s:%d/", user, password, n.Host, n.Port)
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		// One attempt, not the bus's retries: a refusal is an answer.
		return amqp.DeleteQueue(ctx, cfg, "tethertest.absent")
	}

	t.Run("internal administrator", func(t *testing.T) {
		if err := connect(t, n.AdminUser, n.AdminPassword); err != nil {
			t.Fatal(err)
		}
		if q := backend.questions(); len(q) != 0 {
			t.Errorf("the backend was asked %v, want nothing: the internal database comes first", q)
		}
	})
	t.Run("backend allows", func(t *testing.T) {
		if err := connect(t, "agent-web-1", "right"); err != nil {
			t.Fatal(err)
		}
		q := backend.questions()
		for _, want := range []string{"/auth/user agent-web-1", "/auth/vhost agent-web-1", "/auth/resource agent-web-1"} {
			if !slices.Contains(q, want) {
				t.Errorf("the backend was asked %v, want %q among them", q, want)
			}
		}
	})
	t.Run("backend denies", func(t *testing.T) {
		for _, login := range [][2]string{{"agent-web-1", "wrong"}, {"agent-web-2", "right"}} {
			if err := connect(t, login[0], login[1]); err == nil {
				t.Errorf("%s with password %q let in, want refused", login[0], login[1])
			}
			if q := backend.questions(); !slices.Contains(q, "/auth/user "+login[0]) {
				t.Errorf("the backend was asked %v, want /auth/user %s among them", q, login[0])
			}
		}
	})
	t.Run("cpu time", func(t *testing.T) {
		// Booting alone takes the node seconds of processor time; a
		// count that missed its processes would read 0.
		cpu, err := n.CPUTime()
		if err != nil {
			t.Fatal(err)
		}
		if cpu <= 0 {
			t.Errorf("got CPU time %v for a node that booted, want more than 0", cpu)
		}
	})
	t.Run("management", func(t *testing.T) {
		// The URL carries the administrator's credentials.
		resp, err := http.Get(n.ManagementURL + "/api/overview")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var overview struct {
			Node string `json:"node"`
		}
		if err := json.NewDecoder(resp.Body).Decode(&overview); err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("GET /api/overview: %s, %v", resp.Status, err)
		}
		if overview.Node != n.Name {
			t.Errorf("management answers for node %q, want %q", overview.Node, n.Name)
		}
	})
}
