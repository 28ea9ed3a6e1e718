package agent

import (
	"bytes"
	"crypto/ed25519"
	"testing"

	"github.com/tetherhq/tether/bus"
)

// Events journaled before a key rollover leave the outbox signed with the
// key the agent holds when they are sent, the rest of them unchanged.
func TestOutboxEventsSignedAgainAfterRollover(t *testing.T) {
	_, oldKey, _ := bus.GenerateKey()
	_, newKey, _ := bus.GenerateKey()
	e, err := bus.NewSigner(oldKey, 41).Seal(bus.KindResourceStatus, "test", "web", bus.ResourceStatus{DeployID: "d1"})
	if err != nil {
		t.Fatal(err)
	}
	id, seq, body := e.ID, e.Seq, string(e.Body)

	resign(e, newKey)
	if err := bus.Verify(e, newKey.Public().(ed25519.PublicKey)); err != nil {
		t.Fatalf("after signing again: %v; want the new key's signature", err)
	}
	if e.ID != id || e.Seq != seq || string(e.Body) != body {
		t.Fatalf("signing again changed the event: %s #%d %s, want %s #%d %s", e.ID, e.Seq, e.Body, id, seq, body)
	}
	sig := bytes.Clone(e.Sig)
	resign(e, newKey)
	if !bytes.Equal(e.Sig, sig) {
		t.Fatal("an event already signed with the key was signed again")
	}
}
