// Package journal is an agent's durable local state: its key pair, the
// server's key once enrolled, the desired slice it holds and its
// generation, the last result of every resource, the commands it accepted
// and has not finished, the ids of recent commands (to drop redeliveries),
// and the outbox of events not yet confirmed by the broker.
//
// Changes are made in transactions: a Tx is one record appended to a
// write-ahead log and synced to disk before Commit returns, so a kill -9 at
// any point keeps every committed transaction whole and loses only one that
// had not returned. When the log grows past a threshold the journal writes
// a snapshot of its state and starts a new log.
//
// Files in the state directory:
//
//	key            the agent's ed25519 private key (PKCS #8 PEM, mode 0600)
//	kex            the agent's X25519 key-agreement key (PKCS #8 PEM, mode
//	               0600): the server seals sensitive values to it
//	identity       the agent's name, the server key it pinned at enrollment,
//	               its sequence-number floor (JSON with a checksum)
//	snapshot       the state as of the start of log N (JSON)
//	wal.N          records after the snapshot: length, CRC-32C, JSON; the
//	               first record names the log
//	lock           held (flock) while a process uses the directory, unless
//	               it holds a lock on a directory above (Config.Lock)
//
// The key and the identity are kept apart from the log and replaced only
// atomically: damage to the log never costs the agent its identity. A torn
// tail of the log (the last record, cut short by a crash) is dropped; damage
// before it, a missing log or snapshot, a log cut short below the
// committed length the identity records, stops Open with ErrCorrupt saying
// what is damaged, and Reset moves the log aside so the agent can start
// over from an empty one, keeping its identity.
//
// A journal opened without a directory keeps the same state in memory only:
// the embedded mode, whose agents live as long as one command.
package journal

import (
	"crypto/ecdh"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tetherhq/tether/model"
)

// Errors of the journal.
var (
	// ErrLocked: another process uses the state directory.
	ErrLocked = errors.New("state directory is used by another process")
	// ErrCorrupt: a file of the journal cannot be read back. The error
	// says which file, where, and what to do.
	ErrCorrupt = errors.New("journal is corrupted")
	// ErrBroken: an earlier write failed half way and could not be undone;
	// the journal refuses further changes until reopened.
	ErrBroken = errors.New("journal is broken by an earlier write error")
)

// Config tunes a journal.
type Config struct {
	// CompactAt is the log size past which the next commit writes a
	// snapshot and starts a new log (0: the default, 8 MiB); never less
	// than twice the last snapshot, so large slices are not rewritten at
	// every commit.
	CompactAt int64
	// NoSync skips fsync: for benchmarks that measure everything else. A
	// crash may then lose recent transactions.
	NoSync bool
	// Lock, if not nil, is a lock this process holds on a directory above
	// the journal's (LockDir): the journal then keeps no lock file open
	// of its own.
	Lock *DirLock
}

// Default returns the configuration Open uses for zero fields.
func Default() Config { return Config{CompactAt: 8 << 20} }

// ErrConfig is wrapped by every error Validate returns.
var ErrConfig = errors.New("invalid journal configuration")

// Validate checks the configuration.
func (c Config) Validate() error {
	if c.CompactAt < 0 {
		return fmt.Errorf("%w: compact at %d bytes: want 0 (the default) or more", ErrConfig, c.CompactAt)
	}
	return nil
}

// dryRunKind is the Kind of a dry-run job (bus.KindDryRun, which the
// journal does not import): it changes nothing, so its drift policy is not
// kept.
const dryRunKind = "dryrun"

// seenMax is how many command ids the journal remembers. Redeliveries come
// from commands handled but not acknowledged, so the recent ones suffice.
const seenMax = 4096

// Applied is the last result of one resource: the intent it was applied
// for and where it stands.
type Applied struct {
	Hash  model.Hash          `json:"hash"`
	State model.ResourceState `json:"state"`
}

