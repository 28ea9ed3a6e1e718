package journal

import (
	"crypto/ed25519"
	"crypto/rand"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/tetherhq/tether/model"
	"github.com/tetherhq/tether/model/durable"
)

// A key rollover replaces the agent's key in two durable steps, so a crash
// between any two of them leaves an agent that still works:
//
//  1. BeginRollover writes the new key to key.next, then records its public
//     key in the identity (NextKey). The agent keeps signing with the old
//     key, which the server accepts until the agent switches; it tells the
//     server about the new one (again after a restart) until the server
//     acknowledges it.
//  2. CompleteRollover, on the server's acknowledgement, writes the new key
//     over the key file, then clears NextKey and removes key.next.
//
// Opening the journal finishes or forgets what a crash interrupted: a
// key.next the identity does not name was never announced and is removed;
// a key file already holding NextKey finished step 2 but for the identity.

// ErrNoRollover: an acknowledgement of a key this agent has not proposed.
var ErrNoRollover = errors.New("no such key rollover under way")

// NextKey returns the key of the rollover under way, nil when none is.
func (j *Journal) NextKey() ed25519.PrivateKey {
	j.idMu.Lock()
	defer j.idMu.Unlock()
	return j.next
}

// BeginRollover makes the agent's next key and keeps it durably, unless a
// rollover is under way already: then it returns that one's key, so the
// server is only ever offered one.
func (j *Journal) BeginRollover() (next ed25519.PrivateKey, started bool, err error) {
	j.idMu.Lock()
	defer j.idMu.Unlock()
	if j.next != nil {
		return j.next, false, nil
	}
	pub, key, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return nil, false, fmt.Errorf("journal: next key: %w", err)
	}
	if j.dir != "" {
		b, err := privateKeyPEM(key)
		if err != nil {
			return nil, false, fmt.Errorf("journal: next key: %w", err)
		}
		if err := j.writeFile(nextKeyFile, b, 0o600); err != nil {
			return nil, false, fmt.Errorf("journal: write the next key: %w", err)
		}
	}
	id := j.id
	id.NextKey = pub
	if err := j.writeIdentity(id); err != nil {
		return nil, false, err
	}
	j.id, j.next = id, key
	return key, true, nil
}

// CompleteRollover makes the rollover's key, whose public half is pub, the
// agent's key: the server acknowledged it.
func (j *Journal) CompleteRollover(pub ed25519.PublicKey) error {
	j.idMu.Lock()
	defer j.idMu.Unlock()
	if j.next == nil || !pub.Equal(j.next.Public()) {
		return fmt.Errorf("%w: key %s", ErrNoRollover, fingerprint(pub))
	}
	if j.dir != "" {
		b, err := privateKeyPEM(j.next)
		if err != nil {
			return fmt.Errorf("journal: key: %w", err)
		}
		if err := j.writeFile(keyFile, b, 0o600); err != nil {
			return fmt.Errorf("journal: write the new key: %w", err)
		}
	}
	// From here the key file holds the new key: a crash before the
	// identity says so is finished by the next open.
	j.key = j.next
	id := j.id
	id.NextKey = nil
	if err := j.writeIdentity(id); err != nil {
		return err
	}
	j.id, j.next = id, nil
	j.removeNextKey()
	return nil
}

// removeNextKey removes the key.next file; one that stays behind is
// removed by the next open.
func (j *Journal) removeNextKey() {
	if j.dir == "" {
		return
	}
	if err := os.Remove(filepath.Join(j.dir, nextKeyFile)); err == nil {
		_ = durable.SyncDir(j.dir)
	}
}

// loadNextKey reads the key of a rollover under way, and puts right what
// a crash in the middle of one left (see the top of this file).
func (j *Journal) loadNextKey() error {
	path := filepath.Join(j.dir, nextKeyFile)
	if len(j.id.NextKey) == 0 {
		if _, err := os.Stat(path); err == nil {
			j.repairs = append(j.repairs, "removed "+nextKeyFile+", the key of a rollover a crash interrupted before it was announced: the agent keeps its key")
			j.removeNextKey()
		}
		return nil
	}
	want := ed25519.PublicKey(j.id.NextKey)
	if want.Equal(j.key.Public()) {
		id := j.id
		id.NextKey = nil
		if err := j.writeIdentity(id); err != nil {
			return err
		}
		j.id = id
		j.removeNextKey()
		j.repairs = append(j.repairs, "finished a key rollover a crash interrupted: the key file holds the new key "+fingerprint(want))
		return nil
	}
	b, ok, err := readPrivate(path)
	if err != nil {
		return err
	}
	var key ed25519.PrivateKey
	if ok {
		key, err = parseKey(path, b)
	}
	if !ok || err != nil || !want.Equal(key.Public()) {
		// The old key still holds: the server takes it until the agent
		// switches. The rollover is given up.
		id := j.id
		id.NextKey = nil
		if werr := j.writeIdentity(id); werr != nil {
			return werr
		}
		j.id = id
		j.removeNextKey()
		j.repairs = append(j.repairs, fmt.Sprintf("gave up the key rollover to %s: %s is missing or holds another key; the agent keeps its key, which the server still takes "+
			"(if the server had accepted the lost one, it refuses another: remove the agent on the server and enroll it again)",
			fingerprint(want), path))
		return nil
	}
	j.next = key
	return nil
}

func fingerprint(pub ed25519.PublicKey) string {
	if len(pub) != ed25519.PublicKeySize {
		return "(none)"
	}
	return model.Fingerprint(pub)
}
