package api_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/rs/zerolog"

	"github.com/tetherhq/tether/bus"
	"github.com/tetherhq/tether/model"
	"github.com/tetherhq/tether/server/api"
	"github.com/tetherhq/tether/server/record"
	"github.com/tetherhq/tether/server/store"
	"github.com/tetherhq/tether/server/store/postgres"
	"github.com/tetherhq/tether/server/store/postgres/pgtest"
)

// answer is a response as the limit tests look at it.
type answer struct {
	status int
	header http.Header
	body   []byte
	err    *api.Error
}

// send sends a request with body (a string, bytes, or a value to encode)
// and returns the whole answer.
func (r *rig) send(token, method, path string, body any) answer {
	r.t.Helper()
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case string:
		rd = strings.NewReader(b)
	case []byte:
		rd = bytes.NewReader(b)
	case io.Reader:
		rd = b
	default:
		j, _ := json.Marshal(b)
		rd = bytes.NewReader(j)
	}
	req, _ := http.NewRequest(method, r.ts.URL+path, rd)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		r.t.Fatal(err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	a := answer{status: resp.StatusCode, header: resp.Header, body: data}
	if resp.StatusCode >= 400 {
		var e api.Body
		if err := json.Unmarshal(data, &e); err != nil || e.Error == nil {
			r.t.Fatalf("%s %s: status %d with a body that is not a catalogue error: %.300s", method, path, resp.StatusCode, data)
		}
		if want := api.Codes[e.Error.Code]; want != resp.StatusCode {
			r.t.Fatalf("%s %s: code %s came with status %d, catalogue says %d", method, path, e.Error.Code, resp.StatusCode, want)
		}
		a.err = e.Error
	}
	return a
}

func (a answer) code() string {
	if a.err == nil {
		return ""
	}
	return a.err.Code
}

func TestRateLimits(t *testing.T) {
	cfg := api.Config{MaxUpload: 1 << 20, AnonymousRate: 0.01, AnonymousBurst: 5, AuthFailureRate: 0.01, AuthFailureBurst: 3}
	r := newRigWith(t, openSQLite(t), cfg, zerolog.Nop())

	// Requests without a token: the burst, then 429 with Retry-After.
	for i := range 5 {
		if a := r.send("", "GET", "/api/v1/envs", nil); a.code() != "unauthorized" {
			t.Fatalf("anonymous request %d: got %d %s, want unauthorized", i+1, a.status, a.code())
		}
	}
	for _, path := range []string{"/api/v1/envs", "/api/v1/openapi.json", "/api/v1/no-such-route", "/readyz", "/api/v1/envs?basic"} {
		req, _ := http.NewRequest("GET", r.ts.URL+path, nil)
		if strings.HasSuffix(path, "?basic") {
			// Not a bearer token: anonymous.
			req.SetBasicAuth("admin", "admin")
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		var e api.Body
		_ = json.NewDecoder(resp.Body).Decode(&e)
		resp.Body.Close()
		a := answer{status: resp.StatusCode, header: resp.Header, err: e.Error}
		if a.code() != "rate_limited" || a.header.Get("Retry-After") == "" {
			t.Fatalf("GET %s after the burst: got %d %s, Retry-After %q; want rate_limited with Retry-After", path, a.status, a.code(), a.header.Get("Retry-After"))
		}
	}
	// Health checks are never limited; requests with a valid token are not
	// held to the anonymous bucket.
	if a := r.send("", "GET", "/healthz", nil); a.status != http.StatusOK {
		t.Fatalf("healthz: got %d, want 200", a.status)
	}
	if a := r.send(r.admin, "GET", "/api/v1/envs", nil); a.status != http.StatusOK {
		t.Fatalf("admin after the anonymous burst: got %d %s, want 200", a.status, a.code())
	}

	// Guessing tokens: three failures, then every bad token from that
	// address is answered 429 until the bucket refills; the valid admin
	// token, from the same address, always authenticates.
	for i := range 3 {
		if a := r.send("tether_guess"+fmt.Sprint(i), "GET", "/api/v1/envs", nil); a.code() != "unauthorized" {
			t.Fatalf("guess %d: got %s, want unauthorized", i+1, a.code())
		}
	}
	for i := range 3 {
		a := r.send("tether_guess"+fmt.Sprint(3+i), "GET", "/api/v1/envs", nil)
		if a.code() != "rate_limited" || a.header.Get("Retry-After") == "" || !strings.Contains(a.err.Message, "failed authentications") {
			t.Fatalf("a bad token after 3 failures: got %d %s %+v, want rate_limited naming failed authentications", a.status, a.code(), a.err)
		}
		if a := r.send(r.admin, "GET", "/api/v1/envs", nil); a.status != http.StatusOK {
			t.Fatalf("the admin token from the same address, after the failures: got %d %s %+v, want 200", a.status, a.code(), a.err)
		}
	}
}

// Requests behind a trusted proxy are limited per forwarded client, and a
// forwarded address from an untrusted peer is ignored.
func TestRateLimitsBehindProxy(t *testing.T) {
	cfg := api.Config{MaxUpload: 1 << 20, AnonymousRate: 0.01, AnonymousBurst: 2}
	for _, tt := range []struct {
		name    string
		trusted string
		// want is what the third request of a second forwarded client
		// gets after a first one used its burst.
		want string
	}{
		{"trusted", "127.0.0.0/8", "unauthorized"},
		{"untrusted", "10.0.0.0/8", "rate_limited"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c := cfg
			c.TrustedProxies = []netip.Prefix{netip.MustParsePrefix(tt.trusted)}
			r := newRigWith(t, openSQLite(t), c, zerolog.Nop())
			get := func(forwarded string) string {
				req, _ := http.NewRequest("GET", r.ts.URL+"/api/v1/envs", nil)
				req.Header.Set("X-Forwarded-For", forwarded)
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				defer resp.Body.Close()
				var e api.Body
				_ = json.NewDecoder(resp.Body).Decode(&e)
				return e.Error.Code
			}
			get("192.0.2.1")
			get("192.0.2.1")
			if got := get("198.51.100.7, 192.0.2.1"); got != "rate_limited" && tt.name == "trusted" {
				// The right-most untrusted hop is 192.0.2.1 again.
				t.Fatalf("got %s, want rate_limited for the same forwarded client", got)
			}
			if got := get("192.0.2.2"); got != tt.want {
				t.Fatalf("another forwarded client: got %s, want %s", got, tt.want)
			}
		})
	}
}

