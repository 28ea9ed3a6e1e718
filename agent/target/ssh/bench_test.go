package ssh_test

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/tetherhq/tether/agent/handler"
	"github.com/tetherhq/tether/agent/target/ssh/sshtest"
)

// benchFiles is the size of the benchmarks' deploy: 20 files of a few
// hundred bytes, as a host's configuration files are.
const benchFiles = 20

func benchContent(i int) string {
	return strings.Repeat("setting "+strconv.Itoa(i)+" = on\n", 20)
}

// filesystems are the benchmarks' targets: the local host's HostFS, for
// comparison, and this machine over SSH, one connection.
func filesystems(b *testing.B) map[string]handler.FS {
	return map[string]handler.FS{"local": &handler.HostFS{}, "ssh": sshtest.Start(b).Dial(b)}
}

// BenchmarkAgentlessVerify20 is a deploy that changes nothing: each file's
// Lstat and SameContent, one after the other, as the file handler reads.
func BenchmarkAgentlessVerify20(b *testing.B) {
	for name, fsys := range filesystems(b) {
		b.Run(name, func(b *testing.B) { benchVerify(b, fsys) })
	}
}

func benchVerify(b *testing.B, target handler.FS) {
	root := b.TempDir()
	paths := make([]string, benchFiles)
	for i := range paths {
		paths[i] = filepath.Join(root, "f"+strconv.Itoa(i))
		if err := os.WriteFile(paths[i], []byte(benchContent(i)), 0o644); err != nil {
			b.Fatal(err)
		}
	}
	b.ResetTimer()
	for b.Loop() {
		for i, p := range paths {
			if _, err := target.Lstat(p); err != nil {
				b.Fatal(err)
			}
			if same, err := target.SameContent(p, benchContent(i)); err != nil || !same {
				b.Fatalf("SameContent %s: %v, %v", p, same, err)
			}
		}
	}
	b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N*benchFiles), "µs/file")
}

// BenchmarkAgentlessWrite20 replaces 20 files, one after the other: a
// temporary file, its mode, fsync, the rename.
func BenchmarkAgentlessWrite20(b *testing.B) {
	for name, fsys := range filesystems(b) {
		b.Run(name, func(b *testing.B) { benchWrite(b, fsys) })
	}
}

func benchWrite(b *testing.B, fsys handler.FS) {
	root := b.TempDir()
	b.ResetTimer()
	n := 0
	for b.Loop() {
		n++
		for i := range benchFiles {
			p := filepath.Join(root, "f"+strconv.Itoa(i))
			if err := fsys.WriteFile(p, strings.NewReader(benchContent(i+n)), 0o644, -1, -1); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N*benchFiles), "µs/file")
}
