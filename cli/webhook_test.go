package cli

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/tetherhq/tether/server/notify"
	"github.com/tetherhq/tether/server/record"
)

// TestWebhookCommands: add prints the secret once, list and show name the
// webhook, test reaches a receiver that verifies it with that secret and
// deliveries shows it delivered; delete takes the name; bad input says
// what is wrong.
func TestWebhookCommands(t *testing.T) {
	newTestAPI(t)
	verified := make(chan error, 10)
	var secret string
	rcv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		_, err := notify.Verify(r.Header, body, secret, time.Now(), 5*time.Minute)
		verified <- err
	}))
	defer rcv.Close()
	run := func(args ...string) string {
		t.Helper()
		code, out, errs := invoke(t, args...)
		if code != 0 {
			t.Fatalf("tether %s: exit %d: %s", strings.Join(args, " "), code, errs)
		}
		return out
	}
	var w record.Webhook
	if err := json.Unmarshal([]byte(run("webhook", "add", "pager", "--url", rcv.URL, "--kinds", "compliance.drift,security.alert", "-o", "json")), &w); err != nil || w.Secret == "" {
		t.Fatalf("add -o json: %+v (%v), want the secret", w, err)
	}
	secret = w.Secret
	if out := run("webhook", "list"); !strings.Contains(out, "pager") || !strings.Contains(out, "compliance.drift,security.alert") || strings.Contains(out, secret) {
		t.Fatalf("list:\n%s\nwant pager and its kinds, never the secret", out)
	}
	if out := run("webhook", "show", "pager"); !strings.Contains(out, rcv.URL) {
		t.Fatalf("show:\n%s", out)
	}
	if out := run("webhook", "test", "pager"); !strings.Contains(out, "queued") {
		t.Fatalf("test: %s", out)
	}
	select {
	case err := <-verified:
		if err != nil {
			t.Fatalf("the receiver could not verify the test: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the test delivery did not arrive")
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		var ds []record.Delivery
		if err := json.Unmarshal([]byte(run("webhook", "deliveries", "pager", "-o", "json")), &ds); err != nil {
			t.Fatal(err)
		}
		if len(ds) == 1 && ds[0].State == record.DeliveryDelivered {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("deliveries: %+v, want the test delivered", ds)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if code, _, errs := invoke(t, "webhook", "add", "bad", "--url", "ftp://example.com"); code == 0 || !strings.Contains(errs, "http:// or https://") {
		t.Fatalf("add with an ftp URL: exit %d, %q: want refused saying why", code, errs)
	}
	// The test server allows 127.0.0.1/32 only: the metadata address is
	// refused, and the message names the flag that would allow it.
	if code, _, errs := invoke(t, "webhook", "add", "meta", "--url", "http://169.254.169.254/latest/meta-data/"); code == 0 || !strings.Contains(errs, "--webhook-allow 169.254.169.254/32") {
		t.Fatalf("add to the metadata address: exit %d, %q: want refused naming --webhook-allow", code, errs)
	}
	if code, _, errs := invoke(t, "webhook", "show", "nope"); code == 0 || !strings.Contains(errs, "tether webhook list") {
		t.Fatalf("show nope: exit %d, %q", code, errs)
	}
	if out := run("webhook", "delete", "pager"); !strings.Contains(out, "deleted") {
		t.Fatalf("delete: %s", out)
	}
	if out := run("webhook", "list", "-o", "json"); strings.TrimSpace(out) != "[]" {
		t.Fatalf("list after delete: %s, want []", out)
	}
}
