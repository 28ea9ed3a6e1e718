package journal

import (
	"bufio"
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

	"github.com/tetherhq/tether/model"
)

// A log record is a header of the payload's length and CRC-32C (both
// little-endian uint32), then the payload: a JSON list of ops. A record
// cut short by a crash, or whose checksum fails, ends the log: it was never
// acknowledged as committed.
const headerSize = 8

// maxRecord bounds one record, so a damaged length never makes replay
// allocate gigabytes.
const maxRecord = 1 << 30

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// append writes one record to the current log (syncTo syncs it). A failed
// write is cut off again so later records never follow garbage.
func (j *Journal) append(ops []op) error {
	payload, err := json.Marshal(ops)
	if err != nil {
		return fmt.Errorf("journal: encode: %w", err)
	}
	if len(payload) > maxRecord {
		return fmt.Errorf("journal: a record of %d bytes is over the %d limit", len(payload), maxRecord)
	}
	buf := make([]byte, headerSize, headerSize+len(payload))
	binary.LittleEndian.PutUint32(buf[0:4], uint32(len(payload)))
	binary.LittleEndian.PutUint32(buf[4:8], crc32.Checksum(payload, castagnoli))
	buf = append(buf, payload...)
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

// load reads the key, the snapshot and every log after it, and opens the
// last log for appending.
func (j *Journal) load() error {
	if err := j.loadKey(); err != nil {
		return err
	}
	snap := filepath.Join(j.dir, snapshotFile)
	b, err := os.ReadFile(snap)
	switch {
	case errors.Is(err, os.ErrNotExist):
	case err != nil:
		return fmt.Errorf("journal: %w", err)
	default:
		if err := json.Unmarshal(b, &j.st); err != nil {
			return fmt.Errorf("%w: %s: %v", ErrCorrupt, snap, err)
		}
		j.snapSize = int64(len(b))
		if j.st.Applied == nil {
			j.st.Applied = map[model.ID]Applied{}
		}
		if j.st.Intents == nil {
			j.st.Intents = map[model.ID]Intent{}
		}
		for _, id := range j.st.Seen {
			j.st.seen[id] = true
		}
		for _, o := range j.st.Outbox {
			j.st.outbox[o.Seq] = o.Data
		}
		j.st.Outbox = nil
	}
	logs, err := j.logs()
	if err != nil {
		return err
	}
	last := j.st.Wal
	for _, n := range logs {
		path := filepath.Join(j.dir, walName(n))
		if n < j.st.Wal {
			// Left behind by a compaction that stopped before removing it.
			if err := os.Remove(path); err != nil {
				return fmt.Errorf("journal: %w", err)
			}
			continue
		}
		if err := j.replay(path); err != nil {
			return err
		}
		last = n
	}
	f, err := os.OpenFile(filepath.Join(j.dir, walName(last)), os.O_RDWR|os.O_CREATE, 0o600)
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

// replay applies the records of one log. A torn or damaged tail is cut
// off: those records never committed.
func (j *Journal) replay(path string) error {
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return fmt.Errorf("journal: %w", err)
	}
	defer f.Close()
	r := bufio.NewReaderSize(f, 1<<16)
	var good int64
	head := make([]byte, headerSize)
	for {
		if _, err := io.ReadFull(r, head); err != nil {
			break // the end, or a header cut short
		}
		n := binary.LittleEndian.Uint32(head[0:4])
		if n > maxRecord {
			break
		}
		payload := make([]byte, n)
		if _, err := io.ReadFull(r, payload); err != nil {
			break
		}
		if crc32.Checksum(payload, castagnoli) != binary.LittleEndian.Uint32(head[4:8]) {
			break
		}
		var ops []op
		if err := json.Unmarshal(payload, &ops); err != nil {
			return fmt.Errorf("%w: %s at byte %d: %v", ErrCorrupt, path, good, err)
		}
		for i := range ops {
			if err := j.st.apply(&ops[i], false); err != nil {
				return fmt.Errorf("%w: %s at byte %d: %v", ErrCorrupt, path, good, err)
			}
		}
		good += headerSize + int64(n)
	}
	info, err := f.Stat()
	if err != nil {
		return fmt.Errorf("journal: %w", err)
	}
	if info.Size() > good {
		if err := f.Truncate(good); err != nil {
			return fmt.Errorf("journal: cut the torn end of %s: %w", path, err)
		}
	}
	return nil
}

// compact writes the state as a snapshot and moves on to a new log:
// first the new, empty log; then the snapshot naming it; then the old log
// goes. A crash between any two steps leaves files load reads correctly.
func (j *Journal) compact() error {
	// Past the log in use: after a compaction that stopped before its
	// snapshot, that log is newer than the snapshot says.
	next := j.walN + 1
	f, err := os.OpenFile(filepath.Join(j.dir, walName(next)), os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return fmt.Errorf("journal: compact: %w", err)
	}
	if err := syncDir(j.dir); err != nil && !j.opts.NoSync {
		f.Close()
		return fmt.Errorf("journal: compact: %w", err)
	}
	snap := j.st
	snap.Wal = next
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
	j.wal, j.walSize, j.walN, j.snapSize, j.st.Wal = f, 0, next, int64(len(b)), next
	return nil
}

// writeFile replaces a file of the state directory atomically: a
// temporary file, synced, renamed over it, and the directory synced.
func (j *Journal) writeFile(name string, b []byte, perm os.FileMode) error {
	if j.opts.NoSync {
		tmp := filepath.Join(j.dir, name+".tmp")
		if err := os.WriteFile(tmp, b, perm); err != nil {
			return err
		}
		return os.Rename(tmp, filepath.Join(j.dir, name))
	}
	return writeFileSync(j.dir, name, b, perm)
}

func writeFileSync(dir, name string, b []byte, perm os.FileMode) error {
	tmp := filepath.Join(dir, name+".tmp")
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, perm)
	if err != nil {
		return err
	}
	if _, err := f.Write(b); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp, filepath.Join(dir, name)); err != nil {
		return err
	}
	return syncDir(dir)
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}
