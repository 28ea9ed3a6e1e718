// Package keyring holds the server's key-encryption keys: the keys that
// seal what the server keeps secret in its database, so that whoever reads
// the database — a backup, a dump, a stolen disk — cannot read those
// secrets. The keys live outside the database: in a key file, or in an
// environment variable holding the same text.
//
// A Ring holds one key or more, newest first: the first seals, every key
// opens. Each key has a short id derived from it (8 hex digits), written
// in clear at the head of every value sealed with it, so Open picks the
// right key and, when the ring lacks it, says which one is missing.
// Rotating keys is: put a new key first, re-seal every sealed value (each
// consumer re-seals its own), then remove the old key.
//
// Values are sealed with AES-256-GCM from the standard library, with a
// random 96-bit nonce per value. It needs no dependency, is hardware
// accelerated on the CPUs servers run on, and is part of Go's FIPS 140-3
// module. Random nonces bound a key to 2^32 seals; the values a server
// seals are counted in thousands, and rotation starts the count over
// (XChaCha20-Poly1305, with its 192-bit nonces, would lift a bound that is
// not in reach, for a dependency).
//
// The additional data (aad) a caller gives Seal must be given again to
// Open: it binds a sealed value to where it is kept (a row's table and
// key), so a value copied into another row does not open there.
//
// A consumer declares the part it uses, as:
//
//	type Sealer interface {
//		Seal(plaintext, aad []byte) ([]byte, error)
//		Open(ciphertext, aad []byte) ([]byte, error)
//	}
package keyring

import (
	"bytes"
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
)

// KeySize is the size of a key: 32 random bytes (AES-256), written in a
// key file in standard base64 (44 characters, the last one "=").
const KeySize = 32

// A sealed value is: magic (3 bytes) and format version (1), the sealing
// key's id (4), then AES-GCM's nonce (12), ciphertext and tag (16). The
// header is authenticated with the caller's aad.
const (
	magic      = "tkr"
	version    = 1
	idSize     = 4
	headerSize = len(magic) + 1 + idSize
	minSealed  = headerSize + 12 + 16
)

// idContext separates the derivation of key ids from every other use of a
// key's bytes.
const idContext = "tether keyring key id\x00"

var (
	// ErrNoKey: a ring needs at least one key.
	ErrNoKey = errors.New("no key")
	// ErrUnknownKey: a value was sealed with a key the ring does not hold.
	ErrUnknownKey = errors.New("unknown key")
	// ErrTampered: a value names a key the ring holds but does not open
	// with it and the aad given: it was altered, damaged, or moved from
	// another row.
	ErrTampered = errors.New("authentication failed")
	// ErrNotSealed: the bytes are not a value a ring sealed.
	ErrNotSealed = errors.New("not a sealed value")
)

// Ring is a set of keys, newest first. It is safe for concurrent use, and
// never prints its keys (String shows their ids).
type Ring struct {
	keys []ringKey
}

type ringKey struct {
	id   [idSize]byte
	aead cipher.AEAD
}

// NewKey returns a new random key.
func NewKey() []byte {
	k := make([]byte, KeySize)
	_, _ = rand.Read(k) // never fails: it would crash the process first
	return k
}

// EncodeKey writes a key as a key file holds it.
func EncodeKey(key []byte) string { return base64.StdEncoding.EncodeToString(key) }

// KeyID returns the id of key: 8 hex digits derived from it, which say
// nothing of the key.
func KeyID(key []byte) string {
	id := keyID(key)
	return hex.EncodeToString(id[:])
}

func keyID(key []byte) [idSize]byte {
	h := sha256.Sum256(append([]byte(idContext), key...))
	return [idSize]byte(h[:idSize])
}

// New returns a ring of keys, newest first: keys[0] seals, every one
// opens.
func New(keys ...[]byte) (*Ring, error) {
	if len(keys) == 0 {
		return nil, fmt.Errorf("keyring: %w: give at least one key", ErrNoKey)
	}
	r := &Ring{}
	for i, k := range keys {
		if len(k) != KeySize {
			return nil, fmt.Errorf("keyring: key %d has %d bytes: want %d random bytes", i+1, len(k), KeySize)
		}
		id := keyID(k)
		for j, other := range r.keys {
			if other.id == id {
				return nil, fmt.Errorf("keyring: keys %d and %d are the same key (id %s): keep one", j+1, i+1, hex.EncodeToString(id[:]))
			}
		}
		block, err := aes.NewCipher(k)
		if err != nil {
			return nil, fmt.Errorf("keyring: key %d: %w", i+1, err)
		}
		aead, err := cipher.NewGCMWithRandomNonce(block)
		if err != nil {
			return nil, fmt.Errorf("keyring: key %d: %w", i+1, err)
		}
		r.keys = append(r.keys, ringKey{id: id, aead: aead})
	}
	return r, nil
}