// Job is a deploy, repair or dry run the agent accepted and has not
// finished: it is run again after a restart.
type Job struct {
	// ID is the deploy id the server gave it.
	ID string `json:"id"`
	// Kind is the command: deploy, repair or dryrun.
	Kind string `json:"kind"`
	// Full covers every resource, not only those that changed or failed.
	Full       bool  `json:"full,omitempty"`
	Generation int64 `json:"generation"`
	// DriftPolicy is what to do about drift seen after the job.
	DriftPolicy model.DriftPolicy `json:"drift_policy,omitempty"`
	// IssuedAt is when the server issued the command: of two jobs, the
	// drift policy of the one issued last wins, whatever order they end in.
	IssuedAt time.Time `json:"issued_at,omitzero"`
}

// Intent is a change about to be applied: recorded before the handler
// runs, dropped when the resource's result is recorded. One found after a
// restart is a change that may have been made without being reported.
type Intent struct {
	Hash    model.Hash    `json:"hash"`
	Changes model.Changes `json:"changes"`
}

// Out is an event waiting in the outbox for the broker's confirm.
type Out struct {
	Seq  uint64 `json:"seq"`
	Data []byte `json:"data"`
}

// state is everything the log keeps; snapshots hold it whole.
type state struct {
	// Wal is the number of the first log that follows this state.
	Wal int `json:"wal"`
	// ServerKey is read from journals written before the identity file
	// held it, and moved there.
	ServerKey []byte `json:"server_key,omitempty"`
	// Seq is the highest sequence number of an event put in the outbox.
	Seq    uint64 `json:"seq"`
	Paused bool   `json:"paused,omitempty"`
	// PausedAt is when the server issued the pause or resume in force: an
	// older one is not applied over it.
	PausedAt time.Time `json:"paused_at,omitzero"`
	// DriftPolicy is that of the last deploy or repair issued and done,
	// or of the last settings command, whichever the server issued last:
	// the watch after a restart keeps it until the next one. PolicyAt is
	// when that command was issued.
	DriftPolicy model.DriftPolicy    `json:"drift_policy,omitempty"`
	PolicyAt    time.Time            `json:"policy_at,omitzero"`
	Slice       model.Slice          `json:"slice"`
	Applied     map[model.ID]Applied `json:"applied,omitempty"`
	Jobs        []Job                `json:"jobs,omitempty"`
	Seen        []string             `json:"seen,omitempty"`
	Outbox      []Out                `json:"outbox,omitempty"`
	Intents     map[model.ID]Intent  `json:"intents,omitempty"`
	seen        map[string]bool
	outbox      map[uint64][]byte
}

// Journal is an agent's durable state. Its methods are safe for concurrent
// use.
type Journal struct {
	dir  string
	cfg  Config
	kex  *ecdh.PrivateKey
	lock *os.File

	// committed is the log's length known committed (synced), which the
	// identity file records each time it is written (writeIdentity reads
	// it without the locks below).
	committed atomic.Pointer[logMark]

	// idMu guards the identity and the keys; it is never held with the
	// locks below.
	idMu sync.Mutex
	id   identity
	key  ed25519.PrivateKey
	// next is the key of a rollover under way (nil when none).
	next ed25519.PrivateKey

	// syncMu is held while syncing the log; lock order: syncMu, then mu.
	syncMu sync.Mutex

	mu      sync.Mutex
	st      state
	wal     *os.File
	walSize int64
	// walN is the number of the log in use.
	walN int
	// written and synced count records appended and records known to be
	// on disk: committers share one fsync (group commit).
	written, synced uint64
	// snapSize is the size of the last snapshot written or read.
	snapSize int64
	broken   error
	// repairs say what opening the journal put right (a torn tail cut
	// off, an older format upgraded), for the agent to log.
	repairs []string
}

// Open opens (creating it if needed) the journal in dir, replays it and
// takes the directory's lock. dir "" keeps the journal in memory. A
// directory is one agent's: opening another agent's fails.
func Open(dir, agent string, cfg Config) (*Journal, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.CompactAt == 0 {
		cfg.CompactAt = Default().CompactAt
	}
	j := &Journal{dir: dir, cfg: cfg, st: emptyState(), id: identity{Agent: agent}}
	j.st.Slice.Agent = agent
	if dir == "" {
		_, key, err := ed25519.GenerateKey(rand.Reader)
		if err != nil {
			return nil, err
		}
		kex, err := ecdh.X25519().GenerateKey(rand.Reader)
		if err != nil {
			return nil, err
		}
		j.key, j.kex = key, kex
		return j, nil
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("journal: create %s: %w", dir, err)
	}
	if cfg.Lock != nil {
		if err := cfg.Lock.covers(dir); err != nil {
			return nil, err
		}
	} else {
		lock, err := lockDir(dir)
		if err != nil {
			return nil, err
		}
		j.lock = lock
	}
	if err := j.load(agent); err != nil {
		j.broken = err // closed as found: nothing is recorded of it
		j.Close()
		return nil, err
	}
	return j, nil
}

