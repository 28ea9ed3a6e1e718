package sqlite

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/tetherhq/tether/model"
	"github.com/tetherhq/tether/server/record"
	"github.com/tetherhq/tether/server/store"
)

func benchResources(n int) []model.Resource {
	rs := make([]model.Resource, n)
	for i := range rs {
		p := fmt.Sprintf("/out/f%04d", i)
		rs[i] = model.Resource{ID: model.ID{Type: "file", Agent: "local", Key: "path", Value: p},
			Attributes: model.Attributes{"path": p, "content": fmt.Sprintf("file %d: managed by tether\n", i), "mode": "0644"}}
	}
	return rs
}

func benchStore(b *testing.B) *Store {
	s, err := Open(context.Background(), filepath.Join(b.TempDir(), "t.db"), Config{})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { s.Close() })
	if err := s.CreateEnv(context.Background(), record.Environment{Name: "local"}); err != nil {
		b.Fatal(err)
	}
	return s
}

// BenchmarkPutVersion1000 stores a version of 1000 new resources.
//
//	go test ./server/store/sqlite -run '^$' -bench . -benchmem
func BenchmarkPutVersion1000(b *testing.B) {
	s := benchStore(b)
	ctx := context.Background()
	for i := 0; i < b.N; i++ {
		rs := benchResources(1000)
		for j := range rs {
			rs[j].Attributes["content"] = fmt.Sprintf("v%d %d", i, j) // new bodies every time
		}
		if _, err := s.PutVersion(ctx, "local", model.VersionMeta{}, rs); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkLoadVersion1000 reads a version of 1000 resources back.
func BenchmarkLoadVersion1000(b *testing.B) {
	s := benchStore(b)
	ctx := context.Background()
	v, err := s.PutVersion(ctx, "local", model.VersionMeta{}, benchResources(1000))
	if err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		got, err := s.GetVersion(ctx, "local", v.Number, true)
		if err != nil || len(got.Resources) != 1000 {
			b.Fatal(err)
		}
	}
}

// BenchmarkRecordResults1000 records a deploy's 1000 results in batches of
// 256, as the server ingests them (unchanged resources: status only).
func BenchmarkRecordResults1000(b *testing.B) {
	s := benchStore(b)
	ctx := context.Background()
	rs := benchResources(1000)
	v, err := s.PutVersion(ctx, "local", model.VersionMeta{}, rs)
	if err != nil {
		b.Fatal(err)
	}
	if _, err := s.Release(ctx, "local", v.Number); err != nil {
		b.Fatal(err)
	}
	results := make([]model.Result, len(rs))
	for i := range rs {
		results[i] = model.Result{ID: rs[i].ID, State: model.StateDeployed, Duration: time.Millisecond}
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		for start := 0; start < len(results); start += 256 {
			if _, err := s.RecordResults(ctx, []store.ResultBatch{{Env: "local", Agent: "local", Version: v.Number, DeployID: "d", Results: results[start:min(start+256, len(results))]}}); err != nil {
				b.Fatal(err)
			}
		}
	}
}
