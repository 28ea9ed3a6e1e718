package amqp

import (
	"testing"
	"time"
)

// Reconnect delays are full jitter: spread between zero and the bound
// (agents that lost one broker do not come back in step), and the bound
// doubles after each attempt up to the maximum.
func TestReconnectDelayJitter(t *testing.T) {
	const bound, most = 400 * time.Millisecond, time.Second
	seen := map[time.Duration]bool{}
	low, high := false, false
	for range 1000 {
		d, next := reconnectDelay(bound, most)
		if d < 0 || d > bound {
			t.Fatalf("delay %v: want between 0 and %v", d, bound)
		}
		if next != 2*bound {
			t.Fatalf("next bound %v: want %v", next, 2*bound)
		}
		seen[d] = true
		low = low || d < bound/4
		high = high || d > 3*bound/4
	}
	if len(seen) < 900 || !low || !high {
		t.Errorf("1000 delays: %d distinct, one under a quarter of the bound %v, one over three quarters %v: want them spread over the whole range", len(seen), low, high)
	}
	bound2 := bound
	for range 5 {
		_, bound2 = reconnectDelay(bound2, most)
	}
	if bound2 != most {
		t.Errorf("bound after 5 attempts: %v, want the maximum %v", bound2, most)
	}
}
