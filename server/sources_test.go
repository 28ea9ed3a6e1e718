package server_test

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/tetherhq/tether/model"
	"github.com/tetherhq/tether/model/gitfetch/gittest"
	"github.com/tetherhq/tether/server"
	"github.com/tetherhq/tether/server/compile/source"
	"github.com/tetherhq/tether/server/record"
	"github.com/tetherhq/tether/server/store"
)

// tarball packs files as a tar.gz archive; a value starting with "->" is a
// symbolic link.
func tarball(t *testing.T, files map[string]string) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	tw := tar.NewWriter(zw)
	for name, content := range files {
		h := &tar.Header{Name: name, Mode: 0o644, Size: int64(len(content)), Typeflag: tar.TypeReg}
		if target, ok := strings.CutPrefix(content, "->"); ok {
			h = &tar.Header{Name: name, Mode: 0o777, Linkname: target, Typeflag: tar.TypeSymlink}
			content = ""
		}
		if err := tw.WriteHeader(h); err != nil {
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

// storedRig is a server whose sources are the ones set through it.
func storedRig(t *testing.T, allowFile bool) *rig {
	t.Helper()
	r := startRigWith(t, func(c *server.Config, st store.Store) {
		c.Sources = server.StoredSources(st, server.SourceOptions{AllowFile: allowFile})
	},
		map[string]record.EnvSettings{"test": record.DefaultEnvSettings(), "nosource": record.DefaultEnvSettings()})
	r.waitCompiles()
	return r
}

// A git repository set as the source is compiled at once and released;
// the answers never carry its credentials; the webhook secret is shown
// once; a new ref keeps the credentials, a new URL does not.
func TestGitSource(t *testing.T) {
	r := storedRig(t, true)
	repo := gittest.New(t)
	rev := repo.Commit(map[string]string{"fleet/main.hcl": goodModel})

	v, err := r.srv.SetSource(r.ctx, "test", record.SourceRequest{URL: repo.URL(), Subdir: "fleet"}, "alice")
	if err != nil {
		t.Fatal(err)
	}
	if v.Kind != record.SourceGit || v.URL != repo.URL() || !v.HasWebhook || !strings.HasPrefix(v.WebhookSecret, "whsec_") || v.WebhookPath != "/api/v1/envs/test/compile/hook" {
		t.Fatalf("set: %+v", v)
	}
	c := r.finished()
	if c.Outcome != record.CompileReleased || c.Revision != rev || c.Triggers[0].Kind != record.TriggerOperator || c.Triggers[0].By != "alice" {
		t.Fatalf("compile after the source was set: %+v, want released at %s", c, rev)
	}
	shown, err := r.srv.GetSource(r.ctx, "test")
	if err != nil || shown.WebhookSecret != "" || !shown.HasWebhook || shown.Subdir != "fleet" || shown.UpdatedBy != "alice" {
		t.Fatalf("show: %+v (%v): the secret is shown once only", shown, err)
	}

	// A token for an http(s) URL is stored and never shown; the same URL
	// with a new ref keeps it, another URL drops it.
	const token = "glpat-very-secret-token"
	if _, err := r.srv.SetSource(r.ctx, "nosource", record.SourceRequest{URL: "https://git.example.com/fleet.git", Token: token, Ref: "main"}, "alice"); err != nil {
		t.Fatal(err)
	}
	v, err = r.srv.SetSource(r.ctx, "nosource", record.SourceRequest{URL: "https://git.example.com/fleet.git", Ref: "release"}, "bob")
	if err != nil || !v.HasToken || v.Ref != "release" || v.WebhookSecret != "" {
		t.Fatalf("same URL, new ref: %+v (%v): want the token kept and the webhook secret not shown again", v, err)
	}
	b, _ := json.Marshal(v)
	if strings.Contains(string(b), token) {
		t.Fatalf("the view carries the token: %s", b)
	}
	stored, err := r.store.GetSource(r.ctx, "nosource", false)
	if err != nil || !strings.Contains(string(stored.Spec), token) {
		t.Fatalf("the store keeps the token for fetches: %v", err)
	}
	v, err = r.srv.SetSource(r.ctx, "nosource", record.SourceRequest{URL: "https://elsewhere.example.com/fleet.git"}, "mallory")
	if err != nil || v.HasToken {
		t.Fatalf("new URL: %+v (%v): a token never follows the source to another host", v, err)
	}
	v, err = r.srv.SetSource(r.ctx, "nosource", record.SourceRequest{URL: "https://elsewhere.example.com/fleet.git", RotateWebhookSecret: true}, "bob")
	if err != nil || !strings.HasPrefix(v.WebhookSecret, "whsec_") {
		t.Fatalf("rotate: %+v (%v)", v, err)
	}

	refused := []struct {
		name string
		req  record.SourceRequest
		want string
	}{
		{"no URL", record.SourceRequest{}, "URL is empty"},
		{"token over http", record.SourceRequest{URL: "http://git.example.com/x.git", Token: "t"}, "clear text"},
		{"ssh without known hosts", record.SourceRequest{URL: "ssh://git@git.example.com/x.git", SSHKey: "k"}, "known hosts"},
		{"odd scheme", record.SourceRequest{URL: "ftp://git.example.com/x.git"}, "scheme"},
		{"subdir out", record.SourceRequest{URL: repo.URL(), Subdir: "../x"}, "sub-directory"},
		{"poll too often", record.SourceRequest{URL: repo.URL(), PollInterval: "1s"}, "poll interval"},
		{"short webhook secret", record.SourceRequest{URL: repo.URL(), WebhookSecret: "short"}, "16 to 256"},
	}
	for _, tt := range refused {
		_, err := r.srv.SetSource(r.ctx, "test", tt.req, "alice")
		if !errors.Is(err, record.ErrInvalidSource) || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: %v, want an invalid source saying %q", tt.name, err, tt.want)
		}
	}
	if v, _ := r.srv.GetSource(r.ctx, "test"); v.URL != repo.URL() || v.Subdir != "fleet" {
		t.Fatalf("refused requests changed the source: %+v", v)
	}

	// Deleted: no more compiles; what was released stays.
	if err := r.srv.DeleteSource(r.ctx, "test"); err != nil {
		t.Fatal(err)
	}
	if _, err := r.srv.RequestCompile(r.ctx, "test", "alice"); !errors.Is(err, server.ErrNoSource) {
		t.Fatalf("compile after the source went: %v, want ErrNoSource", err)
	}
	if rel, err := r.store.ReleasedVersion(r.ctx, "test"); err != nil || rel.Number != c.Version {
		t.Fatalf("released version after the source went: %+v (%v)", rel, err)
	}
}

// An uploaded archive is the source: unpacked and checked on the way in,
// compiled at once. One that holds a link out is refused and changes
// nothing.
func TestArchiveSource(t *testing.T) {
	r := storedRig(t, true)
	data := tarball(t, map[string]string{"model/main.hcl": goodModel})
	v, err := r.srv.UploadSource(r.ctx, "test", data, "model", "alice")
	if err != nil {
		t.Fatal(err)
	}
	if v.Kind != record.SourceArchive || v.ArchiveBytes != int64(len(data)) || len(v.ArchiveSHA256) != 64 || v.HasWebhook {
		t.Fatalf("upload: %+v", v)
	}
	c := r.finished()
	if c.Outcome != record.CompileReleased || c.Revision != v.ArchiveSHA256 {
		t.Fatalf("compile of the archive: %+v, want released at %s", c, v.ArchiveSHA256)
	}

	for name, bad := range map[string][]byte{
		"link out":    tarball(t, map[string]string{"main.hcl": goodModel, "shadow.hcl": "->/etc/shadow"}),
		"name out":    tarball(t, map[string]string{"../main.hcl": goodModel}),
		"not a tar":   []byte("this is not an archive"),
		"no such dir": data,
	} {
		subdir := ""
		if name == "no such dir" {
			subdir = "nope"
		}
		_, err := r.srv.UploadSource(r.ctx, "test", bad, subdir, "mallory")
		if !errors.Is(err, record.ErrInvalidSource) {
			t.Errorf("%s: %v, want an invalid source", name, err)
		}
	}
	if now, err := r.srv.GetSource(r.ctx, "test"); err != nil || now.ArchiveSHA256 != v.ArchiveSHA256 || now.UpdatedBy != "alice" {
		t.Fatalf("refused uploads changed the source: %+v (%v)", now, err)
	}
	if _, err := r.srv.GetSource(r.ctx, "nosource"); !errors.Is(err, model.ErrNotFound) {
		t.Fatalf("no source: %v, want ErrNotFound", err)
	}
}

// file:// repositories read the server's disk: refused unless allowed.
func TestFileSourcesRefused(t *testing.T) {
	r := storedRig(t, false)
	repo := gittest.New(t)
	repo.Commit(map[string]string{"main.hcl": goodModel})
	_, err := r.srv.SetSource(r.ctx, "test", record.SourceRequest{URL: repo.URL()}, "alice")
	if !errors.Is(err, record.ErrInvalidSource) || !strings.Contains(err.Error(), "--allow-file-sources") {
		t.Fatalf("file:// source: %v, want refused, saying how to allow it", err)
	}
	if _, err := r.srv.GetSource(r.ctx, "test"); !errors.Is(err, model.ErrNotFound) {
		t.Fatalf("a refused source was stored: %v", err)
	}
}

// githubPush is a GitHub push delivery of ref at after, signed with secret.
func githubPush(secret, ref, after, defaultBranch string) (http.Header, []byte) {
	body := fmt.Appendf(nil, `{"ref": %q, "before": "%s", "after": %q, "repository": {"full_name": "acme/fleet", "default_branch": %q}}`,
		ref, strings.Repeat("0", 40), after, defaultBranch)
	m := hmac.New(sha256.New, []byte(secret))
	m.Write(body)
	h := http.Header{}
	h.Set("X-GitHub-Event", "push")
	h.Set("X-GitHub-Delivery", "72d3162e-cc78-11e3-81ab-4c9367dc0958")
	h.Set("X-Hub-Signature-256", "sha256="+hex.EncodeToString(m.Sum(nil)))
	h.Set("Content-Type", "application/json")
	return h, body
}

// A signed push of the followed branch compiles what the repository holds;
// a forged one, a push of another branch and an environment without a
// source change nothing.
func TestWebhook(t *testing.T) {
	r := storedRig(t, true)
	repo := gittest.New(t)
	repo.Commit(map[string]string{"main.hcl": goodModel})
	v, err := r.srv.SetSource(r.ctx, "test", record.SourceRequest{URL: repo.URL(), Ref: "main"}, "alice")
	if err != nil {
		t.Fatal(err)
	}
	first := r.finished()
	secret := v.WebhookSecret
	rev := repo.Commit(map[string]string{"main.hcl": goodModel2})

	forged, body := githubPush("whsec_not-the-secret-at-all", "refs/heads/main", rev, "main")
	if _, err := r.srv.Webhook(r.ctx, "test", forged, body); !errors.Is(err, record.ErrWebhookRefused) {
		t.Fatalf("forged webhook: %v, want refused", err)
	}
	tampered, body := githubPush(secret, "refs/heads/main", rev, "main")
	if _, err := r.srv.Webhook(r.ctx, "test", tampered, append(body, ' ')); !errors.Is(err, record.ErrWebhookRefused) {
		t.Fatalf("tampered body: %v, want refused", err)
	}
	if _, err := r.srv.Webhook(r.ctx, "nosource", tampered, body); !errors.Is(err, record.ErrWebhookRefused) {
		t.Fatalf("webhook of an environment without a source: %v, want refused alike", err)
	}
	other, body := githubPush(secret, "refs/heads/feature", rev, "main")
	if res, err := r.srv.Webhook(r.ctx, "test", other, body); err != nil || res.Compile || !strings.Contains(res.Why, "refs/heads/feature") {
		t.Fatalf("push of another branch: %+v (%v), want no compile, saying why", res, err)
	}

	h, body := githubPush(secret, "refs/heads/main", rev, "main")
	res, err := r.srv.Webhook(r.ctx, "test", h, body)
	if err != nil || !res.Compile || res.Provider != "github" || res.Event != "push" {
		t.Fatalf("signed push: %+v (%v)", res, err)
	}
	c := r.finished()
	// Had any refused delivery asked for a compile, this one would count
	// it, or another would have run before it.
	if c.Outcome != record.CompileReleased || c.Revision != rev || len(c.Triggers) != 1 || c.Triggers[0].Kind != record.TriggerWebhook ||
		c.Triggers[0].Count != 1 || !strings.Contains(c.Triggers[0].By, "acme/fleet") || c.Version != first.Version+1 {
		t.Fatalf("compile after the push: %+v, want one webhook trigger releasing %s as version %d", c, rev, first.Version+1)
	}
	list, err := r.store.ListCompiles(r.ctx, "test", 10)
	if err != nil || len(list) != 2 {
		t.Fatalf("%d compiles (%v), want 2: the source set, the push", len(list), err)
	}
}

// A source with a poll interval is asked for its revision by the
// environment's leader; a revision no compile read yet is compiled.
func TestPolledSource(t *testing.T) {
	r := startRigWith(t, func(c *server.Config, st store.Store) {
		c.Sources, c.LeadEvery = server.StoredSources(st, server.SourceOptions{AllowFile: true}), 20*time.Millisecond
	}, map[string]record.EnvSettings{"test": record.DefaultEnvSettings(), "nosource": record.DefaultEnvSettings()})
	repo := gittest.New(t)
	rev := repo.Commit(map[string]string{"main.hcl": goodModel})
	// Stored as it is, so that no operator's compile comes first.
	spec := fmt.Appendf(nil, `{"url": %q}`, repo.URL())
	if _, err := r.store.PutSource(r.ctx, record.Source{Env: "test", Kind: record.SourceGit, Spec: spec, PollInterval: record.MinPollInterval}); err != nil {
		t.Fatal(err)
	}
	c := r.finished()
	if c.Outcome != record.CompileReleased || c.Revision != rev || c.Triggers.String() != "poll ("+rev[:12]+")" {
		t.Fatalf("polled compile: %+v (triggers %s), want released at %s, triggered by the poll", c, c.Triggers, rev)
	}
}

// Bad sources fail their compile with a report that says why, release
// nothing, and leave the server answering.
func TestBadSources(t *testing.T) {
	// The time limit is short for the compile that must exceed it alone:
	// on a loaded machine the others' fetches could too.
	rig := func(timeout time.Duration) *rig {
		r := startRigWith(t, func(c *server.Config, st store.Store) {
			c.Sources = server.StoredSources(st, server.SourceOptions{AllowFile: true, Limits: source.Limits{MaxBytes: 64 << 10, MaxFiles: 100}})
			c.CompileTimeout = timeout
		}, map[string]record.EnvSettings{"test": record.DefaultEnvSettings(), "nosource": record.DefaultEnvSettings()})
		r.waitCompiles()
		return r
	}
	r, short := rig(0), rig(300*time.Millisecond)
	cases := []struct {
		name  string
		files map[string]string
		want  string
	}{
		{"reads outside its directory", map[string]string{"main.hcl": "host \"web-1\" {\n  file \"/x\" { content = file(\"../../etc/passwd\") }\n}\n"}, "outside"},
		{"link out of the checkout", map[string]string{"main.hcl": goodModel, "evil.hcl": "->/etc/passwd"}, "link"},
		{"over the size limit", map[string]string{"main.hcl": goodModel, "big.txt": strings.Repeat("x", 100<<10)}, "limit"},
		{"compile over the time limit", map[string]string{"main.hcl": "host \"web-1\" {\n  file \"f\" {\n    for_each = toset(flatten([for i in range(1000) : [for j in range(200) : \"${i}-${j}\"]]))\n    path = \"/srv/${each.key}\"\n    content = each.key\n  }\n}\n"}, "time"},
	}
	for _, tt := range cases {
		r := r
		if tt.want == "time" {
			r = short
		}
		repo := gittest.New(t)
		rev := repo.Commit(tt.files)
		if _, err := r.srv.SetSource(r.ctx, "test", record.SourceRequest{URL: repo.URL()}, "alice"); err != nil {
			t.Fatal(err)
		}
		c := r.finished()
		if c.Outcome != record.CompileFailed || c.Version != 0 || !strings.Contains(strings.ToLower(fmt.Sprint(c.Diagnostics)), tt.want) {
			t.Errorf("%s (%s): %+v, want failed saying %q", tt.name, rev[:8], c, tt.want)
		}
		if _, err := r.srv.GetSource(r.ctx, "test"); err != nil {
			t.Fatalf("%s: the server stopped answering: %v", tt.name, err)
		}
	}
	if _, err := short.store.ReleasedVersion(short.ctx, "test"); !errors.Is(err, model.ErrNotFound) {
		t.Fatalf("a compile over the time limit released a version: %v", err)
	}
	if _, err := r.store.ReleasedVersion(r.ctx, "test"); !errors.Is(err, model.ErrNotFound) {
		t.Fatalf("bad sources released a version: %v", err)
	}
}
