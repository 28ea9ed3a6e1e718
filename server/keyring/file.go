package keyring

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"github.com/tetherhq/tether/model/durable"
)

// maxFileSize bounds what Load reads: a key file of a hundred keys is 7 KiB.
const maxFileSize = 64 << 10

// fileHeader opens every key file Create writes.
const fileHeader = `# Tether key file: the keys that seal the server's secrets in its database.
# The first key seals, every key opens. Give every server of one database
# the same file, and keep it out of the database's backups (back it up
# apart: without it the database's secrets are lost).
`

// keyComment says which key the line after it holds and when it was made.
const keyComment = "# key "

// Load reads the ring of the key file at path (as Parse reads it).
// Errors name the file; a missing file's wraps fs.ErrNotExist.
func Load(path string) (*Ring, error) {
	data, err := readFile(path)
	if err != nil {
		return nil, err
	}
	r, err := Parse(data)
	if err != nil {
		return nil, fmt.Errorf("key file %s: %w", path, err)
	}
	return r, nil
}

func readFile(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("read key file: %w", err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, maxFileSize+1))
	if err != nil {
		return nil, fmt.Errorf("read key file: %w", err)
	}
	if len(data) > maxFileSize {
		return nil, fmt.Errorf("key file %s: larger than %d KiB: not a key file", path, maxFileSize>>10)
	}
	return data, nil
}

// Create writes a new key file at path holding one new key, readable by
// its owner only (mode 0600), and returns the key's id. It never replaces
// a file: an existing one fails with an error wrapping fs.ErrExist.
func Create(path string) (id string, err error) {
	key := NewKey()
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return "", fmt.Errorf("create key file: %w", err)
	}
	_, err = f.WriteString(fileHeader + entry(key, time.Now()))
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = durable.SyncDir(filepath.Dir(path))
	}
	if err != nil {
		os.Remove(path)
		return "", fmt.Errorf("create key file %s: %w", path, err)
	}
	return KeyID(key), nil
}

// AddKey puts a new key first in the key file at path, the keys it holds
// staying after it, and returns the new key's id. The file is replaced at
// once (never half written), keeps its owner, and gets mode 0600. A file
// that does not read as a key file is left as it is.
func AddKey(path string) (id string, err error) {
	if real, err := filepath.EvalSymlinks(path); err == nil {
		path = real // a link to the key file: the file changes, not the link
	}
	data, err := readFile(path)
	if err != nil {
		return "", err
	}
	if _, err := Parse(data); err != nil {
		return "", fmt.Errorf("key file %s: %w: the file is not changed", path, err)
	}
	fi, err := os.Stat(path)
	if err != nil {
		return "", fmt.Errorf("add a key: %w", err)
	}
	var opts []durable.Option
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		opts = append(opts, durable.Owner(int(st.Uid), int(st.Gid)))
	}
	key := NewKey()
	lines := bytes.SplitAfter(data, []byte("\n"))
	at := firstKeyLine(lines)
	for at > 0 && bytes.HasPrefix(lines[at-1], []byte(keyComment)) {
		at-- // the first key's own comment stays with it
	}
	var out bytes.Buffer
	for _, l := range lines[:at] {
		out.Write(l)
	}
	if out.Len() > 0 && !bytes.HasSuffix(out.Bytes(), []byte("\n")) {
		out.WriteByte('\n')
	}
	out.WriteString(entry(key, time.Now()))
	for _, l := range lines[at:] {
		out.Write(l)
	}
	if err := durable.WriteFile(path, out.Bytes(), 0o600, opts...); err != nil {
		return "", fmt.Errorf("add a key to %s: %w", path, err)
	}
	return KeyID(key), nil
}

// firstKeyLine returns the index of the first line holding a key (Parse
// has read them all).
func firstKeyLine(lines [][]byte) int {
	for i, l := range lines {
		if j := bytes.IndexByte(l, '#'); j >= 0 {
			l = l[:j]
		}
		if len(bytes.Trim(bytes.TrimSpace(l), ",")) > 0 {
			return i
		}
	}
	return len(lines)
}

// entry is a key as a key file holds it, after a comment naming it.
func entry(key []byte, at time.Time) string {
	return fmt.Sprintf("%s%s, created %s\n%s\n", keyComment, KeyID(key), at.UTC().Format(time.RFC3339), EncodeKey(key))
}
