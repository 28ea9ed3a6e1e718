package postgres_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/tetherhq/tether/model"
	"github.com/tetherhq/tether/server/record"
	"github.com/tetherhq/tether/server/store"
	"github.com/tetherhq/tether/server/store/postgres"
	"github.com/tetherhq/tether/server/store/postgres/pgbaseline"
	"github.com/tetherhq/tether/server/store/postgres/pgtest"
)

// benchBatches stores a released version of 1000 files of one agent and
// returns n single-result batches about them, with increasing seqs.
func benchBatches(b *testing.B, st store.Store, n int, seq0 uint64) []store.ResultBatch {
	b.Helper()
	ctx := context.Background()
	if _, err := st.GetEnv(ctx, "prod"); err != nil {
		if err := st.CreateEnv(ctx, record.Environment{Name: "prod", Settings: record.DefaultEnvSettings()}); err != nil {
			b.Fatal(err)
		}
		var rs []model.Resource
		for i := range 1000 {
			p := fmt.Sprintf("/f%04d", i)
			rs = append(rs, model.Resource{ID: model.ID{Type: "file", Agent: "a", Key: "path", Value: p}, Attributes: model.Attributes{"path": p}})
		}
		v, err := st.PutVersion(ctx, "prod", model.VersionMeta{}, rs)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := st.Release(ctx, "prod", v.Number); err != nil {
			b.Fatal(err)
		}
	}
	out := make([]store.ResultBatch, n)
	for i := range out {
		id := model.ID{Type: "file", Agent: "a", Key: "path", Value: fmt.Sprintf("/f%04d", i%1000)}
		out[i] = store.ResultBatch{Env: "prod", Agent: "a", Seq: seq0 + uint64(i), Version: 1, DeployID: "d",
			Results: []model.Result{{ID: id, State: model.StateDeployed}}}
	}
	return out
}

// BenchmarkRecordResults8 writes 8 single-result batches per transaction,
// the group size of the server's ingest under a light load; Bare writes the
// same rows with WriteBare.
func BenchmarkRecordResults8(b *testing.B) {
	st := pgtest.Open(b)
	ctx := context.Background()
	batches := benchBatches(b, st, 8*b.N, 1)
	b.ResetTimer()
	for i := range b.N {
		if _, err := st.RecordResults(ctx, batches[8*i:8*i+8]); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkBare8(b *testing.B) {
	url := pgtest.Fresh(b)
	st, err := postgres.Open(context.Background(), postgres.Config{URL: url})
	if err != nil {
		b.Fatal(err)
	}
	defer st.Close()
	batches := benchBatches(b, st, 8*b.N, 1)
	b.ResetTimer()
	if _, err := pgbaseline.WriteBare(context.Background(), url, batches, 8); err != nil {
		b.Fatal(err)
	}
}

// BenchmarkPutAndRelease60k stores and releases a version of 60,000 file
// resources (6,000 agents × 10) of which one changed since the released
// one: what a server-side compile of a large fleet writes.
func BenchmarkPutAndRelease60k(b *testing.B) {
	st := pgtest.Open(b)
	ctx := context.Background()
	if err := st.CreateEnv(ctx, record.Environment{Name: "prod", Settings: record.DefaultEnvSettings()}); err != nil {
		b.Fatal(err)
	}
	rs := make([]model.Resource, 0, 60000)
	for a := range 6000 {
		for i := range 10 {
			p := fmt.Sprintf("/etc/app/%02d.conf", i)
			rs = append(rs, model.Resource{ID: model.ID{Type: "file", Agent: fmt.Sprintf("host%05d", a), Key: "path", Value: p},
				Attributes: model.Attributes{"path": p, "content": "v1 " + p, "mode": "0644"}})
		}
	}
	put := func(round int) time.Duration {
		rs[0].Attributes["content"] = fmt.Sprintf("round %d", round)
		start := time.Now()
		v, err := st.PutVersion(ctx, "prod", model.VersionMeta{}, rs)
		if err != nil {
			b.Fatal(err)
		}
		stored := time.Since(start)
		if _, err := st.Release(ctx, "prod", v.Number); err != nil {
			b.Fatal(err)
		}
		return stored
	}
	put(-1)
	b.ResetTimer()
	var stored time.Duration
	for i := 0; b.Loop(); i++ {
		stored += put(i)
	}
	b.ReportMetric(stored.Seconds()/float64(b.N), "put-s/op")
}
