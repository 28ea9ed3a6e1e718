// Package secrettest finds a planted secret where it must not be: tests
// plant a unique marker as a sensitive value, deploy it, and count it in
// everything the value travelled through or rested in (databases, broker
// messages, journals, logs).
package secrettest

import (
	"bytes"
	"encoding/base64"
	"encoding/hex"
	"io/fs"
	"os"
	"path/filepath"
	"testing"
)

// Count counts marker in data as it is, in hex (how PostgreSQL shows
// bytea as text) and in base64 at each of its three alignments (how JSON
// holds []byte: a journal's outbox, a message inside a message).
func Count(data []byte, marker string) int {
	n := bytes.Count(data, []byte(marker))
	n += bytes.Count(bytes.ToLower(data), []byte(hex.EncodeToString([]byte(marker))))
	for off := range 3 {
		enc := base64.StdEncoding.EncodeToString(append(make([]byte, off), marker...))
		// The groups of four characters made of marker bytes alone.
		first, last := (off+2)/3, (off+len(marker))/3
		if last > first {
			n += bytes.Count(data, []byte(enc[first*4:last*4]))
		}
	}
	return n
}

// CountFiles counts marker (as Count does) in every regular file below
// dir, and returns the count per file that holds it.
func CountFiles(t testing.TB, dir, marker string) map[string]int {
	t.Helper()
	found := map[string]int{}
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return err
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		if n := Count(b, marker); n > 0 {
			found[path] = n
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return found
}
