package bus

import "sync"

// Dedup remembers the ids of the last N envelopes handled, so a receiver can
// drop a redelivery (delivery is at least once). Record an id only once its
// handling is final (done, or dead-lettered): an envelope whose handling
// failed must stay unknown so its redelivery gets handled. It is safe for
// concurrent use.
type Dedup struct {
	mu   sync.Mutex
	max  int
	seen map[string]struct{}
	// ring holds the ids in arrival order; it grows to max, then wraps.
	ring []string
	next int
}

// NewDedup remembers up to n ids. Memory grows with the ids recorded, not
// with n.
func NewDedup(n int) *Dedup {
	return &Dedup{max: max(n, 1), seen: map[string]struct{}{}}
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
	d.seen[id] = struct{}{}
	if len(d.ring) < d.max {
		d.ring = append(d.ring, id)
		return
	}
	delete(d.seen, d.ring[d.next])
	d.ring[d.next] = id
	d.next = (d.next + 1) % d.max
}
