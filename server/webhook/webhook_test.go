package webhook

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"
)

// The environment's secret in these tests, and the key a signing token
// decodes from it.
var (
	testKey    = []byte("0123456789abcdef0123456789abcdef")
	testSecret = "whsec_" + base64.StdEncoding.EncodeToString(testKey)
	testNow    = time.Unix(1714990000, 0)
	testStamp  = strconv.FormatInt(testNow.Unix(), 10)
)

func hubSig(secret string, body []byte) string {
	m := hmac.New(sha256.New, []byte(secret))
	m.Write(body)
	return hex.EncodeToString(m.Sum(nil))
}

func stdSig(key []byte, id, ts string, body []byte) string {
	m := hmac.New(sha256.New, key)
	m.Write([]byte(id + "." + ts + "."))
	m.Write(body)
	return base64.StdEncoding.EncodeToString(m.Sum(nil))
}

func sample(t testing.TB, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// headers builds a request's headers from name, value pairs.
func headers(kv ...string) http.Header {
	h := http.Header{}
	for i := 0; i < len(kv); i += 2 {
		h.Add(kv[i], kv[i+1])
	}
	return h
}

// Headers as each host sends them, signed with secret.
func githubHeaders(event string, body []byte, secret string) http.Header {
	return headers("X-GitHub-Event", event, "X-GitHub-Delivery", "72d3162e-cc78-11e3-81ab-4c9367dc0958",
		"X-Hub-Signature-256", "sha256="+hubSig(secret, body), "Content-Type", "application/json")
}

func giteaHeaders(body []byte, secret string) http.Header {
	sig := hubSig(secret, body)
	return headers("X-Gitea-Event", "push", "X-Gitea-Event-Type", "push", "X-Gitea-Delivery", "c4a3c1a0-2f0e-4a57-9d8b-5b3f1f7e2a10",
		"X-GitHub-Event", "push", "X-GitHub-Delivery", "c4a3c1a0-2f0e-4a57-9d8b-5b3f1f7e2a10", "X-Gogs-Event", "push",
		"X-Gitea-Signature", sig, "X-Gogs-Signature", sig, "X-Hub-Signature", "sha1=0000", "X-Hub-Signature-256", "sha256="+sig)
}

func forgejoHeaders(body []byte, secret string) http.Header {
	h := giteaHeaders(body, secret)
	h.Set("X-Forgejo-Event", "push")
	h.Set("X-Forgejo-Delivery", "0b9f4e51-7a3d-4c2e-8f61-2d5c9a7b3e04")
	h.Set("X-Forgejo-Signature", hubSig(secret, body))
	return h
}

func gitlabSigned(event string, body []byte, key []byte, ts string) http.Header {
	id := "8d6a7b2c-3e4f-4a5b-9c8d-7e6f5a4b3c2d"
	return headers("X-Gitlab-Event", event, "X-Gitlab-Event-UUID", "13792a34-cac6-4fda-95a8-c58e00a3954e", "Idempotency-Key", id,
		"webhook-id", id, "webhook-timestamp", ts, "webhook-signature", "v1,"+stdSig(key, id, ts, body))
}

func gitlabToken(event, token string) http.Header {
	return headers("X-Gitlab-Event", event, "X-Gitlab-Event-UUID", "13792a34-cac6-4fda-95a8-c58e00a3954e",
		"X-Gitlab-Instance", "https://gitlab.example.com", "X-Gitlab-Token", token)
}

func TestVerifyAccepts(t *testing.T) {
	ghPush := sample(t, "github-push.json")
	ghTag := sample(t, "github-tag-push.json")
	ghDelete := sample(t, "github-branch-delete.json")
	ghPing := sample(t, "github-ping.json")
	gtPush := sample(t, "gitea-push.json")
	fjPush := sample(t, "forgejo-push.json")
	glPush := sample(t, "gitlab-push.json")
	glTag := sample(t, "gitlab-tag-push.json")
	glDelete := sample(t, "gitlab-branch-delete.json")
	form := []byte("payload=" + url.QueryEscape(string(ghPush)))

	ghMain := &Push{Ref: "refs/heads/main", After: "0d1a26e67d8f5eaf1f6ba5c57fc3c7d91ac0fd1c", DefaultBranch: "main", Repository: "acme/fleet-models"}
	glProd := &Push{Ref: "refs/heads/production", After: "da1560886d4f094c3e6c9ef40349f7d38b5d27d7", DefaultBranch: "production", Repository: "infra/platform/fleet"}
	const ghID, glID, glUUID = "72d3162e-cc78-11e3-81ab-4c9367dc0958", "8d6a7b2c-3e4f-4a5b-9c8d-7e6f5a4b3c2d", "13792a34-cac6-4fda-95a8-c58e00a3954e"

	tests := []struct {
		name string
		h    http.Header
		body []byte
		now  time.Time
		want Delivery
	}{
		{"github push", githubHeaders("push", ghPush, testSecret), ghPush, testNow,
			Delivery{GitHub, EventPush, ghID, "X-Hub-Signature-256", ghMain}},
		{"github push as a form", func() http.Header {
			h := githubHeaders("push", form, testSecret)
			h.Set("Content-Type", "application/x-www-form-urlencoded")
			return h
		}(), form, testNow, Delivery{GitHub, EventPush, ghID, "X-Hub-Signature-256", ghMain}},
		{"github tag push", githubHeaders("push", ghTag, testSecret), ghTag, testNow,
			Delivery{GitHub, EventTagPush, ghID, "X-Hub-Signature-256", &Push{Ref: "refs/tags/v1.4.0", After: "5c1e0a0b7f0c4a8d2e5b9f3c6a1d4e7b8c9f0a12", DefaultBranch: "main", Repository: "acme/fleet-models"}}},
		{"github branch deleted", githubHeaders("push", ghDelete, testSecret), ghDelete, testNow,
			Delivery{GitHub, EventPush, ghID, "X-Hub-Signature-256", &Push{Ref: "refs/heads/feature/tls", After: strings.Repeat("0", 40), Deleted: true, DefaultBranch: "main", Repository: "acme/fleet-models"}}},
		{"github ping", githubHeaders("ping", ghPing, testSecret), ghPing, testNow,
			Delivery{GitHub, EventPing, ghID, "X-Hub-Signature-256", nil}},
		{"github other event", githubHeaders("pull_request", []byte(`{"action":"opened"}`), testSecret), []byte(`{"action":"opened"}`), testNow,
			Delivery{GitHub, "pull_request", ghID, "X-Hub-Signature-256", nil}},
		{"gitea push, every header", giteaHeaders(gtPush, testSecret), gtPush, testNow,
			Delivery{Gitea, EventPush, "c4a3c1a0-2f0e-4a57-9d8b-5b3f1f7e2a10", "X-Hub-Signature-256",
				&Push{Ref: "refs/heads/develop", After: "bffeb74224043ba2feb48d137756c8a9331c449a", DefaultBranch: "main", Repository: "ops/site-config"}}},
		{"gitea push, X-Gitea-Signature alone", headers("X-Gitea-Event", "push", "X-Gitea-Signature", hubSig(testSecret, gtPush)), gtPush, testNow,
			Delivery{Gitea, EventPush, "", "X-Gitea-Signature",
				&Push{Ref: "refs/heads/develop", After: "bffeb74224043ba2feb48d137756c8a9331c449a", DefaultBranch: "main", Repository: "ops/site-config"}}},
		{"forgejo push, every header", forgejoHeaders(fjPush, testSecret), fjPush, testNow,
			Delivery{Forgejo, EventPush, "0b9f4e51-7a3d-4c2e-8f61-2d5c9a7b3e04", "X-Hub-Signature-256",
				&Push{Ref: "refs/heads/main", After: "4b6d8f0a2c4e6a8c0e2a4c6e8a0c2e4a6c8e0a2c", DefaultBranch: "main", Repository: "homelab/nodes"}}},
		{"forgejo push, X-Forgejo-Signature alone", headers("X-Forgejo-Event", "push", "X-Forgejo-Signature", hubSig(testSecret, fjPush)), fjPush, testNow,
			Delivery{Forgejo, EventPush, "", "X-Forgejo-Signature",
				&Push{Ref: "refs/heads/main", After: "4b6d8f0a2c4e6a8c0e2a4c6e8a0c2e4a6c8e0a2c", DefaultBranch: "main", Repository: "homelab/nodes"}}},
		{"gitlab signing token", gitlabSigned("Push Hook", glPush, testKey, testStamp), glPush, testNow,
			Delivery{GitLab, EventPush, glID, "Webhook-Signature", glProd}},
		{"gitlab signing token 4 minutes old", gitlabSigned("Push Hook", glPush, testKey, testStamp), glPush, testNow.Add(4 * time.Minute),
			Delivery{GitLab, EventPush, glID, "Webhook-Signature", glProd}},
		{"gitlab signing token 4 minutes ahead", gitlabSigned("Push Hook", glPush, testKey, testStamp), glPush, testNow.Add(-4 * time.Minute),
			Delivery{GitLab, EventPush, glID, "Webhook-Signature", glProd}},
		{"gitlab signing token among others", func() http.Header {
			h := gitlabSigned("Push Hook", glPush, testKey, testStamp)
			good := h.Get("webhook-signature")
			old := "v1," + stdSig([]byte("a rotated-out key"), glID, testStamp, glPush)
			h.Set("webhook-signature", "v1a,bm90IGNoZWNrZWQ= "+old+" "+good)
			return h
		}(), glPush, testNow, Delivery{GitLab, EventPush, glID, "Webhook-Signature", glProd}},
		{"gitlab signing token and a stale secret token", func() http.Header {
			h := gitlabSigned("Push Hook", glPush, testKey, testStamp)
			h.Set("X-Gitlab-Token", "an old token")
			return h
		}(), glPush, testNow, Delivery{GitLab, EventPush, glID, "Webhook-Signature", glProd}},
		{"gitlab tag push", gitlabSigned("Tag Push Hook", glTag, testKey, testStamp), glTag, testNow,
			Delivery{GitLab, EventTagPush, glID, "Webhook-Signature", &Push{Ref: "refs/tags/release-2024.05", After: "da1560886d4f094c3e6c9ef40349f7d38b5d27d7", DefaultBranch: "production", Repository: "infra/platform/fleet"}}},
		{"gitlab branch deleted", gitlabSigned("Push Hook", glDelete, testKey, testStamp), glDelete, testNow,
			Delivery{GitLab, EventPush, glID, "Webhook-Signature", &Push{Ref: "refs/heads/hotfix/ntp", After: strings.Repeat("0", 40), Deleted: true, DefaultBranch: "production", Repository: "infra/platform/fleet"}}},
		{"gitlab secret token", gitlabToken("Push Hook", testSecret), glPush, testNow,
			Delivery{GitLab, EventPush, glUUID, "X-Gitlab-Token", glProd}},
		{"gitlab other event", gitlabToken("Merge Request Hook", testSecret), []byte(`{"object_kind":"merge_request"}`), testNow,
			Delivery{GitLab, "Merge Request Hook", glUUID, "X-Gitlab-Token", nil}},
		{"generic", headers("X-Tether-Signature", "sha256="+hubSig(testSecret, ghPush), "X-Tether-Delivery", "run-42"), ghPush, testNow,
			Delivery{Generic, EventPush, "run-42", "X-Tether-Signature", ghMain}},
		{"generic, upper-case hex", headers("X-Tether-Signature", "sha256="+strings.ToUpper(hubSig(testSecret, ghPush))), ghPush, testNow,
			Delivery{Generic, EventPush, "", "X-Tether-Signature", ghMain}},
		{"generic ping", headers("X-Tether-Event", "ping", "X-Tether-Signature", "sha256="+hubSig(testSecret, []byte("{}"))), []byte("{}"), testNow,
			Delivery{Generic, EventPing, "", "X-Tether-Signature", nil}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Verify(tt.h, tt.body, testSecret, tt.now)
			if err != nil {
				t.Fatalf("Verify: %v", err)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("got %+v (push %+v), want %+v (push %+v)", got, got.Push, tt.want, tt.want.Push)
			}
		})
	}
}