// Every name and text a client sends is bounded, and no answer repeats a
// huge one.
func TestFieldLimits(t *testing.T) {
	r := newRig(t, openSQLite(t))
	r.must(r.admin, "POST", "/api/v1/envs", api.EnvRequest{Name: "prod"}, nil, 201)
	long := func(n int) string { return strings.Repeat("x", n) }
	agents := make([]string, model.MaxAgentsPerRequest+1)
	for i := range agents {
		agents[i] = fmt.Sprint("a", i)
	}
	resource := file("h", "/f", "x")
	tests := []struct {
		name, method, path string
		body               any
		want               string
	}{
		{"long token name", "POST", "/api/v1/tokens", api.TokenRequest{Name: long(model.MaxNameLen + 1), Role: record.RoleViewer}, "invalid"},
		{"token name with a newline", "POST", "/api/v1/tokens", api.TokenRequest{Name: "ci\nadmin", Role: record.RoleViewer}, "invalid"},
		{"token name with a NUL", "POST", "/api/v1/tokens", api.TokenRequest{Name: "ci\x00", Role: record.RoleViewer}, "invalid"},
		{"huge token name", "POST", "/api/v1/tokens", api.TokenRequest{Name: long(2 << 20), Role: record.RoleViewer}, "too_large"},
		{"long role", "POST", "/api/v1/tokens", api.TokenRequest{Name: "x", Role: record.Role(long(50000))}, "invalid"},
		{"long expiry", "POST", "/api/v1/tokens", api.TokenRequest{Name: "x", Role: record.RoleViewer, ExpiresIn: long(50000)}, "invalid"},
		{"long token env", "POST", "/api/v1/tokens", api.TokenRequest{Name: "x", Role: record.RoleViewer, Env: long(50000)}, "invalid"},
		{"long enrollment token name", "POST", "/api/v1/envs/prod/enrollment-tokens", api.EnrollmentTokenRequest{Name: long(50000)}, "invalid"},
		{"negative max uses", "POST", "/api/v1/envs/prod/enrollment-tokens", api.EnrollmentTokenRequest{Name: "rack", MaxUses: -1}, "invalid"},
		{"long environment name", "POST", "/api/v1/envs", api.EnvRequest{Name: long(50000)}, "invalid"},
		{"long setting value", "POST", "/api/v1/envs", api.EnvRequest{Name: "x", Settings: map[string]string{"versions_to_keep": strings.Repeat("0", 50000) + "5"}}, "invalid"},
		{"long setting key", "PATCH", "/api/v1/envs/prod/settings", map[string]string{long(50000): "1"}, "invalid"},
		{"long metadata", "POST", "/api/v1/envs/prod/versions", api.ExportRequest{Resources: []model.Resource{resource}, Meta: model.VersionMeta{Source: long(model.MaxTextLen + 1)}}, "invalid"},
		{"metadata with a NUL", "POST", "/api/v1/envs/prod/versions", api.ExportRequest{Resources: []model.Resource{resource}, Meta: model.VersionMeta{Compiler: "tether\x00"}}, "invalid"},
		{"too many agents", "POST", "/api/v1/envs/prod/deploy", api.OperationRequest{Agents: agents}, "invalid"},
		{"long agent in an operation", "POST", "/api/v1/envs/prod/deploy", api.OperationRequest{Agents: []string{long(50000)}}, "invalid"},
		{"long agent in the path", "POST", "/api/v1/envs/prod/agents/" + long(20000) + "/accept", nil, "bad_request"},
		{"long agent filter", "GET", "/api/v1/envs/prod/resources?agent=" + long(20000), nil, "bad_request"},
		{"long type filter", "GET", "/api/v1/envs/prod/resources?type=" + long(20000), nil, "bad_request"},
		{"long environment in the path", "GET", "/api/v1/envs/" + long(20000), nil, "bad_request"},
		{"long resource ID", "GET", "/api/v1/envs/prod/resources/" + url.PathEscape("file[h,path=/"+long(20000)+"]"), nil, "bad_request"},
		{"token ID not a UUID", "DELETE", "/api/v1/tokens/" + long(20000), nil, "bad_request"},
		{"enrollment token ID not a UUID", "DELETE", "/api/v1/envs/prod/enrollment-tokens/x'--", nil, "bad_request"},
		{"long audit filter", "GET", "/api/v1/audit?env=" + long(20000), nil, "bad_request"},
		{"long alert filter", "GET", "/api/v1/envs/prod/alerts?agent=" + long(20000), nil, "bad_request"},
		{"long events filter", "GET", "/api/v1/events?env=" + long(20000), nil, "bad_request"},
		{"headers too large", "GET", "/api/v1/envs?x=" + long(100000), nil, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.want == "" { // refused by net/http itself: 431
				req, _ := http.NewRequest(tt.method, r.ts.URL+tt.path, nil)
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				resp.Body.Close()
				if resp.StatusCode != http.StatusRequestHeaderFieldsTooLarge {
					t.Fatalf("got %d, want 431", resp.StatusCode)
				}
				return
			}
			a := r.send(r.admin, tt.method, tt.path, tt.body)
			if a.code() != tt.want {
				t.Fatalf("got %d %s (%+v), want %s", a.status, a.code(), a.err, tt.want)
			}
			if len(a.body) > 2048 {
				t.Fatalf("answer of %d bytes: the error repeats what was sent (%.200s…)", len(a.body), a.body)
			}
		})
	}
	// What was refused was not stored, and the audit log stays small.
	var audit []record.AuditEntry
	r.must(r.admin, "GET", "/api/v1/audit", nil, &audit, 200)
	for _, e := range audit {
		if len(e.Actor)+len(e.Target)+len(e.Detail) > 3*model.MaxAuditLen {
			t.Fatalf("audit entry of %d bytes", len(e.Actor)+len(e.Target)+len(e.Detail))
		}
	}
	var toks []record.Token
	r.must(r.admin, "GET", "/api/v1/tokens", nil, &toks, 200)
	if len(toks) != 1 {
		t.Fatalf("got %d tokens, want only the admin's", len(toks))
	}
}

