// Package notify carries the server's events to people: the stored event
// log that every replica streams and that a follower resumes from with
// Last-Event-ID (Stream), and the webhooks of environments, posted from a
// durable outbox, signed, retried with back-off (Sender). It declares what
// it needs of the store as small interfaces (Log, Outbox).
package notify

import (
	"context"
	"sync"
	"time"

	"github.com/rs/zerolog"

	"github.com/tetherhq/tether/server/record"
)

// Log is the stored event log.
type Log interface {
	AppendEvents(ctx context.Context, events []record.LoggedEvent) (int64, error)
	EventsAfter(ctx context.Context, after int64, env string, limit int) ([]record.LoggedEvent, error)
	EventLogBounds(ctx context.Context) (record.EventLogBounds, error)
	PruneEvents(ctx context.Context, before time.Time) (int, error)
}

// Listener is a Log that tells of appends by other processes (PostgreSQL's
// LISTEN/NOTIFY), found by type assertion. Without one, only appends of
// this process wake its followers: the store has one process (SQLite).
type Listener interface {
	ListenEvents(ctx context.Context, wake func()) error
}

// StreamConfig configures a Stream. Zero fields take the defaults.
type StreamConfig struct {
	// Keep is how long the log keeps an event (default 7 days; negative:
	// for ever). Finished webhook deliveries go with them.
	Keep time.Duration
	// PruneEvery is how often events older than Keep are deleted
	// (default 1h).
	PruneEvery time.Duration
	// Batch bounds the events appended per transaction (default 500).
	Batch int
	// MaxPending bounds the events waiting to be appended while the store
	// does not answer (default 100000): beyond, the oldest are dropped,
	// and logged.
	MaxPending int
}

// DefaultStream returns the configuration zero fields take.
func DefaultStream() StreamConfig {
	return StreamConfig{Keep: 7 * 24 * time.Hour, PruneEvery: time.Hour, Batch: 500, MaxPending: 100_000}
}

func (c StreamConfig) withDefaults() StreamConfig {
	d := DefaultStream()
	if c.Keep == 0 {
		c.Keep = d.Keep
	}
	if c.PruneEvery <= 0 {
		c.PruneEvery = d.PruneEvery
	}
	if c.Batch <= 0 {
		c.Batch = d.Batch
	}
	if c.MaxPending <= 0 {
		c.MaxPending = d.MaxPending
	}
	return c
}

// Stream appends the server's events to the log, in the background and in
// batches (Append never waits for the store), and follows the log for the
// event stream: every replica streams every replica's events, in the
// log's order, and a follower resumes after the last ID it saw.
//
// A graceful stop (Run's ctx ending) appends what is pending before Run
// returns; a crash loses the events not appended yet (those of the last
// moments, never those of an earlier transaction). Events that must not be
// lost are appended by the transaction that records what they tell (the
// store's RecordResults), which then calls Appended.
type Stream struct {
	log    Log
	cfg    StreamConfig
	logger zerolog.Logger

	mu      sync.Mutex
	pending []record.LoggedEvent
	dropped int
	kick    chan struct{}

	// changed is closed, and replaced, whenever the log may have grown.
	changedMu sync.Mutex
	changed   chan struct{}

	// appended is called after each append (the webhook sender's wake).
	appended func()
}

// NewStream returns a stream over log; appended, if not nil, is called
// after each batch appended.
func NewStream(log Log, cfg StreamConfig, appended func(), logger zerolog.Logger) *Stream {
	if appended == nil {
		appended = func() {}
	}
	return &Stream{log: log, cfg: cfg.withDefaults(), logger: logger.With().Str("component", "stream").Logger(),
		kick: make(chan struct{}, 1), changed: make(chan struct{}), appended: appended}
}

// Append queues an event for the log. It never blocks.
func (s *Stream) Append(e record.LoggedEvent) {
	if e.At.IsZero() {
		e.At = time.Now().UTC()
	}
	s.mu.Lock()
	if len(s.pending) >= s.cfg.MaxPending {
		s.pending[0] = record.LoggedEvent{}
		s.pending = s.pending[1:]
		s.dropped++
	}
	s.pending = append(s.pending, e)
	s.mu.Unlock()
	select {
	case s.kick <- struct{}{}:
	default:
	}
}

// Appended tells the stream that a transaction of this process other
// than its own appends added events to the log (recording results): it
// wakes the followers and calls appended, as an append of its own does.
func (s *Stream) Appended() {
	s.wake()
	s.appended()
}

// wake tells followers the log may have grown.
func (s *Stream) wake() {
	s.changedMu.Lock()
	close(s.changed)
	s.changed = make(chan struct{})
	s.changedMu.Unlock()
}

func (s *Stream) waitChan() <-chan struct{} {
	s.changedMu.Lock()
	defer s.changedMu.Unlock()
	return s.changed
}

