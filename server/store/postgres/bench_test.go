package postgres_test

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
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
	benchEnv(b, st, "a")
	return agentBatches("a", n, seq0)
}

// benchEnv stores a released version of 1000 files of each agent, unless
// there is one.
func benchEnv(b *testing.B, st store.Store, agents ...string) {
	b.Helper()
	ctx := context.Background()
	if _, err := st.GetEnv(ctx, "prod"); err == nil {
		return
	}
	if err := st.CreateEnv(ctx, record.Environment{Name: "prod", Settings: record.DefaultEnvSettings()}); err != nil {
		b.Fatal(err)
	}
	var rs []model.Resource
	for _, a := range agents {
		for i := range 1000 {
			p := fmt.Sprintf("/f%04d", i)
			rs = append(rs, model.Resource{ID: model.ID{Type: "file", Agent: a, Key: "path", Value: p}, Attributes: model.Attributes{"path": p}})
		}
	}
	v, err := st.PutVersion(ctx, "prod", model.VersionMeta{}, rs)
	if err != nil {
		b.Fatal(err)
	}
	if _, err := st.Release(ctx, "prod", v.Number); err != nil {
		b.Fatal(err)
	}
}

// agentBatches returns n single-result batches of agent about its files,
// with increasing seqs.
func agentBatches(agent string, n int, seq0 uint64) []store.ResultBatch {
	out := make([]store.ResultBatch, n)
	for i := range out {
		id := model.ID{Type: "file", Agent: agent, Key: "path", Value: fmt.Sprintf("/f%04d", i%1000)}
		out[i] = store.ResultBatch{Env: "prod", Agent: agent, Seq: seq0 + uint64(i), Version: 1, DeployID: "d",
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

// BenchmarkRecordResults8Events is RecordResults8 with the events ingest
// logs in the transaction: each batch's results as one row of the event
// log (resource.results), appended under the event log's lock, taken last.
func BenchmarkRecordResults8Events(b *testing.B) {
	st := pgtest.Open(b)
	ctx := context.Background()
	batches := withEvents(benchBatches(b, st, 8*b.N, 1))
	b.ResetTimer()
	for i := range b.N {
		if _, err := st.RecordResults(ctx, batches[8*i:8*i+8]); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkRecordResults8EventsParallel is RecordResults8Events from four
// writers at once, each an agent of its own (tether server
// --ingest-writers 4): their transactions append to the event log one at
// a time, in commit order.
func BenchmarkRecordResults8EventsParallel(b *testing.B) {
	st := pgtest.Open(b)
	ctx := context.Background()
	const writers = 4
	agents := make([]string, writers)
	for w := range agents {
		agents[w] = fmt.Sprintf("w%d", w)
	}
	benchEnv(b, st, agents...)
	var all [writers][]store.ResultBatch
	for w, agent := range agents {
		n := b.N / writers
		if w < b.N%writers {
			n++
		}
		all[w] = withEvents(agentBatches(agent, 8*n, 1))
	}
	var wg sync.WaitGroup
	errs := make(chan error, writers)
	b.ResetTimer()
	for _, batches := range all {
		n := len(batches) / 8
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range n {
				if _, err := st.RecordResults(ctx, batches[8*i:8*i+8]); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		b.Fatal(err)
	}
}

// withEvents gives each batch the event ingest logs with it: its results
// as one row.
func withEvents(batches []store.ResultBatch) []store.ResultBatch {
	for i := range batches {
		bt := &batches[i]
		data, _ := json.Marshal(map[string]any{"kind": record.EventResults, "env": bt.Env, "agent": bt.Agent, "results": bt.Results})
		bt.Events = []record.LoggedEvent{{Env: bt.Env, Kind: record.EventResults, Data: data, At: time.Now()}}
	}
	return batches
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
