package bus

import (
	"crypto/ed25519"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/google/uuid"

	"github.com/tetherhq/tether/model"
)

// ErrBadSignature is returned when an envelope's signature does not verify.
// Transports dead-letter such messages.
var ErrBadSignature = errors.New("bad envelope signature")

// signingDomain separates envelope signatures from any other use of a key.
const signingDomain = "tether.envelope.v1"

// signingInput is the byte string a signature covers: every field but Sig,
// each length-prefixed so no two envelopes share an input, and the body by
// its SHA-256 (the exact bytes received).
func signingInput(e *Envelope) []byte {
	sum := sha256.Sum256(e.Body)
	buf := make([]byte, 0, 256)
	field := func(s string) {
		buf = binary.AppendUvarint(buf, uint64(len(s)))
		buf = append(buf, s...)
	}
	field(signingDomain)
	buf = binary.AppendUvarint(buf, uint64(e.V))
	field(e.ID)
	field(string(e.Kind))
	field(e.Env)
	field(e.Agent)
	buf = binary.BigEndian.AppendUint64(buf, e.Seq)
	field(e.TS.UTC().Format(time.RFC3339Nano))
	buf = append(buf, sum[:]...)
	return buf
}

// Sign sets e.Sig.
func Sign(e *Envelope, key ed25519.PrivateKey) {
	e.Sig = ed25519.Sign(key, signingInput(e))
}

// Verify checks e.Sig against pub.
func Verify(e *Envelope, pub ed25519.PublicKey) error {
	if len(pub) != ed25519.PublicKeySize {
		return fmt.Errorf("%w: %s: no valid key to verify with", ErrBadSignature, e)
	}
	if len(e.Sig) != ed25519.SignatureSize || !ed25519.Verify(pub, signingInput(e), e.Sig) {
		return fmt.Errorf("%w: %s", ErrBadSignature, e)
	}
	return nil
}

// Signer seals messages of one sender: it assigns ids, sequence numbers and
// timestamps, and signs.
type Signer struct {
	key ed25519.PrivateKey
	seq atomic.Uint64
	now func() time.Time
}

// NewSigner returns a signer whose first sequence number follows lastSeq.
func NewSigner(key ed25519.PrivateKey, lastSeq uint64) *Signer {
	s := &Signer{key: key, now: time.Now}
	s.seq.Store(lastSeq)
	return s
}

// PublicKey returns the signer's public key.
func (s *Signer) PublicKey() ed25519.PublicKey {
	return s.key.Public().(ed25519.PublicKey)
}

// Seal builds a signed envelope of kind for env and agent around body.
func (s *Signer) Seal(kind Kind, env, agent string, body any) (*Envelope, error) {
	b, err := json.Marshal(body)
	if err != nil {
		return nil, fmt.Errorf("seal %s: %w", kind, err)
	}
	e := &Envelope{
		V:     ProtocolVersion,
		ID:    uuid.NewString(),
		Kind:  kind,
		Env:   env,
		Agent: agent,
		Seq:   s.seq.Add(1),
		TS:    s.now().UTC(),
		Body:  b,
	}
	if err := e.Validate(); err != nil {
		return nil, fmt.Errorf("seal: %w", err)
	}
	Sign(e, s.key)
	return e, nil
}

// GenerateKey returns a new ed25519 key pair.
func GenerateKey() (ed25519.PublicKey, ed25519.PrivateKey, error) {
	return ed25519.GenerateKey(rand.Reader)
}

// Fingerprint names a public key for humans, in the form ssh uses:
// SHA256:<base64 of the key's SHA-256>.
func Fingerprint(pub ed25519.PublicKey) string { return model.Fingerprint(pub) }
