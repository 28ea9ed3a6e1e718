package journal

import (
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// A rollover of the server's key survives a restart at each step: after
// the announcement the agent comes back taking both keys, after the
// switch the new one alone, the old one kept as the previous.
func TestServerKeyRolloverAcrossRestarts(t *testing.T) {
	dir := t.TempDir()
	current, _, _ := ed25519.GenerateKey(nil)
	next, _, _ := ed25519.GenerateKey(nil)
	j := mustOpen(t, dir)
	if err := j.AnnounceServerKey(next); err == nil {
		t.Fatal("a next server key was taken before any server key was pinned")
	}
	if err := j.SwitchServerKey(); !errors.Is(err, ErrNoServerRollover) {
		t.Fatalf("a switch with no next key: got %v, want ErrNoServerRollover", err)
	}
	if err := j.Enroll(current, time.Now()); err != nil {
		t.Fatal(err)
	}
	if err := j.AnnounceServerKey(next); err != nil {
		t.Fatal(err)
	}
	j.Close()

	j = mustOpen(t, dir)
	if !j.ServerKey().Equal(current) || !j.NextServerKey().Equal(next) || j.PreviousServerKey() != nil {
		t.Fatalf("after the announcement and a restart: pinned %s, next %s, previous %s; want the current key and the next one",
			fingerprint(j.ServerKey()), fingerprint(j.NextServerKey()), fingerprint(j.PreviousServerKey()))
	}
	if err := j.SwitchServerKey(); err != nil {
		t.Fatal(err)
	}
	j.Close()

	j = mustOpen(t, dir)
	defer j.Close()
	if !j.ServerKey().Equal(next) || j.NextServerKey() != nil || !j.PreviousServerKey().Equal(current) {
		t.Fatalf("after the switch and a restart: pinned %s, next %s, previous %s; want the next key alone, the old one previous",
			fingerprint(j.ServerKey()), fingerprint(j.NextServerKey()), fingerprint(j.PreviousServerKey()))
	}
}

// An identity file written before server key rollovers existed (without
// their fields) opens as it is, and takes a rollover.
func TestIdentityOlderThanServerKeyRollovers(t *testing.T) {
	dir := t.TempDir()
	j := mustOpen(t, dir)
	j.Close()
	server, _, _ := ed25519.GenerateKey(nil)
	// The identity's fields as agents before server key rollovers wrote
	// them, with the checksum they computed.
	type older struct {
		Agent      string    `json:"agent"`
		ServerKey  []byte    `json:"server_key,omitempty"`
		EnrolledAt time.Time `json:"enrolled_at,omitzero"`
		Seq        uint64    `json:"seq"`
		Env        string    `json:"env,omitempty"`
		Generation int64     `json:"generation,omitempty"`
		Kex        bool      `json:"kex,omitempty"`
		NextKey    []byte    `json:"next_key,omitempty"`
	}
	id := older{Agent: "a", ServerKey: server, EnrolledAt: time.Now().UTC(), Seq: 2048, Env: "e1", Generation: 7, Kex: true}
	b, _ := json.Marshal(id)
	sum := sha256.Sum256(b)
	file, err := json.Marshal(struct {
		older
		Check string `json:"check"`
	}{id, hex.EncodeToString(sum[:])})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, identityFile), file, 0o600); err != nil {
		t.Fatal(err)
	}
	j = mustOpen(t, dir)
	defer j.Close()
	if !j.ServerKey().Equal(server) || j.NextServerKey() != nil || j.SeqFloor() != 2048 {
		t.Fatalf("older identity: pinned %s, next %s, seq floor %d; want it as written", fingerprint(j.ServerKey()), fingerprint(j.NextServerKey()), j.SeqFloor())
	}
	next, _, _ := ed25519.GenerateKey(nil)
	if err := j.AnnounceServerKey(next); err != nil {
		t.Fatalf("a rollover on an older identity: %v", err)
	}
}
