package ingest

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tetherhq/tether/model"
	"github.com/tetherhq/tether/server/store"
)

// committer writes result batches in groups: each of its writers takes
// every batch waiting for it, up to max, into one RecordResults
// transaction, while the next ones queue up behind it. Several writers
// keep several transactions in flight: one is sent and prepared while
// PostgreSQL runs another (the store locks rows in one order, as it does
// for replicas; SQLite's one connection runs them one after the other).
// An agent's batches all go to one writer (by a hash of its name), so
// they are written in the order they were handed over, as with one
// writer: a deploy's last batch (Done) never lands before the ones
// sent before it.
type committer struct {
	store store.Store
	// logged is called after a transaction that appended events to the
	// event log (the stream's Appended: it wakes followers and webhooks).
	logged func()
	max    int
	in     []chan *pendingBatch // a writer's each
	// committed is told of each transaction written: its batches, and
	// how long it took (the metrics).
	committed func(batches int, took time.Duration)
	// commits and written count transactions and the batches they wrote.
	commits, written atomic.Uint64
}

type pendingBatch struct {
	batch store.ResultBatch
	fresh bool
	done  chan error
}

func newCommitter(st store.Store, maxBatch, writers int, committed func(batches int, took time.Duration)) *committer {
	c := &committer{store: st, logged: func() {}, max: maxBatch, committed: committed}
	for range max(writers, 1) {
		c.in = append(c.in, make(chan *pendingBatch, maxBatch))
	}
	return c
}

// writerOf is the writer that writes env/agent's batches.
func (c *committer) writerOf(env, agent string) int {
	return int(agentKey{env, agent}.hash() % uint32(len(c.in)))
}

// commit hands b to the running committer and waits until it is written.
func (c *committer) commit(ctx context.Context, b store.ResultBatch) (bool, error) {
	p := &pendingBatch{batch: b, done: make(chan error, 1)}
	select {
	case c.in[c.writerOf(b.Env, b.Agent)] <- p:
	case <-ctx.Done():
		return false, ctx.Err()
	}
	select {
	case err := <-p.done:
		return p.fresh, err
	case <-ctx.Done():
		// Unacknowledged, it comes back and is deduplicated if it
		// was written after all.
		return false, ctx.Err()
	}
}

// run writes groups until ctx ends, a transaction in flight per writer
// at most.
func (c *committer) run(ctx context.Context) {
	var wg sync.WaitGroup
	for _, in := range c.in[1:] {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c.writer(ctx, in)
		}()
	}
	c.writer(ctx, c.in[0])
	wg.Wait()
}

// writer writes the groups handed to it on in, one transaction at a
// time, until ctx ends.
func (c *committer) writer(ctx context.Context, in chan *pendingBatch) {
	group := make([]*pendingBatch, 0, c.max)
	for {
		group = group[:0]
		select {
		case p := <-in:
			group = append(group, p)
		case <-ctx.Done():
			return
		}
	fill:
		for len(group) < c.max {
			select {
			case p := <-in:
				group = append(group, p)
			default:
				break fill
			}
		}
		c.write(ctx, group)
	}
}

func (c *committer) write(ctx context.Context, group []*pendingBatch) {
	batches := make([]store.ResultBatch, len(group))
	for i, p := range group {
		batches[i] = p.batch
	}
	start := time.Now()
	fresh, err := c.store.RecordResults(ctx, batches)
	if errors.Is(err, model.ErrInvalid) && len(group) > 1 {
		// One bad batch fails the transaction: write them one by one
		// so only it is refused.
		for _, p := range group {
			c.write(ctx, []*pendingBatch{p})
		}
		return
	}
	if err == nil {
		c.commits.Add(1)
		c.written.Add(uint64(len(group)))
		c.committed(len(group), time.Since(start))
		for i := range group {
			if fresh[i] && len(group[i].batch.Events) > 0 {
				c.logged()
				break
			}
		}
	}
	for i, p := range group {
		if err == nil {
			p.fresh = fresh[i]
		}
		p.done <- err
	}
}
