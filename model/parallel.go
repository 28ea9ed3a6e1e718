package model

import (
	"runtime"
	"sync"
)

// Chunks runs fn over [0, n) split into one contiguous chunk per CPU, at
// once, and returns the first error of the chunk with the lowest start.
// For work on large resource sets (hashing, encoding) that is the same for
// every element: small sets (under a thousand) run in this goroutine.
func Chunks(n int, fn func(lo, hi int) error) error {
	workers := runtime.GOMAXPROCS(0)
	if n < 1000 || workers < 2 {
		return fn(0, n)
	}
	size := (n + workers - 1) / workers
	errs := make([]error, workers)
	var wg sync.WaitGroup
	for w := range workers {
		lo, hi := w*size, min((w+1)*size, n)
		if lo >= hi {
			break
		}
		wg.Go(func() { errs[w] = fn(lo, hi) })
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}
