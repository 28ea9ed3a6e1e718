package api_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/rs/zerolog"

	"github.com/tetherhq/tether/bus"
	"github.com/tetherhq/tether/model"
	sealedvalues "github.com/tetherhq/tether/model/secret"
	"github.com/tetherhq/tether/server"
	"github.com/tetherhq/tether/server/api"
	"github.com/tetherhq/tether/server/notify"
	"github.com/tetherhq/tether/server/record"
	"github.com/tetherhq/tether/server/store"
	"github.com/tetherhq/tether/server/store/postgres/pgtest"
	"github.com/tetherhq/tether/server/store/sqlite"
)

// rig is a real server (store, scheduler, in-process bus) behind the API.
type rig struct {
	t     *testing.T
	bus   *bus.Local
	ts    *httptest.Server
	srv   *server.Server
	api   *api.API
	st    store.Store
	admin string
}

func openSQLite(t testing.TB) store.Store {
	s, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "t.db"), sqlite.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func newRig(t *testing.T, st store.Store) *rig {
	t.Helper()
	return newRigWith(t, st, api.Config{MaxUpload: 1 << 20, KeepAlive: 50 * time.Millisecond}, zerolog.Nop())
}

// localWebhooks lets webhooks reach the tests' receivers, on 127.0.0.1
// (denied by default); the rest of the default policy stands.
var localWebhooks = notify.SenderConfig{Policy: notify.Policy{Allow: []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}}}

// newRigWith serves the API with cfg (zero fields: defaults) from the
// http.Server it configures, timeouts included, logging to log.
func newRigWith(t *testing.T, st store.Store, cfg api.Config, log zerolog.Logger) *rig {
	t.Helper()
	return newServerRig(t, st, server.Config{Webhooks: localWebhooks}, cfg, log)
}

// newServerRig is newRigWith with the server configured by scfg.
func newServerRig(t *testing.T, st store.Store, scfg server.Config, cfg api.Config, log zerolog.Logger) *rig {
	t.Helper()
	return newServerRigOn(t, st, scfg, cfg, log, nil)
}

