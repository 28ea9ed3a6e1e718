package journal

import (
	"crypto/ecdh"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/tetherhq/tether/model/durable"
)

// The agent's identity lives apart from the log, so damage to the log
// never costs the agent its key, the server key it pinned, or the floor of
// its sequence numbers: the key in its own file (as ssh keeps one), the rest
// in the identity file, each replaced only atomically.
const (
	keyFile      = "key"
	nextKeyFile  = "key.next"
	kexFile      = "kex"
	identityFile = "identity"
)

// identity is what the identity file holds.
type identity struct {
	Agent string `json:"agent"`
	// ServerKey is the server's public key, pinned at enrollment.
	ServerKey  []byte    `json:"server_key,omitempty"`
	EnrolledAt time.Time `json:"enrolled_at,omitzero"`
	// Seq is the sequence-number floor: every number the agent signed an
	// event with is at most Seq, so a restart, or a journal started over,
	// never signs two events with one number.
	Seq uint64 `json:"seq"`
	// Env is the incarnation of the environment the agent serves, and
	// Generation the newest generation of desired state it held there:
	// desired state older than it is refused, even after the journal
	// started over.
	Env        string `json:"env,omitempty"`
	Generation int64  `json:"generation,omitempty"`
	// Kex says the state directory has a key-agreement key: a kex file
	// missing then is a key lost, not a directory of an older agent.
	Kex bool `json:"kex,omitempty"`
	// NextKey is the public key of a rollover under way: its private key
	// is in the key.next file until the server acknowledges it.
	NextKey []byte `json:"next_key,omitempty"`
	// NextServerKey is the server's next signing key, announced by a
	// server.rollover signed by ServerKey: commands signed by either are
	// taken until the first signed by it, which makes it ServerKey.
	NextServerKey []byte `json:"next_server_key,omitempty"`
	// PreviousServerKey is the server key pinned before the last switch:
	// a configuration (enrollment token, --server-key) that still names
	// it starts the agent; nothing it signs is taken.
	PreviousServerKey []byte `json:"previous_server_key,omitempty"`
	// Committed is how much of the log was known committed when the
	// identity was last written (at each identity change, and when the
	// journal is closed): a log found shorter than that lost committed
	// records, which a crash cannot do (a crash tears at most the record
	// being written, after everything committed).
	Committed *logMark `json:"committed,omitempty"`
}

// logMark says that log N held Size bytes of committed records.
type logMark struct {
	N    int   `json:"log"`
	Size int64 `json:"size"`
}

// fresh reports whether the identity says nothing happened yet: no
// enrollment, no event signed. A missing log is then no loss.
func (id *identity) fresh() bool { return len(id.ServerKey) == 0 && id.Seq == 0 && id.Generation == 0 }

// identityFileForm is the identity with a checksum, so a damaged file is
// found rather than believed.
type identityFileForm struct {
	identity
	Check string `json:"check"`
}

func (id *identity) checksum() string {
	b, _ := json.Marshal(id) // a plain struct: cannot fail
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// readIdentity reads the identity file; ok is false when there is none.
func (j *Journal) readIdentity() (id identity, ok bool, err error) {
	path := filepath.Join(j.dir, identityFile)
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return identity{}, false, nil
	}
	if err != nil {
		return identity{}, false, fmt.Errorf("journal: %w", err)
	}
	var f identityFileForm
	if err := json.Unmarshal(b, &f); err != nil {
		return identity{}, false, fmt.Errorf("%w: %s cannot be read (%v): restore it from a backup, or start the agent over as a new one", ErrCorrupt, path, err)
	}
	if f.Check != f.identity.checksum() {
		return identity{}, false, fmt.Errorf("%w: %s fails its checksum: restore it from a backup, or start the agent over as a new one", ErrCorrupt, path)
	}
	return f.identity, true, nil
}

