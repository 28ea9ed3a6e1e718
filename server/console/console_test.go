package console_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/tetherhq/tether/bus"
	"github.com/tetherhq/tether/model"
	"github.com/tetherhq/tether/server"
	"github.com/tetherhq/tether/server/api"
	"github.com/tetherhq/tether/server/console"
	"github.com/tetherhq/tether/server/notify"
	"github.com/tetherhq/tether/server/record"
	"github.com/tetherhq/tether/server/store"
	"github.com/tetherhq/tether/server/store/sqlite"
)

// cheap are password hashing parameters that keep tests fast.
var cheap = record.PasswordParams{Time: 1, Memory: 64, Threads: 1}

// rig is a real server (store, in-process bus) behind the API with the
// console mounted, as tether server serves them.
type rig struct {
	t     testing.TB
	ts    *httptest.Server
	srv   *server.Server
	st    store.Store
	bus   *bus.Local
	admin string
}

func newRig(t testing.TB, st store.Store) *rig {
	t.Helper()
	b := bus.NewLocal(zerolog.Nop())
	t.Cleanup(func() { b.Close() })
	// The webhook test's URL is on 127.0.0.1, denied by default.
	srv, err := server.New(server.Config{Webhooks: notify.SenderConfig{Policy: notify.Policy{Allow: []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}}}}, st, b, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	a := api.New(api.Config{Password: cheap, AnonymousRate: 1000, AnonymousBurst: 1000}, server.APIServices(srv, nil), zerolog.Nop())
	c, err := console.New(a.Handler(), zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	a.Mount(c)
	ts := httptest.NewServer(a.Handler())
	t.Cleanup(ts.Close)
	tok, secret, err := api.IssueToken("root", record.RoleAdmin, "", "test", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if err := st.CreateToken(context.Background(), tok); err != nil {
		t.Fatal(err)
	}
	return &rig{t: t, ts: ts, srv: srv, st: st, bus: b, admin: secret}
}

func openSQLite(t testing.TB) store.Store {
	s, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "t.db"), sqlite.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// apiCall calls the API with the root token; want is the status wanted.
func (r *rig) apiCall(method, path string, body any, want int) []byte {
	r.t.Helper()
	b, _ := json.Marshal(body)
	req, _ := http.NewRequest(method, r.ts.URL+"/api/v1"+path, bytes.NewReader(b))
	req.Header.Set("Authorization", "Bearer "+r.admin)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		r.t.Fatal(err)
	}
	defer resp.Body.Close()
	out, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != want {
		r.t.Fatalf("%s %s: %d %s, want %d", method, path, resp.StatusCode, out, want)
	}
	return out
}

// browser is a user's browser: its cookies, and the page it got last.
type browser struct {
	t    testing.TB
	r    *rig
	c    *http.Client
	page string
	code int
}

func (r *rig) browser() *browser {
	jar, _ := cookiejar.New(nil)
	return &browser{t: r.t, r: r, c: &http.Client{Jar: jar}}
}

func (b *browser) do(req *http.Request) *browser {
	b.t.Helper()
	resp, err := b.c.Do(req)
	if err != nil {
		b.t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	b.page, b.code = string(body), resp.StatusCode
	return b
}

func (b *browser) get(path string) *browser {
	b.t.Helper()
	req, _ := http.NewRequest("GET", b.r.ts.URL+path, nil)
	return b.do(req)
}

// post sends a form, with the CSRF token of the page got last unless
// form has one.
func (b *browser) post(path string, form url.Values) *browser {
	b.t.Helper()
	if !form.Has("csrf") {
		if m := regexp.MustCompile(`name="csrf" value="([^"]+)"`).FindStringSubmatch(b.page); m != nil {
			form.Set("csrf", m[1])
		}
	}
	req, _ := http.NewRequest("POST", b.r.ts.URL+path, strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	return b.do(req)
}

func (b *browser) login(org, name, password string) *browser {
	b.t.Helper()
	b.get("/login")
	b.post("/login", url.Values{"org": {org}, "name": {name}, "password": {password}, "next": {"/"}})
	if b.code != http.StatusOK || !strings.Contains(b.page, "Log out") {
		b.t.Fatalf("log in as %s: %d %s", name, b.code, b.page)
	}
	return b
}

// has fails unless the page got last says each of want.
func (b *browser) has(what string, want ...string) {
	b.t.Helper()
	for _, w := range want {
		if !strings.Contains(b.page, w) {
			b.t.Fatalf("%s: the page (%d) does not say %q:\n%s", what, b.code, w, b.page)
		}
	}
}

func (b *browser) hasNot(what string, unwanted ...string) {
	b.t.Helper()
	for _, w := range unwanted {
		if strings.Contains(b.page, w) {
			b.t.Fatalf("%s: the page (%d) says %q:\n%s", what, b.code, w, b.page)
		}
	}
}

func file(agent, path, content string) model.Resource {
	return model.Resource{ID: model.ID{Type: "file", Agent: agent, Key: "path", Value: path},
		Attributes: model.Attributes{"path": path, "content": content}}
}

// seed makes environment prod with agents and two versions, the first
// released, and a drift alert on one resource.
func (r *rig) seed() {
	r.t.Helper()
	ctx := context.Background()
	r.apiCall("POST", "/envs", api.EnvRequest{Name: "prod"}, 201)
	for i, state := range []record.AgentState{record.AgentAccepted, record.AgentAccepted, record.AgentPending} {
		ag := record.Agent{Env: "prod", Name: fmt.Sprintf("web-%d", i+1), State: state, Labels: map[string]string{"role": "web"},
			Facts: map[string]any{"os": "debian", "cpus": 2}, Connected: true, LastSeen: time.Now()}
		if err := r.st.UpsertAgent(ctx, ag); err != nil {
			r.t.Fatal(err)
		}
	}
	secret := file("web-1", "/etc/secret", "hush")
	secret.Sensitive = []string{"content"}
	r.apiCall("POST", "/envs/prod/versions?release=true", api.ExportRequest{Resources: []model.Resource{file("web-1", "/etc/motd", "hello"), secret}}, 202)
	r.apiCall("POST", "/envs/prod/versions", api.ExportRequest{Resources: []model.Resource{file("web-1", "/etc/motd", "hello, world"), file("web-2", "/etc/motd", "new")}}, 201)
	id := model.ID{Type: "file", Agent: "web-1", Key: "path", Value: "/etc/motd"}
	alert := record.Alert{At: time.Now(), Env: "prod", Agent: "web-1", Kind: record.AlertDrift, ID: &id, Message: "drifted",
		Changes: model.Changes{"content": {Current: "edited by hand", Desired: "hello"}}, Compliance: model.NonCompliant, Version: 1}
	if err := r.st.RecordDeploy(ctx, record.Deploy{ID: "8c6f3d2e-0d5e-4c43-9b1e-2f0b7c1e5a10", Env: "prod", Kind: record.OpDeploy,
		Trigger: record.DeployByOperator, Who: "ada", Version: 1}, []string{"web-1", "web-2"}); err != nil {
		r.t.Fatal(err)
	}
	if _, err := r.st.RecordResults(ctx, []store.ResultBatch{
		{Env: "prod", Agent: "web-1", Version: 1, DeployID: "8c6f3d2e-0d5e-4c43-9b1e-2f0b7c1e5a10", Results: []model.Result{{ID: id, State: model.StateDeployed,
			Changes: model.Changes{"content": {Current: nil, Desired: "hello"}}}}},
		{Env: "prod", Agent: "web-1", Version: 1, Alerts: []record.Alert{alert}},
	}); err != nil {
		r.t.Fatal(err)
	}
}

// user makes a user of the default organization with role in every
// environment; it returns the password.
func (r *rig) user(name string, role record.Role) string {
	r.t.Helper()
	pw := "correct horse " + name
	r.apiCall("POST", "/users", api.UserRequest{Name: name, Password: pw, Role: role}, 201)
	return pw
}

// Every page renders for an admin, with what it is about; the pages need
// a login; change buttons are there for an operator.
func TestPagesRender(t *testing.T) {
	r := newRig(t, openSQLite(t))
	r.seed()
	pw := r.user("ada", record.RoleAdmin)

	anon := r.browser()
	if anon.get("/envs/prod/agents"); anon.code != http.StatusOK || !strings.Contains(anon.page, `name="password"`) {
		t.Fatalf("a page without a login: %d, want the login form:\n%s", anon.code, anon.page)
	}
	anon.has("next kept", `value="/envs/prod/agents"`)

	b := r.browser().login("", "ada", pw)
	b.has("home with one environment goes to its overview", "Overview of prod", "pending", "online")
	for _, tc := range []struct {
		path string
		want []string
	}{
		{"/envs/prod", []string{"Open drift", "file[web-1,path=/etc/motd]", "Last release", "Version 1", "edited by hand"}},
		{"/envs/prod/agents", []string{"web-1", "web-3", "role=web", `value="accept"`, `type="checkbox"`}},
		{"/envs/prod/agents?state=pending", []string{"web-3", "1–1 of 1"}},
		{"/envs/prod/agents?label=role%3Dweb&q=WEB-2&online=true", []string{"web-2", "1–1 of 1"}},
		{"/envs/prod/agents/web-1", []string{"debian", "cpus", "Pause"}},
		{"/envs/prod/resources", []string{"file[web-1,path=/etc/motd]", "file[web-1,path=/etc/secret]", "1–2 of 2"}},
		{"/envs/prod/resources?q=secret", []string{"/etc/secret", "1–1 of 1"}},
		{"/envs/prod/resources/" + url.PathEscape("file[web-1,path=/etc/motd]"), []string{"Drift", "edited by hand", "→", "hello", "Action log"}},
		{"/envs/prod/resources/" + url.PathEscape("file[web-1,path=/etc/secret]"), []string{"(sensitive, not shown)"}},
		{"/envs/prod/versions", []string{"Release…", "released"}},
		{"/envs/prod/versions/2", []string{"hello, world", "added", "changed", "Release this version…"}},
		{"/envs/prod/versions/2/release", []string{"Yes, release version 2", `name="confirm"`}},
		{"/envs/prod/compiles", []string{"compiled nothing"}},
		{"/envs/prod/deploys", []string{"Deploys of prod", "8c6f3d2e", "operator", "ada"}},
		{"/envs/prod/deploys?kind=repair", []string{"No deploy, repair or dry run matches"}},
		{"/envs/prod/deploys/8c6f3d2e-0d5e-4c43-9b1e-2f0b7c1e5a10", []string{"operator, by ada", "Not answered yet", "web-2", "/etc/motd"}},
		{"/envs/prod/alerts", []string{"drifted", "edited by hand"}},
		{"/envs/prod/enrollment-tokens", []string{"New enrollment token"}},
		{"/envs/prod/webhooks", []string{"No webhook in this environment", "New webhook"}},
		{"/audit", []string{"version.export", "user.create"}},
		{"/admin/users", []string{"ada", "New user"}},
		{"/admin/tokens", []string{"root", "New API token"}},
	} {
		if b.get(tc.path); b.code != http.StatusOK {
			t.Fatalf("GET %s: %d\n%s", tc.path, b.code, b.page)
		}
		b.has(tc.path, tc.want...)
		b.hasNot(tc.path, "hush")
	}
	// A bad filter is refused with what to do, not an empty list.
	if b.get("/envs/prod/agents?label=my%20role"); b.code != http.StatusBadRequest {
		t.Fatalf("GET agents with a bad label key: %d, want 400\n%s", b.code, b.page)
	}
	b.has("bad label key", "a label key is letters, digits", "give key=value or key")

	// The live part alone, for the page's script.
	b.get("/envs/prod/agents?fragment=1")
	b.has("fragment", "web-1")
	b.hasNot("fragment", "<html", "Log out")

	// Paths under /api stay the API's, with its JSON errors.
	if b.get("/api/v1/nothing-here"); b.code != http.StatusNotFound || !strings.Contains(b.page, `"code":"no_route"`) {
		t.Fatalf("GET /api/v1/nothing-here: %d %s, want the API's JSON 404", b.code, b.page)
	}
	b.get("/envs/prod/nothing-here")
	if b.code != http.StatusNotFound {
		t.Fatalf("a page that does not exist: %d, want 404", b.code)
	}
}

// Changes made through the console go through the API: accepting agents
// (several at once), releasing with a confirmation, rolling back; a
// viewer gets no buttons and the API refuses what it posts anyway; bad
// input is answered clearly and changes nothing.
func TestChanges(t *testing.T) {
	r := newRig(t, openSQLite(t))
	r.seed()
	ctx := context.Background()
	if err := r.st.UpsertAgent(ctx, record.Agent{Env: "prod", Name: "web-4", State: record.AgentPending, LastSeen: time.Now()}); err != nil {
		t.Fatal(err)
	}
	op := r.browser().login("", "otto", r.user("otto", record.RoleOperator))
	op.get("/envs/prod/agents?state=pending")
	op.post("/envs/prod/agents?state=pending", url.Values{"action": {"accept"}, "agent": {"web-3", "web-4"}})
	op.has("accept two", "accepted 2 agent(s): web-3, web-4")
	for _, n := range []string{"web-3", "web-4"} {
		if ag, err := r.st.GetAgent(ctx, "prod", n); err != nil || ag.State != record.AgentAccepted {
			t.Fatalf("%s after accept: %+v %v, want accepted", n, ag, err)
		}
	}
	op.get("/envs/prod/agents")
	op.post("/envs/prod/agents", url.Values{"action": {"accept"}})
	if op.code != http.StatusBadRequest {
		t.Fatalf("accept with no agent checked: %d, want 400", op.code)
	}
	op.has("nothing checked", "no agent checked")

	// A release without its confirmation releases nothing.
	op.get("/envs/prod/versions/2")
	op.post("/envs/prod/versions/2/release", url.Values{})
	if op.code != http.StatusBadRequest {
		t.Fatalf("release not confirmed: %d, want 400", op.code)
	}
	if v, _ := r.st.ReleasedVersion(ctx, "prod"); v.Number != 1 {
		t.Fatalf("released version after an unconfirmed release: %d, want 1", v.Number)
	}
	op.get("/envs/prod/versions/2/release")
	op.post("/envs/prod/versions/2/release", url.Values{"confirm": {"yes"}})
	op.has("release", "version 2 released")
	if v, _ := r.st.ReleasedVersion(ctx, "prod"); v.Number != 2 {
		t.Fatalf("released version: %d, want 2", v.Number)
	}
	// web-2 holds version 2, and version 1 has nothing for it: the
	// rollback's confirmation says it leaves the model, with what it
	// loses.
	if _, err := r.st.SetAgentGeneration(ctx, "prod", "web-2", 2); err != nil {
		t.Fatal(err)
	}
	op.get("/envs/prod/versions/1/release")
	op.has("rollback confirmation", "Roll back to version 1?", "Yes, roll back to version 1",
		"It takes 1 resource(s) away from 1 agent(s), and 1 agent(s) leave the model", `web-2 <span class="state bad">leaves the model</span>`,
		"<li>file[web-2,path=/etc/motd] <small>orphaned</small></li>")
	op.post("/envs/prod/versions/1/release", url.Values{"confirm": {"yes"}})
	op.has("rollback", "version 1 released again as version 3 (rollback)")

	// A viewer sees no change buttons; what it posts anyway is refused
	// by the API and changes nothing.
	if err := r.st.UpsertAgent(ctx, record.Agent{Env: "prod", Name: "web-5", State: record.AgentPending, LastSeen: time.Now()}); err != nil {
		t.Fatal(err)
	}
	v := r.browser().login("", "vera", r.user("vera", record.RoleViewer))
	v.get("/envs/prod/agents")
	v.hasNot("viewer's agents page", `value="accept"`, `type="checkbox"`)
	v.get("/envs/prod/versions")
	v.hasNot("viewer's versions page", "Release…", "Roll back")
	v.post("/envs/prod/agents", url.Values{"action": {"accept"}, "agent": {"web-5"}})
	if v.code != http.StatusForbidden {
		t.Fatalf("viewer accepting: %d, want 403:\n%s", v.code, v.page)
	}
	if ag, _ := r.st.GetAgent(ctx, "prod", "web-5"); ag.State != record.AgentPending {
		t.Fatalf("web-5 after a viewer's accept: %s, want pending", ag.State)
	}
	v.get("/envs/prod/versions/2")
	v.post("/envs/prod/versions/2/release", url.Values{"confirm": {"yes"}})
	if vv, _ := r.st.ReleasedVersion(ctx, "prod"); v.code != http.StatusForbidden || vv.Number != 3 {
		t.Fatalf("viewer releasing: %d, released %d; want 403 and 3 still", v.code, vv.Number)
	}
	// A change without the session's CSRF token is refused.
	op.post("/envs/prod/agents", url.Values{"action": {"pause"}, "agent": {"web-1"}, "csrf": {"forged"}})
	if ag, _ := r.st.GetAgent(ctx, "prod", "web-1"); op.code != http.StatusForbidden || ag.Paused {
		t.Fatalf("pause with a forged CSRF token: %d, paused %v; want 403 and not paused", op.code, ag.Paused)
	}

	// Bad input on forms: a clear message, nothing changed.
	admin := r.browser().login("", "ada", r.user("ada", record.RoleAdmin))
	admin.get("/admin/users")
	admin.post("/admin/users", url.Values{"action": {"create"}, "name": {"bob"}, "password": {"short"}, "role": {"viewer"}})
	admin.has("short password", "password", "longer password")
	if admin.code != http.StatusBadRequest && admin.code != http.StatusUnprocessableEntity {
		t.Fatalf("user with a short password: %d, want a 4xx", admin.code)
	}
	if _, err := r.st.GetUser(ctx, "default", "bob"); err == nil {
		t.Fatal("user bob was created with a short password")
	}
	admin.has("form keeps its input", `value="bob"`)
	admin.get("/envs/prod/enrollment-tokens")
	admin.post("/envs/prod/enrollment-tokens", url.Values{"action": {"create"}, "name": {"ci"}, "max_uses": {"many"}})
	admin.has("bad max uses", "max uses &#34;many&#34;: want a whole number")
	if ts, _ := r.st.ListEnrollTokens(ctx, "prod"); len(ts) != 0 {
		t.Fatalf("enrollment tokens after bad input: %d, want 0", len(ts))
	}
	admin.get("/admin/tokens")
	admin.post("/admin/tokens", url.Values{"action": {"create"}, "name": {"ci"}, "role": {"boss"}})
	admin.has("bad role", "role")
	if admin.code < 400 {
		t.Fatalf("token with role boss: %d, want a 4xx", admin.code)
	}

	// Webhooks: bad input changes nothing; a new one shows its secret
	// once; test, disable and delete go through the API.
	admin.get("/envs/prod/webhooks")
	admin.has("no webhook yet", "No webhook in this environment", "New webhook")
	admin.post("/envs/prod/webhooks", url.Values{"action": {"create"}, "name": {"ops"}, "url": {"not a url"}})
	if admin.code < 400 {
		t.Fatalf("webhook with URL %q: %d, want a 4xx", "not a url", admin.code)
	}
	admin.has("bad URL kept", `value="not a url"`)
	if hs, _ := r.st.ListWebhooks(ctx, "prod"); len(hs) != 0 {
		t.Fatalf("webhooks after bad input: %d, want 0", len(hs))
	}
	admin.post("/envs/prod/webhooks", url.Values{"action": {"create"}, "name": {"ops"}, "url": {"http://169.254.169.254/latest/meta-data/"}})
	if admin.code < 400 {
		t.Fatalf("webhook to the metadata address: %d, want a 4xx", admin.code)
	}
	admin.has("policy refusal shown", "webhooks may not reach", "--webhook-allow 169.254.169.254/32")
	admin.post("/envs/prod/webhooks", url.Values{"action": {"create"}, "name": {"ops"}, "url": {"http://127.0.0.1:9/hook"}, "kinds": {"compliance.drift, security.alert"}})
	if admin.code != http.StatusCreated {
		t.Fatalf("webhook create: %d\n%s", admin.code, admin.page)
	}
	admin.has("new webhook", "Webhook secret", "http://127.0.0.1:9/hook", "compliance.drift", "security.alert", "enabled")
	hs, err := r.st.ListWebhooks(ctx, "prod")
	if err != nil || len(hs) != 1 {
		t.Fatalf("webhooks after create: %+v, %v; want one", hs, err)
	}
	id := fmt.Sprint(hs[0].ID)
	admin.post("/envs/prod/webhooks", url.Values{"action": {"test"}, "id": {id}})
	admin.get("/envs/prod/webhooks")
	admin.has("test delivery listed", "webhook.test")
	admin.post("/envs/prod/webhooks", url.Values{"action": {"disable"}, "id": {id}})
	admin.get("/envs/prod/webhooks")
	admin.has("disabled", "disabled", `value="enable"`)
	admin.post("/envs/prod/webhooks", url.Values{"action": {"delete"}, "id": {id}})
	if hs, _ := r.st.ListWebhooks(ctx, "prod"); len(hs) != 0 {
		t.Fatalf("webhooks after delete: %d, want 0", len(hs))
	}

	// Wrong password: said so, no session.
	w := r.browser()
	w.get("/login")
	w.post("/login", url.Values{"name": {"ada"}, "password": {"wrong password!"}})
	if w.code != http.StatusUnauthorized {
		t.Fatalf("wrong password: %d, want 401", w.code)
	}
	w.has("wrong password", "wrong user name or password")
	w.get("/envs/prod")
	w.has("still logged out", `name="password"`)
	// Failed logins past the free ones are held back: the page says how
	// long to wait.
	for range 7 {
		w.post("/login", url.Values{"name": {"vera"}, "password": {"wrong password!"}})
	}
	if w.code != http.StatusTooManyRequests {
		t.Fatalf("login after repeated failures: %d, want 429:\n%s", w.code, w.page)
	}
	w.has("throttled login", "Too many failed logins for this user or from this address: try again in")
	// Logging out ends the session.
	op.get("/envs/prod")
	op.post("/logout", url.Values{})
	op.get("/envs/prod")
	op.has("after logout", `name="password"`)
}

// A user of one organization gets nothing of another's environments,
// from the pages or the API behind them.
func TestOrganizationsApart(t *testing.T) {
	r := newRig(t, openSQLite(t))
	r.seed()
	r.apiCall("POST", "/orgs", api.OrgRequest{Name: "acme"}, 201)
	r.apiCall("POST", "/users?org=acme", api.UserRequest{Name: "wile", Password: "correct horse wile", Role: record.RoleAdmin}, 201)
	b := r.browser().login("acme", "wile", "correct horse wile")
	b.hasNot("acme's home", "prod")
	for _, p := range []string{"/envs/prod", "/envs/prod/agents", "/envs/prod/resources", "/envs/prod/versions/1", "/envs/prod/alerts",
		"/envs/prod/resources/" + url.PathEscape("file[web-1,path=/etc/motd]")} {
		b.get(p)
		if b.code < 400 {
			t.Fatalf("acme's user GET %s: %d, want refused", p, b.code)
		}
		b.hasNot(p, "edited by hand", "hello", "debian")
	}
	b.get("/audit")
	b.hasNot("acme's audit log", "version.export")
	b.get("/envs/prod/agents")
	b.post("/envs/prod/agents", url.Values{"action": {"accept"}, "agent": {"web-3"}})
	if ag, _ := r.st.GetAgent(context.Background(), "prod", "web-3"); b.code < 400 || ag.State != record.AgentPending {
		t.Fatalf("acme's user accepting web-3 of the default organization: %d, state %s; want refused, pending", b.code, ag.State)
	}
}
