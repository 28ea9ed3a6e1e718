package bus

import (
	"crypto/ed25519"
	"encoding/binary"
	"fmt"
)

// KeyRollover proposes an agent's next key. The envelope is signed by the
// agent's current key; Proof is the next key's signature over the
// environment, the agent, the current key and the next one (ProveKey), so
// nobody can move an agent to a key they do not hold, nor replay one
// agent's proof for another.
type KeyRollover struct {
	NewKey []byte `json:"new_key"`
	Proof  []byte `json:"proof"`
}

// KeyAccepted acknowledges a rollover: Key is the agent's key from now on,
// Rollover the id of the key.rollover it answers.
type KeyAccepted struct {
	Key      []byte `json:"key"`
	Rollover string `json:"rollover,omitempty"`
}

// rolloverDomain and serverRolloverDomain separate rollover proofs from
// each other and from any other use of a key: an agent's proof is no
// server's, nor the other way round.
const (
	rolloverDomain       = "tether.key-rollover.v1"
	serverRolloverDomain = "tether.server-rollover.v1"
)

func rolloverInput(domain, env, agent string, old, next ed25519.PublicKey) []byte {
	buf := make([]byte, 0, 128)
	for _, f := range [][]byte{[]byte(domain), []byte(env), []byte(agent), old, next} {
		buf = binary.AppendUvarint(buf, uint64(len(f)))
		buf = append(buf, f...)
	}
	return buf
}

// ProveKey returns next's proof that the agent env/agent, holding old,
// moves to it.
func ProveKey(next ed25519.PrivateKey, env, agent string, old ed25519.PublicKey) []byte {
	return ed25519.Sign(next, rolloverInput(rolloverDomain, env, agent, old, next.Public().(ed25519.PublicKey)))
}

// CheckKeyProof verifies a rollover's proof of possession of its new key.
func CheckKeyProof(env, agent string, old ed25519.PublicKey, r KeyRollover) error {
	switch {
	case len(r.NewKey) != ed25519.PublicKeySize:
		return fmt.Errorf("%w: key rollover of %s/%s: the new key is not an ed25519 public key", ErrBadSignature, env, agent)
	case old.Equal(ed25519.PublicKey(r.NewKey)):
		return fmt.Errorf("%w: key rollover of %s/%s: the new key is the old one", ErrBadSignature, env, agent)
	case len(r.Proof) != ed25519.SignatureSize || !ed25519.Verify(r.NewKey, rolloverInput(rolloverDomain, env, agent, old, r.NewKey), r.Proof):
		return fmt.Errorf("%w: key rollover of %s/%s to %s: the proof is not signed by the new key", ErrBadSignature, env, agent, Fingerprint(r.NewKey))
	}
	return nil
}

// ServerRollover announces the server's next signing key to one agent
// (kind server.rollover). The envelope is signed by the key the agent
// pinned, which Key names; Proof is the next key's signature over the
// environment, the agent, Key and NextKey (ProveServerKey), so that nobody
// can make an agent trust a key the server does not hold, nor replay one
// agent's announcement to another.
type ServerRollover struct {
	Key     []byte `json:"key"`
	NextKey []byte `json:"next_key"`
	Proof   []byte `json:"proof"`
}

// ServerRolloverAck tells the server an agent took a server.rollover:
// ServerKeys are the fingerprints of the server keys it takes commands
// signed by from now on (the one it pinned, then the next), Rollover the
// id of the server.rollover it answers. Rollover is empty when the agent
// says it took the next key alone (the server switched).
type ServerRolloverAck struct {
	ServerKeys []string `json:"server_keys"`
	Rollover   string   `json:"rollover,omitempty"`
}

// MaxServerKeys bounds the server keys an agent says it takes (hello,
// server.rollover.ack): the one it pinned and the next.
const MaxServerKeys = 2

// ProveServerKey returns the server's next key's proof that the agent
// env/agent, which pinned the server key current, may trust it.
func ProveServerKey(next ed25519.PrivateKey, env, agent string, current ed25519.PublicKey) []byte {
	return ed25519.Sign(next, rolloverInput(serverRolloverDomain, env, agent, current, next.Public().(ed25519.PublicKey)))
}

// CheckServerKeyProof verifies a server.rollover for the agent env/agent,
// which pinned the server key current (and took the envelope signed by it).
func CheckServerKeyProof(env, agent string, current ed25519.PublicKey, r ServerRollover) error {
	switch {
	case !current.Equal(ed25519.PublicKey(r.Key)):
		return fmt.Errorf("%w: server key rollover for %s/%s: it rolls over from key %s, not the pinned %s", ErrBadSignature, env, agent, keyName(r.Key), Fingerprint(current))
	case len(r.NextKey) != ed25519.PublicKeySize:
		return fmt.Errorf("%w: server key rollover for %s/%s: the next key is not an ed25519 public key", ErrBadSignature, env, agent)
	case current.Equal(ed25519.PublicKey(r.NextKey)):
		return fmt.Errorf("%w: server key rollover for %s/%s: the next key is the current one", ErrBadSignature, env, agent)
	case len(r.Proof) != ed25519.SignatureSize || !ed25519.Verify(r.NextKey, rolloverInput(serverRolloverDomain, env, agent, current, r.NextKey), r.Proof):
		return fmt.Errorf("%w: server key rollover for %s/%s to %s: the proof is missing or not signed by the next key for this agent", ErrBadSignature, env, agent, Fingerprint(r.NextKey))
	}
	return nil
}

// keyName names a key that may be malformed.
func keyName(pub []byte) string {
	if len(pub) != ed25519.PublicKeySize {
		return "(none)"
	}
	return Fingerprint(pub)
}
