package journal

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/tetherhq/tether/model"
	"github.com/tetherhq/tether/model/durable"
)

// A log record is a header of the payload's length and CRC-32C (both
// little-endian uint32), then the payload: a JSON list of ops. Every log
// begins with a record of one op, opLog, naming the log's number and its
// agent; so an emptied, swapped or truncated log is told from a new one.
//
// Only the last record of the newest log can be torn: it is the only one a
// crash can cut short (appends are sequential; every earlier record was
// whole before the next one started). So a record that cannot be read is
// a torn tail — dropped, it never committed — only when nothing readable
// follows it; otherwise the log is damaged and Open says so.
const headerSize = 8

// maxRecord bounds one record, so a damaged length never makes replay
// allocate gigabytes.
const maxRecord = 1 << 30

// recordStart is how every payload begins (a JSON list of ops, each with
// "op" first): it finds later records when one cannot be read.
var recordStart = []byte(`[{"op":"`)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// snapshotFile is the snapshot's name in the state directory.
const snapshotFile = "snapshot"

func walName(n int) string { return fmt.Sprintf("wal.%d", n) }

// encodeRecord frames ops as one record.
func encodeRecord(ops []op) ([]byte, error) {
	payload, err := json.Marshal(ops)
	if err != nil {
		return nil, fmt.Errorf("journal: encode: %w", err)
	}
	if len(payload) > maxRecord {
		return nil, fmt.Errorf("journal: a record of %d bytes is over the %d limit", len(payload), maxRecord)
	}
	buf := make([]byte, headerSize, headerSize+len(payload))
	binary.LittleEndian.PutUint32(buf[0:4], uint32(len(payload)))
	binary.LittleEndian.PutUint32(buf[4:8], crc32.Checksum(payload, castagnoli))
	return append(buf, payload...), nil
}

// append writes one record to the current log (syncTo syncs it). A failed
// write is cut off again so later records never follow garbage.
func (j *Journal) append(ops []op) error {
	buf, err := encodeRecord(ops)
	if err != nil {
		return err
	}
	if _, err := j.wal.Write(buf); err != nil {
		j.undo(err)
		return fmt.Errorf("journal: write: %w", err)
	}
	j.walSize += int64(len(buf))
	return nil
}

// undo cuts the log back to its last whole record after a failed write.
func (j *Journal) undo(cause error) {
	if err := j.wal.Truncate(j.walSize); err != nil {
		j.broken = fmt.Errorf("write failed (%v) and could not be undone: %w", cause, err)
		return
	}
	if _, err := j.wal.Seek(j.walSize, io.SeekStart); err != nil {
		j.broken = fmt.Errorf("write failed (%v) and could not be undone: %w", cause, err)
	}
}

// createLog creates (or empties) log n and writes its header, synced with
// the directory unless NoSync: a log exists only with its header.
func (j *Journal) createLog(n int, agent string) (*os.File, int64, error) {
	f, err := os.OpenFile(filepath.Join(j.dir, walName(n)), os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return nil, 0, err
	}
	buf, err := encodeRecord([]op{{Op: opLog, Log: n, Agent: agent}})
	if err == nil {
		_, err = f.Write(buf)
	}
	if err == nil && !j.cfg.NoSync {
		err = f.Sync()
		if err == nil {
			err = durable.SyncDir(j.dir)
		}
	}
	if err != nil {
		f.Close()
		return nil, 0, err
	}
	return f, int64(len(buf)), nil
}

// logInfo is what replaying one log found.
type logInfo struct {
	n int
	// header: the log begins with its header; records counts the records
	// after it.
	header  bool
	records int
	// torn is where a torn tail began (-1: none), cut bytes long.
	torn, cut int64
}