func emptyState() state {
	return state{Wal: 1, Applied: map[model.ID]Applied{}, Intents: map[model.ID]Intent{}, seen: map[string]bool{}, outbox: map[uint64][]byte{}}
}

func (j *Journal) unlock() {
	if j.lock != nil {
		_ = j.lock.Close() // closing the file releases the flock
		j.lock = nil
	}
}

// Close closes the journal's files and releases the directory. A journal
// closed whole records its log's length in the identity file: a log found
// shorter at the next open lost committed records (load).
func (j *Journal) Close() error {
	j.syncMu.Lock()
	defer j.syncMu.Unlock()
	j.mu.Lock()
	var err error
	whole := false
	if j.wal != nil {
		whole = j.broken == nil && (j.cfg.NoSync || j.wal.Sync() == nil)
		if whole {
			j.committed.Store(&logMark{N: j.walN, Size: j.walSize})
		}
		err = j.wal.Close()
		j.wal = nil
	}
	if j.broken == nil {
		j.broken = errors.New("journal is closed")
	}
	j.mu.Unlock()
	if whole {
		j.idMu.Lock()
		if werr := j.writeIdentity(j.id); werr != nil && err == nil {
			err = werr
		}
		j.idMu.Unlock()
	}
	j.unlock()
	return err
}

// Dir returns the state directory ("" in memory).
func (j *Journal) Dir() string { return j.dir }

// Key returns the agent's private key, created on first open and
// replaced by CompleteRollover.
func (j *Journal) Key() ed25519.PrivateKey {
	j.idMu.Lock()
	defer j.idMu.Unlock()
	return j.key
}

// Kex returns the agent's key-agreement key, created on first open (of a
// state directory an older agent made too).
func (j *Journal) Kex() *ecdh.PrivateKey { return j.kex }

// Repairs says what opening the journal put right: a torn tail of the log
// cut off (records that never committed), an older format upgraded. The
// agent logs them once.
func (j *Journal) Repairs() []string { return slices.Clone(j.repairs) }

// Seq returns the highest sequence number of an event put in the outbox.
func (j *Journal) Seq() uint64 {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.st.Seq
}

// Paused reports whether the server paused the agent, and when it issued
// the pause or resume in force (zero when it never did).
func (j *Journal) Paused() (bool, time.Time) {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.st.Paused, j.st.PausedAt
}

// Slice returns the desired slice held. Its resources must not be changed.
func (j *Journal) Slice() model.Slice {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.st.Slice
}

// Applied returns the last result of a resource.
func (j *Journal) Applied(id model.ID) (Applied, bool) {
	j.mu.Lock()
	defer j.mu.Unlock()
	a, ok := j.st.Applied[id]
	return a, ok
}

// Intent returns the change recorded as about to be applied to a
// resource whose result was not recorded since.
func (j *Journal) Intent(id model.ID) (Intent, bool) {
	j.mu.Lock()
	defer j.mu.Unlock()
	in, ok := j.st.Intents[id]
	return in, ok
}

// Jobs returns the accepted, unfinished jobs in the order they came.
func (j *Journal) Jobs() []Job {
	j.mu.Lock()
	defer j.mu.Unlock()
	return slices.Clone(j.st.Jobs)
}

// DriftPolicy returns the drift policy of the last deploy or repair
// issued and done, or of the last settings command, whichever was issued
// last ("" before the first, or when the server sent none).
func (j *Journal) DriftPolicy() model.DriftPolicy {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.st.DriftPolicy
}

