// Package secret keeps sensitive values sealed from the server's door to
// the handler that needs them.
//
// A value the model marks sensitive is sealed by the server as it takes a
// version in (Sealer.SealAtRest): its clear value leaves the resource's
// attributes for Resource.Sealed, encrypted under a key of the server's,
// next to a keyed digest that stands for it in the resource's hash. Before
// a desired state enters the bus, each value is sealed again to the one
// agent it is for (Sealer.ForAgent): an anonymous NaCl box
// (X25519, XSalsa20-Poly1305) to that agent's key-agreement key. The agent
// keeps it so in its journal and opens it (Open) in memory only, just
// before a handler reads or applies the resource.
//
// Who can see what: the store holds digests and ciphertexts under the
// server's key; the bus and the journal hold digests and boxes only the
// agent's private key opens. A digest is an HMAC under a server secret,
// bound to the resource and the attribute, so neither an equal value
// elsewhere nor a guess can be recognised by it.
package secret

import (
	"crypto/ecdh"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"

	"golang.org/x/crypto/nacl/box"
	"golang.org/x/crypto/nacl/secretbox"

	"github.com/tetherhq/tether/model"
)

// KeySize is the size of a master key, and of an X25519 public key.
const KeySize = 32

// Errors of sealing and opening.
var (
	// ErrNoKey: the agent has no key-agreement key (an agent older than
	// sealed values): nothing sensitive can be sent to it.
	ErrNoKey = errors.New("no key-agreement key")
	// ErrOpen: a sealed value cannot be opened (another key, or damaged).
	ErrOpen = errors.New("sealed value cannot be opened")
)

// GenerateMasterKey returns a new random master key for NewSealer.
func GenerateMasterKey() ([]byte, error) {
	k := make([]byte, KeySize)
	if _, err := rand.Read(k); err != nil {
		return nil, fmt.Errorf("secret: master key: %w", err)
	}
	return k, nil
}

// GenerateKey returns a new key-agreement key for an agent.
func GenerateKey() (*ecdh.PrivateKey, error) {
	k, err := ecdh.X25519().GenerateKey(rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("secret: key-agreement key: %w", err)
	}
	return k, nil
}

// CheckPublicKey checks that pub is an X25519 public key.
func CheckPublicKey(pub []byte) error {
	if _, err := ecdh.X25519().NewPublicKey(pub); err != nil {
		return fmt.Errorf("key-agreement key: %w", err)
	}
	return nil
}

// Sealer seals values with the server's keys, derived from one master
// key: one for the digests, one for the encryption at rest.
type Sealer struct {
	digestKey, restKey [KeySize]byte
}

// NewSealer returns the sealer of a master key.
func NewSealer(master []byte) (*Sealer, error) {
	if len(master) != KeySize {
		return nil, fmt.Errorf("secret: the master key has %d bytes, want %d", len(master), KeySize)
	}
	s := &Sealer{}
	derive := func(dst *[KeySize]byte, purpose string) {
		m := hmac.New(sha256.New, master)
		m.Write([]byte(purpose))
		m.Sum(dst[:0])
	}
	derive(&s.digestKey, "tether sealed values: digest")
	derive(&s.restKey, "tether sealed values: at rest")
	return s, nil
}

// digest is the keyed digest of a clear value (its canonical JSON) of
// attribute attr of resource id.
func (s *Sealer) digest(id model.ID, attr string, clear []byte) model.Hash {
	m := hmac.New(sha256.New, s.digestKey[:])
	for _, part := range []string{"tether sealed value v1", id.String(), attr} {
		m.Write([]byte(part))
		m.Write([]byte{0})
	}
	m.Write(clear)
	var h model.Hash
	m.Sum(h[:0])
	return h
}

// SealAtRest moves every sensitive value res holds in clear into
// res.Sealed, under the server's key. The encryption is deterministic (its
// nonce is the value's digest): an unchanged value seals to the same bytes,
// so versions keep sharing their stored bodies. res's attribute and sealed
// maps are replaced, never changed in place: they may be shared.
func (s *Sealer) SealAtRest(res *model.Resource) error {
	names := res.ClearSensitive()
	if len(names) == 0 {
		return nil
	}
	attrs := maps.Clone(res.Attributes)
	sealed := make(map[string]model.Sealed, len(res.Sealed)+len(names))
	maps.Copy(sealed, res.Sealed)
	for _, name := range names {
		plain, err := model.Canonical(attrs[name])
		if err != nil {
			return fmt.Errorf("seal %s %s: %w", res.ID, name, err)
		}
		d := s.digest(res.ID, name, plain)
		var nonce [24]byte
		copy(nonce[:], d[:])
		sealed[name] = model.Sealed{Digest: d, To: model.SealedToServer, Box: secretbox.Seal(nil, plain, &nonce, &s.restKey)}
		wipe(plain)
		delete(attrs, name)
	}
	res.Attributes, res.Sealed = attrs, sealed
	return nil
}

