package model

import (
	"crypto/ed25519"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"strings"
)

// An agent trusts no command before it knows the server's key: it learns
// it from its enrollment token, which carries the key's fingerprint, or
// from the operator (--server-key, the key or its fingerprint). So a
// stranger who writes into a new agent's inbox first cannot make it pin
// another key.
//
// An enrollment token is "tether-enroll.", the base64url SHA-256 of the
// server's public key, ".", and 32 random bytes in base64url. The server
// keeps only a hash of the whole token.
const enrollPrefix = "tether-enroll."

// ErrNoFingerprint: an enrollment token of the older form, which does not
// carry the server key's fingerprint.
var ErrNoFingerprint = errors.New("the enrollment token does not carry the server key's fingerprint")

// NewEnrollmentToken returns a fresh enrollment token for the server whose
// key is serverKey.
func NewEnrollmentToken(serverKey ed25519.PublicKey) (string, error) {
	secret := make([]byte, 32)
	if _, err := rand.Read(secret); err != nil {
		return "", fmt.Errorf("enrollment token: %w", err)
	}
	sum := sha256.Sum256(serverKey)
	return enrollPrefix + base64.RawURLEncoding.EncodeToString(sum[:]) + "." + base64.RawURLEncoding.EncodeToString(secret), nil
}

// TokenFingerprint returns the server key fingerprint an enrollment token
// carries (in Fingerprint's form); ErrNoFingerprint for a token of the
// older form.
func TokenFingerprint(token string) (string, error) {
	rest, ok := strings.CutPrefix(token, enrollPrefix)
	if !ok {
		return "", ErrNoFingerprint
	}
	fp, secret, ok := strings.Cut(rest, ".")
	sum, err := base64.RawURLEncoding.DecodeString(fp)
	if !ok || err != nil || len(sum) != sha256.Size || secret == "" {
		return "", errors.New("the enrollment token is damaged: copy it again as `tether agent token create` printed it")
	}
	return "SHA256:" + base64.RawStdEncoding.EncodeToString(sum), nil
}

// ParseServerKey reads a server key as an operator gives it: the public
// key in base64 (44 characters), or its fingerprint "SHA256:…" as `tether
// server` and `tether agent token create` print it. It returns the key (nil
// when given a fingerprint) and the fingerprint.
func ParseServerKey(s string) (ed25519.PublicKey, string, error) {
	s = strings.TrimSpace(s)
	if rest, ok := strings.CutPrefix(s, "SHA256:"); ok {
		sum, err := base64.RawStdEncoding.DecodeString(strings.TrimRight(rest, "="))
		if err != nil || len(sum) != sha256.Size {
			return nil, "", fmt.Errorf("%q is not a key fingerprint: want SHA256: and 43 characters of base64, as `tether server key` prints it", s)
		}
		return nil, "SHA256:" + base64.RawStdEncoding.EncodeToString(sum), nil
	}
	b, err := base64.StdEncoding.DecodeString(s)
	if err != nil || len(b) != ed25519.PublicKeySize {
		return nil, "", fmt.Errorf("%q is neither the server's public key (44 characters of base64) nor its fingerprint (SHA256:…)", s)
	}
	return b, Fingerprint(b), nil
}

// Fingerprint names a public key in logs and listings: "SHA256:" and the
// unpadded base64 of its SHA-256, as ssh does.
func Fingerprint(pub []byte) string {
	sum := sha256.Sum256(pub)
	return "SHA256:" + base64.RawStdEncoding.EncodeToString(sum[:])
}
