package ingest

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/tetherhq/tether/server/store"
)

// heldTransactions is a store whose RecordResults says it was entered,
// with its batches, and then waits to be let go: how many transactions
// are in flight at once, and in what order batches were written.
type heldTransactions struct {
	store.Store
	entered chan []store.ResultBatch
	release chan struct{}
}

func (h *heldTransactions) RecordResults(ctx context.Context, batches []store.ResultBatch) ([]bool, error) {
	h.entered <- batches
	select {
	case <-h.release:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	fresh := make([]bool, len(batches))
	for i := range fresh {
		fresh[i] = true
	}
	return fresh, nil
}

// agentsOfWriters returns, for each of c's writers, an agent whose
// batches it writes.
func agentsOfWriters(c *committer) []string {
	out := make([]string, len(c.in))
	for i, n := 0, 0; n < len(out); i++ {
		name := fmt.Sprintf("agent-%d", i)
		if w := c.writerOf("prod", name); out[w] == "" {
			out[w], n = name, n+1
		}
	}
	return out
}

// TestCommitterWritersOverlap: with two writers, agents of both have a
// transaction in flight at once. With one, the second waits for the
// first, which waits to be let go: the test does not end (go test's
// timeout fails it).
func TestCommitterWritersOverlap(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	st := &heldTransactions{entered: make(chan []store.ResultBatch, 2), release: make(chan struct{})}
	c := newCommitter(st, 1, 2, func(int, time.Duration) {})
	go c.run(ctx)
	done := make(chan error, 2)
	for _, agent := range agentsOfWriters(c) {
		go func() {
			_, err := c.commit(ctx, store.ResultBatch{Env: "prod", Agent: agent, Seq: 1})
			done <- err
		}()
	}
	got := map[string]bool{}
	for range 2 {
		got[(<-st.entered)[0].Agent] = true
	}
	if len(got) != 2 {
		t.Fatalf("transactions in flight at once: %v, want one of each writer's agent", got)
	}
	close(st.release)
	for range 2 {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	if n := c.commits.Load(); n != 2 {
		t.Fatalf("%d transactions committed, want 2", n)
	}
}

// TestCommitterKeepsAnAgentsOrder: an agent's batches are written by one
// writer, in the order they were handed over, though another writer is
// idle: its later batches wait while its first is being written, then go
// together, in order (a deploy's last batch never lands before the ones
// sent before it).
func TestCommitterKeepsAnAgentsOrder(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	st := &heldTransactions{entered: make(chan []store.ResultBatch, 8), release: make(chan struct{})}
	c := newCommitter(st, 8, 2, func(int, time.Duration) {})
	go c.run(ctx)
	agent := agentsOfWriters(c)[0]
	in := c.in[c.writerOf("prod", agent)]
	var wg sync.WaitGroup
	hand := func(seq uint64) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := c.commit(ctx, store.ResultBatch{Env: "prod", Agent: agent, Seq: seq}); err != nil {
				t.Error(err)
			}
		}()
	}
	hand(1)
	first := <-st.entered // held
	for seq := uint64(2); seq <= 5; seq++ {
		hand(seq)
		for len(in) < int(seq-1) { // queued behind the first, in order
			runtime.Gosched()
		}
	}
	close(st.release)
	second := <-st.entered
	wg.Wait()
	var seqs []uint64
	for _, b := range append(first, second...) {
		seqs = append(seqs, b.Seq)
	}
	if fmt.Sprint(seqs) != "[1 2 3 4 5]" {
		t.Fatalf("batches written %v, want [1 2 3 4 5] in two transactions", seqs)
	}
}
