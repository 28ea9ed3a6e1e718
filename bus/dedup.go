package bus

import "sync"

// Dedup remembers the ids of the last N envelopes handled, so a receiver can
// drop a redelivery (delivery is at least once). It is safe for concurrent use.
type Dedup struct {
	mu   sync.Mutex
	seen map[string]struct{}
	ring []string
	next int
}

// NewDedup remembers up to n ids.
func NewDedup(n int) *Dedup {
	return &Dedup{seen: make(map[string]struct{}, n), ring: make([]string, n)}
}

// Seen records id and reports whether it was already recorded.
func (d *Dedup) Seen(id string) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	if _, ok := d.seen[id]; ok {
		return true
	}
	if old := d.ring[d.next]; old != "" {
		delete(d.seen, old)
	}
	d.ring[d.next] = id
	d.seen[id] = struct{}{}
	d.next = (d.next + 1) % len(d.ring)
	return false
}
