package api_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"

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