func TestUploads(t *testing.T) {
	r := newRig(t, openSQLite(t)) // max-upload 1 MiB, max-body 1 MiB
	r.must(r.admin, "POST", "/api/v1/envs", api.EnvRequest{Name: "prod"}, nil, 201)
	res := `{"id":"file[h,path=/f]","attributes":{"path":"/f","content":"x"}}`
	res2 := `{"id":"file[h,path=/g]","attributes":{"path":"/g","content":"y"}}`
	big := `{"resources":[` + strings.Repeat(res+",", 20000) + res + `]}`
	tests := []struct {
		name string
		body any
		want string
		// message is part of the error message wanted.
		message string
	}{
		{"meta first", `{"meta":{"source":"git"},"resources":[` + res + `]}`, "", ""},
		{"duplicate key", `{"resources":[` + res + `],"resources":[]}`, "invalid_json", "twice"},
		{"unknown key", `{"resources":[],"colour":"red"}`, "unknown_field", "colour"},
		{"resources not an array", `{"resources":{}}`, "invalid_json", "want ["},
		{"bad element", `{"resources":[` + res + `,` + res2 + `,{"id":"file[h,path=/h]","attributes":{"path":"/h"},"colour":1}]}`, "unknown_field", "resources[2]"},
		{"element of the wrong type", `{"resources":[` + res + `,7]}`, "invalid_json", "resources[1]"},
		{"cut short", `{"resources":[` + res, "invalid_json", ""},
		{"trailing data", `{"resources":[]} {}`, "invalid_json", "after"},
		{"no resources", `{"meta":{}}`, "invalid", "no \"resources\""},
		{"too large, announced", big, "too_large", "max-upload"},
		{"too large, chunked", io.MultiReader(strings.NewReader(big)), "too_large", "max-upload"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a := r.send(r.admin, "POST", "/api/v1/envs/prod/versions", tt.body)
			if a.code() != tt.want {
				t.Fatalf("got %d %s %+v, want %q", a.status, a.code(), a.err, tt.want)
			}
			if a.err != nil && !strings.Contains(a.err.Message+a.err.Hint, tt.message) {
				t.Fatalf("got %+v, want it to say %q", a.err, tt.message)
			}
		})
	}
}

