package model

import (
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
)

// Chunks covers every index once, and returns the error of the lowest
// failing chunk.
func TestChunks(t *testing.T) {
	for _, n := range []int{0, 1, 999, 1000, 1001, 10007} {
		seen := make([]atomic.Int32, n)
		if err := Chunks(n, func(lo, hi int) error {
			for i := lo; i < hi; i++ {
				seen[i].Add(1)
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		for i := range seen {
			if c := seen[i].Load(); c != 1 {
				t.Fatalf("n=%d: index %d seen %d times", n, i, c)
			}
		}
	}
	err := Chunks(10000, func(lo, hi int) error {
		if hi == 10000 || lo == 0 {
			return fmt.Errorf("chunk at %d", lo)
		}
		return nil
	})
	if err == nil || err.Error() != "chunk at 0" {
		t.Fatalf("error %v, want the first chunk's", err)
	}
	if err := Chunks(5, func(int, int) error { return errors.New("small") }); err == nil {
		t.Fatal("a small set's error was lost")
	}
}