// Seen reports whether a command with this envelope id was handled.
func (j *Journal) Seen(id string) bool {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.st.seen[id]
}

// Outbox returns the events not yet confirmed, oldest first.
func (j *Journal) Outbox() []Out {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.st.sortedOutbox()
}

func (s *state) sortedOutbox() []Out {
	out := make([]Out, 0, len(s.outbox))
	for _, seq := range slices.Sorted(maps.Keys(s.outbox)) {
		out = append(out, Out{Seq: seq, Data: s.outbox[seq]})
	}
	return out
}

// OutboxLen returns how many events wait for a confirm.
func (j *Journal) OutboxLen() int {
	j.mu.Lock()
	defer j.mu.Unlock()
	return len(j.st.outbox)
}

// Result pairs a resource with its last result, for Tx.Record.
type Result struct {
	ID model.ID `json:"id"`
	Applied
}

// UnmarshalJSON reads a result as the log holds it. Logs written before
// the forget operation existed dropped a result with an empty state: that
// form is read back as a deletion (see state.apply).
func (r *Result) UnmarshalJSON(b []byte) error {
	var raw struct {
		ID    model.ID   `json:"id"`
		Hash  model.Hash `json:"hash"`
		State string     `json:"state"`
	}
	if err := json.Unmarshal(b, &raw); err != nil {
		return err
	}
	st := model.ResourceState(raw.State)
	if st != "" && !st.Valid() {
		return fmt.Errorf("unknown resource state %q", raw.State)
	}
	*r = Result{ID: raw.ID, Applied: Applied{Hash: raw.Hash, State: st}}
	return nil
}

// op is one change of a transaction; a log record is a list of ops.
type op struct {
	Op        string            `json:"op"`
	ServerKey []byte            `json:"server_key,omitempty"`
	Slice     *model.Slice      `json:"slice,omitempty"`
	Diff      *model.Diff       `json:"diff,omitempty"`
	Results   []Result          `json:"results,omitempty"`
	IDs       []model.ID        `json:"ids,omitempty"`
	Job       *Job              `json:"job,omitempty"`
	ID        string            `json:"id,omitempty"`
	Seq       uint64            `json:"seq,omitempty"`
	Data      []byte            `json:"data,omitempty"`
	Seqs      []uint64          `json:"seqs,omitempty"`
	Paused    bool              `json:"paused,omitempty"`
	At        time.Time         `json:"at,omitzero"`
	Policy    model.DriftPolicy `json:"policy,omitempty"`
	Intent    *Intent           `json:"intent,omitempty"`
	// Log and Agent are the header that opens every log: its number and
	// the agent it belongs to.
	Log   int    `json:"log,omitempty"`
	Agent string `json:"agent,omitempty"`
}

// Operation names.
const (
	opLog       = "log"
	opServerKey = "server_key" // read from older logs only: moved to the identity
	opSlice     = "slice"
	opDiff      = "diff"
	opRecord    = "record"
	opForget    = "forget"
	opJob       = "job"
	opJobDone   = "job_done"
	opSeen      = "seen"
	opOut       = "out"
	opSent      = "sent"
	opPaused    = "paused"
	opPolicy    = "policy"
	opIntent    = "intent"
)

// Tx collects changes that are committed together or not at all.
type Tx struct {
	j   *Journal
	ops []op
}

// Begin starts a transaction.
func (j *Journal) Begin() *Tx { return &Tx{j: j} }

// Seen records that the command with this envelope id was handled.
func (t *Tx) Seen(id string) *Tx { return t.add(op{Op: opSeen, ID: id}) }

// SetSlice replaces the desired slice.
func (t *Tx) SetSlice(s model.Slice) *Tx { return t.add(op{Op: opSlice, Slice: &s}) }

// ApplyDiff moves the desired slice by a diff; Commit fails with
// model.ErrGenerationMismatch when it does not start at the slice held.
func (t *Tx) ApplyDiff(d model.Diff) *Tx { return t.add(op{Op: opDiff, Diff: &d}) }

// Record sets resources' last results.
func (t *Tx) Record(rs []Result) *Tx { return t.add(op{Op: opRecord, Results: rs}) }