// load reads the key, the identity, the snapshot and every log after it,
// checks that nothing is missing, and opens the last log for appending.
func (j *Journal) load(agent string) error {
	if err := j.removeTemps(); err != nil {
		return err
	}
	key, haveKey, err := j.readKey()
	if err != nil {
		return err
	}
	id, haveID, err := j.readIdentity()
	if err != nil {
		return err
	}
	if haveID && id.Agent != agent {
		return fmt.Errorf("journal: %s holds the identity of agent %q, not %q: give each agent its own state directory", j.dir, id.Agent, agent)
	}
	haveSnap, err := j.readSnapshot()
	if err != nil {
		return err
	}
	logs, err := j.logs()
	if err != nil {
		return err
	}
	var infos []logInfo
	for _, n := range logs {
		path := filepath.Join(j.dir, walName(n))
		if n < j.st.Wal {
			// Left behind by a compaction that stopped before removing it.
			if err := os.Remove(path); err != nil {
				return fmt.Errorf("journal: %w", err)
			}
			continue
		}
		var committed int64
		if haveID && id.Committed != nil && id.Committed.N == n {
			committed = id.Committed.Size
		}
		info, err := j.replay(n, agent, committed)
		if err != nil {
			return err
		}
		infos = append(infos, info)
	}
	// A torn tail is the end of the newest writes: a later log holding
	// records means the tail was not the end.
	for i, info := range infos {
		if info.torn < 0 {
			continue
		}
		for _, later := range infos[i+1:] {
			if later.records > 0 {
				return j.damaged(walName(info.n), "the record at byte %d cannot be read, and %s holds later records", info.torn, walName(later.n))
			}
		}
	}
	committed := haveSnap || slices.ContainsFunc(infos, func(i logInfo) bool { return i.records > 0 })
	if j.st.Slice.Agent != "" && j.st.Slice.Agent != agent {
		return fmt.Errorf("journal: %s holds the state of agent %q, not %q: give each agent its own state directory", j.dir, j.st.Slice.Agent, agent)
	}
	j.st.Slice.Agent = agent

	switch {
	case haveKey:
		j.key = key
	case committed || (haveID && !id.fresh()):
		return fmt.Errorf("%w: the key file %s is missing while the journal holds this agent's state: the agent's identity is lost; "+
			"restore the key file from a backup, or remove the state directory and enroll the agent again as a new one",
			ErrCorrupt, filepath.Join(j.dir, keyFile))
	default:
		if err := j.createKey(); err != nil {
			return err
		}
	}

	newFormat := slices.ContainsFunc(infos, func(i logInfo) bool { return i.header })
	switch {
	case haveID:
		j.id = id
		if !id.fresh() {
			if err := j.checkLogs(haveSnap, infos); err != nil {
				return err
			}
		}
	case committed && newFormat:
		return fmt.Errorf("%w: the identity file %s is missing (it holds the pinned server key and the sequence-number floor): "+
			"restore it from a backup, or remove the state directory and enroll the agent again as a new one",
			ErrCorrupt, filepath.Join(j.dir, identityFile))
	default:
		// A journal of an older format (the server key in the log), or a
		// new one: the identity starts here. Sequence numbers of the older
		// format followed the clock: the floor starts past both.
		j.id = identity{Agent: agent, ServerKey: j.st.ServerKey, Seq: max(j.st.Seq, olderFloor(committed)), Generation: j.st.Slice.Generation}
		if err := j.writeIdentity(j.id); err != nil {
			return err
		}
	}
	if err := j.loadKex(); err != nil {
		return err
	}
	if err := j.loadNextKey(); err != nil {
		return err
	}
	for _, info := range infos {
		if info.torn >= 0 {
			j.repairs = append(j.repairs, fmt.Sprintf("%s: cut %d bytes of a torn tail at byte %d (a write a crash interrupted; it never committed)",
				walName(info.n), info.cut, info.torn))
		}
	}
	if err := j.openLast(agent, infos, committed && !newFormat); err != nil {
		return err
	}
	j.committed.Store(&logMark{N: j.walN, Size: j.walSize})
	return nil
}

// olderFloor is the sequence-number floor of a journal of the older
// format, whose numbers followed the clock in nanoseconds.
func olderFloor(committed bool) uint64 {
	if !committed {
		return 0
	}
	return uint64(time.Now().UnixNano())
}

// checkLogs refuses a journal whose log is missing or emptied: an agent
// that enrolled or signed an event has a log that begins with its header
// where the snapshot (or, without one, the first log) says.
func (j *Journal) checkLogs(haveSnap bool, infos []logInfo) error {
	first := j.st.Wal
	if len(infos) == 0 || infos[0].n != first {
		if !haveSnap && len(infos) > 0 {
			return j.damaged(snapshotFile, "the file is missing, and the logs start at %s", walName(infos[0].n))
		}
		return j.damaged(walName(first), "the file is missing")
	}
	if !infos[0].header {
		return j.damaged(walName(first), "the file is empty, or lost its beginning")
	}
	return nil
}