// newServerRigOn is newServerRig with the server's bus wrapped by wrap
// (nil: the in-process bus as it is).
func newServerRigOn(t *testing.T, st store.Store, scfg server.Config, cfg api.Config, log zerolog.Logger, wrap func(*bus.Local) bus.Bus) *rig {
	t.Helper()
	b := bus.NewLocal(zerolog.Nop())
	t.Cleanup(func() { b.Close() })
	var sb bus.Bus = b
	if wrap != nil {
		sb = wrap(b)
	}
	srv, err := server.New(scfg, st, sb, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	runNotify(t, srv)
	a := api.New(cfg, server.APIServices(srv, nil), log)
	ts := httptest.NewUnstartedServer(conform(t, a.Handler()))
	ts.Config = a.HTTPServer(conform(t, a.Handler()))
	ts.Start()
	t.Cleanup(ts.Close)
	tok, secret, err := api.IssueToken("root", record.RoleAdmin, "", "test", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if err := st.CreateToken(context.Background(), tok); err != nil {
		t.Fatal(err)
	}
	return &rig{t: t, bus: b, ts: ts, srv: srv, api: a, st: st, admin: secret}
}

// do sends a request and decodes the answer into out (if not nil); it
// returns the status and, for errors, the error code.
func (r *rig) do(token, method, path string, body any, out any) (int, string) {
	r.t.Helper()
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case string:
		rd = strings.NewReader(b)
	case []byte:
		rd = bytes.NewReader(b)
	default:
		j, _ := json.Marshal(b)
		rd = bytes.NewReader(j)
	}
	req, _ := http.NewRequest(method, r.ts.URL+path, rd)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		r.t.Fatal(err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	if resp.StatusCode >= 400 {
		var e api.Body
		if err := json.Unmarshal(data, &e); err != nil || e.Error == nil || e.Error.Message == "" {
			r.t.Fatalf("%s %s: status %d with a body that is not a catalogue error: %s", method, path, resp.StatusCode, data)
		}
		if want := api.Codes[e.Error.Code]; want != resp.StatusCode {
			r.t.Fatalf("%s %s: code %s came with status %d, catalogue says %d", method, path, e.Error.Code, resp.StatusCode, want)
		}
		if eb, ok := out.(*api.Body); ok {
			*eb = e
		}
		return resp.StatusCode, e.Error.Code
	}
	if out != nil {
		if err := json.Unmarshal(data, out); err != nil {
			r.t.Fatalf("%s %s: decode %s: %v", method, path, data, err)
		}
	}
	return resp.StatusCode, ""
}

func (r *rig) must(token, method, path string, body, out any, want int) {
	r.t.Helper()
	if got, code := r.do(token, method, path, body, out); got != want {
		r.t.Fatalf("%s %s: status %d (%s), want %d", method, path, got, code, want)
	}
}

func (r *rig) token(name string, role record.Role, env string) string {
	r.t.Helper()
	var nt api.NewToken
	r.must(r.admin, "POST", "/api/v1/tokens", api.TokenRequest{Name: name, Role: role, Env: env}, &nt, 201)
	if nt.Secret == "" || nt.Role != role {
		r.t.Fatalf("new token %+v", nt)
	}
	return nt.Secret
}

func file(agent, path, content string) model.Resource {
	return model.Resource{ID: model.ID{Type: "file", Agent: agent, Key: "path", Value: path},
		Attributes: model.Attributes{"path": path, "content": content}}
}

func esc(id model.ID) string { return url.PathEscape(id.String()) }

func TestFlowSQLite(t *testing.T)   { testFlow(t, openSQLite(t)) }
func TestFlowPostgres(t *testing.T) { testFlow(t, pgtest.Open(t)) }

func testFlow(t *testing.T, st store.Store) {
	r := newRig(t, st)
	r.must(r.admin, "POST", "/api/v1/envs", api.EnvRequest{Name: "prod", Settings: map[string]string{"drift_policy": "heal"}}, nil, 201)
	var settings map[string]string
	r.must(r.admin, "GET", "/api/v1/envs/prod/settings", nil, &settings, 200)
	if settings["drift_policy"] != "heal" || settings["enrollment"] != "manual" {
		t.Fatalf("settings %v", settings)
	}
	secret := file("web-1", "/etc/secret", "hunter2")
	secret.Sensitive = []string{"content"}
	motd := file("web-1", "/etc/motd", "hello")
	motd.Requires = []model.ID{secret.ID}
	var exp api.ExportResponse
	r.must(r.admin, "POST", "/api/v1/envs/prod/versions?release=true", api.ExportRequest{Resources: []model.Resource{secret, motd}, Meta: model.VersionMeta{Source: "test"}}, &exp, 202)
	if exp.Version.Number != 1 || !exp.Released || exp.Reused || exp.Version.Meta.ExportedBy != "root" || exp.ReleaseID == "" {
		t.Fatalf("export %+v", exp)
	}
	// The same set again is reused, not a new version.
	r.must(r.admin, "POST", "/api/v1/envs/prod/versions", api.ExportRequest{Resources: []model.Resource{secret, motd}}, &exp, 200)
	if !exp.Reused || exp.Version.Number != 1 {
		t.Fatalf("re-export %+v", exp)
	}
	motd2 := file("web-1", "/etc/motd", "changed")
	extra := file("web-2", "/x", "y")
	r.must(r.admin, "POST", "/api/v1/envs/prod/versions", api.ExportRequest{Resources: []model.Resource{secret, motd2, extra}}, &exp, 201)
	var diff api.Diff
	r.must(r.admin, "GET", "/api/v1/envs/prod/versions/2/diff", nil, &diff, 200)
	if diff.From != 1 || len(diff.Added) != 1 || diff.Added[0] != extra.ID || len(diff.Changed) != 1 || diff.Changed[0] != motd.ID || diff.Unchanged != 1 {
		t.Fatalf("diff %+v", diff)
	}
	var v model.Version
	r.must(r.admin, "GET", "/api/v1/envs/prod/versions/1?resources=true", nil, &v, 200)
	for _, res := range v.Resources {
		if res.ID == secret.ID && (res.Attributes["content"] != model.RedactedValue || len(res.Sealed) > 0) {
			t.Fatalf("version show: %+v; want the sensitive value shown as %s, and no ciphertext", res, model.RedactedValue)
		}
	}
	var sts []record.ResourceStatus
	r.must(r.admin, "GET", "/api/v1/envs/prod/resources?agent=web-1", nil, &sts, 200)
	if len(sts) != 2 || sts[0].State != model.StateAvailable {
		t.Fatalf("statuses %+v", sts)
	}
	var view api.ResourceView
	r.must(r.admin, "GET", "/api/v1/envs/prod/resources/"+esc(secret.ID), nil, &view, 200)
	if view.Resource == nil || view.Resource.Attributes["content"] != model.RedactedValue || len(view.Resource.Sealed) > 0 || view.Compliance != model.ComplianceUnknown {
		t.Fatalf("resource view %+v", view)
	}
	var hist []record.ResourceHash
	r.must(r.admin, "GET", "/api/v1/envs/prod/resources/"+esc(motd.ID)+"/history", nil, &hist, 200)
	if len(hist) != 2 || hist[0].Version != 2 {
		t.Fatalf("history %+v", hist)
	}
	var log []record.Action
	r.must(r.admin, "GET", "/api/v1/envs/prod/resources/"+esc(motd.ID)+"/log", nil, &log, 200)
	if len(log) != 0 {
		t.Fatalf("log of a never-deployed resource: %+v", log)
	}

	// Agents: a discovered one is accepted, paused, resumed.
	kex, err := sealedvalues.GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	if err := st.UpsertAgent(context.Background(), record.Agent{Env: "prod", Name: "web-1", PublicKey: make([]byte, 32), KeyAgreementKey: kex.PublicKey().Bytes(),
		LastSeen: time.Now(), Connected: true}); err != nil {
		t.Fatal(err)
	}
	if _, code := r.do(r.admin, "POST", "/api/v1/envs/prod/deploy", nil, nil); code != "no_agents" {
		t.Fatalf("deploy with only a pending agent: %s, want no_agents", code)
	}
	// One recorded but never connected: accepted, it has no inbox until
	// its first hello, and nothing can be sent to it.
	if err := st.UpsertAgent(context.Background(), record.Agent{Env: "prod", Name: "web-0", PublicKey: make([]byte, 32), KeyAgreementKey: kex.PublicKey().Bytes(),
		LastSeen: time.Now()}); err != nil {
		t.Fatal(err)
	}
	var ag api.AgentView
	r.must(r.admin, "POST", "/api/v1/envs/prod/agents/web-0/accept", nil, &ag, 200)
	var d record.Deployment
	if _, code := r.do(r.admin, "POST", "/api/v1/envs/prod/dryrun", nil, &d); code != "no_agents" {
		t.Fatalf("dry run to an agent that never connected: %q, want no_agents", code)
	}
	r.must(r.admin, "DELETE", "/api/v1/envs/prod/agents/web-0", nil, nil, 200)
	// web-1 said hello: accepted, it gets its inbox at once.
	r.must(r.admin, "POST", "/api/v1/envs/prod/agents/web-1/accept", nil, &ag, 200)
	if ag.State != record.AgentAccepted || !ag.Online || !strings.HasPrefix(ag.Key, "SHA256:") {
		t.Fatalf("accepted agent %+v", ag)
	}
	r.must(r.admin, "POST", "/api/v1/envs/prod/agents/web-1/pause", nil, &ag, 200)
	if !ag.Paused {
		t.Fatal("pause did not stick")
	}
	r.must(r.admin, "POST", "/api/v1/envs/prod/agents/web-1/resume", nil, &ag, 200)
	r.must(r.admin, "POST", "/api/v1/envs/prod/dryrun", map[string]any{"agents": []string{"web-1"}}, &d, 202)
	if d.Operation != record.OpDryRun || len(d.Agents) != 1 || d.Generation != 1 {
		t.Fatalf("dry run %+v", d)
	}
	var rep api.Report
	r.must(r.admin, "GET", "/api/v1/envs/prod/deploys/"+d.ID, nil, &rep, 200)
	if rep.ID != d.ID {
		t.Fatalf("report %+v", rep)
	}
	// The dry run is listed, with who asked and what set it off; no
	// agent has answered it (none runs here): the report names web-1.
	if rep.Deploy == nil || rep.Deploy.Kind != record.OpDryRun || rep.Deploy.Trigger != record.DeployByOperator || rep.Deploy.Who == "" ||
		rep.Deploy.Who == record.WhoServer || rep.Deploy.Asked != 1 || rep.Deploy.Outcome != record.DeployRunning || !slices.Equal(rep.Waiting, []string{"web-1"}) {
		t.Fatalf("report of a dry run nobody answered: %+v, deploy %+v; want web-1 waited for", rep, rep.Deploy)
	}
	var ds []record.Deploy
	r.must(r.admin, "GET", "/api/v1/envs/prod/deploys?kind=dryrun&agent=web-1&limit=1", nil, &ds, 200)
	if len(ds) != 1 || ds[0].ID != d.ID || ds[0].Who != rep.Deploy.Who || len(ds[0].Agents) != 0 {
		t.Fatalf("dry runs of web-1: %+v; want the one just sent, first", ds)
	}
	r.must(r.admin, "GET", "/api/v1/envs/prod/deploys?kind=repair", nil, &ds, 200)
	if len(ds) != 0 {
		t.Fatalf("repairs: %+v, want none", ds)
	}
	r.must(r.admin, "POST", "/api/v1/envs/prod/halt", nil, nil, 200)
	if _, code := r.do(r.admin, "POST", "/api/v1/envs/prod/deploy", nil, nil); code != "halted" {
		t.Fatalf("deploy of a halted env: %s, want halted", code)
	}
	r.must(r.admin, "POST", "/api/v1/envs/prod/resume", nil, nil, 200)
	r.must(r.admin, "POST", "/api/v1/envs/prod/deploy", map[string]any{"full": true}, &d, 202)
	if d.Operation != record.OpDeploy {
		t.Fatalf("deploy %+v", d)
	}
	r.must(r.admin, "PATCH", "/api/v1/envs/prod/settings", map[string]string{"deploy_interval": "5m", "purge_on_delete": "true"}, &settings, 200)
	if settings["deploy_interval"] != "5m0s" || settings["purge_on_delete"] != "true" {
		t.Fatalf("patched settings %v", settings)
	}

	// Every change is in the audit log, newest first, with who did it.
	var audit []record.AuditEntry
	r.must(r.admin, "GET", "/api/v1/audit?env=prod", nil, &audit, 200)
	var actions []string
	for _, e := range audit {
		actions = append(actions, e.Action)
		if !strings.HasPrefix(e.Actor, "root (") {
			t.Fatalf("audit actor %q", e.Actor)
		}
	}
	want := "env.settings env.deploy env.resume env.halt env.dryrun agent.resume agent.pause agent.accept agent.delete agent.accept version.export version.export version.export env.create"
	if got := strings.Join(actions, " "); got != want {
		t.Fatalf("audit log:\n got %s\nwant %s", got, want)
	}
	r.must(r.admin, "DELETE", "/api/v1/envs/prod", nil, nil, 204)
	r.must(r.admin, "GET", "/api/v1/envs/prod", nil, nil, 404)
}

// POST .../facts-refresh puts a facts.refresh, signed by the server, in
// the agent's inbox; only an operator may, only for an accepted agent, and
// the audit log says who did.
func TestFactsRefresh(t *testing.T) {
	r := newRig(t, openSQLite(t))
	r.must(r.admin, "POST", "/api/v1/envs", api.EnvRequest{Name: "prod"}, nil, 201)
	if err := r.st.UpsertAgent(context.Background(), record.Agent{Env: "prod", Name: "web-1", PublicKey: make([]byte, 32), LastSeen: time.Now(), Connected: true}); err != nil {
		t.Fatal(err)
	}
	const path = "/api/v1/envs/prod/agents/web-1/facts-refresh"
	if _, code := r.do(r.admin, "POST", path, nil, nil); code != "conflict" {
		t.Fatalf("refresh of a pending agent: %q, want conflict", code)
	}
	if _, code := r.do(r.admin, "POST", "/api/v1/envs/prod/agents/nobody/facts-refresh", nil, nil); code != "not_found" {
		t.Fatalf("refresh of an unknown agent: %q, want not_found", code)
	}
	r.must(r.admin, "POST", "/api/v1/envs/prod/agents/web-1/accept", nil, nil, 200)
	viewer := r.token("dash", record.RoleViewer, "")
	if _, code := r.do(viewer, "POST", path, nil, nil); code != "forbidden" {
		t.Fatalf("refresh by a viewer: %q, want forbidden", code)
	}
	// Not connected yet: nothing to send (its hello will carry its facts).
	var ag api.AgentView
	r.must(r.admin, "POST", path, nil, &ag, 202)

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := r.bus.DeclareInbox(ctx, "prod", "web-1"); err != nil {
		t.Fatal(err)
	}
	operator := r.token("ops", record.RoleOperator, "prod")
	r.must(operator, "POST", path, nil, &ag, 202)
	if ag.Name != "web-1" || ag.State != record.AgentAccepted {
		t.Fatalf("answer %+v, want the accepted agent web-1", ag)
	}
	got := make(chan *bus.Envelope, 1)
	consumed := make(chan struct{})
	go func() {
		defer close(consumed)
		_ = r.bus.ConsumeInbox(ctx, "prod", "web-1", func(_ context.Context, d bus.Delivery) error {
			if d.Envelope.Kind == bus.KindFactsRefresh {
				select {
				case got <- d.Envelope:
				default:
				}
			}
			return nil
		})
	}()
	select {
	case e := <-got:
		if err := bus.Verify(e, r.srv.PublicKey()); err != nil {
			t.Fatalf("facts.refresh not signed by the server: %v", err)
		}
		if e.Env != "prod" || e.Agent != "web-1" {
			t.Fatalf("facts.refresh addressed to %s/%s, want prod/web-1", e.Env, e.Agent)
		}
	case <-ctx.Done():
		t.Fatal("no facts.refresh reached the agent's inbox")
	}
	cancel()
	<-consumed

	var audit []record.AuditEntry
	r.must(r.admin, "GET", "/api/v1/audit?env=prod", nil, &audit, 200)
	if len(audit) == 0 {
		t.Fatal("empty audit log")
	}
	if e := audit[0]; e.Action != "agent.facts-refresh" || e.Target != "web-1" || !strings.HasPrefix(e.Actor, "ops (") {
		t.Fatalf("newest audit entry %+v, want agent.facts-refresh of web-1 by ops", e)
	}
}

func TestAuthorization(t *testing.T) {
	r := newRig(t, openSQLite(t))
	for _, env := range []string{"a", "b"} {
		r.must(r.admin, "POST", "/api/v1/envs", api.EnvRequest{Name: env}, nil, 201)
		r.must(r.admin, "POST", "/api/v1/envs/"+env+"/versions", api.ExportRequest{Resources: []model.Resource{file("h", "/f", env)}}, nil, 201)
		if err := r.st.UpsertAgent(context.Background(), record.Agent{Env: env, Name: "h"}); err != nil {
			t.Fatal(err)
		}
	}
	viewer := r.token("dash", record.RoleViewer, "")
	opA := r.token("ci-a", record.RoleOperator, "a")
	adminA := r.token("admin-a", record.RoleAdmin, "a")

	tests := []struct {
		name, token, method, path string
		body                      any
		want                      string
	}{
		{"no token", "", "GET", "/api/v1/envs", nil, "unauthorized"},
		{"unknown token", "tether_nope", "GET", "/api/v1/envs", nil, "unauthorized"},
		{"viewer releases", viewer, "POST", "/api/v1/envs/a/versions/1/release", nil, "forbidden"},
		{"viewer deploys", viewer, "POST", "/api/v1/envs/a/deploy", nil, "forbidden"},
		{"viewer accepts", viewer, "POST", "/api/v1/envs/a/agents/h/accept", nil, "forbidden"},
		{"viewer exports", viewer, "POST", "/api/v1/envs/a/versions", api.ExportRequest{Resources: []model.Resource{}}, "forbidden"},
		{"viewer creates tokens", viewer, "POST", "/api/v1/tokens", api.TokenRequest{Name: "x", Role: record.RoleAdmin}, "forbidden"},
		{"A reads B", opA, "GET", "/api/v1/envs/b", nil, "forbidden"},
		{"A lists B's resources", opA, "GET", "/api/v1/envs/b/resources", nil, "forbidden"},
		{"A lists B's agents", opA, "GET", "/api/v1/envs/b/agents", nil, "forbidden"},
		{"A releases in B", opA, "POST", "/api/v1/envs/b/versions/1/release", nil, "forbidden"},
		{"A follows B", opA, "GET", "/api/v1/events?env=b", nil, "forbidden"},
		{"scoped admin makes tokens", adminA, "POST", "/api/v1/tokens", api.TokenRequest{Name: "x", Role: record.RoleAdmin}, "forbidden"},
		{"scoped admin deletes B", adminA, "DELETE", "/api/v1/envs/b", nil, "forbidden"},
		{"scoped admin reads audit", adminA, "GET", "/api/v1/audit", nil, "forbidden"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, code := r.do(tt.token, tt.method, tt.path, tt.body, nil); code != tt.want {
				t.Fatalf("got %q, want %q", code, tt.want)
			}
		})
	}
	// What they may do works, and a scoped token sees only its environment.
	var envs []record.Environment
	r.must(opA, "GET", "/api/v1/envs", nil, &envs, 200)
	if len(envs) != 1 || envs[0].Name != "a" {
		t.Fatalf("envs seen by a token for a: %+v", envs)
	}
	r.must(viewer, "GET", "/api/v1/envs", nil, &envs, 200)
	if len(envs) != 2 {
		t.Fatalf("envs seen by an unscoped viewer: %+v", envs)
	}
	r.must(opA, "POST", "/api/v1/envs/a/versions/1/release", nil, nil, 202)
	r.must(opA, "POST", "/api/v1/envs/a/agents/h/accept", nil, nil, 200)
	var who record.Token
	r.must(opA, "GET", "/api/v1/whoami", nil, &who, 200)
	if who.Name != "ci-a" || who.Env != "a" {
		t.Fatalf("whoami %+v", who)
	}
	// B is untouched by anything A's token did.
	if vb, _ := r.st.GetVersion(context.Background(), "b", 1, false); vb.State != model.VersionCandidate {
		t.Fatalf("B's version is %s", vb.State)
	}
	// A revoked token stops working; an expired one never works.
	var list []record.Token
	r.must(r.admin, "GET", "/api/v1/tokens", nil, &list, 200)
	for _, tok := range list {
		if tok.Name == "ci-a" {
			r.must(r.admin, "DELETE", "/api/v1/tokens/"+tok.ID, nil, nil, 204)
		}
	}
	if _, code := r.do(opA, "GET", "/api/v1/envs", nil, nil); code != "unauthorized" {
		t.Fatalf("revoked token: %s", code)
	}
	var nt api.NewToken
	r.must(r.admin, "POST", "/api/v1/tokens", api.TokenRequest{Name: "brief", Role: record.RoleViewer, ExpiresIn: "1ns"}, &nt, 201)
	time.Sleep(time.Millisecond)
	if _, code := r.do(nt.Secret, "GET", "/api/v1/envs", nil, nil); code != "unauthorized" {
		t.Fatalf("expired token: %s", code)
	}
}

func TestBadInput(t *testing.T) {
	r := newRig(t, openSQLite(t))
	r.must(r.admin, "POST", "/api/v1/envs", api.EnvRequest{Name: "prod"}, nil, 201)
	dangling := file("h", "/f", "x")
	dangling.Requires = []model.ID{file("h", "/missing", "").ID}
	big := `{"resources": [` + strings.Repeat(`{"id":"file[h,path=/f]","attributes":{"path":"/f","content":"xxxxxxxxxxxxxxxxxxxxxxxx"}},`, 20000) + `]}`
	tests := []struct {
		name, method, path string
		body               any
		want               string
	}{
		{"malformed JSON", "POST", "/api/v1/envs", `{"name": "x"`, "invalid_json"},
		{"not JSON", "POST", "/api/v1/envs", `name=x`, "invalid_json"},
		{"empty body", "POST", "/api/v1/envs", ``, "invalid_json"},
		{"trailing data", "POST", "/api/v1/envs", `{"name":"x"} {}`, "invalid_json"},
		{"wrong type", "POST", "/api/v1/envs", `{"name": 7}`, "invalid_json"},
		{"unknown field", "POST", "/api/v1/envs", `{"name": "x", "colour": "red"}`, "unknown_field"},
		{"bad env name", "POST", "/api/v1/envs", api.EnvRequest{Name: "Prod'; DROP TABLE environments;--"}, "invalid"},
		{"bad setting", "POST", "/api/v1/envs", api.EnvRequest{Name: "x", Settings: map[string]string{"drift_policy": "ignore"}}, "invalid"},
		{"unknown setting", "PATCH", "/api/v1/envs/prod/settings", map[string]string{"colour": "red"}, "invalid"},
		{"empty patch", "PATCH", "/api/v1/envs/prod/settings", map[string]string{}, "bad_request"},
		{"oversized upload", "POST", "/api/v1/envs/prod/versions", big, "too_large"},
		{"dangling requires", "POST", "/api/v1/envs/prod/versions", api.ExportRequest{Resources: []model.Resource{dangling}}, "invalid"},
		{"no resources", "POST", "/api/v1/envs/prod/versions", `{}`, "invalid"},
		{"resource that does not validate", "POST", "/api/v1/envs/prod/versions", `{"resources":[{"id":"file[h,path=/f]","attributes":{"path":"/other"}}]}`, "invalid"},
		{"unparsable resource ID in body", "POST", "/api/v1/envs/prod/versions", `{"resources":[{"id":"not an id","attributes":{}}]}`, "invalid_json"},
		{"version not a number", "GET", "/api/v1/envs/prod/versions/1;DROP", nil, "bad_request"},
		{"version zero", "GET", "/api/v1/envs/prod/versions/0", nil, "bad_request"},
		{"missing version", "GET", "/api/v1/envs/prod/versions/99", nil, "not_found"},
		{"bad release flag", "POST", "/api/v1/envs/prod/versions?release=maybe", api.ExportRequest{Resources: []model.Resource{}}, "bad_request"},
		{"unparsable resource ID", "GET", "/api/v1/envs/prod/resources/" + url.PathEscape("file[h"), nil, "bad_request"},
		{"SQL in a resource ID", "GET", "/api/v1/envs/prod/resources/" + url.PathEscape("file[h,path=/' OR 1=1 --]"), nil, "not_found"},
		{"SQL in env", "GET", "/api/v1/envs/" + url.PathEscape("x' OR '1'='1") + "/resources", nil, "bad_request"},
		{"SQL in a filter", "GET", "/api/v1/envs/prod/resources?agent=" + url.QueryEscape("' OR 1=1 --"), nil, "bad_request"},
		{"bad state filter", "GET", "/api/v1/envs/prod/resources?state=evil", nil, "bad_request"},
		{"bad limit", "GET", "/api/v1/envs/prod/resources/" + esc(dangling.ID) + "/log?limit=-1", nil, "bad_request"},
		{"bad deploy id", "GET", "/api/v1/envs/prod/deploys/xyz", nil, "bad_request"},
		{"unknown deploy", "GET", "/api/v1/envs/prod/deploys/" + uuid.NewString(), nil, "not_found"},
		{"bad deploy kind", "GET", "/api/v1/envs/prod/deploys?kind=explode", nil, "invalid"},
		{"bad deploy agent", "GET", "/api/v1/envs/prod/deploys?agent=" + url.QueryEscape("../x"), nil, "invalid"},
		{"deploys of an unknown env", "GET", "/api/v1/envs/nope/deploys", nil, "not_found"},
		{"unknown agent", "POST", "/api/v1/envs/prod/agents/ghost/accept", nil, "not_found"},
		{"unknown env", "GET", "/api/v1/envs/nope/versions", nil, "not_found"},
		{"deploy without release", "POST", "/api/v1/envs/prod/deploy", nil, "no_release"},
		{"bad token role", "POST", "/api/v1/tokens", api.TokenRequest{Name: "x", Role: "root"}, "invalid"},
		{"bad expiry", "POST", "/api/v1/tokens", api.TokenRequest{Name: "x", Role: record.RoleViewer, ExpiresIn: "soon"}, "invalid"},
		{"token for a missing env", "POST", "/api/v1/tokens", api.TokenRequest{Name: "x", Role: record.RoleViewer, Env: "nope"}, "not_found"},
		{"unknown route", "GET", "/api/v1/nothing", nil, "no_route"},
		{"wrong method", "PUT", "/api/v1/envs", nil, "bad_method"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			status, code := r.do(r.admin, tt.method, tt.path, tt.body, nil)
			if code != tt.want {
				t.Fatalf("status %d code %q, want %q", status, code, tt.want)
			}
			if status >= 500 {
				t.Fatalf("status %d for bad input", status)
			}
		})
	}
	// Nothing was half-written: prod still has no version.
	var vs []model.Version
	r.must(r.admin, "GET", "/api/v1/envs/prod/versions", nil, &vs, 200)
	if len(vs) != 0 {
		t.Fatalf("bad uploads left %d versions", len(vs))
	}
	var envs []record.Environment
	r.must(r.admin, "GET", "/api/v1/envs", nil, &envs, 200)
	if len(envs) != 1 {
		t.Fatalf("bad creates left environments: %+v", envs)
	}
}