func TestVerifyRefuses(t *testing.T) {
	ghPush := sample(t, "github-push.json")
	glPush := sample(t, "gitlab-push.json")
	other := "whsec_" + base64.StdEncoding.EncodeToString([]byte("another environment's 32 byte k"))
	// A valid push, but one byte too long.
	big := []byte(`{"ref": "refs/heads/main", "after": "0d1a26e67d8f5eaf1f6ba5c57fc3c7d91ac0fd1c"}`)
	big = append(big, strings.Repeat(" ", MaxBody+1-len(big))...)
	tampered := []byte(strings.Replace(string(ghPush), "refs/heads/main", "refs/heads/evil", 1))
	with := func(h http.Header, kv ...string) http.Header {
		for i := 0; i < len(kv); i += 2 {
			h.Set(kv[i], kv[i+1])
		}
		return h
	}
	signedGeneric := func(body string) (http.Header, []byte) {
		return headers("X-Tether-Signature", "sha256="+hubSig(testSecret, []byte(body))), []byte(body)
	}

	type refusal struct {
		name   string
		h      http.Header
		body   []byte
		secret string
		now    time.Time
		want   error
	}
	tests := []refusal{
		{"github, wrong secret", githubHeaders("push", ghPush, other), ghPush, testSecret, testNow, ErrUnauthenticated},
		{"github, tampered body", githubHeaders("push", ghPush, testSecret), tampered, testSecret, testNow, ErrUnauthenticated},
		{"gitea, wrong secret", headers("X-Gitea-Event", "push", "X-Gitea-Signature", hubSig(other, ghPush)), ghPush, testSecret, testNow, ErrUnauthenticated},
		{"forgejo, wrong secret", headers("X-Forgejo-Event", "push", "X-Forgejo-Signature", hubSig(other, ghPush)), ghPush, testSecret, testNow, ErrUnauthenticated},
		{"forgejo, tampered body", forgejoHeaders(ghPush, testSecret), tampered, testSecret, testNow, ErrUnauthenticated},
		{"generic, wrong secret", headers("X-Tether-Signature", "sha256="+hubSig(other, ghPush)), ghPush, testSecret, testNow, ErrUnauthenticated},
		{"gitlab signing token, wrong secret", gitlabSigned("Push Hook", glPush, []byte("another environment's 32 byte k"), testStamp), glPush, testSecret, testNow, ErrUnauthenticated},
		{"gitlab signing token, tampered body", gitlabSigned("Push Hook", glPush, testKey, testStamp), append([]byte(" "), glPush...), testSecret, testNow, ErrUnauthenticated},
		{"gitlab signing token, id changed", with(gitlabSigned("Push Hook", glPush, testKey, testStamp), "webhook-id", "another"), glPush, testSecret, testNow, ErrUnauthenticated},
		{"gitlab signing token, stale", gitlabSigned("Push Hook", glPush, testKey, testStamp), glPush, testSecret, testNow.Add(6 * time.Minute), ErrUnauthenticated},
		{"gitlab signing token, from the future", gitlabSigned("Push Hook", glPush, testKey, testStamp), glPush, testSecret, testNow.Add(-6 * time.Minute), ErrUnauthenticated},
		{"gitlab signing token, timestamp far off", gitlabSigned("Push Hook", glPush, testKey, "-9223372036854775808"), glPush, testSecret, testNow, ErrUnauthenticated},
		{"gitlab signing token, no v1", with(gitlabSigned("Push Hook", glPush, testKey, testStamp), "webhook-signature", "v1a,bm90IGNoZWNrZWQ="), glPush, testSecret, testNow, ErrUnauthenticated},
		{"gitlab signing token, secret not whsec_", gitlabSigned("Push Hook", glPush, []byte("plain"), testStamp), glPush, "plain", testNow, ErrUnauthenticated},
		{"gitlab secret token, wrong", gitlabToken("Push Hook", other), glPush, testSecret, testNow, ErrUnauthenticated},
		{"gitlab secret token, a prefix of the secret", gitlabToken("Push Hook", testSecret[:20]), glPush, testSecret, testNow, ErrUnauthenticated},
		{"a valid token does not excuse a bad signature", with(githubHeaders("push", ghPush, other), "X-Gitlab-Token", testSecret), ghPush, testSecret, testNow, ErrUnauthenticated},
		{"no signature", headers("X-GitHub-Event", "push", "X-GitHub-Delivery", "1"), ghPush, testSecret, testNow, ErrUnauthenticated},
		{"SHA-1 signature only", headers("X-GitHub-Event", "push", "X-Hub-Signature", "sha1=0f0e"), ghPush, testSecret, testNow, ErrUnauthenticated},
		{"empty secret", githubHeaders("push", ghPush, ""), ghPush, "", testNow, ErrUnauthenticated},
		{"empty secret, empty token", headers("X-Gitlab-Event", "Push Hook", "X-Gitlab-Token", ""), glPush, "", testNow, ErrUnauthenticated},

		{"malformed: no sha256= prefix", with(githubHeaders("push", ghPush, testSecret), "X-Hub-Signature-256", hubSig(testSecret, ghPush)), ghPush, testSecret, testNow, ErrInvalid},
		{"malformed: sha1= prefix", with(githubHeaders("push", ghPush, testSecret), "X-Hub-Signature-256", "sha1="+hubSig(testSecret, ghPush)), ghPush, testSecret, testNow, ErrInvalid},
		{"malformed: not hex", with(githubHeaders("push", ghPush, testSecret), "X-Hub-Signature-256", "sha256="+strings.Repeat("zz", 32)), ghPush, testSecret, testNow, ErrInvalid},
		{"malformed: short", with(githubHeaders("push", ghPush, testSecret), "X-Hub-Signature-256", "sha256="+hubSig(testSecret, ghPush)[:40]), ghPush, testSecret, testNow, ErrInvalid},
		{"malformed: gitea with a prefix", headers("X-Gitea-Event", "push", "X-Gitea-Signature", "sha256="+hubSig(testSecret, ghPush)), ghPush, testSecret, testNow, ErrInvalid},
		{"malformed: repeated signature", func() http.Header {
			h := githubHeaders("push", ghPush, testSecret)
			h.Add("X-Hub-Signature-256", "sha256="+hubSig(other, ghPush))
			return h
		}(), ghPush, testSecret, testNow, ErrInvalid},
		{"malformed: timestamp not seconds", with(gitlabSigned("Push Hook", glPush, testKey, testStamp), "webhook-timestamp", "2024-05-06T11:21:35Z"), glPush, testSecret, testNow, ErrInvalid},
		{"malformed: signature without id", func() http.Header {
			h := gitlabSigned("Push Hook", glPush, testKey, testStamp)
			h.Del("webhook-id")
			return h
		}(), glPush, testSecret, testNow, ErrInvalid},
		{"malformed: signature entry without version", with(gitlabSigned("Push Hook", glPush, testKey, testStamp), "webhook-signature", stdSig(testKey, "x", testStamp, glPush)), glPush, testSecret, testNow, ErrInvalid},
		{"malformed: v1 not base64", with(gitlabSigned("Push Hook", glPush, testKey, testStamp), "webhook-signature", "v1,***"), glPush, testSecret, testNow, ErrInvalid},
		{"malformed: event with a control character", with(githubHeaders("push", ghPush, testSecret), "X-GitHub-Event", "push\x01"), ghPush, testSecret, testNow, ErrInvalid},
		{"malformed: delivery id too long", with(githubHeaders("push", ghPush, testSecret), "X-GitHub-Delivery", strings.Repeat("a", 300)), ghPush, testSecret, testNow, ErrInvalid},
		{"body over MaxBody", headers("X-Tether-Signature", "sha256="+hubSig(testSecret, big)), big, testSecret, testNow, ErrInvalid},
	}
	for _, payload := range []string{"not json", `{"ref": 7, "after": "0d1a26e67d8f5eaf1f6ba5c57fc3c7d91ac0fd1c"}`,
		`{"ref": "main", "after": "0d1a26e67d8f5eaf1f6ba5c57fc3c7d91ac0fd1c"}`, `{"ref": "refs/heads/main", "after": "HEAD"}`, `{"ref": "refs/heads/a\nb", "after": "0d1a26e67d8f5eaf1f6ba5c57fc3c7d91ac0fd1c"}`, `{"ref": "refs/heads/main"}`} {
		h, body := signedGeneric(payload)
		tests = append(tests, refusal{"authenticated, bad payload " + payload, h, body, testSecret, testNow, ErrInvalid})
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d, err := Verify(tt.h, tt.body, tt.secret, tt.now)
			if !errors.Is(err, tt.want) {
				t.Fatalf("got %+v, %v; want %v", d, err, tt.want)
			}
			if other := map[error]error{ErrInvalid: ErrUnauthenticated, ErrUnauthenticated: ErrInvalid}[tt.want]; errors.Is(err, other) {
				t.Errorf("error %v is also %v", err, other)
			}
			// Nothing an attacker could use: the secret, its key, what the
			// signature should have been.
			secrets := []string{tt.secret, strings.TrimPrefix(tt.secret, "whsec_"), hubSig(tt.secret, tt.body)}
			if id, ts := tt.h.Get("webhook-id"), tt.h.Get("webhook-timestamp"); id != "" {
				secrets = append(secrets, stdSig(testKey, id, ts, tt.body))
			}
			for _, s := range secrets {
				if s != "" && strings.Contains(err.Error(), s) {
					t.Errorf("error %q holds %q", err, s)
				}
			}
		})
	}
}

