package bus

import (
	"crypto/ed25519"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
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
	key atomic.Pointer[ed25519.PrivateKey]
	seq atomic.Uint64
	now func() time.Time

	// reserver, when set, makes numbers durable in blocks before they are
	// used; limit is the highest number reserved.
	reserver SeqReserver
	mu       sync.Mutex
	limit    atomic.Uint64
}

// SeqReserver makes sequence numbers durable before a signer uses them.
type SeqReserver interface {
	// ReserveSeq returns once no restart can hand out a number up to upTo
	// again.
	ReserveSeq(upTo uint64) error
}

// seqBlock is how many sequence numbers a reserving signer reserves at a
// time: one durable write per seqBlock events. A restart skips what is left
// of a block, so a sender's numbers may jump by up to this much.
const seqBlock = 1024

// MaxSeqJump bounds how far a sender's sequence number may run ahead of the
// highest one a receiver accepted from it: room for the block a restart
// skips and for every heartbeat a long broker outage swallowed (years of
// them), yet no jump to the end of the number space.
const MaxSeqJump = 1 << 24

// MaxSeq is the highest sequence number a sender may use: receivers keep
// numbers as signed 64-bit integers, and refuse anything past this.
const MaxSeq = 1 << 62

// NewSigner returns a signer whose first sequence number follows lastSeq.
func NewSigner(key ed25519.PrivateKey, lastSeq uint64) *Signer {
	s := &Signer{now: time.Now}
	s.key.Store(&key)
	s.seq.Store(lastSeq)
	return s
}

// NewReservingSigner returns a signer whose numbers follow floor, every
// one reserved through r before it is used: a sender restarting from its
// last reservation never signs two messages with one number.
func NewReservingSigner(key ed25519.PrivateKey, floor uint64, r SeqReserver) *Signer {
	s := NewSigner(key, floor)
	s.reserver = r
	s.limit.Store(floor)
	return s
}

// Advance moves the sequence past n: the receiver holds numbers up to n
// (from a restored backup of this sender, say), so later ones must follow.
// It reports whether it moved: what was numbered before was at or below
// numbers the receiver held, older news to it.
func (s *Signer) Advance(n uint64) bool {
	for {
		cur := s.seq.Load()
		if cur >= n {
			return false
		}
		if s.seq.CompareAndSwap(cur, n) {
			return true
		}
	}
}

// Seq returns the last sequence number handed out.
func (s *Signer) Seq() uint64 { return s.seq.Load() }

// next hands out the next sequence number, reserving a block first when
// the reservation is used up.
func (s *Signer) next() (uint64, error) {
	n := s.seq.Add(1)
	if n > MaxSeq {
		return 0, fmt.Errorf("sequence number %d is past the protocol's limit", n)
	}
	if s.reserver == nil || n <= s.limit.Load() {
		return n, nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if n > s.limit.Load() {
		upTo := n + seqBlock
		if err := s.reserver.ReserveSeq(upTo); err != nil {
			return 0, fmt.Errorf("reserve sequence numbers: %w", err)
		}
		s.limit.Store(upTo)
	}
	return n, nil
}

// PublicKey returns the signer's public key.
func (s *Signer) PublicKey() ed25519.PublicKey {
	return (*s.key.Load()).Public().(ed25519.PublicKey)
}

// SetKey makes the signer sign with key from now on (a key rollover): the
// sequence goes on, so the receiver's deduplication still holds.
func (s *Signer) SetKey(key ed25519.PrivateKey) { s.key.Store(&key) }

// Key returns the key the signer signs with.
func (s *Signer) Key() ed25519.PrivateKey { return *s.key.Load() }

// Seal builds a signed envelope of kind for env and agent around body.
func (s *Signer) Seal(kind Kind, env, agent string, body any) (*Envelope, error) {
	b, err := json.Marshal(body)
	if err != nil {
		return nil, fmt.Errorf("seal %s: %w", kind, err)
	}
	seq, err := s.next()
	if err != nil {
		return nil, fmt.Errorf("seal %s: %w", kind, err)
	}
	e := &Envelope{
		V:     ProtocolVersion,
		ID:    uuid.NewString(),
		Kind:  kind,
		Env:   env,
		Agent: agent,
		Seq:   seq,
		TS:    s.now().UTC(),
		Body:  b,
	}
	if err := e.Validate(); err != nil {
		return nil, fmt.Errorf("seal: %w", err)
	}
	Sign(e, *s.key.Load())
	return e, nil
}

// GenerateKey returns a new ed25519 key pair.
func GenerateKey() (ed25519.PublicKey, ed25519.PrivateKey, error) {
	return ed25519.GenerateKey(rand.Reader)
}

// Fingerprint names a public key for humans, in the form ssh uses:
// SHA256:<base64 of the key's SHA-256>.
func Fingerprint(pub ed25519.PublicKey) string { return model.Fingerprint(pub) }