// damaged is the error of a damaged journal: what is damaged, that the
// identity is intact, and what to do.
func (j *Journal) damaged(file, format string, args ...any) error {
	return fmt.Errorf("%w: %s: %s. The agent's key and identity are intact; "+
		"to start over from an empty journal (the agent keeps its identity and the server sends it its whole desired state), "+
		"move the damaged files aside with: tether agent reset-journal %s",
		ErrCorrupt, filepath.Join(j.dir, file), fmt.Sprintf(format, args...), j.dir)
}

// openLast opens the newest log for appending; one without its header (a
// new journal, a crash while it was created) is started again. An older
// format's log is compacted, so the log in use has a header.
func (j *Journal) openLast(agent string, infos []logInfo, upgrade bool) error {
	last := j.st.Wal
	if len(infos) > 0 {
		last = infos[len(infos)-1].n
	}
	if upgrade {
		f, err := os.OpenFile(filepath.Join(j.dir, walName(last)), os.O_RDWR, 0)
		if err != nil {
			return fmt.Errorf("journal: %w", err)
		}
		j.wal, j.walN = f, last
		if err := j.compact(); err != nil {
			return err
		}
		j.repairs = append(j.repairs, "upgraded the journal to keep the identity apart from the log")
		return nil
	}
	if len(infos) == 0 || !infos[len(infos)-1].header {
		f, size, err := j.createLog(last, agent)
		if err != nil {
			return fmt.Errorf("journal: %w", err)
		}
		j.wal, j.walSize, j.walN = f, size, last
		return nil
	}
	f, err := os.OpenFile(filepath.Join(j.dir, walName(last)), os.O_RDWR, 0)
	if err != nil {
		return fmt.Errorf("journal: %w", err)
	}
	size, err := f.Seek(0, io.SeekEnd)
	if err != nil {
		f.Close()
		return fmt.Errorf("journal: %w", err)
	}
	j.wal, j.walSize, j.walN = f, size, last
	return nil
}

// readSnapshot reads the snapshot into the state, if there is one.
func (j *Journal) readSnapshot() (bool, error) {
	snap := filepath.Join(j.dir, snapshotFile)
	b, err := os.ReadFile(snap)
	if errors.Is(err, os.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("journal: %w", err)
	}
	if err := json.Unmarshal(b, &j.st); err != nil {
		return false, j.damaged(snapshotFile, "the file cannot be read (%v)", err)
	}
	j.snapSize = int64(len(b))
	if j.st.Applied == nil {
		j.st.Applied = map[model.ID]Applied{}
	}
	if j.st.Intents == nil {
		j.st.Intents = map[model.ID]Intent{}
	}
	if j.st.Wal < 1 {
		return false, j.damaged(snapshotFile, "the file names log %d, which cannot be", j.st.Wal)
	}
	for _, id := range j.st.Seen {
		j.st.seen[id] = true
	}
	for _, o := range j.st.Outbox {
		j.st.outbox[o.Seq] = o.Data
	}
	j.st.Outbox = nil
	return true, nil
}

// logs lists the numbers of the log files, in order.
func (j *Journal) logs() ([]int, error) {
	entries, err := os.ReadDir(j.dir)
	if err != nil {
		return nil, fmt.Errorf("journal: %w", err)
	}
	var ns []int
	for _, e := range entries {
		s, ok := strings.CutPrefix(e.Name(), "wal.")
		if !ok {
			continue
		}
		if n, err := strconv.Atoi(s); err == nil && n > 0 {
			ns = append(ns, n)
		}
	}
	slices.Sort(ns)
	return ns, nil
}