// Uploads wait their turn (max-uploads); one that waited too long is busy.
func TestUploadsAtOnce(t *testing.T) {
	r := newRigWith(t, openSQLite(t), api.Config{MaxUploads: 1, UploadWait: time.Millisecond}, zerolog.Nop())
	r.must(r.admin, "POST", "/api/v1/envs", api.EnvRequest{Name: "prod"}, nil, 201)
	// The first upload must take the one slot before a second does; a
	// second sent while the first is on its way may win it, and the first
	// is then the busy one: start over.
	for attempt := 1; attempt <= 5; attempt++ {
		if uploadsAtOnce(t, r) {
			return
		}
		t.Logf("attempt %d: a second upload took the slot before the first; again", attempt)
	}
	t.Fatal("in 5 attempts the first upload never held the slot")
}

// uploadsAtOnce holds the slot with a first upload whose body trickles in,
// and checks that a second is busy; false if the first lost the slot to
// the second.
func uploadsAtOnce(t *testing.T, r *rig) bool {
	t.Helper()
	// The first goes on a connection of its own: a body from a pipe cannot
	// be sent again, so a kept-alive connection the server had just closed
	// would fail it.
	pr, pw := io.Pipe()
	defer pw.Close()
	type result struct {
		status int
		err    error
	}
	first := make(chan result, 1)
	go func() {
		req, _ := http.NewRequest("POST", r.ts.URL+"/api/v1/envs/prod/versions", pr)
		req.Header.Set("Authorization", "Bearer "+r.admin)
		client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
		resp, err := client.Do(req)
		if err != nil {
			first <- result{err: err}
			return
		}
		resp.Body.Close()
		first <- result{status: resp.StatusCode}
	}()
	// More than the client's write buffer, so that the request leaves it.
	if _, err := io.WriteString(pw, `{"resources":[`+strings.Repeat(" ", 64<<10)); err != nil {
		if a := <-first; a.status == http.StatusServiceUnavailable {
			return false
		}
		t.Fatal(err)
	}
	var second answer
	for deadline := time.Now().Add(30 * time.Second); ; {
		select {
		case a := <-first:
			if a.status == http.StatusServiceUnavailable {
				return false
			}
			t.Fatalf("the first upload ended before its body was whole: %d %v", a.status, a.err)
		default:
		}
		// Until the first holds the slot, the second may get it.
		second = r.send(r.admin, "POST", "/api/v1/envs/prod/versions", `{"resources":[]}`)
		if second.code() == "busy" || time.Now().After(deadline) {
			break
		}
	}
	if second.code() != "busy" || second.header.Get("Retry-After") == "" || !strings.Contains(second.err.Message, "max-uploads") {
		t.Fatalf("second upload: got %d %+v, want busy naming max-uploads with Retry-After", second.status, second.err)
	}
	_, _ = io.WriteString(pw, `]}`)
	pw.Close()
	a := <-first
	if a.status == http.StatusServiceUnavailable {
		// The busy second answered while the first still waited for a
		// slot a third held: only a first that got in counts.
		return false
	}
	if a.err != nil || (a.status != http.StatusCreated && a.status != http.StatusOK) {
		t.Fatalf("first upload: got %d %v", a.status, a.err)
	}
	return true
}

