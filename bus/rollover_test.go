package bus

import (
	"crypto/ed25519"
	"errors"
	"testing"
)

// A server.rollover is taken only from the pinned key, with a proof the
// next key made for this agent of this environment: a proof for another
// agent or environment, one by another key, an agent's own rollover proof
// (another domain), or none, is refused.
func TestServerKeyProof(t *testing.T) {
	current, _, _ := GenerateKey()
	nextPub, next, _ := GenerateKey()
	otherPub, other, _ := GenerateKey()
	good := ServerRollover{Key: current, NextKey: nextPub, Proof: ProveServerKey(next, "prod", "web", current)}
	if err := CheckServerKeyProof("prod", "web", current, good); err != nil {
		t.Fatalf("a good rollover: %v", err)
	}
	for _, c := range []struct {
		name string
		r    ServerRollover
		env  string
		pin  ed25519.PublicKey
	}{
		{"for another agent", ServerRollover{Key: current, NextKey: nextPub, Proof: ProveServerKey(next, "prod", "db", current)}, "prod", current},
		{"for another environment", ServerRollover{Key: current, NextKey: nextPub, Proof: ProveServerKey(next, "staging", "web", current)}, "prod", current},
		{"signed by another key", ServerRollover{Key: current, NextKey: nextPub, Proof: ProveServerKey(other, "prod", "web", current)}, "prod", current},
		{"without proof", ServerRollover{Key: current, NextKey: nextPub}, "prod", current},
		{"an agent's rollover proof", ServerRollover{Key: current, NextKey: nextPub, Proof: ProveKey(next, "prod", "web", current)}, "prod", current},
		{"from another current key", ServerRollover{Key: otherPub, NextKey: nextPub, Proof: ProveServerKey(next, "prod", "web", otherPub)}, "prod", current},
		{"to no key", ServerRollover{Key: current, NextKey: []byte("short"), Proof: good.Proof}, "prod", current},
		{"to the current key", ServerRollover{Key: current, NextKey: current, Proof: good.Proof}, "prod", current},
	} {
		t.Run(c.name, func(t *testing.T) {
			if err := CheckServerKeyProof(c.env, "web", c.pin, c.r); !errors.Is(err, ErrBadSignature) {
				t.Fatalf("got %v, want ErrBadSignature", err)
			}
		})
	}
}