// replay applies the records of log n. A torn tail is cut off; damage
// before it is an error, and so is a log that ends (torn or not) before
// committed, the length the identity file says it had committed: it was
// cut short after the fact (a disk that filled up, a copy or restore
// that stopped half way), not by a crash, and the records it lost were
// committed. Such a log is left as it is, for reset-journal to move aside.
func (j *Journal) replay(n int, agent string, committed int64) (logInfo, error) {
	info := logInfo{n: n, torn: -1}
	name := walName(n)
	path := filepath.Join(j.dir, name)
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return info, fmt.Errorf("journal: %w", err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return info, fmt.Errorf("journal: %w", err)
	}
	size := st.Size()
	r := bufio.NewReaderSize(f, 1<<16)
	var good int64
	head := make([]byte, headerSize)
	for good < size {
		payload, ok := readRecord(r, head, size-good)
		if !ok {
			break
		}
		var ops []op
		if err := json.Unmarshal(payload, &ops); err != nil {
			// Its checksum held: not a torn write.
			return info, j.damaged(name, "the record at byte %d cannot be decoded (%v)", good, err)
		}
		if good == 0 && len(ops) == 1 && ops[0].Op == opLog {
			if ops[0].Log != n || ops[0].Agent != agent {
				return info, j.damaged(name, "the file holds log %d of agent %q, not log %d of %q", ops[0].Log, ops[0].Agent, n, agent)
			}
			info.header = true
		} else {
			for i := range ops {
				if ops[i].Op == opLog {
					return info, j.damaged(name, "a log header stands at byte %d, inside the log", good)
				}
				if err := j.st.apply(&ops[i], false); err != nil {
					return info, j.damaged(name, "the record at byte %d cannot be applied (%v)", good, err)
				}
			}
			info.records++
		}
		good += headerSize + int64(len(payload))
	}
	// Cut short after the fact: a log that still begins with its header
	// (else the messages below say more) and ends before committed.
	cutShort := func() error {
		held := fmt.Sprintf("ends at byte %d", size)
		if good < size {
			held = fmt.Sprintf("holds whole records up to byte %d, then %d bytes that cannot be read", good, size-good)
		}
		return j.damaged(name, "the file was cut short after the fact (not by a crash): it %s, but its first %d bytes were committed; "+
			"the last %d bytes of committed records are lost: what the agent journaled last (desired state it took, results, "+
			"commands it accepted, events not yet sent to the server)", held, committed, committed-good)
	}
	if good == size {
		if good > 0 && good < committed {
			return info, cutShort()
		}
		return info, nil
	}
	// What follows the last good record is a torn tail only if no whole
	// record follows it.
	rest := make([]byte, size-good)
	if _, err := f.ReadAt(rest, good); err != nil {
		return info, fmt.Errorf("journal: %w", err)
	}
	if at := laterRecord(rest); at >= 0 {
		return info, j.damaged(name, "the record at byte %d cannot be read, and a whole record follows it at byte %d", good, good+int64(at))
	}
	if good > 0 && good < committed {
		return info, cutShort()
	}
	if err := f.Truncate(good); err != nil {
		return info, fmt.Errorf("journal: cut the torn end of %s: %w", path, err)
	}
	info.torn, info.cut = good, size-good
	return info, nil
}

// readRecord reads one whole record of at most left bytes; ok is false
// when none can be read there (cut short, bad length, bad checksum).
func readRecord(r *bufio.Reader, head []byte, left int64) ([]byte, bool) {
	if left < headerSize {
		return nil, false
	}
	if _, err := io.ReadFull(r, head); err != nil {
		return nil, false
	}
	n := int64(binary.LittleEndian.Uint32(head[0:4]))
	if n == 0 || n > maxRecord || n > left-headerSize {
		return nil, false
	}
	payload := make([]byte, n)
	if _, err := io.ReadFull(r, payload); err != nil {
		return nil, false
	}
	if crc32.Checksum(payload, castagnoli) != binary.LittleEndian.Uint32(head[4:8]) {
		return nil, false
	}
	return payload, true
}

// laterRecord returns the offset in rest of the first whole record (a
// payload start with a header whose length fits and whose checksum holds)
// after its first byte, or -1.
func laterRecord(rest []byte) int {
	for from := 1; from < len(rest); {
		i := bytes.Index(rest[from:], recordStart)
		if i < 0 {
			return -1
		}
		p := from + i // payload start
		if h := p - headerSize; h >= 1 {
			n := int(binary.LittleEndian.Uint32(rest[h : h+4]))
			if n > 0 && p+n <= len(rest) && crc32.Checksum(rest[p:p+n], castagnoli) == binary.LittleEndian.Uint32(rest[h+4:h+8]) {
				return h
			}
		}
		from = p + 1
	}
	return -1
}