func TestEventsStream(t *testing.T) {
	r := newRig(t, openSQLite(t))
	r.must(r.admin, "POST", "/api/v1/envs", api.EnvRequest{Name: "prod"}, nil, 201)
	r.must(r.admin, "POST", "/api/v1/envs", api.EnvRequest{Name: "dev"}, nil, 201)
	for _, env := range []string{"prod", "dev"} {
		if err := r.st.UpsertAgent(context.Background(), record.Agent{Env: env, Name: "h"}); err != nil {
			t.Fatal(err)
		}
	}
	prodViewer := r.token("watch", record.RoleViewer, "prod")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", r.ts.URL+"/api/v1/events", nil)
	req.Header.Set("Authorization", "Bearer "+prodViewer)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
		t.Fatalf("content type %q", ct)
	}
	rd := bufio.NewReader(resp.Body)
	if line, _ := rd.ReadString('\n'); !strings.HasPrefix(line, ": following environment prod") {
		t.Fatalf("first line %q: a scoped token follows its environment", line)
	}
	// An event of dev first, then one of prod: only prod's arrives.
	r.must(r.admin, "POST", "/api/v1/envs/dev/agents/h/reject", nil, nil, 200)
	r.must(r.admin, "POST", "/api/v1/envs/prod/agents/h/reject", nil, nil, 200)
	var event, data string
	for event == "" || data == "" {
		line, err := rd.ReadString('\n')
		if err != nil {
			t.Fatal(err)
		}
		if v, ok := strings.CutPrefix(line, "event: "); ok {
			event = strings.TrimSpace(v)
		}
		if v, ok := strings.CutPrefix(line, "data: "); ok {
			data = v
		}
	}
	var e server.Event
	if err := json.Unmarshal([]byte(data), &e); err != nil {
		t.Fatal(err)
	}
	if event != string(server.EventAgentChanged) || e.Env != "prod" || e.Agent != "h" {
		t.Fatalf("event %s %+v, want agent.changed of prod/h", event, e)
	}
}

