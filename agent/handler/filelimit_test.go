package handler

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// A FileLimit never lets more writers than its bound hold a file at once,
// and lets them all through in the end; a runtime without one never waits.
func TestFileLimit(t *testing.T) {
	rt := Runtime{Files: NewFileLimit(3)}
	var open, most atomic.Int64
	var wg sync.WaitGroup
	for range 30 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			release := rt.HoldFile()
			n := open.Add(1)
			for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
			}
			time.Sleep(time.Millisecond)
			open.Add(-1)
			release()
		}()
	}
	wg.Wait()
	if m := most.Load(); m > 3 || m < 1 {
		t.Fatalf("at most %d writers held a file at once: want 1 to 3", m)
	}
	release := Runtime{}.HoldFile() // no limit: no wait
	release()
}
