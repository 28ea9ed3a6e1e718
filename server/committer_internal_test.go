package server

import (
	"context"
	"testing"
	"time"

	"github.com/tetherhq/tether/server/store"
)

// heldTransactions is a store whose RecordResults says it was entered and
// then waits to be let go: how many transactions are in flight at once.
type heldTransactions struct {
	store.Store
	entered chan struct{}
	release chan struct{}
}

func (h *heldTransactions) RecordResults(ctx context.Context, batches []store.ResultBatch) ([]bool, error) {
	h.entered <- struct{}{}
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

// TestCommitterWritersOverlap: with two writers, a second group is
// written while the first transaction is still running (with one, the
// second waits: the test fails).
func TestCommitterWritersOverlap(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	st := &heldTransactions{entered: make(chan struct{}, 2), release: make(chan struct{})}
	c := newCommitter(st, 1, 2, newMetrics()) // one batch per group
	go c.run(ctx)
	done := make(chan error, 2)
	for _, agent := range []string{"a", "b"} {
		go func() {
			_, err := c.commit(ctx, store.ResultBatch{Env: "prod", Agent: agent, Seq: 1})
			done <- err
		}()
	}
	for i := range 2 {
		select {
		case <-st.entered:
		case <-time.After(10 * time.Second):
			t.Fatalf("%d transaction(s) in flight after 10 s, want 2 at once", i)
		}
	}
	close(st.release)
	for range 2 {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	if got := c.commits.Load(); got != 2 {
		t.Fatalf("%d transactions committed, want 2", got)
	}
}