func TestOpenAPIAndProbes(t *testing.T) {
	r := newRig(t, openSQLite(t))
	var doc map[string]any
	r.must("", "GET", "/api/v1/openapi.json", nil, &doc, 200)
	paths := doc["paths"].(map[string]any)
	for _, p := range []string{"/api/v1/envs/{env}/versions/{n}/release", "/api/v1/events", "/api/v1/tokens/{id}"} {
		if paths[p] == nil {
			t.Errorf("openapi lacks %s", p)
		}
	}
	r.must("", "GET", "/healthz", nil, nil, 200)
	var ready map[string]string
	r.must("", "GET", "/readyz", nil, &ready, 200)
	if ready["store"] != "ok" {
		t.Fatalf("readyz %v", ready)
	}
}

// runNotify runs the server's event log and webhooks until the test ends.
func runNotify(t *testing.T, srv *server.Server) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = srv.RunNotify(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
}

// TestEventsStreamUnfoldsResults: a stored row of one report's results
// streams as one resource.result event per result (what the console's
// live update and tether watch listen for), IDs "row.element" in the
// "id:" line and the data; Last-Event-ID after an element resumes with
// the next one; a scoped token sees its environment's rows only.
func TestEventsStreamUnfoldsResults(t *testing.T) {
	r := newRig(t, openSQLite(t))
	r.must(r.admin, "POST", "/api/v1/envs", api.EnvRequest{Name: "prod"}, nil, 201)
	r.must(r.admin, "POST", "/api/v1/envs", api.EnvRequest{Name: "dev"}, nil, 201)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var results []model.Result
	for _, p := range []string{"/a", "/b", "/c"} {
		results = append(results, model.Result{ID: model.ID{Type: "file", Agent: "h", Key: "path", Value: p}, State: model.StateDeployed})
	}
	var rows []record.LoggedEvent
	for _, env := range []string{"dev", "prod"} {
		data, err := json.Marshal(server.Event{Kind: server.EventResults, Env: env, Agent: "h", DeployID: "d", Generation: 2, Results: results})
		if err != nil {
			t.Fatal(err)
		}
		rows = append(rows, record.LoggedEvent{Env: env, Kind: string(server.EventResults), Data: data})
	}
	last, err := r.st.AppendEvents(ctx, rows)
	if err != nil {
		t.Fatal(err)
	}
	prodViewer := r.token("watch", record.RoleViewer, "prod")
	type sse struct{ id, event, data string }
	// follow reads n events of the stream resumed after after.
	follow := func(after string, n int) []sse {
		t.Helper()
		req, _ := http.NewRequestWithContext(ctx, "GET", r.ts.URL+"/api/v1/events", nil)
		req.Header.Set("Authorization", "Bearer "+prodViewer)
		req.Header.Set("Last-Event-ID", after)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		rd := bufio.NewReader(resp.Body)
		var out []sse
		var e sse
		for len(out) < n {
			line, err := rd.ReadString('\n')
			if err != nil {
				t.Fatalf("after %s: %v (got %+v)", after, err, out)
			}
			line = strings.TrimSuffix(line, "\n")
			switch {
			case line == "":
				if e.event != "" {
					out = append(out, e)
				}
				e = sse{}
			case strings.HasPrefix(line, "id: "):
				e.id = line[4:]
			case strings.HasPrefix(line, "event: "):
				e.event = line[7:]
			case strings.HasPrefix(line, "data: "):
				e.data = line[6:]
			}
		}
		return out
	}
	row := strconv.FormatInt(last, 10) // prod's: dev's is the one before
	got := follow("0", 3)
	for i, g := range got {
		var e server.Event
		if err := json.Unmarshal([]byte(g.data), &e); err != nil {
			t.Fatal(err)
		}
		want := fmt.Sprintf("%s.%d", row, i)
		if g.id != want || g.event != string(server.EventResult) || e.ID != want || e.Kind != server.EventResult || e.Env != "prod" ||
			e.Agent != "h" || e.DeployID != "d" || e.Generation != 2 || e.Result == nil || e.Result.ID != results[i].ID || e.Results != nil {
			t.Fatalf("event %d: %+v (%+v), want result %s of prod as %s", i, g, e, results[i].ID, want)
		}
	}
	if got := follow(row+".1", 1); got[0].id != row+".2" {
		t.Fatalf("resumed after %s.1: %s first, want %s.2", row, got[0].id, row)
	}
	// Past the row: the next event is the next one published.
	if err := r.st.UpsertAgent(ctx, record.Agent{Env: "prod", Name: "h"}); err != nil {
		t.Fatal(err)
	}
	r.must(r.admin, "POST", "/api/v1/envs/prod/agents/h/reject", nil, nil, 200)
	if got := follow(row+".2", 1); got[0].event != string(server.EventAgentChanged) {
		t.Fatalf("resumed after the row's last element: %+v first, want the agent.changed published after", got[0])
	}
}