// Run appends what Append queues, prunes the log and, over a Listener,
// wakes followers when another process appends, until ctx ends; then it
// appends what is still pending (for at most 10s) and returns.
func (s *Stream) Run(ctx context.Context) error {
	var wg sync.WaitGroup
	defer wg.Wait()
	if l, ok := s.log.(Listener); ok {
		wg.Add(1)
		go func() { defer wg.Done(); _ = l.ListenEvents(ctx, s.wake) }()
	}
	if s.cfg.Keep > 0 {
		wg.Add(1)
		go func() { defer wg.Done(); s.prune(ctx) }()
	}
	pause := 100 * time.Millisecond
	failing := false
	for {
		select {
		case <-ctx.Done():
			flush, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
			defer cancel()
			for s.appendPending(flush) == nil && s.hasPending() {
			}
			if n := s.pendingLen(); n > 0 {
				s.logger.Error().Int("events", n).Msg("stopping: events not appended to the log are lost")
			}
			return ctx.Err()
		case <-s.kick:
		}
		for s.hasPending() {
			if err := s.appendPending(ctx); err != nil {
				if ctx.Err() != nil {
					break
				}
				if !failing {
					s.logger.Error().Err(err).Msg("append to the event log failed: retrying (streams and webhooks wait)")
					failing = true
				}
				select {
				case <-ctx.Done():
				case <-time.After(pause):
					pause = min(2*pause, 5*time.Second)
				}
				continue
			}
			if failing {
				s.logger.Info().Msg("appending to the event log again")
				failing, pause = false, 100*time.Millisecond
			}
		}
	}
}

func (s *Stream) hasPending() bool { return s.pendingLen() > 0 }

func (s *Stream) pendingLen() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.pending)
}

// appendPending appends one batch of the pending events; they stay
// pending if it fails.
func (s *Stream) appendPending(ctx context.Context) error {
	s.mu.Lock()
	batch := s.pending[:min(len(s.pending), s.cfg.Batch)]
	batch = append([]record.LoggedEvent(nil), batch...)
	dropped := s.dropped
	s.dropped = 0
	s.mu.Unlock()
	if dropped > 0 {
		s.logger.Error().Int("events", dropped).Msg("the store did not answer for long: the oldest events waiting for it were dropped")
	}
	if len(batch) == 0 {
		return nil
	}
	if _, err := s.log.AppendEvents(ctx, batch); err != nil {
		return err
	}
	s.mu.Lock()
	// Only the batch goes: Append may have dropped from the front
	// meanwhile, in which case fewer of the batch are still there.
	// Those dropped from the batch were appended: not lost.
	gone := min(s.dropped, len(batch))
	s.dropped -= gone
	n := len(batch) - gone
	clear(s.pending[:n])
	s.pending = s.pending[n:]
	s.mu.Unlock()
	s.wake()
	s.appended()
	return nil
}

func (s *Stream) prune(ctx context.Context) {
	t := time.NewTicker(s.cfg.PruneEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		n, err := s.log.PruneEvents(ctx, time.Now().Add(-s.cfg.Keep))
		if err != nil && ctx.Err() == nil {
			s.logger.Warn().Err(err).Msg("prune the event log")
		} else if n > 0 {
			s.logger.Debug().Int("events", n).Msg("pruned the event log")
		}
	}
}

// followPage bounds the events read from the log at once by a follower.
const followPage = 500

// Follow streams the log's events of env ("" for all) until ctx ends or
// send fails. A folded row (record.Unfold) comes as its elements, with
// IDs "row.element" (record.EventID). After is the ID of the last event
// the follower saw ("" for none: only events appended from now on come;
// a row's ID alone: the whole row was seen). opened is called once,
// before any event, with the ID the follower is at (the events that come
// are those after it: after itself when it resumes, else where the log
// is now) and told whether every event after after is still kept
// (false: too old and pruned, or not an ID of this log; the follower
// then gets the events from now on). A follower keeps the ID it is at
// before any event comes, so that a follower that saw none resumes after
// it all the same: what is appended while it is away (its server
// restarts, the events of agents ingested meanwhile) is not missed.
func (s *Stream) Follow(ctx context.Context, env, after string, opened func(at string, resumed bool) error, send func(id, kind string, data []byte) error) error {
	changed := s.waitChan()
	b, err := s.log.EventLogBounds(ctx)
	if err != nil {
		return err
	}
	// The oldest ID kept; past the newest given when none is: a
	// follower after an ID below it missed what was pruned.
	first := b.First
	if first == 0 {
		first = b.Last + 1
	}
	// skip is how far into the folded row seen (its ID) the follower
	// got: the row is read again, from the element after.
	cursor, resumed := b.Last, true
	at := record.EventID(b.Last, 0, false)
	seen, skip := int64(0), -1
	if after != "" {
		n, elem, err := record.ParseEventID(after)
		switch {
		case err != nil || n > b.Last:
			resumed = false
		case n < first-1, elem >= 0 && n < first:
			resumed = false
		case elem >= 0:
			cursor, seen, skip = n-1, n, elem
			at = record.EventID(n, elem, true)
		default:
			cursor = n
			at = record.EventID(n, 0, false)
		}
	}
	if err := opened(at, resumed); err != nil {
		return err
	}
	for {
		events, err := s.log.EventsAfter(ctx, cursor, env, followPage)
		if err != nil {
			return err
		}
		for _, e := range events {
			kinds, data, err := record.Unfold(e.Kind, e.Data)
			if err != nil {
				s.logger.Error().Err(err).Int64("event", e.ID).Msg("an event of the log cannot be streamed")
			}
			folded := e.Kind == record.EventResults
			for i := range data {
				if e.ID == seen && i <= skip {
					continue
				}
				if err := send(record.EventID(e.ID, i, folded), kinds[i], data[i]); err != nil {
					return err
				}
			}
			cursor = e.ID
		}
		if len(events) == followPage {
			continue
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-changed:
			changed = s.waitChan()
		}
	}
}