func TestNewSecret(t *testing.T) {
	a, err := NewSecret()
	if err != nil {
		t.Fatal(err)
	}
	b, err := NewSecret()
	if err != nil {
		t.Fatal(err)
	}
	if a == b {
		t.Errorf("two secrets are the same: %s", a)
	}
	key, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(a, "whsec_"))
	if !strings.HasPrefix(a, "whsec_") || err != nil || len(key) != 32 {
		t.Fatalf("got secret %q (%v), want whsec_ and the base64 of 32 bytes", a, err)
	}
	// Every host can use it.
	body := sample(t, "github-push.json")
	for name, h := range map[string]http.Header{
		"github":  githubHeaders("push", body, a),
		"gitea":   giteaHeaders(body, a),
		"forgejo": forgejoHeaders(body, a),
		"gitlab":  gitlabSigned("Push Hook", body, key, testStamp),
		"token":   gitlabToken("Push Hook", a),
		"generic": headers("X-Tether-Signature", "sha256="+hubSig(a, body)),
	} {
		if _, err := Verify(h, body, a, testNow); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
}

func TestMatches(t *testing.T) {
	const commit = "0d1a26e67d8f5eaf1f6ba5c57fc3c7d91ac0fd1c"
	branch := func(ref, defaultBranch string) Delivery {
		return Delivery{Provider: GitHub, Event: EventPush, Push: &Push{Ref: ref, After: commit, DefaultBranch: defaultBranch}}
	}
	tag := Delivery{Provider: GitLab, Event: EventTagPush, Push: &Push{Ref: "refs/tags/v1", After: commit, DefaultBranch: "main"}}
	deleted := Delivery{Provider: GitHub, Event: EventPush, Push: &Push{Ref: "refs/heads/main", After: strings.Repeat("0", 40), Deleted: true, DefaultBranch: "main"}}

	tests := []struct {
		name   string
		d      Delivery
		ref    string
		want   bool
		reason string // in the reason given, when set
	}{
		{"branch by name", branch("refs/heads/main", "main"), "main", true, ""},
		{"other branch by name", branch("refs/heads/dev", "main"), "main", false, ""},
		{"branch by full ref", branch("refs/heads/main", "main"), "refs/heads/main", true, ""},
		{"other branch by full ref", branch("refs/heads/main", "main"), "refs/heads/dev", false, ""},
		{"nested branch", branch("refs/heads/release/2024", "main"), "release/2024", true, ""},
		{"a branch ref is not its suffix", branch("refs/heads/feature/main", "main"), "main", false, ""},
		{"branch push, tag ref of that name", branch("refs/heads/v1", "main"), "refs/tags/v1", false, ""},
		{"HEAD, push to the default branch", branch("refs/heads/main", "main"), "", true, ""},
		{"HEAD, push to another branch", branch("refs/heads/dev", "main"), "", false, ""},
		{"HEAD spelt out", branch("refs/heads/main", "main"), "HEAD", true, ""},
		{"HEAD, default branch unknown", branch("refs/heads/dev", ""), "", true, "does not name"},
		{"HEAD, tag push", tag, "", false, ""},
		{"tag by name", tag, "v1", true, ""},
		{"tag by full ref", tag, "refs/tags/v1", true, ""},
		{"other tag", tag, "v2", false, ""},
		{"tag push, branch ref of that name", tag, "refs/heads/v1", false, ""},
		{"tag push, branch followed", tag, "main", false, ""},
		{"pinned commit, push of that commit", branch("refs/heads/main", "main"), commit, false, "pinned to commit " + commit},
		{"deleted branch", deleted, "main", false, "deletes refs/heads/main"},
		{"deleted branch, HEAD", deleted, "", false, "deletes"},
		{"ping", Delivery{Provider: GitHub, Event: EventPing}, "main", false, "not a push"},
		{"other event", Delivery{Provider: GitLab, Event: "Merge Request Hook"}, "", false, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, why := tt.d.Matches(tt.ref)
			if got != tt.want {
				t.Errorf("Matches(%q) = %v (%s), want %v", tt.ref, got, why, tt.want)
			}
			if why == "" || !strings.Contains(why, tt.reason) {
				t.Errorf("Matches(%q) gave the reason %q, want one with %q", tt.ref, why, tt.reason)
			}
		})
	}
}

