package ingest

import (
	"context"
	"sync"
	"time"

	"github.com/rs/zerolog"

	"github.com/tetherhq/tether/server/store"
)

// seenEvery is how often the heartbeats heard are written.
const seenEvery = time.Second

// seenWriter writes heartbeats in groups. A heartbeat that says nothing new
// (the agent is connected, with the version and protocol known) only moves
// the agent's last-seen time and sequence: it is marked here, and every
// second the marks are written in one statement, instead of a read and a
// write of the agent's whole record each. With 10,000 agents beating every
// ten seconds that is a thousand reads and writes a second spared. A
// heartbeat that changes something goes through the record as before.
//
// A mark not written yet is lost if the server stops hard: the agent's
// last-seen time is then up to a second older, and its next heartbeat
// moves it.
type seenWriter struct {
	store store.Store
	log   zerolog.Logger
	mu    sync.Mutex
	marks map[agentKey]store.AgentSeen
	// failing is set while writes fail, so that a database away is
	// logged once, not every second.
	failing bool
}

func newSeenWriter(st store.Store, log zerolog.Logger) *seenWriter {
	return &seenWriter{store: st, log: log, marks: map[agentKey]store.AgentSeen{}}
}

// mark records that env/name was heard from at at, in message seq.
func (w *seenWriter) mark(env, name string, seq int64, at time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.add(store.AgentSeen{Env: env, Agent: name, Seq: seq, At: at})
}

// add merges m into the marks: the later event's stands (an older one,
// handled after it, says nothing more); w.mu is held.
func (w *seenWriter) add(m store.AgentSeen) {
	k := agentKey{m.Env, m.Agent}
	if old, ok := w.marks[k]; ok && (old.Seq > m.Seq || old.Seq == m.Seq && old.At.After(m.At)) {
		return
	}
	w.marks[k] = m
}

// forget drops the mark of env/name not written yet (its sequence starts
// over with a new key).
func (w *seenWriter) forget(env, name string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	delete(w.marks, agentKey{env, name})
}

// run writes the marks every second until ctx ends, then once more.
func (w *seenWriter) run(ctx context.Context) {
	t := time.NewTicker(seenEvery)
	defer t.Stop()
	for {
		select {
		case <-t.C:
			w.flush(ctx)
		case <-ctx.Done():
			// The last marks are written as the server stops.
			stop, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			w.flush(stop)
			cancel()
			return
		}
	}
}

// flush writes the marks taken so far; those that could not be written
// are kept for the next try (newer marks merged in).
func (w *seenWriter) flush(ctx context.Context) {
	w.mu.Lock()
	if len(w.marks) == 0 {
		w.mu.Unlock()
		return
	}
	seen := make([]store.AgentSeen, 0, len(w.marks))
	for _, m := range w.marks {
		seen = append(seen, m)
	}
	clear(w.marks)
	w.mu.Unlock()
	err := w.store.MarkAgentsSeen(ctx, seen)
	w.mu.Lock()
	defer w.mu.Unlock()
	if err != nil {
		for _, m := range seen {
			w.add(m)
		}
		if !w.failing && ctx.Err() == nil {
			w.log.Warn().Err(err).Int("agents", len(seen)).Msg("cannot record agents' heartbeats; trying again every second (their last-seen times lag meanwhile)")
		}
		w.failing = true
		return
	}
	if w.failing {
		w.log.Info().Int("agents", len(seen)).Msg("agents' heartbeats recorded again")
	}
	w.failing = false
}
