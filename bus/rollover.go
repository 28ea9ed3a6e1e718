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

// rolloverDomain separates rollover proofs from any other use of a key.
const rolloverDomain = "tether.key-rollover.v1"

func rolloverInput(env, agent string, old, next ed25519.PublicKey) []byte {
	buf := make([]byte, 0, 128)
	for _, f := range [][]byte{[]byte(rolloverDomain), []byte(env), []byte(agent), old, next} {
		buf = binary.AppendUvarint(buf, uint64(len(f)))
		buf = append(buf, f...)
	}
	return buf
}

// ProveKey returns next's proof that the agent env/agent, holding old,
// moves to it.
func ProveKey(next ed25519.PrivateKey, env, agent string, old ed25519.PublicKey) []byte {
	return ed25519.Sign(next, rolloverInput(env, agent, old, next.Public().(ed25519.PublicKey)))
}

// CheckKeyProof verifies a rollover's proof of possession of its new key.
func CheckKeyProof(env, agent string, old ed25519.PublicKey, r KeyRollover) error {
	switch {
	case len(r.NewKey) != ed25519.PublicKeySize:
		return fmt.Errorf("%w: key rollover of %s/%s: the new key is not an ed25519 public key", ErrBadSignature, env, agent)
	case old.Equal(ed25519.PublicKey(r.NewKey)):
		return fmt.Errorf("%w: key rollover of %s/%s: the new key is the old one", ErrBadSignature, env, agent)
	case len(r.Proof) != ed25519.SignatureSize || !ed25519.Verify(r.NewKey, rolloverInput(env, agent, old, r.NewKey), r.Proof):
		return fmt.Errorf("%w: key rollover of %s/%s to %s: the proof is not signed by the new key", ErrBadSignature, env, agent, Fingerprint(r.NewKey))
	}
	return nil
}
