package secret

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"strings"

	"golang.org/x/crypto/nacl/secretbox"
)

// Values kept outside resources (a distribution's root password, a
// host's secret setting) are sealed at rest on their own: a string
// "sealed:v1:" and the base64 of a random nonce and the box, under a key
// of the master key derived for what the value is (its purpose), so that
// a sealed value cannot be moved to stand for another.

// ValuePrefix starts a value sealed with SealValue.
const ValuePrefix = "sealed:v1:"

// IsSealedValue reports whether s is a value SealValue sealed.
func IsSealedValue(s string) bool { return strings.HasPrefix(s, ValuePrefix) }

// SealValue seals plain for purpose.
func (s *Sealer) SealValue(purpose string, plain []byte) (string, error) {
	var nonce [24]byte
	if _, err := rand.Read(nonce[:]); err != nil {
		return "", fmt.Errorf("secret: nonce: %w", err)
	}
	key := s.valueKey(purpose)
	out := secretbox.Seal(nonce[:], plain, &nonce, &key)
	return ValuePrefix + base64.RawURLEncoding.EncodeToString(out), nil
}

// OpenValue opens a value SealValue sealed for purpose.
func (s *Sealer) OpenValue(purpose, sealed string) ([]byte, error) {
	enc, ok := strings.CutPrefix(sealed, ValuePrefix)
	if !ok {
		return nil, fmt.Errorf("%w: not a sealed value", ErrOpen)
	}
	b, err := base64.RawURLEncoding.DecodeString(enc)
	if err != nil || len(b) < 24+secretbox.Overhead {
		return nil, fmt.Errorf("%w: damaged", ErrOpen)
	}
	var nonce [24]byte
	copy(nonce[:], b[:24])
	key := s.valueKey(purpose)
	plain, ok := secretbox.Open(nil, b[24:], &nonce, &key)
	if !ok {
		return nil, fmt.Errorf("%w: sealed under another server key, for another value, or damaged", ErrOpen)
	}
	return plain, nil
}

// valueKey is the key values of purpose are sealed with.
func (s *Sealer) valueKey(purpose string) [KeySize]byte {
	m := hmac.New(sha256.New, s.restKey[:])
	m.Write([]byte("tether sealed value of its own\x00"))
	m.Write([]byte(purpose))
	var k [KeySize]byte
	m.Sum(k[:0])
	return k
}