// openAtRest returns the clear value (canonical JSON) of a value sealed at
// rest, checked against its digest.
func (s *Sealer) openAtRest(id model.ID, name string, v model.Sealed) ([]byte, error) {
	if v.To != model.SealedToServer {
		return nil, fmt.Errorf("%w: %s %s is sealed to %s, not to the server", ErrOpen, id, name, v.To)
	}
	var nonce [24]byte
	copy(nonce[:], v.Digest[:])
	plain, ok := secretbox.Open(nil, v.Box, &nonce, &s.restKey)
	if !ok || s.digest(id, name, plain) != v.Digest {
		return nil, fmt.Errorf("%w: %s %s: sealed under another server key, or damaged", ErrOpen, id, name)
	}
	return plain, nil
}

// ForAgent returns res with its sealed values sealed again, from the
// server's key to the agent's key-agreement key pub, digests unchanged (so
// are the resource's hash and the slice's). A resource without sealed
// values is returned as it is; one with a value in clear is refused: the
// server seals before it sends. ErrNoKey when pub is empty.
func (s *Sealer) ForAgent(res model.Resource, pub []byte) (model.Resource, error) {
	if names := res.ClearSensitive(); len(names) > 0 {
		return res, fmt.Errorf("secret: %s holds sensitive values in clear (%v): refused to send", res.ID, names)
	}
	if len(res.Sealed) == 0 {
		return res, nil
	}
	if len(pub) == 0 {
		return res, ErrNoKey
	}
	if len(pub) != KeySize {
		return res, fmt.Errorf("secret: key-agreement key of %d bytes, want %d", len(pub), KeySize)
	}
	to := model.Fingerprint(pub)
	sealed := make(map[string]model.Sealed, len(res.Sealed))
	for _, name := range slices.Sorted(maps.Keys(res.Sealed)) {
		v := res.Sealed[name]
		plain, err := s.openAtRest(res.ID, name, v)
		if err != nil {
			return res, err
		}
		msg, err := json.Marshal(inner{ID: res.ID.String(), Attr: name, Digest: hex.EncodeToString(v.Digest[:]), Value: plain})
		if err != nil {
			return res, fmt.Errorf("secret: %s %s: %w", res.ID, name, err)
		}
		boxed, err := box.SealAnonymous(nil, msg, (*[KeySize]byte)(pub), rand.Reader)
		wipe(plain)
		wipe(msg)
		if err != nil {
			return res, fmt.Errorf("secret: seal %s %s: %w", res.ID, name, err)
		}
		sealed[name] = model.Sealed{Digest: v.Digest, To: to, Box: boxed}
	}
	res.Sealed = sealed
	return res, nil
}

// inner is what a box to an agent holds: the value and where it belongs,
// so that a box cannot be moved to another resource or attribute, nor put
// under another digest (which the hash the agent verifies covers).
type inner struct {
	ID     string          `json:"id"`
	Attr   string          `json:"attr"`
	Digest string          `json:"digest"`
	Value  json.RawMessage `json:"value"`
}

// Open returns res with its sealed values opened with the agent's
// key-agreement key: back in Attributes, in clear, Sealed empty. The copy
// is for memory only (a handler's): never journal, log or send it. A
// resource without sealed values is returned as it is.
func Open(key *ecdh.PrivateKey, res *model.Resource) (model.Resource, error) {
	out := *res
	if len(res.Sealed) == 0 {
		return out, nil
	}
	if key == nil {
		return out, fmt.Errorf("%w: %s: this agent has no key-agreement key", ErrOpen, res.ID)
	}
	pub := key.PublicKey().Bytes()
	to := model.Fingerprint(pub)
	attrs := make(model.Attributes, len(res.Attributes)+len(res.Sealed))
	maps.Copy(attrs, res.Attributes)
	for _, name := range slices.Sorted(maps.Keys(res.Sealed)) {
		v := res.Sealed[name]
		if v.To != to {
			return out, fmt.Errorf("%w: %s %s is sealed to key %s, this agent's is %s", ErrOpen, res.ID, name, v.To, to)
		}
		msg, ok := box.OpenAnonymous(nil, v.Box, (*[KeySize]byte)(pub), (*[KeySize]byte)(key.Bytes()))
		if !ok {
			return out, fmt.Errorf("%w: %s %s: not sealed to this agent's key, or damaged", ErrOpen, res.ID, name)
		}
		var in inner
		err := model.DecodeJSON(msg, &in)
		wipe(msg)
		if err != nil || in.ID != res.ID.String() || in.Attr != name || in.Digest != hex.EncodeToString(v.Digest[:]) {
			return out, fmt.Errorf("%w: %s %s: the box holds a value of another resource, attribute or digest", ErrOpen, res.ID, name)
		}
		var value any
		if err := model.DecodeJSON(in.Value, &value); err != nil {
			return out, fmt.Errorf("%w: %s %s: %w", ErrOpen, res.ID, name, err)
		}
		attrs[name] = value
	}
	out.Attributes, out.Sealed = attrs, nil
	return out, nil
}

// wipe zeroes b, which held a clear value. Go may have copied it elsewhere
// already: this shortens its life in memory, no more.
func wipe(b []byte) { clear(b) }