// FuzzVerify feeds arbitrary headers and bodies to Verify: it never
// panics, every error is one of the two sentinels, a delivery it accepts
// was authenticated by a header it names, and Matches never panics on it.
func FuzzVerify(f *testing.F) {
	ghPush := sample(f, "github-push.json")
	glPush := sample(f, "gitlab-push.json")
	glID := "8d6a7b2c-3e4f-4a5b-9c8d-7e6f5a4b3c2d"
	f.Add(uint8(0), "push", "sha256="+hubSig(testSecret, ghPush), "", "", "application/json", ghPush)
	f.Add(uint8(1), "push", hubSig(testSecret, ghPush), "", "", "", ghPush)
	f.Add(uint8(2), "push", hubSig(testSecret, ghPush), "", "", "", ghPush)
	f.Add(uint8(3), "Push Hook", "v1,"+stdSig(testKey, glID, testStamp, glPush), glID, testStamp, "", glPush)
	f.Add(uint8(4), "Tag Push Hook", testSecret, "", "", "", glPush)
	f.Add(uint8(5), "", "sha256="+hubSig(testSecret, []byte(`{"ref":"refs/tags/x","after":"00"}`)), "", "", "", []byte(`{"ref":"refs/tags/x","after":"00"}`))
	form := []byte("payload=" + url.QueryEscape(string(ghPush)))
	f.Add(uint8(0), "push", "sha256="+hubSig(testSecret, form), "", "", "application/x-www-form-urlencoded", form)
	f.Fuzz(func(t *testing.T, kind uint8, event, sig, id, ts, contentType string, body []byte) {
		h := http.Header{}
		eventHeader := []string{"X-GitHub-Event", "X-Gitea-Event", "X-Forgejo-Event", "X-Gitlab-Event", "X-Gitlab-Event", "X-Tether-Event"}[kind%6]
		sigHeader := []string{"X-Hub-Signature-256", "X-Gitea-Signature", "X-Forgejo-Signature", "Webhook-Signature", "X-Gitlab-Token", "X-Tether-Signature"}[kind%6]
		h.Set(eventHeader, event)
		h.Set(sigHeader, sig)
		h.Set("Webhook-Id", id)
		h.Set("Webhook-Timestamp", ts)
		h.Set("Content-Type", contentType)
		d, err := Verify(h, body, testSecret, testNow)
		if err != nil {
			if errors.Is(err, ErrInvalid) == errors.Is(err, ErrUnauthenticated) {
				t.Fatalf("error %v is not exactly one of ErrInvalid, ErrUnauthenticated", err)
			}
			if strings.Contains(err.Error(), testSecret) || strings.Contains(err.Error(), hubSig(testSecret, body)) {
				t.Fatalf("error %q holds the secret or the signature", err)
			}
			return
		}
		if d.Auth != sigHeader {
			t.Fatalf("authenticated by %q, but only %s was sent", d.Auth, sigHeader)
		}
		if sigHeader == "X-Hub-Signature-256" && !strings.EqualFold(sig, "sha256="+hubSig(testSecret, body)) {
			t.Fatalf("accepted signature %q for a body whose signature is another", sig)
		}
		for _, ref := range []string{"", "HEAD", "main", "refs/heads/main", "v1", "refs/tags/v1", strings.Repeat("a", 40)} {
			d.Matches(ref)
		}
	})
}