// A body that keeps to min-upload-rate outlives read-timeout, upload or
// not: its deadline moves on as its bytes come. One that stalls, or
// dribbles below the rate, fails.
func TestUploadDeadlines(t *testing.T) {
	cfg := api.Config{ReadHeaderTimeout: 300 * time.Millisecond, ReadTimeout: 300 * time.Millisecond, MinUploadRate: 1 << 10, MaxUpload: 1 << 20}
	r := newRigWith(t, openSQLite(t), cfg, zerolog.Nop())
	r.must(r.admin, "POST", "/api/v1/envs", api.EnvRequest{Name: "prod"}, nil, 201)
	// paced sends body in three parts 300ms apart (a read-timeout):
	// each part's 1,000 bytes at 1 KiB/s earn it about a second.
	paced := func(method, path, body string) int {
		t.Helper()
		pr, pw := io.Pipe()
		go func() {
			for i := range 3 {
				if i > 0 {
					time.Sleep(300 * time.Millisecond)
				}
				_, _ = io.WriteString(pw, body[i*len(body)/3:(i+1)*len(body)/3])
			}
			pw.Close()
		}()
		req, _ := http.NewRequest(method, r.ts.URL+path, pr)
		req.ContentLength = int64(len(body))
		req.Header.Set("Authorization", "Bearer "+r.admin)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	upload := `{"resources":[` + `{"id":"file[h,path=/f]","attributes":{"path":"/f","content":"` + strings.Repeat("x", 3000) + `"}}` + `]}`
	if got := paced("POST", "/api/v1/envs/prod/versions", upload); got != http.StatusCreated {
		t.Fatalf("slow upload: got %d, want 201", got)
	}
	if got := paced("POST", "/api/v1/envs", `{"name": "paced"`+strings.Repeat(" ", 3000)+`}`); got != http.StatusCreated {
		t.Fatalf("a command's body at the pace, over twice read-timeout: got %d, want 201", got)
	}
	// A byte every 100ms: each gap within read-timeout, the pace ten
	// times too slow.
	dr, dw := io.Pipe()
	go func() {
		defer dw.Close()
		for _, b := range `{"name": "dribbled"` + strings.Repeat(" ", 100) + `}` {
			if _, err := io.WriteString(dw, string(b)); err != nil {
				return
			}
			time.Sleep(100 * time.Millisecond)
		}
	}()
	req, _ := http.NewRequest("POST", r.ts.URL+"/api/v1/envs", dr)
	req.Header.Set("Authorization", "Bearer "+r.admin)
	if resp, err := http.DefaultClient.Do(req); err == nil {
		var e api.Body
		_ = json.NewDecoder(resp.Body).Decode(&e)
		resp.Body.Close()
		if e.Error == nil || e.Error.Code != "request_timeout" {
			t.Fatalf("dribbled body: got %d %+v, want request_timeout or the connection closed", resp.StatusCode, e.Error)
		}
	}
	// An environment created with a body that stalls past read-timeout
	// fails.
	pr, pw := io.Pipe()
	defer pw.Close()
	go func() { _, _ = io.WriteString(pw, `{"name":`) }()
	req, _ = http.NewRequest("POST", r.ts.URL+"/api/v1/envs", pr)
	req.Header.Set("Authorization", "Bearer "+r.admin)
	resp, err := http.DefaultClient.Do(req)
	if err == nil {
		var e api.Body
		_ = json.NewDecoder(resp.Body).Decode(&e)
		resp.Body.Close()
		if e.Error == nil || e.Error.Code != "request_timeout" {
			t.Fatalf("stalled body: got %d %+v, want request_timeout or the connection closed", resp.StatusCode, e.Error)
		}
	}
}

// The event stream outlives write-timeout: each write renews it.
func TestEventStreamOutlivesWriteTimeout(t *testing.T) {
	cfg := api.Config{WriteTimeout: 300 * time.Millisecond, HandlerTimeout: 100 * time.Millisecond, KeepAlive: 50 * time.Millisecond}
	r := newRigWith(t, openSQLite(t), cfg, zerolog.Nop())
	req, _ := http.NewRequest("GET", r.ts.URL+"/api/v1/events", nil)
	req.Header.Set("Authorization", "Bearer "+r.admin)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	start := time.Now()
	buf := make([]byte, 256)
	for time.Since(start) < 4*cfg.WriteTimeout {
		if _, err := resp.Body.Read(buf); err != nil {
			t.Fatalf("stream ended after %v (write-timeout %v): %v", time.Since(start), cfg.WriteTimeout, err)
		}
	}
}

// A release whose fan-out meets a full inbox or an agent that never
// connected is a successful release saying who gets it later.
func TestReleaseWithFullInboxSQLite(t *testing.T)   { testReleaseWithFullInbox(t, openSQLite(t)) }
func TestReleaseWithFullInboxPostgres(t *testing.T) { testReleaseWithFullInbox(t, pgtest.Open(t)) }

func testReleaseWithFullInbox(t *testing.T, st store.Store) {
	r := newRig(t, st)
	ctx := context.Background()
	r.must(r.admin, "POST", "/api/v1/envs", api.EnvRequest{Name: "prod"}, nil, 201)
	for _, name := range []string{"web-1", "web-2", "web-3"} {
		if err := st.UpsertAgent(ctx, record.Agent{Env: "prod", Name: name, State: record.AgentAccepted}); err != nil {
			t.Fatal(err)
		}
	}
	// web-1 and web-2 are connected; web-2's inbox holds its maximum.
	for _, name := range []string{"web-1", "web-2"} {
		if err := r.bus.DeclareInbox(ctx, "prod", name); err != nil {
			t.Fatal(err)
		}
	}
	for range bus.DefaultInboxLength {
		if err := r.bus.SendRaw(ctx, "prod", "web-2", []byte("{}")); err != nil {
			t.Fatal(err)
		}
	}
	r.run()
	rs := []model.Resource{file("web-1", "/a", "1"), file("web-2", "/a", "1"), file("web-3", "/a", "1")}
	var exp api.ExportResponse
	r.must(r.admin, "POST", "/api/v1/envs/prod/versions?release=true", api.ExportRequest{Resources: rs}, &exp, 202)
	want := map[string]record.PendingReason{"web-2": record.PendingInboxFull, "web-3": record.PendingNotConnected}
	check := func(what string, rel record.Release) {
		t.Helper()
		got := map[string]record.PendingReason{}
		for _, p := range rel.Pending {
			got[p.Agent] = p.Reason
			if p.Later == "" {
				t.Fatalf("%s: %+v says nothing of when it gets the release", what, p)
			}
		}
		if fmt.Sprint(got) != fmt.Sprint(want) || rel.PendingCount != 2 || rel.Sent != 1 || rel.Agents != 3 || rel.State != record.ReleaseDone {
			t.Fatalf("%s: got %s, %d agents, %d sent, pending %v (%d); want done, 3 agents, 1 sent, pending %v", what, rel.State, rel.Agents, rel.Sent, got, rel.PendingCount, want)
		}
	}
	if !exp.Released || exp.Version.State != model.VersionReleased || exp.ReleaseID == "" || exp.Release == nil || exp.Release.ID != exp.ReleaseID {
		t.Fatalf("export with release: %+v, want released with a release id", exp)
	}
	check("export --release", r.waitRelease("prod", exp.ReleaseID))
	// A version released on its own says the same.
	rs[0] = file("web-1", "/a", "2")
	r.must(r.admin, "POST", "/api/v1/envs/prod/versions", api.ExportRequest{Resources: rs}, &exp, 201)
	var rel record.Released
	r.must(r.admin, "POST", fmt.Sprintf("/api/v1/envs/prod/versions/%d/release", exp.Version.Number), nil, &rel, 202)
	if rel.State != model.VersionReleased || rel.Number != exp.Version.Number || rel.ReleaseID == "" {
		t.Fatalf("release: %+v, want version %d released with a release id", rel, exp.Version.Number)
	}
	check("release", r.waitRelease("prod", rel.ReleaseID))
	// The reachable agent got both versions.
	v, err := st.ReleasedVersion(ctx, "prod")
	if err != nil || v.Number != exp.Version.Number {
		t.Fatalf("released version %+v, %v", v, err)
	}
	var list []record.Release
	r.must(r.admin, "GET", "/api/v1/envs/prod/releases", nil, &list, 200)
	if len(list) != 2 || list[0].ID != rel.ReleaseID || list[1].ID != exp.ReleaseID {
		t.Fatalf("releases %+v, want the two, newest first", list)
	}
}

// Store failures answer the catalogue's own words: no constraint name, SQL,
// driver or database address reaches a client. Internal ones carry a
// reference that the log holds once, with the details.
func TestNoDriverTextLeaksSQLite(t *testing.T) {
	st := openSQLite(t)
	testNoDriverTextLeaks(t, st, func() { st.Close() })
}

func TestNoDriverTextLeaksPostgres(t *testing.T) {
	base := pgtest.URL(t)
	schema := "t_" + strings.ReplaceAll(uuid.NewString(), "-", "")
	ctx := context.Background()
	if err := postgres.CreateSchema(ctx, base, schema); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = postgres.DropSchema(context.Background(), base, schema) })
	st, err := postgres.Open(ctx, postgres.Config{URL: postgres.WithSchema(base, schema)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	testNoDriverTextLeaks(t, st, func() {
		// Every table goes: each query now fails in the database.
		if err := postgres.DropSchema(ctx, base, schema); err != nil {
			t.Fatal(err)
		}
	})
}

// syncLog is a log the server writes while the test reads.
type syncLog struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *syncLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *syncLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// driverWords are what database and driver errors say, and where the
// database is.
var driverWords = []string{"constraint", "pkey", "fkey", "duplicate key", "SQLSTATE", "relation", "schema", "pgx", "pgconn",
	"postgres", "PostgreSQL", "sqlite", "SQL", "sql:", "database is closed", "127.0.0.1", "5432", "syntax error", "violates"}

func testNoDriverTextLeaks(t *testing.T, st store.Store, breakStore func()) {
	var log syncLog
	r := newRigWith(t, st, api.Config{MaxUpload: 1 << 20}, zerolog.New(&log))
	leaks := func(a answer) {
		t.Helper()
		for _, w := range driverWords {
			if strings.Contains(strings.ToLower(string(a.body)), strings.ToLower(w)) {
				t.Fatalf("answer %d says %q: %s", a.status, w, a.body)
			}
		}
	}
	r.must(r.admin, "POST", "/api/v1/envs", api.EnvRequest{Name: "prod"}, nil, 201)
	// Refusals by the database's own constraints.
	missing := uuid.NewString()
	for _, tt := range []struct {
		name, method, path string
		body               any
		want, says         string
	}{
		{"duplicate environment", "POST", "/api/v1/envs", api.EnvRequest{Name: "prod"}, "env_exists", "environment prod already exists"},
		{"token for a missing environment", "POST", "/api/v1/tokens", api.TokenRequest{Name: "x", Role: record.RoleViewer, Env: "nope"}, "not_found", "environment nope"},
		{"enrollment token for a missing environment", "POST", "/api/v1/envs/nope/enrollment-tokens", api.EnrollmentTokenRequest{Name: "x"}, "not_found", "environment nope"},
		{"missing agent", "POST", "/api/v1/envs/prod/agents/ghost/accept", nil, "not_found", "agent ghost"},
		{"missing token", "DELETE", "/api/v1/tokens/" + missing, nil, "not_found", "token " + missing},
	} {
		a := r.send(r.admin, tt.method, tt.path, tt.body)
		if a.code() != tt.want || !strings.Contains(a.err.Message, tt.says) {
			t.Fatalf("%s: got %d %+v, want %s naming %s", tt.name, a.status, a.err, tt.want, tt.says)
		}
		leaks(a)
	}
	// The database breaks under the server.
	breakStore()
	for _, tt := range []struct{ method, path string }{
		{"GET", "/api/v1/envs"},
		{"POST", "/api/v1/envs"},
	} {
		a := r.send(r.admin, tt.method, tt.path, api.EnvRequest{Name: "staging"})
		if a.status < 500 || a.err.Ref == "" {
			t.Fatalf("%s %s on a broken store: got %d %+v, want 5xx with a reference to the log", tt.method, tt.path, a.status, a.err)
		}
		leaks(a)
		if n := strings.Count(log.String(), a.err.Ref); n != 1 {
			t.Fatalf("reference %s is in the log %d times, want once:\n%s", a.err.Ref, n, log.String())
		}
	}
	// Readiness says which check fails, never why.
	resp, err := http.Get(r.ts.URL + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	leaks(answer{status: resp.StatusCode, body: body})
}

// slowEnvs lists environments only when the request's context ends, as a
// database that stopped answering would.
type slowEnvs struct{ api.Environments }

func (slowEnvs) ListEnvs(ctx context.Context) ([]record.Environment, error) {
	<-ctx.Done()
	return nil, ctx.Err()
}

// oneToken knows one admin token.
type oneToken struct {
	api.Tokens
	tok record.Token
}

func (o oneToken) TokenByHash(_ context.Context, hash []byte) (record.Token, error) {
	if bytes.Equal(hash, o.tok.Hash) {
		return o.tok, nil
	}
	return record.Token{}, model.ErrNotFound
}

// Work that outlasts handler-timeout is answered timeout, with a reference.
func TestHandlerTimeout(t *testing.T) {
	tok, secret, err := api.IssueToken("root", record.RoleAdmin, "", "test", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	a := api.New(api.Config{HandlerTimeout: 50 * time.Millisecond}, api.Services{Envs: slowEnvs{}, Tokens: oneToken{tok: tok}}, zerolog.Nop())
	ts := httptest.NewServer(conform(t, a.Handler()))
	defer ts.Close()
	r := &rig{t: t, ts: ts, admin: secret}
	if got := r.send(r.admin, "GET", "/api/v1/envs", nil); got.code() != "timeout" || got.err.Ref == "" {
		t.Fatalf("got %d %+v, want timeout with a reference", got.status, got.err)
	}
}

// The version uploads in progress hold at most upload-memory together:
// an upload that needs more on its own is refused too_large, and an
// upload that finds the rest held by another is refused busy (with
// Retry-After), while one that fits beside it goes through. An upload
// refused gives its memory back.
func TestUploadMemory(t *testing.T) {
	const mib = 1 << 20
	cfg := api.Config{UploadMemory: 8 * mib, MaxUploads: 3, MaxUpload: 64 * mib, MaxBody: 1 * mib}
	r := newRigWith(t, openSQLite(t), cfg, zerolog.Nop())
	r.must(r.admin, "POST", "/api/v1/envs", api.EnvRequest{Name: "prod"}, nil, 201)
	content := strings.Repeat("x", 300)
	resources := func(prefix string, from, to int) string {
		var b strings.Builder
		for i := from; i < to; i++ {
			if i > from {
				b.WriteByte(',')
			}
			fmt.Fprintf(&b, `{"id":"file[h,path=/%s/%d]","attributes":{"path":"/%s/%d","content":%q}}`, prefix, i, prefix, i, content)
		}
		return b.String()
	}
	upload := func(prefix string, n int) string { return `{"resources":[` + resources(prefix, 0, n) + `]}` }

	// The large upload trickles in: about 3 MiB of it first, then held.
	pr, pw := io.Pipe()
	defer pw.Close()
	large := make(chan answer, 1)
	go func() {
		req, _ := http.NewRequest("POST", r.ts.URL+"/api/v1/envs/prod/versions", pr)
		req.Header.Set("Authorization", "Bearer "+r.admin)
		client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
		resp, err := client.Do(req)
		if err != nil {
			large <- answer{status: -1, body: []byte(err.Error())}
			return
		}
		defer resp.Body.Close()
		data, _ := io.ReadAll(resp.Body)
		a := answer{status: resp.StatusCode, body: data}
		var e api.Body
		if json.Unmarshal(data, &e) == nil {
			a.err = e.Error
		}
		large <- a
	}()
	if _, err := io.WriteString(pw, `{"resources":[`+resources("large", 0, 8000)); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "the large upload to hold 3 MiB", func() bool { return r.api.UploadMemoryHeld() >= 3*mib })

	// A small upload fits beside it.
	if a := r.send(r.admin, "POST", "/api/v1/envs/prod/versions", upload("small", 10)); a.status != http.StatusCreated {
		t.Fatalf("small upload beside the large one: got %d %+v, want 201", a.status, a.err)
	}
	// One that needs more than the large one leaves is busy, and says why.
	medium := upload("medium", 14000)
	a := r.send(r.admin, "POST", "/api/v1/envs/prod/versions", medium)
	if a.code() != "busy" || a.header.Get("Retry-After") == "" || !strings.Contains(a.err.Message, "upload-memory") {
		t.Fatalf("medium upload beside the large one: got %d %+v, want busy naming upload-memory, with Retry-After", a.status, a.err)
	}
	// The large one goes on past the bound: too large on its own.
	go func() {
		_, _ = io.WriteString(pw, ","+resources("large", 8000, 30000)+`]}`)
		pw.Close()
	}()
	got := <-large
	if got.status != http.StatusRequestEntityTooLarge || got.err == nil || got.err.Code != "too_large" ||
		!strings.Contains(got.err.Message, "upload-memory") || !strings.Contains(got.err.Hint, "--upload-memory") {
		t.Fatalf("large upload: got %d %s, want 413 too_large naming upload-memory and how to raise it", got.status, got.body)
	}
	// Its memory is given back: the medium upload goes through now.
	waitUntil(t, "the large upload's memory given back", func() bool { return r.api.UploadMemoryHeld() == 0 })
	if a := r.send(r.admin, "POST", "/api/v1/envs/prod/versions", medium); a.status != http.StatusCreated {
		t.Fatalf("medium upload alone: got %d %+v, want 201", a.status, a.err)
	}
	vs, err := r.st.ListVersions(context.Background(), "prod")
	if err != nil || len(vs) != 2 {
		t.Fatalf("versions: %d, %v; want 2 (small and medium; the large one refused)", len(vs), err)
	}
}

// waitUntil waits for cond, failing the test after a minute.
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(time.Minute); !cond(); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("gave up waiting for %s", what)
		}
	}
}

