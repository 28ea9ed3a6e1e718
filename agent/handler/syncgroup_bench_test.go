package handler

import (
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"
)

// writeFiles writes 1000 small files into dir with 32 writers, each made
// durable by durable (nil: not at all), then renamed into place: the file
// handler's pattern.
func writeFiles(dir string, durable func(*os.File) error) error {
	work := make(chan int)
	var wg sync.WaitGroup
	errs := make(chan error, 32)
	for w := 0; w < 32; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n := range work {
				p := filepath.Join(dir, strconv.Itoa(n))
				f, err := os.Create(p + ".tmp")
				if err == nil {
					_, err = f.WriteString("file " + strconv.Itoa(n) + ": managed by tether\n")
				}
				if err == nil && durable != nil {
					err = durable(f)
				}
				if err == nil {
					err = f.Close()
				}
				if err == nil {
					err = os.Rename(p+".tmp", p)
				}
				if err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	for n := 0; n < 1000; n++ {
		work <- n
	}
	close(work)
	wg.Wait()
	select {
	case err := <-errs:
		return err
	default:
		return nil
	}
}

// BenchmarkDurable1000 compares three ways of writing 1000 files, the
// measurement behind the file handler's group commit (docs/performance.md):
// one fsync per file, a shared SyncGroup, and no durability at all. Disks of
// shared machines change speed as they are written to, so the variants run
// interleaved (rotating order, a sync(2) before each) and each reports its
// median in ms.
//
//	go test ./agent/handler -run '^$' -bench Durable1000 -benchtime 15x
func BenchmarkDurable1000(b *testing.B) {
	variants := []struct {
		name    string
		durable func() func(*os.File) error
	}{
		{"fsync-each", func() func(*os.File) error { return (*os.File).Sync }},
		{"group-commit", func() func(*os.File) error { return NewSyncGroup().Sync }},
		{"no-sync", func() func(*os.File) error { return nil }},
	}
	base := b.TempDir()
	times := make([][]time.Duration, len(variants))
	for i := 0; i < b.N; i++ {
		for k := range variants {
			v := (i + k) % len(variants)
			dir := filepath.Join(base, strconv.Itoa(i)+"-"+variants[v].name)
			if err := os.Mkdir(dir, 0o755); err != nil {
				b.Fatal(err)
			}
			durable := variants[v].durable()
			syscall.Sync()
			start := time.Now()
			if err := writeFiles(dir, durable); err != nil {
				b.Fatal(err)
			}
			times[v] = append(times[v], time.Since(start))
		}
	}
	for v, ts := range times {
		slices.Sort(ts)
		b.ReportMetric(float64(ts[len(ts)/2].Microseconds())/1000, "ms-"+variants[v].name)
	}
	b.ReportMetric(0, "ns/op") // the per-variant medians are the result
}