// writeIdentity replaces the identity file (synced unless NoSync), with
// the log's committed length as known now.
func (j *Journal) writeIdentity(id identity) error {
	if j.dir == "" {
		return nil
	}
	if m := j.committed.Load(); m != nil {
		id.Committed = m
	}
	b, err := json.MarshalIndent(identityFileForm{identity: id, Check: id.checksum()}, "", "  ")
	if err != nil {
		return fmt.Errorf("journal: identity: %w", err)
	}
	if err := j.writeFile(identityFile, append(b, '\n'), 0o600); err != nil {
		return fmt.Errorf("journal: write identity: %w", err)
	}
	return nil
}

// ServerKey returns the server's public key, nil before enrollment.
func (j *Journal) ServerKey() ed25519.PublicKey {
	j.idMu.Lock()
	defer j.idMu.Unlock()
	if len(j.id.ServerKey) == 0 {
		return nil
	}
	return ed25519.PublicKey(j.id.ServerKey)
}

// Enroll pins the server's public key. The agent trusts commands signed
// with it from then on, across restarts and whatever happens to the log.
func (j *Journal) Enroll(serverKey ed25519.PublicKey, at time.Time) error {
	j.idMu.Lock()
	defer j.idMu.Unlock()
	next := j.id
	next.ServerKey, next.EnrolledAt = serverKey, at.UTC()
	if err := j.writeIdentity(next); err != nil {
		return err
	}
	j.id = next
	return nil
}

// SeqFloor returns the highest sequence number reserved: every number the
// agent signed with is at most this one.
func (j *Journal) SeqFloor() uint64 {
	j.idMu.Lock()
	defer j.idMu.Unlock()
	return j.id.Seq
}

// ReserveSeq raises the sequence-number floor to upTo, durably: once it
// returns, no restart hands out a number up to upTo again.
func (j *Journal) ReserveSeq(upTo uint64) error {
	j.idMu.Lock()
	defer j.idMu.Unlock()
	if upTo <= j.id.Seq {
		return nil
	}
	next := j.id
	next.Seq = upTo
	if err := j.writeIdentity(next); err != nil {
		return err
	}
	j.id = next
	return nil
}

// Generation returns the environment incarnation the agent serves and the
// newest generation of desired state it held there.
func (j *Journal) Generation() (env string, gen int64) {
	j.idMu.Lock()
	defer j.idMu.Unlock()
	return j.id.Env, j.id.Generation
}

// HoldGeneration raises the generation held to gen (durably; nothing is
// written when it is not higher).
func (j *Journal) HoldGeneration(gen int64) error {
	j.idMu.Lock()
	defer j.idMu.Unlock()
	if gen <= j.id.Generation {
		return nil
	}
	next := j.id
	next.Generation = gen
	if err := j.writeIdentity(next); err != nil {
		return err
	}
	j.id = next
	return nil
}

// SetGeneration sets the environment incarnation and the generation held,
// lower or higher: only for the server's own fresh word (an environment
// created again numbers its versions from 1).
func (j *Journal) SetGeneration(env string, gen int64) error {
	j.idMu.Lock()
	defer j.idMu.Unlock()
	if env == j.id.Env && gen == j.id.Generation {
		return nil
	}
	next := j.id
	next.Env, next.Generation = env, gen
	if err := j.writeIdentity(next); err != nil {
		return err
	}
	j.id = next
	return nil
}

func privateKeyPEM(key ed25519.PrivateKey) ([]byte, error) {
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), nil
}

func parseKey(path string, b []byte) (ed25519.PrivateKey, error) {
	blk, _ := pem.Decode(b)
	if blk == nil || blk.Type != "PRIVATE KEY" {
		return nil, fmt.Errorf("%w: %s is not a PEM private key", ErrCorrupt, path)
	}
	k, err := x509.ParsePKCS8PrivateKey(blk.Bytes)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %v", ErrCorrupt, path, err)
	}
	key, ok := k.(ed25519.PrivateKey)
	if !ok {
		return nil, fmt.Errorf("%w: %s holds a %T, not an ed25519 key", ErrCorrupt, path, k)
	}
	return key, nil
}