// A request whose body is read whole keeps its context however long its
// handler works: a plan waiting on an agent that does not answer outlives
// read-timeout (net/http cancels the request when a read deadline left
// on its connection passes).
func TestLongHandlerOutlivesReadTimeout(t *testing.T) {
	cfg := api.Config{ReadHeaderTimeout: 200 * time.Millisecond, ReadTimeout: 200 * time.Millisecond}
	st := openSQLite(t)
	r := newRigWith(t, st, cfg, zerolog.Nop())
	r.must(r.admin, "POST", "/api/v1/envs", api.EnvRequest{Name: "prod"}, nil, 201)
	if err := st.UpsertAgent(context.Background(), record.Agent{Env: "prod", Name: "web-1", State: record.AgentAccepted, Connected: true, LastSeen: time.Now()}); err != nil {
		t.Fatal(err)
	}
	if err := r.bus.DeclareInbox(context.Background(), "prod", "web-1"); err != nil {
		t.Fatal(err)
	}
	r.must(r.admin, "POST", "/api/v1/envs/prod/versions", api.ExportRequest{Resources: []model.Resource{file("web-1", "/a", "1")}}, nil, 201)
	var p record.Plan
	r.must(r.admin, "POST", "/api/v1/envs/prod/versions/1/plan", api.PlanRequest{Timeout: "1s"}, &p, 200)
	if len(p.NotAnswered) != 1 || p.NotAnswered[0] != "web-1" {
		t.Fatalf("plan %+v: want web-1 not answering", p)
	}
}
