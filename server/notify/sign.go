package notify

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// The headers of a delivery, as the Standard Webhooks scheme names them:
// a receiver may verify with any of its libraries.
const (
	// HeaderID is the delivery's ID: the same on every attempt, so a
	// receiver deduplicates by it.
	HeaderID = "Webhook-Id"
	// HeaderTimestamp is when the attempt was signed, in Unix seconds.
	HeaderTimestamp = "Webhook-Timestamp"
	// HeaderSignature is "v1,<base64 of HMAC-SHA256(key, id.timestamp.body)>".
	HeaderSignature = "Webhook-Signature"
)

// ErrSignature is wrapped by what Verify refuses.
var ErrSignature = errors.New("webhook signature not valid")

const secretPrefix = "whsec_"

// NewSecret returns a fresh secret: "whsec_" and the base64 of 32 random
// bytes, the form the Standard Webhooks libraries take.
func NewSecret() (string, error) {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("webhook secret: %w", err)
	}
	return secretPrefix + base64.StdEncoding.EncodeToString(b), nil
}

// key is the HMAC key of a secret: the bytes after "whsec_" base64
// decoded, or the secret as it is written when it is not of that form.
func key(secret string) []byte {
	if rest, ok := strings.CutPrefix(secret, secretPrefix); ok {
		if b, err := base64.StdEncoding.DecodeString(rest); err == nil && len(b) > 0 {
			return b
		}
	}
	return []byte(secret)
}

// Sign returns the signature of a delivery: "v1," and the base64 of the
// HMAC-SHA256, keyed by the secret, of "<id>.<timestamp>.<body>".
func Sign(secret, id string, at time.Time, body []byte) string {
	m := hmac.New(sha256.New, key(secret))
	m.Write([]byte(id + "." + strconv.FormatInt(at.Unix(), 10) + "."))
	m.Write(body)
	return "v1," + base64.StdEncoding.EncodeToString(m.Sum(nil))
}

// Verify checks a delivery as a receiver does: its signature is one of
// those in HeaderSignature (space-separated; a rotated secret may send
// several), for secret, and its timestamp within tolerance of now (an old
// delivery replayed is refused). It returns the delivery's ID.
func Verify(h http.Header, body []byte, secret string, now time.Time, tolerance time.Duration) (string, error) {
	id, ts, sigs := h.Get(HeaderID), h.Get(HeaderTimestamp), h.Get(HeaderSignature)
	if id == "" || ts == "" || sigs == "" {
		return "", fmt.Errorf("%w: want the %s, %s and %s headers", ErrSignature, HeaderID, HeaderTimestamp, HeaderSignature)
	}
	sec, err := strconv.ParseInt(ts, 10, 64)
	if err != nil {
		return "", fmt.Errorf("%w: timestamp %q is not Unix seconds", ErrSignature, ts)
	}
	at := time.Unix(sec, 0)
	if d := now.Sub(at); d > tolerance || d < -tolerance {
		return "", fmt.Errorf("%w: timestamp %s is more than %s from now", ErrSignature, at.UTC().Format(time.RFC3339), tolerance)
	}
	want := Sign(secret, id, at, body)
	for _, s := range strings.Fields(sigs) {
		if hmac.Equal([]byte(s), []byte(want)) {
			return id, nil
		}
	}
	return "", fmt.Errorf("%w: no signature matches the secret", ErrSignature)
}