// readKex reads the key-agreement key file; ok is false when there is
// none. Like the key, it is refused when others can read it: it opens the
// agent's sensitive values.
func (j *Journal) readKex() (key *ecdh.PrivateKey, ok bool, err error) {
	path := filepath.Join(j.dir, kexFile)
	b, ok, err := readPrivate(path)
	if !ok || err != nil {
		return nil, false, err
	}
	blk, _ := pem.Decode(b)
	if blk == nil || blk.Type != "PRIVATE KEY" {
		return nil, false, fmt.Errorf("%w: %s is not a PEM private key", ErrCorrupt, path)
	}
	k, err := x509.ParsePKCS8PrivateKey(blk.Bytes)
	if err != nil {
		return nil, false, fmt.Errorf("%w: %s: %v", ErrCorrupt, path, err)
	}
	key, isX25519 := k.(*ecdh.PrivateKey)
	if !isX25519 || key.Curve() != ecdh.X25519() {
		return nil, false, fmt.Errorf("%w: %s holds a %T, not an X25519 key", ErrCorrupt, path, k)
	}
	return key, true, nil
}

// createKex makes the agent's key-agreement key and writes it, synced.
func (j *Journal) createKex() error {
	key, err := ecdh.X25519().GenerateKey(rand.Reader)
	if err != nil {
		return err
	}
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return err
	}
	b := pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der})
	if err := durable.WriteFile(filepath.Join(j.dir, kexFile), b, 0o600); err != nil {
		return fmt.Errorf("journal: write key-agreement key: %w", err)
	}
	j.kex = key
	return nil
}

// loadKex reads the key-agreement key, or makes it: on the first start,
// and on the first start of a state directory an older agent made. One
// lost after it was made stops the agent: the server would refuse another.
func (j *Journal) loadKex() error {
	key, ok, err := j.readKex()
	switch {
	case err != nil:
		return err
	case ok:
		j.kex = key
	case j.id.Kex:
		return fmt.Errorf("%w: the key-agreement key file %s is missing: the server refuses this agent another one; "+
			"restore the file from a backup, or remove the state directory and enroll the agent again as a new one",
			ErrCorrupt, filepath.Join(j.dir, kexFile))
	default:
		if err := j.createKex(); err != nil {
			return err
		}
		if !j.id.fresh() {
			j.repairs = append(j.repairs, "made a key-agreement key ("+kexFile+") for sealed sensitive values: the state directory was made by an older agent")
		}
	}
	if !j.id.Kex {
		next := j.id
		next.Kex = true
		if err := j.writeIdentity(next); err != nil {
			return err
		}
		j.id = next
	}
	return nil
}

// readPrivate reads a private key's file; ok is false when there is none.
// A file others can read is refused, as ssh does.
func readPrivate(path string) (b []byte, ok bool, err error) {
	info, err := os.Stat(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, fmt.Errorf("journal: %w", err)
	}
	if info.Mode().Perm()&0o077 != 0 {
		return nil, false, fmt.Errorf("journal: key file %s is accessible by others (mode %04o): run chmod 600 %s", path, info.Mode().Perm(), path)
	}
	b, err = os.ReadFile(path)
	if err != nil {
		return nil, false, fmt.Errorf("journal: %w", err)
	}
	return b, true, nil
}

// readKey reads the key file; ok is false when there is none. A key others
// can read is refused, as ssh does: it is the agent's identity.
func (j *Journal) readKey() (key ed25519.PrivateKey, ok bool, err error) {
	path := filepath.Join(j.dir, keyFile)
	b, ok, err := readPrivate(path)
	if !ok || err != nil {
		return nil, false, err
	}
	key, err = parseKey(path, b)
	return key, err == nil, err
}

// createKey makes the agent's key pair and writes it, synced.
func (j *Journal) createKey() error {
	_, key, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return err
	}
	b, err := privateKeyPEM(key)
	if err != nil {
		return err
	}
	if err := durable.WriteFile(filepath.Join(j.dir, keyFile), b, 0o600); err != nil {
		return fmt.Errorf("journal: write key: %w", err)
	}
	j.key = key
	return nil
}
