// Package webhook authenticates and reads the push webhooks of git hosts
// (GitHub, Gitea, Forgejo, GitLab, or anything that signs like them), so
// that a push to an environment's git source can trigger a compile of its
// model. It is pure functions over a request's headers and body: the HTTP
// handler reads the body (at most MaxBody bytes), calls Verify with the
// environment's secret, and asks the Delivery whether it Matches the ref
// the source follows.
//
// One secret serves every host: NewSecret makes a whsec_ secret, which
// GitHub, Gitea and Forgejo use as an HMAC key as it is written, and
// GitLab's signing tokens (the Standard Webhooks scheme) decode.
//
// Every method but GitLab's signing token is replayable: a captured GitHub,
// Gitea or Forgejo delivery verifies again later, as does one carrying a
// plain token. Replaying a push only asks for another compile of the same
// source, which the compile queue folds, so this package keeps no memory of
// deliveries.
package webhook

import (
	"cmp"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// MaxBody is the largest body Verify accepts. Hosts cap a push's commit
// list (GitLab at 20 commits, GitHub at 2048), so a push fits with room to
// spare; the handler reads at most MaxBody+1 bytes and refuses more.
const MaxBody = 5 << 20

// Tolerance is how far a signing token's timestamp may be from now, either
// way, before its delivery is refused as a replay.
const Tolerance = 5 * time.Minute

// The errors of Verify, for callers to tell apart (errors.Is). Their
// messages never hold the secret or the signature expected.
var (
	// ErrUnauthenticated: no signature or token, one that does not match
	// the secret, a stale signing token, or no secret to check against.
	ErrUnauthenticated = errors.New("webhook not authenticated")
	// ErrInvalid: a malformed header, a body over MaxBody, or (once
	// authenticated) a payload that is not what its event says.
	ErrInvalid = errors.New("invalid webhook")
)

// Provider is the host that sent a delivery, told by its event header.
type Provider string

// The providers. Generic is anything else signing with X-Tether-Signature
// (a script, a test, a host that lets one name the headers).
const (
	GitHub  Provider = "github"
	Gitea   Provider = "gitea"
	Forgejo Provider = "forgejo"
	GitLab  Provider = "gitlab"
	Generic Provider = "generic"
)

// The normalized events. Other events keep the host's own name.
const (
	EventPush    = "push"     // a push to a branch (or another ref that is not a tag)
	EventTagPush = "tag_push" // a push of a tag, from any host
	EventPing    = "ping"     // GitHub's hello when a hook is created
)

// Delivery is an authenticated webhook request.
type Delivery struct {
	Provider Provider
	// Event is EventPush, EventTagPush, EventPing, or the host's own name
	// of any other event ("pull_request", "Merge Request Hook"…).
	Event string
	// ID is the host's delivery id, for logs; empty when it sent none.
	ID string
	// Auth is the header that authenticated the delivery, for logs: a
	// delivery authenticated by X-Gitlab-Token carried the secret itself.
	Auth string
	// Push is what a push says; nil for any other event.
	Push *Push
}

// NewSecret returns a fresh webhook secret: "whsec_" and the standard
// base64 of 32 random bytes, the form GitLab asks of a signing token and
// that every other host takes as it is.
func NewSecret() (string, error) {
	key := make([]byte, 32)
	if _, err := rand.Read(key); err != nil {
		return "", fmt.Errorf("webhook secret: %w", err)
	}
	return secretPrefix + base64.StdEncoding.EncodeToString(key), nil
}

const secretPrefix = "whsec_"

// The headers, canonical as http.Header keeps them.
const (
	hStdID        = "Webhook-Id"
	hStdTimestamp = "Webhook-Timestamp"
	hStdSignature = "Webhook-Signature"
	hHub256       = "X-Hub-Signature-256"
	hForgejoSig   = "X-Forgejo-Signature"
	hGiteaSig     = "X-Gitea-Signature"
	hTetherSig    = "X-Tether-Signature"
	hGitLabToken  = "X-Gitlab-Token"
	hHubSHA1      = "X-Hub-Signature"
)

// Verify authenticates a webhook request against the environment's secret
// and reads it. It accepts, from the strongest:
//
//   - a GitLab signing token (Standard Webhooks): webhook-id,
//     webhook-timestamp (Unix seconds, within Tolerance of now) and
//     webhook-signature, a space-separated list of "v1,<base64 HMAC-SHA256
//     of id.timestamp.body>" keyed with the base64 after the secret's
//     "whsec_";
//   - X-Hub-Signature-256 (GitHub; Gitea and Forgejo send it too):
//     "sha256=<hex HMAC-SHA256 of the body>", keyed with the secret as it
//     is written;
//   - X-Forgejo-Signature or X-Gitea-Signature: the same HMAC, bare hex;
//   - X-Tether-Signature: "sha256=<hex HMAC>", for scripts and other hosts;
//   - X-Gitlab-Token: the secret itself. This is a shared password sent
//     with every delivery, not a signature: anyone who sees one request
//     (a proxy, a log) can forge any other. Use it only over HTTPS, and
//     prefer a GitLab signing token.
//
// The strongest header present is the one checked, and its verdict is
// final: a weaker header beside it is neither needed nor tried. All
// comparisons take constant time. The provider is told by the event
// header (X-Forgejo-Event, X-Gitea-Event, X-Gitlab-Event, X-GitHub-Event;
// X-Tether-Event or none for Generic), independently of the signature.
//
// Errors wrap ErrUnauthenticated or ErrInvalid. The body is parsed only
// once authenticated: JSON, or a form whose "payload" field is the JSON
// (GitHub's and Gitea's application/x-www-form-urlencoded).
func Verify(h http.Header, body []byte, secret string, now time.Time) (Delivery, error) {
	if secret == "" {
		return Delivery{}, fmt.Errorf("%w: the environment has no webhook secret", ErrUnauthenticated)
	}
	if len(body) > MaxBody {
		return Delivery{}, fmt.Errorf("%w: body over %d bytes", ErrInvalid, MaxBody)
	}
	d, err := identify(h)
	if err != nil {
		return Delivery{}, err
	}
	if d.Auth, err = authenticate(h, body, secret, now); err != nil {
		return Delivery{}, err
	}
	if err := d.read(h, body); err != nil {
		return Delivery{}, err
	}
	return d, nil
}

// identify tells the provider, the event and the delivery id from the
// headers. Forgejo also sends Gitea's and GitHub's headers, and Gitea
// GitHub's, so the most specific is looked at first; a request with none
// of the hosts' event headers is Generic, a push unless X-Tether-Event
// says otherwise.
func identify(h http.Header) (Delivery, error) {
	for _, p := range []struct {
		provider Provider
		event    string   // the event header
		delivery []string // the delivery id headers, first found wins
	}{
		{Forgejo, "X-Forgejo-Event", []string{"X-Forgejo-Delivery"}},
		{Gitea, "X-Gitea-Event", []string{"X-Gitea-Delivery"}},
		{GitLab, "X-Gitlab-Event", []string{hStdID, "Idempotency-Key", "X-Gitlab-Event-Uuid"}},
		{GitHub, "X-Github-Event", []string{"X-Github-Delivery"}},
		{Generic, "X-Tether-Event", []string{"X-Tether-Delivery"}},
	} {
		event, err := logged(h, p.event)
		if err != nil {
			return Delivery{}, err
		}
		if event == "" && p.provider != Generic {
			continue
		}
		d := Delivery{Provider: p.provider, Event: cmp.Or(event, EventPush)}
		for _, name := range p.delivery {
			if d.ID, err = logged(h, name); err != nil {
				return Delivery{}, err
			}
			if d.ID != "" {
				break
			}
		}
		return d, nil
	}
	return Delivery{}, nil // not reached: the Generic row matches any request
}

// maxLogged bounds the event and delivery id headers, which end up in logs.
const maxLogged = 256

// logged returns a header that ends up in logs: as header does, and
// refused over maxLogged bytes.
func logged(h http.Header, name string) (string, error) {
	v, err := header(h, name)
	if err == nil && len(v) > maxLogged {
		err = fmt.Errorf("%w: header %s is over %d bytes", ErrInvalid, name, maxLogged)
	}
	return v, err
}

// header returns the one value of a header: empty when absent, an error
// when repeated (a proxy that added one is not to be guessed around) or
// not printable ASCII.
func header(h http.Header, name string) (string, error) {
	vs := h.Values(name)
	switch {
	case len(vs) == 0:
		return "", nil
	case len(vs) > 1:
		return "", fmt.Errorf("%w: header %s is repeated", ErrInvalid, name)
	}
	v := strings.TrimSpace(vs[0])
	if strings.ContainsFunc(v, func(r rune) bool { return r < ' ' || r > '~' }) {
		return "", fmt.Errorf("%w: header %s has a character that is not printable ASCII", ErrInvalid, name)
	}
	return v, nil
}

// method is one way of authenticating a delivery: the header it reads and
// its check of that header's value.
type method struct {
	name  string
	check func(name, value string, body []byte, secret string, h http.Header, now time.Time) error
}

// methods are the ways of authenticating, strongest first.
var methods = []method{
	{hStdSignature, checkStandard},
	{hHub256, checkHexHMAC("sha256=")},
	{hForgejoSig, checkHexHMAC("")},
	{hGiteaSig, checkHexHMAC("")},
	{hTetherSig, checkHexHMAC("sha256=")},
	{hGitLabToken, checkToken},
}

// authenticate checks the strongest signature header present and returns
// its name.
func authenticate(h http.Header, body []byte, secret string, now time.Time) (string, error) {
	for _, m := range methods {
		v, err := header(h, m.name)
		if err != nil {
			return "", err
		}
		if v == "" {
			continue
		}
		if err := m.check(m.name, v, body, secret, h, now); err != nil {
			return "", err
		}
		return m.name, nil
	}
	if h.Get(hHubSHA1) != "" {
		return "", fmt.Errorf("%w: only a SHA-1 signature (X-Hub-Signature), which is not accepted; send X-Hub-Signature-256", ErrUnauthenticated)
	}
	return "", fmt.Errorf("%w: no signature (webhook-signature, X-Hub-Signature-256, X-Forgejo-Signature, X-Gitea-Signature, X-Tether-Signature) and no X-Gitlab-Token", ErrUnauthenticated)
}

func mac(key []byte, parts ...[]byte) []byte {
	m := hmac.New(sha256.New, key)
	for _, p := range parts {
		m.Write(p)
	}
	return m.Sum(nil)
}

// checkHexHMAC checks "<prefix><hex HMAC-SHA256(secret, body)>".
func checkHexHMAC(prefix string) func(string, string, []byte, string, http.Header, time.Time) error {
	return func(name, v string, body []byte, secret string, _ http.Header, _ time.Time) error {
		hexSig, ok := strings.CutPrefix(v, prefix)
		if !ok {
			return fmt.Errorf("%w: %s does not start with %q", ErrInvalid, name, prefix)
		}
		got, err := hex.DecodeString(hexSig)
		if err != nil || len(got) != sha256.Size {
			return fmt.Errorf("%w: %s is not %s and %d hex digits", ErrInvalid, name, prefix, 2*sha256.Size)
		}
		if !hmac.Equal(got, mac([]byte(secret), body)) {
			return fmt.Errorf("%w: %s does not match the body and the environment's secret", ErrUnauthenticated, name)
		}
		return nil
	}
}

// checkStandard checks a Standard Webhooks signature (GitLab's signing
// token).
func checkStandard(_, v string, body []byte, secret string, h http.Header, now time.Time) error {
	id, err := header(h, hStdID)
	if err != nil {
		return err
	}
	ts, err := header(h, hStdTimestamp)
	if err != nil {
		return err
	}
	if id == "" || ts == "" {
		return fmt.Errorf("%w: webhook-signature without webhook-id and webhook-timestamp", ErrInvalid)
	}
	sec, err := strconv.ParseInt(ts, 10, 64)
	if err != nil {
		return fmt.Errorf("%w: webhook-timestamp is not Unix seconds", ErrInvalid)
	}
	if age := now.Sub(time.Unix(sec, 0)); age > Tolerance || age < -Tolerance {
		return fmt.Errorf("%w: webhook-timestamp is more than %s from now (a replay, or a clock off)", ErrUnauthenticated, Tolerance)
	}
	encoded, ok := strings.CutPrefix(secret, secretPrefix)
	key, err := base64.RawStdEncoding.DecodeString(strings.TrimRight(encoded, "="))
	if !ok || err != nil || len(key) == 0 {
		return fmt.Errorf("%w: the environment's secret is not a whsec_ secret, which a signing token needs", ErrUnauthenticated)
	}
	want := mac(key, []byte(id), []byte("."), []byte(ts), []byte("."), body)
	versioned := false
	for sig := range strings.FieldsSeq(v) {
		version, b64, ok := strings.Cut(sig, ",")
		if !ok {
			return fmt.Errorf("%w: webhook-signature entry is not version,signature", ErrInvalid)
		}
		if version != "v1" {
			continue // another scheme (v1a is asymmetric): not ours to check
		}
		versioned = true
		got, err := base64.StdEncoding.DecodeString(b64)
		if err != nil {
			return fmt.Errorf("%w: webhook-signature v1 entry is not base64", ErrInvalid)
		}
		if hmac.Equal(got, want) {
			return nil
		}
	}
	if !versioned {
		return fmt.Errorf("%w: webhook-signature has no v1 signature", ErrUnauthenticated)
	}
	return fmt.Errorf("%w: webhook-signature does not match the body and the environment's secret", ErrUnauthenticated)
}

// checkToken checks GitLab's plain secret token.
func checkToken(_, v string, _ []byte, secret string, _ http.Header, _ time.Time) error {
	// Compare digests so that the comparison takes as long whatever the
	// lengths (ConstantTimeCompare returns early on a length mismatch).
	got, want := sha256.Sum256([]byte(v)), sha256.Sum256([]byte(secret))
	if subtle.ConstantTimeCompare(got[:], want[:]) != 1 {
		return fmt.Errorf("%w: X-Gitlab-Token is not the environment's secret", ErrUnauthenticated)
	}
	return nil
}
