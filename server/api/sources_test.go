package api_test

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/tetherhq/tether/server"
	"github.com/tetherhq/tether/server/api"
	"github.com/tetherhq/tether/server/record"
)

func modelArchive(t *testing.T, files map[string]string) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	tw := tar.NewWriter(zw)
	for name, content := range files {
		if err := tw.WriteHeader(&tar.Header{Name: name, Mode: 0o644, Size: int64(len(content)), Typeflag: tar.TypeReg}); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write([]byte(content)); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// Sources are set by operators, read by viewers, and their credentials
// never come back: not in answers, not in the audit log.
func TestSourceRoutes(t *testing.T) {
	st := openSQLite(t)
	r := newServerRig(t, st, server.Config{Sources: server.StoredSources(st, server.SourceOptions{})},
		api.Config{MaxUpload: 1 << 20, KeepAlive: 50 * time.Millisecond}, zerolog.Nop())
	r.must(r.admin, "POST", "/api/v1/envs", api.EnvRequest{Name: "prod"}, nil, 201)
	viewer := r.token("dash", record.RoleViewer, "")
	operator := r.token("ci", record.RoleOperator, "prod")

	if _, code := r.do(viewer, "GET", "/api/v1/envs/prod/source", nil, nil); code != "not_found" {
		t.Fatalf("no source yet: %q, want not_found", code)
	}
	const token = "ghp_the-secret-token-value"
	req := record.SourceRequest{URL: "https://git.example.com/fleet.git", Ref: "main", Token: token, PollInterval: "5m"}
	if _, code := r.do(viewer, "PUT", "/api/v1/envs/prod/source", req, nil); code != "forbidden" {
		t.Fatalf("source set by a viewer: %q, want forbidden", code)
	}
	var raw map[string]any
	r.must(operator, "PUT", "/api/v1/envs/prod/source", req, &raw, 200)
	if secret, _ := raw["webhook_secret"].(string); !strings.HasPrefix(secret, "whsec_") || raw["has_token"] != true || raw["poll_interval"] != "5m0s" {
		t.Fatalf("set answered %v", raw)
	}
	for _, who := range []string{viewer, operator} {
		var body map[string]any
		r.must(who, "GET", "/api/v1/envs/prod/source", nil, &body, 200)
		if _, shown := body["webhook_secret"]; shown || body["url"] != req.URL || body["has_webhook"] != true {
			t.Fatalf("show: %v: the webhook secret is shown once, when made", body)
		}
	}
	var audit []record.AuditEntry
	r.must(r.admin, "GET", "/api/v1/audit", nil, &audit, 200)
	found := false
	for _, e := range audit {
		if strings.Contains(e.Detail, token) || strings.Contains(e.Detail, "whsec_") {
			t.Fatalf("the audit log holds a credential: %+v", e)
		}
		found = found || e.Action == "env.source.set"
	}
	if !found {
		t.Fatalf("audit %+v: no env.source.set", audit)
	}

	for name, bad := range map[string]record.SourceRequest{
		"token over http":   {URL: "http://git.example.com/x.git", Token: "t"},
		"unknown scheme":    {URL: "gopher://git.example.com/x.git"},
		"poll too often":    {URL: req.URL, PollInterval: "1s"},
		"file on a server":  {URL: "file:///srv/git/fleet.git"},
		"subdir leading up": {URL: req.URL, Subdir: "../../etc"},
	} {
		var e api.Body
		status, code := r.do(operator, "PUT", "/api/v1/envs/prod/source", bad, &e)
		if status != 422 || code != "invalid" || !strings.Contains(e.Error.Message, "invalid source") {
			t.Errorf("%s: %d %q (%+v), want 422 invalid saying why", name, status, code, e.Error)
		}
	}
	if status, code := r.do(operator, "PUT", "/api/v1/envs/prod/source", `{"url": "https://x.example/y.git", "tokn": "typo"}`, nil); status != 400 || code != "unknown_field" {
		t.Errorf("unknown field: %d %q, want 400 unknown_field", status, code)
	}

	// An archive upload replaces it; one over max-upload is refused before
	// it is read; an empty one says what to send.
	var v record.SourceView
	r.must(operator, "PUT", "/api/v1/envs/prod/source/archive?subdir=fleet", modelArchive(t, map[string]string{"fleet/main.hcl": "# empty\n"}), &v, 200)
	if v.Kind != record.SourceArchive || v.Subdir != "fleet" || v.HasToken || len(v.ArchiveSHA256) != 64 {
		t.Fatalf("upload answered %+v", v)
	}
	if status, code := r.do(operator, "PUT", "/api/v1/envs/prod/source/archive", bytes.Repeat([]byte("x"), 2<<20), nil); status != 413 || code != "too_large" {
		t.Fatalf("2 MiB upload over a 1 MiB max-upload: %d %q", status, code)
	}
	if status, code := r.do(operator, "PUT", "/api/v1/envs/prod/source/archive", []byte{}, nil); status != 422 || code != "invalid" {
		t.Fatalf("empty upload: %d %q", status, code)
	}
	if status, code := r.do(operator, "PUT", "/api/v1/envs/prod/source/archive", "not an archive at all", nil); status != 422 || code != "invalid" {
		t.Fatalf("garbage upload: %d %q", status, code)
	}

	r.must(operator, "DELETE", "/api/v1/envs/prod/source", nil, nil, 204)
	if _, code := r.do(viewer, "GET", "/api/v1/envs/prod/source", nil, nil); code != "not_found" {
		t.Fatalf("after delete: %q, want not_found", code)
	}
	if _, code := r.do(operator, "DELETE", "/api/v1/envs/prod/source", nil, nil); code != "not_found" {
		t.Fatalf("delete twice: %q, want not_found", code)
	}
}

// A server that compiles nothing says so.
func TestSourceRoutesWithoutCompiles(t *testing.T) {
	r := newRig(t, openSQLite(t))
	r.must(r.admin, "POST", "/api/v1/envs", api.EnvRequest{Name: "prod"}, nil, 201)
	if status, code := r.do(r.admin, "PUT", "/api/v1/envs/prod/source", record.SourceRequest{URL: "https://git.example.com/x.git"}, nil); status != 409 || code != "conflict" {
		t.Fatalf("source set on a server that compiles nothing: %d %q, want 409 conflict", status, code)
	}
}

// The push webhook needs no token: the source's secret authenticates it,
// and every refusal looks the same, whether the environment, its source or
// the signature is wrong.
func TestWebhookRoute(t *testing.T) {
	st := openSQLite(t)
	r := newServerRig(t, st, server.Config{Sources: server.StoredSources(st, server.SourceOptions{})},
		api.Config{MaxUpload: 1 << 20, KeepAlive: 50 * time.Millisecond}, zerolog.Nop())
	r.must(r.admin, "POST", "/api/v1/envs", api.EnvRequest{Name: "prod"}, nil, 201)
	var v record.SourceView
	r.must(r.admin, "PUT", "/api/v1/envs/prod/source", record.SourceRequest{URL: "https://git.example.com/fleet.git", Ref: "main"}, &v, 200)

	body := []byte(`{"ref": "refs/heads/main", "after": "` + strings.Repeat("a", 40) + `", "repository": {"full_name": "acme/fleet"}}`)
	// send signs body with secret and sends it with extra appended.
	send := func(env, secret string, body []byte, extra ...byte) (int, api.Body, record.WebhookResult) {
		t.Helper()
		m := hmac.New(sha256.New, []byte(secret))
		m.Write(body)
		req, _ := http.NewRequest("POST", r.ts.URL+"/api/v1/envs/"+env+"/compile/hook", bytes.NewReader(append(bytes.Clone(body), extra...)))
		req.Header.Set("X-Tether-Signature", "sha256="+hex.EncodeToString(m.Sum(nil)))
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var e api.Body
		var res record.WebhookResult
		data, _ := io.ReadAll(resp.Body)
		if resp.StatusCode >= 400 {
			_ = json.Unmarshal(data, &e)
		} else if err := json.Unmarshal(data, &res); err != nil {
			t.Fatalf("webhook answer %s: %v", data, err)
		}
		return resp.StatusCode, e, res
	}
	status, _, res := send("prod", v.WebhookSecret, body)
	if status != 202 || !res.Compile || res.Provider != "generic" {
		t.Fatalf("signed push: %d %+v, want 202 and a compile", status, res)
	}
	var refusals []string
	for name, c := range map[string]struct {
		env, secret string
		extra       []byte
	}{
		"wrong secret":         {"prod", "whsec_wrong", nil},
		"tampered":             {"prod", v.WebhookSecret, []byte("\n")},
		"unknown environment":  {"nope", v.WebhookSecret, nil},
		"no secret to sign by": {"prod", "", nil},
	} {
		status, e, _ := send(c.env, c.secret, body, c.extra...)
		if status != 401 || e.Error == nil || e.Error.Code != "unauthorized" {
			t.Fatalf("%s: %d %+v, want 401 unauthorized", name, status, e.Error)
		}
		refusals = append(refusals, e.Error.Message)
	}
	for _, m := range refusals[1:] {
		if m != refusals[0] {
			t.Fatalf("refusals differ (%q, %q): they must not tell what was wrong", refusals[0], m)
		}
	}
	if status, e, _ := send("prod", v.WebhookSecret, bytes.Repeat([]byte(" "), 6<<20)); status != 413 || e.Error == nil {
		t.Fatalf("6 MiB webhook: %d, want 413", status)
	}
}