// AddJob queues a job.
func (t *Tx) AddJob(job Job) *Tx { return t.add(op{Op: opJob, Job: &job}) }

// JobDone drops a finished job.
func (t *Tx) JobDone(id string) *Tx { return t.add(op{Op: opJobDone, ID: id}) }

// Out puts an event in the outbox.
func (t *Tx) Out(seq uint64, data []byte) *Tx { return t.add(op{Op: opOut, Seq: seq, Data: data}) }

// Intend records that changes are about to be applied to a resource.
func (t *Tx) Intend(id model.ID, hash model.Hash, changes model.Changes) *Tx {
	return t.add(op{Op: opIntent, ID: id.String(), Intent: &Intent{Hash: hash, Changes: changes}})
}

// Pause records whether the server paused the agent, by a command it
// issued at the time given.
func (t *Tx) Pause(paused bool, at time.Time) *Tx {
	return t.add(op{Op: opPaused, Paused: paused, At: at.UTC()})
}

// SetDriftPolicy records the drift policy the server set, by a command it
// issued at the time given: it is in force unless a deploy or repair
// issued later brought another.
func (t *Tx) SetDriftPolicy(p model.DriftPolicy, at time.Time) *Tx {
	return t.add(op{Op: opPolicy, Policy: p, At: at.UTC()})
}

func (t *Tx) add(o op) *Tx {
	t.ops = append(t.ops, o)
	return t
}

// Commit writes the transaction and returns once it is on disk.
func (t *Tx) Commit() error {
	if len(t.ops) == 0 {
		return nil
	}
	return t.j.commit(t.ops, !t.j.cfg.NoSync)
}

// Sent drops confirmed events from the outbox. It is not synced on its own:
// after a crash an event may be published again, and the server drops the
// duplicate by its sequence number.
func (j *Journal) Sent(seqs ...uint64) error {
	if len(seqs) == 0 {
		return nil
	}
	return j.commit([]op{{Op: opSent, Seqs: seqs}}, false)
}

func (j *Journal) commit(ops []op, sync bool) error {
	n, err := j.write(ops)
	if err != nil || !sync || j.dir == "" || j.cfg.NoSync {
		return err
	}
	return j.syncTo(n)
}

// syncTo returns once record n is on disk. Whoever syncs first syncs every
// record written so far; those waiting behind find theirs synced.
func (j *Journal) syncTo(n uint64) error {
	j.syncMu.Lock()
	defer j.syncMu.Unlock()
	j.mu.Lock()
	if j.synced >= n {
		j.mu.Unlock()
		return nil
	}
	if j.broken != nil {
		defer j.mu.Unlock()
		return fmt.Errorf("journal: %w", j.broken)
	}
	f, target, mark := j.wal, j.written, logMark{N: j.walN, Size: j.walSize}
	j.mu.Unlock()
	err := f.Sync()
	j.mu.Lock()
	defer j.mu.Unlock()
	if err != nil {
		if j.synced >= n {
			return nil // a compaction's snapshot holds it, and closed f
		}
		// After a failed fsync the kernel may have dropped the dirty
		// pages: nothing since the last good sync can be trusted.
		j.broken = fmt.Errorf("sync %s: %w", f.Name(), err)
		return fmt.Errorf("journal: %w", j.broken)
	}
	j.synced = max(j.synced, target)
	if mark.N == j.walN {
		j.committed.Store(&mark)
	}
	return nil
}

// write appends ops as one record and applies them to the state; it
// returns the record's number for syncTo.
func (j *Journal) write(ops []op) (uint64, error) {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.broken != nil {
		return 0, fmt.Errorf("journal: %w", j.broken)
	}
	// Work out the diffs' results first: an op that cannot apply fails
	// the transaction before anything is written.
	next := j.st.Slice
	for i := range ops {
		switch ops[i].Op {
		case opSlice:
			next = *ops[i].Slice
		case opDiff:
			s, err := next.Apply(*ops[i].Diff)
			if err != nil {
				return 0, fmt.Errorf("journal: %w", err)
			}
			next = s
		}
	}
	if j.dir != "" {
		if err := j.append(ops); err != nil {
			return 0, err
		}
	}
	j.written++
	for i := range ops {
		_ = j.st.apply(&ops[i], true) // cannot fail: the ops were built here
	}
	j.st.Slice = next
	if j.dir != "" && j.walSize > max(j.cfg.CompactAt, 2*j.snapSize) {
		if err := j.compact(); err != nil {
			return 0, err
		}
	}
	return j.written, nil
}

