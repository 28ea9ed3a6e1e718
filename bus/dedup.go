package bus

import "sync"

// Dedup remembers the ids of the last N envelopes handled, so a receiver can
// drop a redelivery (delivery is at least once). Record an id only once its
// handling is final (done, or dead-lettered): an envelope whose handling
// failed must stay unknown so its redelivery gets handled. It is safe for
// concurrent use.
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

// Has reports whether id was recorded.
func (d *Dedup) Has(id string) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	_, ok := d.seen[id]
	return ok
}

// Add records id, forgetting the oldest id when full.
func (d *Dedup) Add(id string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if _, ok := d.seen[id]; ok {
		return
	}
	if old := d.ring[d.next]; old != "" {
		delete(d.seen, old)
	}
	d.ring[d.next] = id
	d.seen[id] = struct{}{}
	d.next = (d.next + 1) % len(d.ring)
}