// compact writes the state as a snapshot and moves on to a new log:
// first the new log with its header; then the snapshot naming it; then the
// old logs go. A crash between any two steps leaves files load reads
// correctly.
func (j *Journal) compact() error {
	// Past the log in use: after a compaction that stopped before its
	// snapshot, that log is newer than the snapshot says.
	next := j.walN + 1
	f, size, err := j.createLog(next, j.st.Slice.Agent)
	if err != nil {
		return fmt.Errorf("journal: compact: %w", err)
	}
	snap := j.st
	snap.Wal = next
	snap.ServerKey = nil // in the identity file
	snap.Outbox = j.st.sortedOutbox()
	b, err := json.Marshal(&snap)
	if err != nil {
		f.Close()
		return fmt.Errorf("journal: compact: %w", err)
	}
	if err := j.writeFile(snapshotFile, b, 0o600); err != nil {
		f.Close()
		return fmt.Errorf("journal: compact: %w", err)
	}
	// The snapshot holds every record written: they are durable now, and
	// a sync still running on the old log may fail harmlessly.
	j.synced = j.written
	_ = j.wal.Close()
	for n := j.st.Wal; n <= j.walN; n++ {
		_ = os.Remove(filepath.Join(j.dir, walName(n))) // load removes what is left
	}
	j.wal, j.walSize, j.walN, j.snapSize, j.st.Wal = f, size, next, int64(len(b)), next
	j.st.ServerKey = nil
	j.committed.Store(&logMark{N: next, Size: size})
	return nil
}

// Reset moves the log and the snapshot of the journal in dir aside, into
// a directory named damaged-<time> beside them, and starts an empty log;
// the key and the identity stay. The agent then starts from nothing held:
// it says so in its hello, and the server sends it its whole desired
// state. It returns the directory the files were moved to ("" when there
// was nothing to move). The journal must not be open.
func Reset(dir string) (string, error) {
	lock, err := lockDir(dir)
	if err != nil {
		return "", err
	}
	defer lock.Close()
	j := &Journal{dir: dir}
	id, ok, err := j.readIdentity()
	if err != nil {
		return "", err
	}
	if !ok {
		return "", fmt.Errorf("journal: %s holds no agent identity: nothing to reset (start the agent to create it)", dir)
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return "", fmt.Errorf("journal: %w", err)
	}
	aside := filepath.Join(dir, "damaged-"+time.Now().UTC().Format("20060102T150405.000000000Z"))
	moved := false
	for _, e := range entries {
		name := e.Name()
		// A temporary file is what a write a crash interrupted left.
		if name != snapshotFile && !durable.IsTemp(name) && !strings.HasPrefix(name, "wal.") {
			continue
		}
		if !moved {
			if err := os.Mkdir(aside, 0o700); err != nil {
				return "", fmt.Errorf("journal: %w", err)
			}
			moved = true
		}
		if err := os.Rename(filepath.Join(dir, name), filepath.Join(aside, name)); err != nil {
			return "", fmt.Errorf("journal: move %s aside: %w", name, err)
		}
	}
	f, _, err := j.createLog(1, id.Agent)
	if err != nil {
		return "", fmt.Errorf("journal: %w", err)
	}
	f.Close()
	// The length committed was the old log's.
	if id.Committed != nil {
		id.Committed = nil
		if err := j.writeIdentity(id); err != nil {
			return "", err
		}
	}
	if !moved {
		return "", nil
	}
	return aside, nil
}

// removeTemps removes the temporary files of writes a crash interrupted:
// the directory is locked, so none is in progress.
func (j *Journal) removeTemps() error {
	entries, err := os.ReadDir(j.dir)
	if err != nil {
		return fmt.Errorf("journal: %w", err)
	}
	for _, e := range entries {
		if durable.IsTemp(e.Name()) {
			if err := os.Remove(filepath.Join(j.dir, e.Name())); err != nil {
				return fmt.Errorf("journal: %w", err)
			}
		}
	}
	return nil
}

// writeFile replaces a file of the state directory atomically
// (durable.WriteFile): synced with the directory unless NoSync.
func (j *Journal) writeFile(name string, b []byte, perm os.FileMode) error {
	var opts []durable.Option
	if j.cfg.NoSync {
		opts = append(opts, durable.NoSync())
	}
	return durable.WriteFile(filepath.Join(j.dir, name), b, perm, opts...)
}
