package engine

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"

	"github.com/rs/zerolog"

	"github.com/tetherhq/tether/agent/handler"
	"github.com/tetherhq/tether/agent/handler/builtin"
	"github.com/tetherhq/tether/model"
)

const benchFiles = 1000

// benchSlice is 1000 files with distinct content, mode 0644, directly under
// /files, which the benchmark creates beforehand (the scenario: files
// into an empty directory).
func benchSlice() []model.Resource {
	rs := make([]model.Resource, benchFiles)
	for i := range rs {
		p := "/files/f" + strconv.Itoa(i)
		rs[i] = model.Resource{
			ID:         model.ID{Type: "file", Agent: "bench", Key: "path", Value: p},
			Attributes: model.Attributes{"path": p, "content": fmt.Sprintf("file %d: managed by tether\n", i), "mode": "0644"},
		}
	}
	return rs
}

func benchEngine(b *testing.B, root string) *Engine {
	reg, err := builtin.Registry(handler.Runtime{Root: root, Sync: handler.NewSyncGroup()})
	if err != nil {
		b.Fatal(err)
	}
	return New(reg, zerolog.Nop())
}

func checkAll(b *testing.B, results []Result, wantChanged bool) {
	for _, r := range results {
		if r.State != model.StateDeployed || r.Changed() != wantChanged {
			b.Fatalf("%s: state %s changed %v (%s)", r.ID, r.State, r.Changed(), r.Message)
		}
	}
}

// BenchmarkCreate1000 creates 1000 files in an empty directory. Every
// iteration gets its own directory, all removed at the end: deleting inside
// the loop would slow the next iteration with the file system's write-back.
//
//	go test ./agent/engine -run '^$' -bench 'Create1000|Noop1000' -benchtime 20x -count 5
func BenchmarkCreate1000(b *testing.B) {
	rs := benchSlice()
	base := b.TempDir()
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		root := filepath.Join(base, strconv.Itoa(i))
		if err := os.MkdirAll(filepath.Join(root, "files"), 0o755); err != nil {
			b.Fatal(err)
		}
		e := benchEngine(b, root)
		quiesce()
		b.StartTimer()
		results, err := e.Run(context.Background(), rs, Options{}, nil)
		if err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		checkAll(b, results, true)
		b.StartTimer()
	}
}

// quiesce flushes what earlier iterations left for write-back, so each timed
// iteration starts from a quiet disk instead of paying for the previous one.
func quiesce() { syscall.Sync() }

// BenchmarkNoop1000 verifies the same 1000 files, all already in place.
func BenchmarkNoop1000(b *testing.B) {
	rs := benchSlice()
	root := b.TempDir()
	if err := os.MkdirAll(filepath.Join(root, "files"), 0o755); err != nil {
		b.Fatal(err)
	}
	e := benchEngine(b, root)
	if _, err := e.Run(context.Background(), rs, Options{}, nil); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		results, err := e.Run(context.Background(), rs, Options{}, nil)
		if err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		checkAll(b, results, false)
		b.StartTimer()
	}
}

// BenchmarkBareWriteLoop is the baseline: a plain Go loop writing the same
// 1000 files with os.WriteFile (no temp file, no sync, no rename).
func BenchmarkBareWriteLoop(b *testing.B) {
	rs := benchSlice()
	base := b.TempDir()
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		dir := filepath.Join(base, strconv.Itoa(i), "files")
		if err := os.MkdirAll(dir, 0o755); err != nil {
			b.Fatal(err)
		}
		quiesce()
		b.StartTimer()
		for j := range rs {
			if err := os.WriteFile(filepath.Join(dir, "f"+strconv.Itoa(j)), []byte(rs[j].Attributes["content"].(string)), 0o644); err != nil {
				b.Fatal(err)
			}
		}
	}
}

// BenchmarkBareReadLoop is the no-op baseline: read and compare 1000 files.
func BenchmarkBareReadLoop(b *testing.B) {
	rs := benchSlice()
	dir := filepath.Join(b.TempDir(), "files")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		b.Fatal(err)
	}
	for j := range rs {
		if err := os.WriteFile(filepath.Join(dir, "f"+strconv.Itoa(j)), []byte(rs[j].Attributes["content"].(string)), 0o644); err != nil {
			b.Fatal(err)
		}
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		for j := range rs {
			got, err := os.ReadFile(filepath.Join(dir, "f"+strconv.Itoa(j)))
			if err != nil || string(got) != rs[j].Attributes["content"].(string) {
				b.Fatalf("f%d differs: %v", j, err)
			}
		}
	}
}
