package api_test

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/tetherhq/tether/server"
	"github.com/tetherhq/tether/server/api"
	"github.com/tetherhq/tether/server/notify"
	"github.com/tetherhq/tether/server/record"
)

// TestWebhooksAPI: an admin creates a webhook (its secret shown once),
// operators list and test it, a test delivery reaches the receiver signed
// with that secret and shows in the deliveries; bad input is refused with
// nothing changed, and roles are enforced.
func TestWebhooksAPI(t *testing.T) {
	r := newRig(t, openSQLite(t))
	r.must(r.admin, "POST", "/api/v1/envs", api.EnvRequest{Name: "prod"}, nil, 201)
	r.must(r.admin, "POST", "/api/v1/envs", api.EnvRequest{Name: "dev"}, nil, 201)
	got := make(chan error, 10)
	var secret string
	rcv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		body, _ := io.ReadAll(req.Body)
		_, err := notify.Verify(req.Header, body, secret, time.Now(), 5*time.Minute)
		got <- err
	}))
	defer rcv.Close()
	operator := r.token("op", record.RoleOperator, "prod")
	viewer := r.token("view", record.RoleViewer, "prod")
	url := rcv.URL

	var w record.Webhook
	r.must(r.admin, "POST", "/api/v1/envs/prod/webhooks", record.WebhookRequest{Name: "ops", URL: &url}, &w, 201)
	if w.ID == 0 || len(w.Secret) < 40 || !w.Enabled || len(w.Kinds) != len(record.DefaultWebhookKinds) {
		t.Fatalf("created %+v: want an ID, a secret, enabled, the alert kinds", w)
	}
	secret = w.Secret
	path := "/api/v1/envs/prod/webhooks/" + strconv.FormatInt(w.ID, 10)

	for _, tt := range []struct {
		name  string
		body  any
		token string
		want  int
	}{
		{"bad URL", `{"name":"x","url":"ftp://example.com"}`, r.admin, 422},
		{"no URL", `{"name":"x"}`, r.admin, 422},
		{"bad name", `{"name":"A B","url":"https://example.com"}`, r.admin, 422},
		{"short secret", `{"name":"x","url":"https://example.com","secret":"short"}`, r.admin, 422},
		{"same name", `{"name":"ops","url":"https://example.com"}`, r.admin, 409},
		{"an operator", `{"name":"x","url":"https://example.com"}`, operator, 403},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if status, code := r.do(tt.token, "POST", "/api/v1/envs/prod/webhooks", tt.body, nil); status != tt.want {
				t.Fatalf("status %d (%s), want %d", status, code, tt.want)
			}
		})
	}
	var list []record.Webhook
	r.must(operator, "GET", "/api/v1/envs/prod/webhooks", nil, &list, 200)
	if len(list) != 1 || list[0].Secret != "" || list[0].URL != url {
		t.Fatalf("list: %+v, want the one webhook without its secret", list)
	}
	r.must(viewer, "GET", "/api/v1/envs/prod/webhooks", nil, nil, 403)
	r.must(r.admin, "GET", "/api/v1/envs/dev/webhooks/"+strconv.FormatInt(w.ID, 10), nil, nil, 404)
	r.must(r.admin, "GET", "/api/v1/envs/prod/webhooks/x", nil, nil, 400)

	var d record.Delivery
	r.must(operator, "POST", path+"/test", nil, &d, 202)
	select {
	case err := <-got:
		if err != nil {
			t.Fatalf("the receiver could not verify the test delivery: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the test delivery did not arrive")
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		var log []record.Delivery
		r.must(operator, "GET", path+"/deliveries", nil, &log, 200)
		if len(log) == 1 && log[0].State == record.DeliveryDelivered {
			if log[0].StatusCode != 200 || log[0].Attempts != 1 || log[0].Kind != "webhook.test" {
				t.Fatalf("delivery %+v: want delivered at the first attempt with 200", log[0])
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("deliveries: %+v, want the test delivered", log)
		}
		time.Sleep(20 * time.Millisecond)
	}

	// Rotating the secret shows the new one once; disabling keeps it.
	var rotated record.Webhook
	r.must(r.admin, "PATCH", path, `{"rotate_secret":true}`, &rotated, 200)
	if rotated.Secret == "" || rotated.Secret == secret {
		t.Fatalf("rotated: %+v, want a new secret shown", rotated)
	}
	var disabled record.Webhook
	r.must(r.admin, "PATCH", path, `{"enabled":false}`, &disabled, 200)
	if disabled.Enabled || disabled.Secret != "" {
		t.Fatalf("disabled: %+v, want disabled, no secret shown", disabled)
	}
	r.must(r.admin, "PATCH", path, `{"kinds":[]}`, nil, 422)
	r.must(operator, "DELETE", path, nil, nil, 403)
	r.must(r.admin, "DELETE", path, nil, nil, 204)
	r.must(r.admin, "GET", path, nil, nil, 404)
}

// TestWebhookDestinationPolicy: an environment's admin (a tenant, not
// the server's operator) cannot point a webhook at the server's own
// addresses, the cloud metadata service or its private network: create
// and update answer 422 naming the flag that would allow it. A webhook
// stored to such an address anyway (set before the policy, or a name
// whose DNS changed since) gets nothing delivered: its deliveries
// record the refusal, and the receiver sees no request.
func TestWebhookDestinationPolicy(t *testing.T) {
	st := openSQLite(t)
	r := newServerRig(t, st, server.Config{}, api.Config{}, zerolog.Nop()) // the default policy
	r.must(r.admin, "POST", "/api/v1/envs", api.EnvRequest{Name: "prod"}, nil, 201)
	tenant := r.token("tenant", record.RoleAdmin, "prod")
	hits := make(chan string, 10)
	rcv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) { hits <- req.URL.Path }))
	defer rcv.Close()

	cases := []struct{ url, says string }{
		{rcv.URL + "/hook", "--webhook-allow 127.0.0.1/32"},
		{"http://169.254.169.254/latest/meta-data/iam/security-credentials/", "--webhook-allow 169.254.169.254/32"},
		{"http://[fd00:ec2::254]/latest/meta-data/", "--webhook-allow fd00:ec2::254/128"},
		{"http://10.0.0.5:8080/", "a private address"},
		{"http://[::ffff:127.0.0.1]/", "a loopback address"},
		{"http://0.0.0.0:8420/api/v1/tokens", "--webhook-allow 0.0.0.0/32"},
		{"http://192.0.2.1/", "a documentation address"},
		{"http://[64:ff9b::a9fe:a9fe]/", "a NAT64 address leading to 169.254.169.254"},
	}
	// The server's own addresses, whatever networks they are in.
	own, err := notify.InterfaceAddrs()
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range own {
		if !a.IsLoopback() && !a.IsLinkLocalUnicast() {
			cases = append(cases, struct{ url, says string }{"http://" + net.JoinHostPort(a.String(), "8420") + "/api/v1/tokens", "--webhook-allow " + a.String()})
		}
	}
	for _, tt := range cases {
		t.Run(tt.url, func(t *testing.T) {
			var e api.Body
			status, code := r.do(tenant, "POST", "/api/v1/envs/prod/webhooks", record.WebhookRequest{Name: "x", URL: &tt.url}, &e)
			if status != 422 || code != "invalid" || !strings.Contains(e.Error.Message, tt.says) {
				t.Fatalf("create %s: %d %s %+v, want 422 invalid saying %q", tt.url, status, code, e.Error, tt.says)
			}
		})
	}
	public := "https://93.184.215.14/tether" // no look-up, and no event it would be sent
	var w record.Webhook
	r.must(tenant, "POST", "/api/v1/envs/prod/webhooks", record.WebhookRequest{Name: "ops", URL: &public}, &w, 201)
	path := "/api/v1/envs/prod/webhooks/" + strconv.FormatInt(w.ID, 10)
	var e api.Body
	if status, _ := r.do(tenant, "PATCH", path, `{"url":"http://169.254.169.254/"}`, &e); status != 422 || !strings.Contains(e.Error.Message, "--webhook-allow") {
		t.Fatalf("update to the metadata address: %d %+v, want 422 naming --webhook-allow", status, e.Error)
	}
	if got, _ := st.GetWebhook(context.Background(), "prod", w.ID); got.URL != public {
		t.Fatalf("URL after a refused update: %q, want %q", got.URL, public)
	}
	if hs, _ := st.ListWebhooks(context.Background(), "prod"); len(hs) != 1 {
		t.Fatalf("webhooks after refused creates: %d, want 1", len(hs))
	}

	// Stored behind the API's back: the sender refuses at connect time.
	for _, u := range []string{rcv.URL + "/loopback", "http://169.254.169.254/latest/meta-data/"} {
		h, err := st.CreateWebhook(context.Background(), record.Webhook{Env: "prod", Name: "sneaky-" + strconv.Itoa(len(u)), URL: u, Secret: "a-secret-of-enough-length", Kinds: []string{"*"}, Enabled: true})
		if err != nil {
			t.Fatal(err)
		}
		p := "/api/v1/envs/prod/webhooks/" + strconv.FormatInt(h.ID, 10)
		r.must(tenant, "POST", p+"/test", nil, nil, 202)
		deadline := time.Now().Add(30 * time.Second)
		for {
			var log []record.Delivery
			r.must(tenant, "GET", p+"/deliveries", nil, &log, 200)
			if len(log) == 1 && log[0].Error != "" {
				if log[0].State == record.DeliveryDelivered || !strings.Contains(log[0].Error, "refused by the server's webhook policy") {
					t.Fatalf("%s: delivery %+v, want refused by the policy", u, log[0])
				}
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: deliveries %+v, want one refused", u, log)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	select {
	case p := <-hits:
		t.Fatalf("the receiver on 127.0.0.1 got a request for %s, want none", p)
	default:
	}
}
