package journal

import (
	"crypto/ed25519"
	"errors"
	"fmt"
)

// A rollover of the server's signing key changes only the identity file,
// each step in one atomic replacement, so a restart at any point finds
// the keys the agent takes:
//
//  1. AnnounceServerKey, on a server.rollover signed by the pinned key,
//     records the next key (NextServerKey): commands signed by either are
//     taken.
//  2. SwitchServerKey, on the first command signed by the next key (the
//     server switched), pins it alone and keeps the old one as
//     PreviousServerKey, which signs nothing the agent takes.

// ErrNoServerRollover: no next server key was announced.
var ErrNoServerRollover = errors.New("no server key rollover announced")

// NextServerKey returns the server's next key, nil when none was announced.
func (j *Journal) NextServerKey() ed25519.PublicKey {
	j.idMu.Lock()
	defer j.idMu.Unlock()
	return keyOrNil(j.id.NextServerKey)
}

// PreviousServerKey returns the server key pinned before the last switch,
// nil when there was none.
func (j *Journal) PreviousServerKey() ed25519.PublicKey {
	j.idMu.Lock()
	defer j.idMu.Unlock()
	return keyOrNil(j.id.PreviousServerKey)
}

func keyOrNil(b []byte) ed25519.PublicKey {
	if len(b) == 0 {
		return nil
	}
	return ed25519.PublicKey(b)
}

// AnnounceServerKey records next as the server's next key, in place of
// any announced before (durably; nothing is written when it is the one
// recorded). The agent must have pinned a server key.
func (j *Journal) AnnounceServerKey(next ed25519.PublicKey) error {
	j.idMu.Lock()
	defer j.idMu.Unlock()
	switch {
	case len(j.id.ServerKey) == 0:
		return fmt.Errorf("journal: a next server key %s before any server key was pinned", fingerprint(next))
	case next.Equal(ed25519.PublicKey(j.id.NextServerKey)):
		return nil
	}
	id := j.id
	id.NextServerKey = next
	if err := j.writeIdentity(id); err != nil {
		return err
	}
	j.id = id
	return nil
}

// SwitchServerKey pins the announced next key alone; the one pinned until
// now is kept as the previous key.
func (j *Journal) SwitchServerKey() error {
	j.idMu.Lock()
	defer j.idMu.Unlock()
	if len(j.id.NextServerKey) == 0 {
		return ErrNoServerRollover
	}
	id := j.id
	id.PreviousServerKey, id.ServerKey, id.NextServerKey = id.ServerKey, id.NextServerKey, nil
	if err := j.writeIdentity(id); err != nil {
		return err
	}
	j.id = id
	return nil
}