// apply changes the state by one op. Slice and diff ops change the slice
// only when sliceDone is false (replay): commit computed the slice already.
func (s *state) apply(o *op, sliceDone bool) error {
	switch o.Op {
	case opLog:
		// The header: checked by replay, nothing to apply.
	case opServerKey:
		s.ServerKey = o.ServerKey
	case opSlice:
		if o.Slice == nil {
			return errors.New("slice operation without a slice")
		}
		if !sliceDone {
			s.Slice = *o.Slice
		}
	case opDiff:
		if o.Diff == nil {
			return errors.New("diff operation without a diff")
		}
		if !sliceDone {
			next, err := s.Slice.Apply(*o.Diff)
			if err != nil {
				return err
			}
			s.Slice = next
		}
	case opIntent:
		id, err := model.ParseID(o.ID)
		if err != nil {
			return err
		}
		if o.Intent == nil {
			return errors.New("intent operation without an intent")
		}
		s.Intents[id] = *o.Intent
	case opRecord:
		for _, r := range o.Results {
			delete(s.Intents, r.ID)
			if r.State == "" {
				delete(s.Applied, r.ID) // a forget, as older logs wrote it
				continue
			}
			s.Applied[r.ID] = r.Applied
		}
	case opForget:
		for _, id := range o.IDs {
			delete(s.Applied, id)
		}
	case opJob:
		if o.Job == nil {
			return errors.New("job operation without a job")
		}
		if !slices.ContainsFunc(s.Jobs, func(j Job) bool { return j.ID == o.Job.ID && j.Kind == o.Job.Kind }) {
			s.Jobs = append(s.Jobs, *o.Job)
		}
	case opJobDone:
		s.Jobs = slices.DeleteFunc(s.Jobs, func(j Job) bool {
			if j.ID != o.ID {
				return false
			}
			if j.DriftPolicy != "" && j.Kind != dryRunKind && !j.IssuedAt.Before(s.PolicyAt) {
				s.DriftPolicy, s.PolicyAt = j.DriftPolicy, j.IssuedAt
			}
			return true
		})
	case opSeen:
		if !s.seen[o.ID] {
			s.seen[o.ID] = true
			s.Seen = append(s.Seen, o.ID)
			if len(s.Seen) > seenMax {
				drop := len(s.Seen) - seenMax
				for _, id := range s.Seen[:drop] {
					delete(s.seen, id)
				}
				s.Seen = slices.Delete(s.Seen, 0, drop)
			}
		}
	case opOut:
		s.outbox[o.Seq] = o.Data
		s.Seq = max(s.Seq, o.Seq)
	case opSent:
		for _, seq := range o.Seqs {
			delete(s.outbox, seq)
		}
	case opPaused:
		s.Paused, s.PausedAt = o.Paused, o.At
	case opPolicy:
		if o.Policy != "" && !o.At.Before(s.PolicyAt) {
			s.DriftPolicy, s.PolicyAt = o.Policy, o.At
		}
	default:
		return fmt.Errorf("unknown operation %q", o.Op)
	}
	return nil
}

// Forget drops the results of resources that left the slice, so the
// journal does not grow with every resource ever held. It returns how many
// it dropped.
func (j *Journal) Forget() (int, error) {
	j.mu.Lock()
	held := make(map[model.ID]bool, len(j.st.Slice.Resources))
	for i := range j.st.Slice.Resources {
		held[j.st.Slice.Resources[i].ID] = true
	}
	var gone []model.ID
	for id := range j.st.Applied {
		if !held[id] {
			gone = append(gone, id)
		}
	}
	j.mu.Unlock()
	if len(gone) == 0 {
		return 0, nil
	}
	slices.SortFunc(gone, model.ID.Compare)
	return len(gone), j.commit([]op{{Op: opForget, IDs: gone}}, false)
}