// Parse reads keys as a key file holds them, newest first: each in
// standard base64, one a line or separated by commas (handy in an
// environment variable); "#" starts a comment, up to the end of its line.
// Errors name the line and never quote it.
func Parse(text []byte) (*Ring, error) {
	var keys [][]byte
	var lines []int
	for n, line := range bytes.Split(text, []byte("\n")) {
		if i := bytes.IndexByte(line, '#'); i >= 0 {
			line = line[:i]
		}
		for field := range strings.SplitSeq(string(line), ",") {
			field = strings.TrimSpace(field)
			if field == "" {
				continue
			}
			k, err := base64.StdEncoding.DecodeString(field)
			if err != nil || len(k) != KeySize {
				return nil, fmt.Errorf("line %d: not a key: want %d random bytes in standard base64 (44 characters, the last one \"=\")", n+1, KeySize)
			}
			for i, other := range keys {
				if bytes.Equal(other, k) {
					return nil, fmt.Errorf("lines %d and %d hold the same key (id %s): keep one", lines[i], n+1, KeyID(k))
				}
			}
			keys, lines = append(keys, k), append(lines, n+1)
		}
	}
	if len(keys) == 0 {
		return nil, fmt.Errorf("%w: want at least one line holding a key", ErrNoKey)
	}
	return New(keys...)
}

// KeyID returns the id of the key that seals.
func (r *Ring) KeyID() string { return hex.EncodeToString(r.keys[0].id[:]) }

// KeyIDs returns the ids of every key, newest (the one that seals) first.
func (r *Ring) KeyIDs() []string {
	ids := make([]string, len(r.keys))
	for i, k := range r.keys {
		ids[i] = hex.EncodeToString(k.id[:])
	}
	return ids
}

// String shows the ring's key ids, never its keys.
func (r *Ring) String() string { return "keyring[" + strings.Join(r.KeyIDs(), " ") + "]" }

// GoString is String, so that %#v shows no key either.
func (r *Ring) GoString() string { return r.String() }

// Seal encrypts plaintext with the ring's first key, and authenticates it
// with aad, which Open must be given again.
func (r *Ring) Seal(plaintext, aad []byte) ([]byte, error) {
	k := r.keys[0]
	out := make([]byte, headerSize, headerSize+len(plaintext)+k.aead.Overhead())
	copy(out, magic)
	out[len(magic)] = version
	copy(out[len(magic)+1:], k.id[:])
	return k.aead.Seal(out, nil, plaintext, additional(out, aad)), nil
}

// Open decrypts a value Seal returned, with the key it names and the aad
// it was sealed with. A value sealed with a key the ring lacks fails with
// ErrUnknownKey, one that does not authenticate with ErrTampered, bytes
// that are no sealed value with ErrNotSealed; each message names the key
// the value asks for and what to do.
func (r *Ring) Open(ciphertext, aad []byte) ([]byte, error) {
	if err := checkHeader(ciphertext); err != nil {
		return nil, err
	}
	id := [idSize]byte(ciphertext[len(magic)+1 : headerSize])
	hexID := hex.EncodeToString(id[:])
	for _, k := range r.keys {
		if k.id != id {
			continue
		}
		plain, err := k.aead.Open(nil, nil, ciphertext[headerSize:], additional(ciphertext[:headerSize], aad))
		if err != nil {
			return nil, fmt.Errorf("open a value sealed with key %s: the key is here but the value does not open: "+
				"it was altered, damaged, or copied from another row; restore it from a backup: %w", hexID, ErrTampered)
		}
		return plain, nil
	}
	return nil, fmt.Errorf("open a value sealed with key %s: the keys given are %s, not %s: "+
		"use the key file that holds key %s (if it was removed from the file, restore it from the file's backup): %w",
		hexID, strings.Join(r.KeyIDs(), ", "), hexID, hexID, ErrUnknownKey)
}

// SealedWith returns the id of the key that sealed ciphertext, or "" when
// it is no sealed value. It does not say whether the value opens.
func (r *Ring) SealedWith(ciphertext []byte) string {
	if checkHeader(ciphertext) != nil {
		return ""
	}
	return hex.EncodeToString(ciphertext[len(magic)+1 : headerSize])
}

func checkHeader(ciphertext []byte) error {
	switch {
	case len(ciphertext) < minSealed || string(ciphertext[:len(magic)]) != magic:
		return fmt.Errorf("open: %d bytes that no keyring sealed (in clear, or damaged): %w", len(ciphertext), ErrNotSealed)
	case ciphertext[len(magic)] != version:
		return fmt.Errorf("open: a value sealed in format %d, which this tether does not read (it reads format %d): upgrade tether: %w",
			ciphertext[len(magic)], version, ErrNotSealed)
	}
	return nil
}

// additional is what GCM authenticates besides the plaintext: the header
// (so a value cannot be relabelled with another key's id) and the
// caller's aad.
func additional(header, aad []byte) []byte {
	return append(append(make([]byte, 0, headerSize+len(aad)), header[:headerSize]...), aad...)
}
