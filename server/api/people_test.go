package api_test

import (
	"bufio"
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

	"github.com/rs/zerolog"

	"github.com/tetherhq/tether/bus"
	"github.com/tetherhq/tether/model"
	"github.com/tetherhq/tether/server"
	"github.com/tetherhq/tether/server/api"
	"github.com/tetherhq/tether/server/record"
	"github.com/tetherhq/tether/server/store"
	"github.com/tetherhq/tether/server/store/postgres/pgtest"
)

// cheap are password hashing parameters that keep tests fast; the hash's
// encoding carries them, so nothing else changes.
var cheap = record.PasswordParams{Time: 1, Memory: 64, Threads: 1}

// clock is a time tests move by hand.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// peopleRig is a rig whose API reads the time from its clock.
type peopleRig struct {
	*rig
	clock *clock
}

func newPeopleRig(t *testing.T, st store.Store, cfg api.Config) *peopleRig {
	t.Helper()
	if cfg.Password == (record.PasswordParams{}) {
		cfg.Password = cheap
	}
	cfg.AnonymousBurst, cfg.AnonymousRate = 1000, 1000
	b := bus.NewLocal(zerolog.Nop())
	t.Cleanup(func() { b.Close() })
	srv, err := server.New(server.Config{}, st, b, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	runNotify(t, srv)
	a := api.New(cfg, server.APIServices(srv, nil), zerolog.Nop())
	c := &clock{t: time.Now()}
	a.SetClock(c.now)
	ts := httptest.NewServer(conform(t, a.Handler()))
	t.Cleanup(ts.Close)
	tok, secret, err := api.IssueToken("root", record.RoleAdmin, "", "test", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if err := st.CreateToken(context.Background(), tok); err != nil {
		t.Fatal(err)
	}
	return &peopleRig{rig: &rig{t: t, bus: b, ts: ts, srv: srv, st: st, admin: secret}, clock: c}
}

// browser is a logged-in user: the session cookie and its CSRF token.
type browser struct {
	cookie, csrf string
}

// reply is an answer as a test looks at it.
type reply struct {
	status int
	code   string
	header http.Header
	body   []byte
}

// call sends a request as a browser would (the cookie, the CSRF header
// when csrf is set), or with a bearer token when token is set.
func (r *peopleRig) call(token string, b *browser, csrf bool, method, path string, body any) reply {
	r.t.Helper()
	var rd io.Reader
	ctype := "application/json"
	switch v := body.(type) {
	case nil:
	case url.Values:
		rd, ctype = strings.NewReader(v.Encode()), "application/x-www-form-urlencoded"
	default:
		j, _ := json.Marshal(v)
		rd = strings.NewReader(string(j))
	}
	req, _ := http.NewRequest(method, r.ts.URL+path, rd)
	req.Header.Set("Content-Type", ctype)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	if b != nil {
		req.AddCookie(&http.Cookie{Name: api.SessionCookie, Value: b.cookie})
		if csrf {
			req.Header.Set("X-CSRF-Token", b.csrf)
		}
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		r.t.Fatal(err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	out := reply{status: resp.StatusCode, header: resp.Header, body: data}
	if resp.StatusCode >= 400 {
		var e api.Body
		if err := json.Unmarshal(data, &e); err != nil || e.Error == nil {
			r.t.Fatalf("%s %s: status %d with a body that is not a catalogue error: %s", method, path, resp.StatusCode, data)
		}
		if want := api.Codes[e.Error.Code]; want != resp.StatusCode {
			r.t.Fatalf("%s %s: code %s came with status %d, catalogue says %d", method, path, e.Error.Code, resp.StatusCode, want)
		}
		out.code = e.Error.Code
	}
	return out
}

func (r *peopleRig) want(got reply, status int, what string) {
	r.t.Helper()
	if got.status != status {
		r.t.Fatalf("%s: got status %d (%s: %s), want %d", what, got.status, got.code, got.body, status)
	}
}

// login logs in and returns the browser, checking the cookie's flags.
func (r *peopleRig) login(org, name, password string) *browser {
	r.t.Helper()
	got := r.call("", nil, false, "POST", "/api/v1/session", api.SessionRequest{Org: org, Name: name, Password: password})
	r.want(got, 200, "log in as "+name)
	var view api.SessionView
	if err := json.Unmarshal(got.body, &view); err != nil {
		r.t.Fatal(err)
	}
	resp := http.Response{Header: got.header}
	for _, c := range resp.Cookies() {
		if c.Name == api.SessionCookie {
			if !c.HttpOnly || c.SameSite != http.SameSiteStrictMode || c.Path != "/" {
				r.t.Fatalf("session cookie %+v: want HttpOnly, SameSite=Strict, Path=/", c)
			}
			if view.CSRF == "" || view.User.Name != name || view.Org != record.OrgOr(org) || !view.ExpiresAt.After(r.clock.now()) {
				r.t.Fatalf("session %+v", view)
			}
			return &browser{cookie: c.Value, csrf: view.CSRF}
		}
	}
	r.t.Fatalf("log in as %s: no session cookie in %v", name, got.header)
	return nil
}

func (r *peopleRig) user(token string, org string, req api.UserRequest) record.User {
	r.t.Helper()
	path := "/api/v1/users"
	if org != "" {
		path += "?org=" + org
	}
	got := r.call(token, nil, false, "POST", path, req)
	r.want(got, 201, "create user "+req.Name)
	var u record.User
	if err := json.Unmarshal(got.body, &u); err != nil {
		r.t.Fatal(err)
	}
	if strings.Contains(string(got.body), "argon2") {
		r.t.Fatalf("the password hash is shown: %s", got.body)
	}
	return u
}

const pw = "correct horse battery"

func TestSessionsPostgres(t *testing.T) {
	r := newPeopleRig(t, pgtest.Open(t), api.Config{SessionIdle: time.Hour, SessionMaxAge: 3 * time.Hour})
	r.must(r.admin, "POST", "/api/v1/envs", api.EnvRequest{Name: "prod"}, nil, 201)
	r.user(r.admin, "", api.UserRequest{Name: "alice", Password: pw, Role: record.RoleOperator})

	if got := r.call("", nil, false, "POST", "/api/v1/session", api.SessionRequest{Name: "alice", Password: "wrong password"}); got.status != 401 || got.code != "unauthorized" {
		t.Fatalf("wrong password: got %d %s, want 401 unauthorized", got.status, got.code)
	}
	if got := r.call("", nil, false, "POST", "/api/v1/session", api.SessionRequest{Name: "nobody", Password: pw}); got.status != 401 {
		t.Fatalf("unknown user: got %d, want 401", got.status)
	}
	b := r.login("", "alice", pw)
	got := r.call("", b, false, "GET", "/api/v1/session", nil)
	r.want(got, 200, "GET /session")
	var view api.SessionView
	_ = json.Unmarshal(got.body, &view)
	if view.CSRF != b.csrf || view.User.Name != "alice" {
		t.Fatalf("GET /session: %+v, want alice with the login's CSRF token", view)
	}
	// Reads need no CSRF token; changes do, and bearer tokens need none.
	r.want(r.call("", b, false, "GET", "/api/v1/envs/prod", nil), 200, "read with the cookie")
	if got := r.call("", b, false, "POST", "/api/v1/envs/prod/halt", nil); got.status != 403 || got.code != "csrf_failed" {
		t.Fatalf("change without the CSRF token: got %d %s, want 403 csrf_failed", got.status, got.code)
	}
	bad := *b
	bad.csrf = "forged"
	if got := r.call("", &bad, true, "POST", "/api/v1/envs/prod/halt", nil); got.code != "csrf_failed" {
		t.Fatalf("change with a wrong CSRF token: got %d %s, want csrf_failed", got.status, got.code)
	}
	var env record.Environment
	r.must(r.admin, "GET", "/api/v1/envs/prod", nil, &env, 200)
	if env.Settings.Halted {
		t.Fatal("a refused change was made")
	}
	r.want(r.call("", b, true, "POST", "/api/v1/envs/prod/halt", nil), 200, "change with the CSRF header")
	r.want(r.call("", b, false, "POST", "/api/v1/envs/prod/resume", url.Values{"csrf": {b.csrf}}), 200, "form post with the csrf field")
	r.want(r.call(r.admin, nil, false, "POST", "/api/v1/envs/prod/halt", nil), 200, "bearer token without CSRF")
	// The audit log names the user.
	var audit []record.AuditEntry
	r.must(r.admin, "GET", "/api/v1/audit", nil, &audit, 200)
	if len(audit) < 2 || audit[1].Action != "env.resume" || !strings.HasPrefix(audit[1].Actor, "user alice (") {
		t.Fatalf("audit: %+v, want env.resume by user alice", audit)
	}

	// Logout ends the session.
	r.want(r.call("", b, true, "DELETE", "/api/v1/session", nil), 204, "log out")
	if got := r.call("", b, false, "GET", "/api/v1/session", nil); got.status != 401 {
		t.Fatalf("after logout: got %d, want 401", got.status)
	}

	// Idle and absolute expiry.
	b = r.login("", "alice", pw)
	r.clock.add(59 * time.Minute)
	r.want(r.call("", b, false, "GET", "/api/v1/session", nil), 200, "used within the idle window")
	r.clock.add(59 * time.Minute)
	r.want(r.call("", b, false, "GET", "/api/v1/session", nil), 200, "used again within the idle window")
	r.clock.add(61 * time.Minute)
	if got := r.call("", b, false, "GET", "/api/v1/session", nil); got.status != 401 {
		t.Fatalf("idle for 61 minutes (idle window 1h): got %d, want 401", got.status)
	}
	b = r.login("", "alice", pw)
	for i := 0; i < 5; i++ {
		r.clock.add(30 * time.Minute)
		r.want(r.call("", b, false, "GET", "/api/v1/envs", nil), 200, "a session in use")
	}
	r.clock.add(30 * time.Minute)
	if got := r.call("", b, false, "GET", "/api/v1/envs", nil); got.status != 401 {
		t.Fatalf("3h after login (max age 3h): got %d, want 401", got.status)
	}

	// A new password ends the user's sessions; so does deleting the user.
	b = r.login("", "alice", pw)
	r.want(r.call(r.admin, nil, false, "PATCH", "/api/v1/users/alice", api.UserUpdate{Password: "another good password"}), 200, "new password")
	if got := r.call("", b, false, "GET", "/api/v1/session", nil); got.status != 401 {
		t.Fatalf("session after a new password: got %d, want 401", got.status)
	}
	if got := r.call("", nil, false, "POST", "/api/v1/session", api.SessionRequest{Name: "alice", Password: pw}); got.status != 401 {
		t.Fatalf("old password: got %d, want 401", got.status)
	}
	b = r.login("", "alice", "another good password")
	// Users change their own password with the current one.
	if got := r.call("", b, true, "PATCH", "/api/v1/users/alice", api.UserUpdate{Password: "a third good password", CurrentPassword: "wrong"}); got.status != 403 {
		t.Fatalf("own password with a wrong current one: got %d, want 403", got.status)
	}
	if got := r.call("", b, true, "PATCH", "/api/v1/users/alice", api.UserUpdate{Role: ptr(record.RoleAdmin)}); got.status != 403 {
		t.Fatalf("a user raising their own role: got %d, want 403", got.status)
	}
	r.want(r.call("", b, true, "PATCH", "/api/v1/users/alice", api.UserUpdate{Password: "a third good password", CurrentPassword: "another good password"}), 200, "own password")
	b = r.login("", "alice", "a third good password")
	// A user without any role changes their own password too, and
	// nothing else.
	r.want(r.call(r.admin, nil, false, "PATCH", "/api/v1/users/alice", api.UserUpdate{Role: ptr(record.Role("none"))}), 200, "take alice's role away")
	if g := r.call("", b, false, "GET", "/api/v1/envs/prod", nil); g.status != 403 {
		t.Fatalf("alice without a role reads prod: got %d, want 403", g.status)
	}
	if g := r.call("", b, true, "PATCH", "/api/v1/users/root", api.UserUpdate{Password: "a fourth good password", CurrentPassword: "a third good password"}); g.status != 403 {
		t.Fatalf("alice changes another user's password: got %d, want 403", g.status)
	}
	r.want(r.call("", b, true, "PATCH", "/api/v1/users/alice", api.UserUpdate{Password: "a fourth good password", CurrentPassword: "a third good password"}), 200, "own password without a role")
	b = r.login("", "alice", "a fourth good password")
	r.want(r.call(r.admin, nil, false, "DELETE", "/api/v1/users/alice", nil), 204, "delete alice")
	if got := r.call("", b, false, "GET", "/api/v1/session", nil); got.status != 401 {
		t.Fatalf("session of a deleted user: got %d, want 401", got.status)
	}
	// Bad input: clear errors, nothing made.
	for _, req := range []api.UserRequest{{Name: "bob", Password: "short"}, {Name: "b o b", Password: pw}, {Name: "bob", Password: pw, Role: "root"},
		{Name: "bob", Password: pw, Roles: map[string]record.Role{"nope": record.RoleViewer}}} {
		if got := r.call(r.admin, nil, false, "POST", "/api/v1/users", req); got.status < 400 || got.status >= 500 {
			t.Fatalf("create %+v: got %d, want a client error", req, got.status)
		}
	}
	if got := r.call(r.admin, nil, false, "GET", "/api/v1/users/bob", nil); got.status != 404 {
		t.Fatalf("bob after bad requests: got %d, want 404", got.status)
	}
}

func TestSecureCookie(t *testing.T) {
	r := newPeopleRig(t, openSQLite(t), api.Config{SecureCookies: true})
	r.user(r.admin, "", api.UserRequest{Name: "alice", Password: pw, Role: record.RoleViewer})
	got := r.call("", nil, false, "POST", "/api/v1/session", api.SessionRequest{Name: "alice", Password: pw})
	if c := got.header.Get("Set-Cookie"); !strings.Contains(c, "Secure") || !strings.Contains(c, "HttpOnly") || !strings.Contains(c, "SameSite=Strict") {
		t.Fatalf("Set-Cookie %q behind TLS: want Secure, HttpOnly, SameSite=Strict", c)
	}
}

func ptr[T any](v T) *T { return &v }

func TestLoginThrottlePostgres(t *testing.T) {
	r := newPeopleRig(t, pgtest.Open(t), api.Config{LoginFreeFailures: 2, LoginMaxDelay: time.Minute, LoginAlertAfter: 4})
	r.user(r.admin, "", api.UserRequest{Name: "alice", Password: pw, Role: record.RoleViewer})
	fail := func(name string) reply {
		return r.call("", nil, false, "POST", "/api/v1/session", api.SessionRequest{Name: name, Password: "not the password"})
	}
	// Two free failures, then a second's wait, then two.
	for i := 0; i < 3; i++ {
		if got := fail("alice"); got.status != 401 {
			t.Fatalf("failure %d: got %d, want 401", i+1, got.status)
		}
	}
	got := r.call("", nil, false, "POST", "/api/v1/session", api.SessionRequest{Name: "alice", Password: pw})
	if got.status != 429 || got.code != "rate_limited" || got.header.Get("Retry-After") == "" {
		t.Fatalf("right password while held back: got %d %s (Retry-After %q), want 429 with Retry-After", got.status, got.code, got.header.Get("Retry-After"))
	}
	r.clock.add(1100 * time.Millisecond)
	if got := fail("alice"); got.status != 401 {
		t.Fatalf("failure 4 after the wait: got %d, want 401", got.status)
	}
	r.clock.add(1100 * time.Millisecond)
	if got := fail("alice"); got.status != 429 {
		t.Fatalf("a retry within the doubled wait: got %d, want 429", got.status)
	}
	r.clock.add(2100 * time.Millisecond)
	r.login("", "alice", pw)
	// Failures are in the audit log, and the fourth in a row raised a
	// security entry.
	var audit []record.AuditEntry
	r.must(r.admin, "GET", "/api/v1/audit", nil, &audit, 200)
	failed, security := 0, 0
	for _, e := range audit {
		switch e.Action {
		case "session.login-failed":
			failed++
		case "security.login-failures":
			security++
		}
	}
	if failed != 4 || security != 1 {
		t.Fatalf("audit: %d failed logins and %d security entries, want 4 and 1: %+v", failed, security, audit)
	}
	// Per address: made-up names from one address are held back too
	// (4 × 2 free failures; alice's success reset the address).
	for i := 0; i < 9; i++ {
		fail("nobody" + string(rune('a'+i)))
	}
	if got := fail("someone-else"); got.status != 429 {
		t.Fatalf("a tenth failure from the address with a new name: got %d, want 429", got.status)
	}
}

// loginFrom logs in as name with password from client, an address a
// trusted proxy (the test's own loopback) forwards for.
func (r *peopleRig) loginFrom(client, name, password string) reply {
	r.t.Helper()
	j, _ := json.Marshal(api.SessionRequest{Name: name, Password: password})
	req, _ := http.NewRequest("POST", r.ts.URL+"/api/v1/session", strings.NewReader(string(j)))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Forwarded-For", client)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		r.t.Fatal(err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	out := reply{status: resp.StatusCode, header: resp.Header, body: data}
	var e api.Body
	if json.Unmarshal(data, &e) == nil && e.Error != nil {
		out.code = e.Error.Code
	}
	return out
}

// TestLoginUnderDistributedAttack plays a password guess on admin from
// 50 addresses, 1,000 wrong passwords at 4 a second: the addresses that
// failed are held back (a few dozen guesses are checked, not 1,000), a
// security alert names the attack (audit log and event stream), and the
// real user, from an address that has not failed, logs in with the right
// password in the middle of it. An attacking address with the right
// password waits; a new attacking address gets one guess, then waits.
func TestLoginUnderDistributedAttack(t *testing.T) {
	st := openSQLite(t)
	r := newPeopleRig(t, st, api.Config{TrustedProxies: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}})
	r.user(r.admin, "", api.UserRequest{Name: "admin", Password: pw, Role: record.RoleAdmin})
	checked, held := 0, 0
	for i := range 1000 {
		got := r.loginFrom(fmt.Sprintf("198.51.100.%d", 1+i%50), "admin", fmt.Sprintf("guess %d of the password", i))
		switch {
		case got.status == 401:
			checked++
		case got.status == 429 && got.code == "rate_limited" && got.header.Get("Retry-After") != "":
			held++
		default:
			t.Fatalf("guess %d: got %d %s, want 401 or 429 with Retry-After", i, got.status, got.code)
		}
		r.clock.add(250 * time.Millisecond)
		if i == 500 {
			// The real user, from home: in, although the name is
			// under attack.
			if got := r.loginFrom("192.0.2.77", "admin", pw); got.status != 200 {
				t.Fatalf("the real user from an address that never failed, mid-attack: got %d %s %s, want 200", got.status, got.code, got.body)
			}
			// An address that failed the name waits, right password or not.
			if got := r.loginFrom("198.51.100.7", "admin", pw); got.status != 429 {
				t.Fatalf("an attacking address with the right password: got %d, want 429", got.status)
			}
		}
	}
	// 50 addresses, 20 failures before the name's gate engages, then
	// one guess at a time, the gate's wait doubling: at most 50 + 20
	// and the few turns of 250 s.
	if limit := 50 + 20 + 10; checked > limit || checked+held != 1000 {
		t.Fatalf("%d guesses checked and %d held back of 1000, want at most %d checked", checked, held, limit)
	}
	t.Logf("%d of 1000 guesses from 50 addresses checked over 250s", checked)
	if got := r.loginFrom("203.0.113.9", "admin", "a new address's guess"); got.status != 401 {
		t.Fatalf("a new attacking address's first guess: got %d, want 401", got.status)
	}
	if got := r.loginFrom("203.0.113.9", "admin", "its second guess"); got.status != 429 {
		t.Fatalf("a new attacking address's second guess: got %d, want 429", got.status)
	}
	if got := r.loginFrom("192.0.2.77", "admin", pw); got.status != 200 {
		t.Fatalf("the real user again: got %d %s, want 200", got.status, got.code)
	}

	var audit []record.AuditEntry
	r.must(r.admin, "GET", "/api/v1/audit?limit=2000", nil, &audit, 200)
	attacks := 0
	for _, e := range audit {
		if e.Action == "security.login-attack" {
			attacks++
			if !strings.Contains(e.Detail, "addresses") || e.Target != "admin" {
				t.Fatalf("attack entry %+v, want one naming admin and the addresses", e)
			}
		}
	}
	if attacks != 1 {
		t.Fatalf("%d security.login-attack audit entries, want 1 (one an hour)", attacks)
	}
	for deadline := time.Now().Add(30 * time.Second); ; {
		events, err := st.EventsAfter(context.Background(), 0, "", 1000)
		if err != nil {
			t.Fatal(err)
		}
		found := false
		for _, e := range events {
			found = found || e.Kind == "security.alert" && strings.Contains(string(e.Data), "distributed password guess")
		}
		if found {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no security alert about the attack in the event log: %d events", len(events))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestRolesPerEnvPostgres(t *testing.T) {
	r := newPeopleRig(t, pgtest.Open(t), api.Config{})
	for _, env := range []string{"prod", "dev", "lab"} {
		r.must(r.admin, "POST", "/api/v1/envs", api.EnvRequest{Name: env}, nil, 201)
	}
	r.user(r.admin, "", api.UserRequest{Name: "olga", Password: pw, Role: record.RoleViewer, Roles: map[string]record.Role{"dev": record.RoleOperator}})
	r.user(r.admin, "", api.UserRequest{Name: "vic", Password: pw, Roles: map[string]record.Role{"lab": record.RoleViewer}})
	olga, vic := r.login("", "olga", pw), r.login("", "vic", pw)
	r.want(r.call("", olga, true, "POST", "/api/v1/envs/dev/halt", nil), 200, "operator of dev halts dev")
	if got := r.call("", olga, true, "POST", "/api/v1/envs/prod/halt", nil); got.status != 403 || got.code != "forbidden" {
		t.Fatalf("viewer of prod halts prod: got %d %s, want 403 forbidden", got.status, got.code)
	}
	if got := r.call("", olga, true, "POST", "/api/v1/envs", api.EnvRequest{Name: "new"}); got.status != 403 {
		t.Fatalf("a non-admin creates an environment: got %d, want 403", got.status)
	}
	if got := r.call("", olga, false, "GET", "/api/v1/users", nil); got.status != 403 {
		t.Fatalf("a non-admin lists users: got %d, want 403", got.status)
	}
	names := func(b *browser) []string {
		var envs []record.Environment
		got := r.call("", b, false, "GET", "/api/v1/envs", nil)
		r.want(got, 200, "list envs")
		_ = json.Unmarshal(got.body, &envs)
		var out []string
		for _, e := range envs {
			out = append(out, e.Name)
		}
		return out
	}
	if got := strings.Join(names(olga), ","); got != "dev,lab,prod" {
		t.Fatalf("olga's environments: %s, want dev,lab,prod", got)
	}
	if got := strings.Join(names(vic), ","); got != "lab" {
		t.Fatalf("vic's environments: %s, want lab", got)
	}
	if got := r.call("", vic, false, "GET", "/api/v1/envs/prod", nil); got.status != 403 {
		t.Fatalf("vic reads prod (same organization, no role): got %d, want 403", got.status)
	}
	// Grant and revoke.
	r.want(r.call(r.admin, nil, false, "PATCH", "/api/v1/users/vic", api.UserUpdate{Roles: map[string]record.Role{"prod": record.RoleOperator, "lab": ""}}), 200, "grant prod, revoke lab")
	if got := strings.Join(names(vic), ","); got != "prod" {
		t.Fatalf("vic's environments after grant and revoke: %s, want prod", got)
	}
	r.want(r.call("", vic, true, "POST", "/api/v1/envs/prod/halt", nil), 200, "vic, operator of prod now")
	// A token a user owns has at most the user's rights.
	var nt api.NewToken
	r.must(r.admin, "POST", "/api/v1/tokens", api.TokenRequest{Name: "olga-ci", Role: record.RoleAdmin, User: "olga"}, &nt, 201)
	if nt.Owner == "" {
		t.Fatalf("token for olga: %+v, want olga as its owner", nt.Token)
	}
	r.must(nt.Secret, "POST", "/api/v1/envs/dev/resume", nil, nil, 200)
	if got, _ := r.do(nt.Secret, "POST", "/api/v1/envs/prod/resume", nil, nil); got != 403 {
		t.Fatalf("olga's admin token in prod, where olga is a viewer: got %d, want 403", got)
	}
	if got, _ := r.do(nt.Secret, "GET", "/api/v1/tokens", nil, nil); got != 403 {
		t.Fatalf("olga's admin token lists tokens: got %d, want 403", got)
	}
	r.want(r.call(r.admin, nil, false, "DELETE", "/api/v1/users/olga", nil), 204, "delete olga")
	if got, _ := r.do(nt.Secret, "GET", "/api/v1/envs", nil, nil); got != 401 {
		t.Fatalf("token of a deleted user: got %d, want 401", got)
	}
}

// TestOrgIsolationPostgres: a user or token of one organization gets
// nothing of another's: not_found for its environments (as for missing
// ones), and lists without its things.
func TestOrgIsolationPostgres(t *testing.T) {
	r := newPeopleRig(t, pgtest.Open(t), api.Config{})
	ctx := context.Background()
	r.must(r.admin, "POST", "/api/v1/envs", api.EnvRequest{Name: "prod"}, nil, 201)
	r.must(r.admin, "POST", "/api/v1/envs/prod/versions", map[string]any{"resources": []model.Resource{file("web1", "/etc/motd", "hi")}}, nil, 201)
	if err := r.st.UpsertAgent(ctx, record.Agent{Env: "prod", Name: "web1"}); err != nil {
		t.Fatal(err)
	}
	r.user(r.admin, "", api.UserRequest{Name: "root-user", Password: pw, Role: record.RoleAdmin})

	// A server admin makes organization acme and its first admin.
	r.must(r.admin, "POST", "/api/v1/orgs", api.OrgRequest{Name: "acme"}, nil, 201)
	r.user(r.admin, "acme", api.UserRequest{Name: "ann", Password: pw, Role: record.RoleAdmin})
	if got := r.call("", nil, false, "POST", "/api/v1/session", api.SessionRequest{Name: "ann", Password: pw}); got.status != 401 {
		t.Fatalf("ann logs in to the default organization: got %d, want 401", got.status)
	}
	ann := r.login("acme", "ann", pw)
	r.want(r.call("", ann, true, "POST", "/api/v1/envs", api.EnvRequest{Name: "rocket"}), 201, "ann creates rocket")
	got := r.call("", ann, true, "POST", "/api/v1/tokens", api.TokenRequest{Name: "acme-ci", Role: record.RoleAdmin, OrgOwned: true})
	r.want(got, 201, "ann creates an organization token")
	var nt api.NewToken
	_ = json.Unmarshal(got.body, &nt)
	acme := nt.Secret
	if err := r.st.UpsertAgent(ctx, record.Agent{Env: "rocket", Name: "probe"}); err != nil {
		t.Fatal(err)
	}
	r.must(acme, "POST", "/api/v1/envs/rocket/agents/probe/reject", nil, nil, 200)

	// Open event streams of both organizations before anything happens.
	stream := func(token string) *bufio.Reader {
		sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		t.Cleanup(cancel)
		req, _ := http.NewRequestWithContext(sctx, "GET", r.ts.URL+"/api/v1/events", nil)
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { resp.Body.Close() })
		rd := bufio.NewReader(resp.Body)
		if line, _ := rd.ReadString('\n'); !strings.HasPrefix(line, ": following") {
			t.Fatalf("stream's first line %q", line)
		}
		return rd
	}
	acmeEvents, defaultEvents := stream(acme), stream(r.admin)

	// Everything of the other organization's environments is not_found,
	// for users and tokens, reads and changes.
	for _, path := range []string{"/envs/prod", "/envs/prod/versions", "/envs/prod/versions/1", "/envs/prod/agents", "/envs/prod/agents/web1",
		"/envs/prod/resources", "/envs/prod/alerts", "/envs/prod/settings", "/envs/prod/releases", "/envs/prod/enrollment-tokens", "/envs/prod/inventory"} {
		for who, g := range map[string]reply{"acme token": r.call(acme, nil, false, "GET", "/api/v1"+path, nil), "ann": r.call("", ann, false, "GET", "/api/v1"+path, nil)} {
			if g.status != 404 || g.code != "not_found" {
				t.Fatalf("%s: GET %s: got %d %s, want 404 not_found", who, path, g.status, g.code)
			}
		}
		if g := r.call(r.admin, nil, false, "GET", "/api/v1"+strings.ReplaceAll(path, "prod", "rocket"), nil); g.status != 404 {
			t.Fatalf("default admin: GET %s of rocket: got %d, want 404", path, g.status)
		}
	}
	missing := r.call(acme, nil, false, "GET", "/api/v1/envs/nosuch", nil)
	other := r.call(acme, nil, false, "GET", "/api/v1/envs/prod", nil)
	if strings.ReplaceAll(string(missing.body), "nosuch", "prod") != string(other.body) {
		t.Fatalf("another organization's environment answers unlike a missing one:\n%s\n%s", other.body, missing.body)
	}
	for _, c := range []struct{ method, path string }{{"POST", "/envs/prod/halt"}, {"DELETE", "/envs/prod"}, {"POST", "/envs/prod/agents/web1/accept"}, {"POST", "/envs/prod/versions/1/release"}} {
		if g := r.call(acme, nil, false, c.method, "/api/v1"+c.path, nil); g.status != 404 {
			t.Fatalf("acme token: %s %s: got %d, want 404", c.method, c.path, g.status)
		}
	}
	if g := r.call(acme, nil, false, "GET", "/api/v1/events?env=prod", nil); g.status != 404 {
		t.Fatalf("acme: events of prod: got %d, want 404", g.status)
	}
	// Lists hold only the organization's own.
	list := func(token string, b *browser, path string, v any) {
		g := r.call(token, b, false, "GET", "/api/v1"+path, nil)
		r.want(g, 200, "GET "+path)
		if err := json.Unmarshal(g.body, v); err != nil {
			t.Fatal(err)
		}
	}
	var envs []record.Environment
	list(acme, nil, "/envs", &envs)
	if len(envs) != 1 || envs[0].Name != "rocket" || envs[0].Org != "acme" {
		t.Fatalf("acme's environments: %+v, want rocket alone", envs)
	}
	envs = nil
	list(r.admin, nil, "/envs", &envs)
	if len(envs) != 1 || envs[0].Name != "prod" {
		t.Fatalf("default's environments: %+v, want prod alone", envs)
	}
	var toks []record.Token
	list("", ann, "/tokens", &toks)
	if len(toks) != 1 || toks[0].Name != "acme-ci" {
		t.Fatalf("acme's tokens: %+v, want acme-ci alone", toks)
	}
	toks = nil
	list(r.admin, nil, "/tokens", &toks)
	for _, tk := range toks {
		if tk.Org != record.DefaultOrg && tk.Org != "" {
			t.Fatalf("default's tokens hold %+v", tk)
		}
		if g := r.call(acme, nil, false, "DELETE", "/api/v1/tokens/"+tk.ID, nil); g.status != 404 {
			t.Fatalf("acme revokes a default token: got %d, want 404", g.status)
		}
	}
	var audit []record.AuditEntry
	list(acme, nil, "/audit", &audit)
	for _, e := range audit {
		if e.Org != "acme" || e.Env == "prod" {
			t.Fatalf("acme's audit log holds %+v", e)
		}
	}
	if len(audit) == 0 {
		t.Fatal("acme's audit log is empty; want its own changes")
	}
	audit = nil
	list(r.admin, nil, "/audit", &audit)
	for _, e := range audit {
		if e.Org != record.DefaultOrg || e.Env == "rocket" {
			t.Fatalf("default's audit log holds %+v", e)
		}
	}
	var users []record.User
	list("", ann, "/users", &users)
	if len(users) != 1 || users[0].Name != "ann" {
		t.Fatalf("acme's users: %+v, want ann alone", users)
	}
	if g := r.call("", ann, false, "GET", "/api/v1/users/root-user", nil); g.status != 404 {
		t.Fatalf("ann reads a default user: got %d, want 404", g.status)
	}
	if g := r.call("", ann, false, "GET", "/api/v1/users?org=default", nil); g.status != 404 {
		t.Fatalf("ann lists another organization's users: got %d, want 404", g.status)
	}
	if g := r.call("", ann, false, "GET", "/api/v1/orgs", nil); g.status != 403 {
		t.Fatalf("an organization admin lists organizations: got %d, want 403", g.status)
	}
	if g := r.call(acme, nil, false, "POST", "/api/v1/tokens", api.TokenRequest{Name: "x", Role: record.RoleViewer, Env: "prod"}); g.status != 404 {
		t.Fatalf("acme makes a token for prod: got %d, want 404", g.status)
	}
	// An organization admin manages its users.
	r.want(r.call("", ann, true, "POST", "/api/v1/users", api.UserRequest{Name: "bea", Password: pw, Roles: map[string]record.Role{"rocket": record.RoleViewer}}), 201, "ann creates bea")
	if g := r.call("", ann, true, "POST", "/api/v1/users", api.UserRequest{Name: "eve", Password: pw, Roles: map[string]record.Role{"prod": record.RoleViewer}}); g.status != 404 {
		t.Fatalf("ann gives a role in prod: got %d, want 404", g.status)
	}
	r.want(r.call("", ann, true, "PATCH", "/api/v1/users/bea", api.UserUpdate{Role: ptr(record.RoleOperator)}), 200, "ann grants bea operator")
	bea := r.login("acme", "bea", pw)
	r.want(r.call("", bea, true, "POST", "/api/v1/envs/rocket/halt", nil), 200, "bea halts rocket")
	if g := r.call("", ann, true, "DELETE", "/api/v1/users/ann", nil); g.status != 409 {
		t.Fatalf("ann deletes herself: got %d, want 409", g.status)
	}
	r.want(r.call("", ann, true, "DELETE", "/api/v1/users/bea", nil), 204, "ann deletes bea")
	if g := r.call("", ann, true, "DELETE", "/api/v1/users/root-user", nil); g.status != 404 {
		t.Fatalf("ann deletes a default user: got %d, want 404", g.status)
	}

	// Events: each stream holds its organization's only.
	r.must(r.admin, "POST", "/api/v1/envs/prod/agents/web1/reject", nil, nil, 200)
	r.must(acme, "POST", "/api/v1/envs/rocket/agents/probe/accept", nil, nil, 200)
	r.must(r.admin, "POST", "/api/v1/envs/prod/agents/web1/accept", nil, nil, 200)
	next := func(rd *bufio.Reader) server.Event {
		var data string
		for data == "" {
			line, err := rd.ReadString('\n')
			if err != nil {
				t.Fatal(err)
			}
			if v, ok := strings.CutPrefix(line, "data: "); ok {
				data = v
			}
		}
		var e server.Event
		if err := json.Unmarshal([]byte(data), &e); err != nil {
			t.Fatal(err)
		}
		return e
	}
	for e := next(acmeEvents); e.Agent != "probe"; e = next(acmeEvents) {
		if e.Env != "rocket" {
			t.Fatalf("acme's stream holds %+v", e)
		}
	}
	for seen := 0; seen < 2; {
		e := next(defaultEvents)
		if e.Env != "prod" {
			t.Fatalf("default's stream holds %+v", e)
		}
		if e.Agent == "web1" {
			seen++
		}
	}
	// An organization with environments stays; without, it goes with its
	// users and tokens.
	if g := r.call(r.admin, nil, false, "DELETE", "/api/v1/orgs/acme", nil); g.status != 409 {
		t.Fatalf("delete acme with rocket: got %d, want 409", g.status)
	}
	r.want(r.call("", ann, true, "DELETE", "/api/v1/envs/rocket", nil), 204, "ann deletes rocket")
	r.want(r.call(r.admin, nil, false, "DELETE", "/api/v1/orgs/acme", nil), 204, "delete acme")
	if g := r.call(acme, nil, false, "GET", "/api/v1/envs", nil); g.status != 401 {
		t.Fatalf("a token of a deleted organization: got %d, want 401", g.status)
	}
	if g := r.call("", ann, false, "GET", "/api/v1/envs", nil); g.status != 401 {
		t.Fatalf("a session of a deleted organization: got %d, want 401", g.status)
	}
}
