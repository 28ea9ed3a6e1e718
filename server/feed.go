package server

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"time"

	"github.com/tetherhq/tether/model"
	"github.com/tetherhq/tether/server/record"
)

// EventKind names a live server event.
type EventKind string

// Live event kinds.
const (
	// EventAgentDiscovered: a new agent said hello and awaits acceptance.
	EventAgentDiscovered EventKind = "agent.discovered"
	// EventAgentOnline: an accepted agent said hello and was sent its state.
	EventAgentOnline EventKind = "agent.online"
	// EventAgentOffline: an agent said goodbye (a clean stop).
	EventAgentOffline EventKind = "agent.offline"
	// EventResult: one resource result was recorded.
	EventResult EventKind = record.EventResult
	// EventResults: the results of one report of an agent, as the event
	// log stores them (Results holds them): one row instead of one per
	// result. Subscribers never get it; the event stream and webhooks
	// unfold it into one EventResult per result (record.Unfold).
	EventResults EventKind = record.EventResults
	// EventDeployDone: an agent finished a deploy or dry run.
	EventDeployDone EventKind = "deploy.done"
	// EventSecurity: an event was dropped for its signer.
	EventSecurity EventKind = "security.alert"
	// EventAgentChanged: an operator accepted, rejected, paused or resumed
	// an agent, its facts changed or its key rolled over (Error says
	// which).
	EventAgentChanged EventKind = "agent.changed"
	// EventEnvHalted: an environment was halted or resumed.
	EventEnvHalted EventKind = "env.halted"
	// EventDrift: an agent reported a resource drifted from its intent,
	// or back to it (Alert says which).
	EventDrift EventKind = "compliance.drift"
	// EventScheduled: the environment's scheduler started a periodic
	// retry or verification.
	EventScheduled EventKind = "deploy.scheduled"
	// EventCompileStarted: a server-side compile started (Compile holds
	// its report, running).
	EventCompileStarted EventKind = "compile.started"
	// EventCompileFinished: a server-side compile ended (Compile holds
	// its report).
	EventCompileFinished EventKind = "compile.finished"
	// EventCompileAlert: compiles of the environment started failing
	// (Alert holds the compile.failed alert).
	EventCompileAlert EventKind = "compile.alert"
	// EventCompileRecovered: a compile succeeded after failures (Alert
	// holds the compile.recovered alert).
	EventCompileRecovered EventKind = "compile.recovered"
	// EventReleaseStarted: a version was released; its fan-out to agents
	// starts in the background (Release holds the release, running).
	EventReleaseStarted EventKind = "release.started"
	// EventReleaseProgress: a release's fan-out went on (Release holds
	// its counts so far); at most once a second per release.
	EventReleaseProgress EventKind = "release.progress"
	// EventReleaseDone: a release's fan-out ended (Release holds it: done,
	// or failed with its note).
	EventReleaseDone EventKind = "release.done"
)

// Event is something that just happened at the server, published after it
// was recorded. The event stream's IDs are those of the stored event log
// (the SSE "id:" line), not part of the event.
type Event struct {
	// ID is the event's ID in the stored event log, as the event stream
	// shows it (set by the stream, never by a publisher).
	ID       string    `json:"id,omitempty"`
	Kind     EventKind `json:"kind"`
	At       time.Time `json:"at"`
	Env      string    `json:"env"`
	Agent    string    `json:"agent,omitempty"`
	DeployID string    `json:"deploy_id,omitempty"`
	// Operation is the scheduled operation (deploy, repair, dryrun).
	Operation  record.Operation `json:"operation,omitempty"`
	Generation int64            `json:"generation,omitempty"`
	Result     *model.Result    `json:"result,omitempty"`
	Alert      *record.Alert    `json:"alert,omitempty"`
	Compile    *record.Compile  `json:"compile,omitempty"`
	Release    *record.Release  `json:"release,omitempty"`
	Error      string           `json:"error,omitempty"`
	// Results are the results of an EventResults, in the log only. Last:
	// an unfolded result event has its "result" where it stood.
	Results []model.Result `json:"results,omitempty"`
}

// Feed fans events out to this process's subscribers (the embedded mode's
// report, plans, tests), and hands each to sink: the stored event log,
// which the event stream of every replica follows. Events that were logged
// already, in the transaction that recorded what they tell (ingest's, an
// operator's decision about an agent), are published with publishLogged:
// to the subscribers only. Every subscriber sees
// every event published while it is subscribed, in order: a subscriber's
// queue grows instead of dropping events, so a slow reader never misses a
// result.
type Feed struct {
	mu   sync.Mutex
	subs map[*Subscription]struct{}
	sink func(Event)
}

func newFeed(sink func(Event)) *Feed {
	if sink == nil {
		sink = func(Event) {}
	}
	return &Feed{subs: map[*Subscription]struct{}{}, sink: sink}
}

// Subscription is one reader of a Feed.
type Subscription struct {
	feed   *Feed
	mu     sync.Mutex
	queue  []Event
	notify chan struct{}
}

func (f *Feed) subscribe() *Subscription {
	s := &Subscription{feed: f, notify: make(chan struct{}, 1)}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.subs[s] = struct{}{}
	return s
}

func (f *Feed) publish(e Event) { f.deliver(e, true) }

// publishLogged publishes an event the event log holds already.
func (f *Feed) publishLogged(e Event) { f.deliver(e, false) }

func (f *Feed) deliver(e Event, sink bool) {
	if e.At.IsZero() {
		e.At = time.Now().UTC()
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	// Under the lock: the log gets events in the order subscribers do.
	if sink {
		f.sink(e)
	}
	for s := range f.subs {
		s.mu.Lock()
		s.queue = append(s.queue, e)
		s.mu.Unlock()
		select {
		case s.notify <- struct{}{}:
		default:
		}
	}
}

// Next returns the next event, waiting for one until ctx ends.
func (s *Subscription) Next(ctx context.Context) (Event, error) {
	for {
		s.mu.Lock()
		if len(s.queue) > 0 {
			e := s.queue[0]
			s.queue[0] = Event{}
			s.queue = s.queue[1:]
			s.mu.Unlock()
			return e, nil
		}
		s.mu.Unlock()
		select {
		case <-s.notify:
		case <-ctx.Done():
			return Event{}, ctx.Err()
		}
	}
}

// Close ends the subscription.
func (s *Subscription) Close() {
	s.feed.mu.Lock()
	delete(s.feed.subs, s)
	s.feed.mu.Unlock()
}

// inLog returns events as the event log stores them, for the store
// write that records the change they tell to append them in its
// transaction: a crash between the two loses neither, and no event tells
// of a change that was not committed. Once it is, logged publishes them.
// Their time is set here, as publishing would.
func inLog(events ...*Event) ([]record.LoggedEvent, error) {
	out := make([]record.LoggedEvent, len(events))
	for i, e := range events {
		if e.At.IsZero() {
			e.At = time.Now().UTC()
		}
		le, err := loggedEvent(*e)
		if err != nil {
			return nil, fmt.Errorf("event %s is not JSON: %w", e.Kind, err)
		}
		out[i] = le
	}
	return out, nil
}

// logged publishes events the transaction of what they tell appended to
// the event log (inLog), to this process's subscribers, and wakes the
// streams and webhooks that follow the log.
func (s *Server) logged(events ...Event) {
	for _, e := range events {
		s.feed.publishLogged(e)
	}
	s.stream.Appended()
}

// logEvent hands an event to the stored event log.
func (s *Server) logEvent(e Event) {
	le, err := loggedEvent(e)
	if err != nil {
		s.log.Error().Err(err).Str("kind", string(e.Kind)).Msg("an event that is not JSON is not logged")
		return
	}
	s.stream.Append(le)
}

// loggedEvent is e as the event log stores it.
func loggedEvent(e Event) (record.LoggedEvent, error) {
	if e.At.IsZero() {
		e.At = time.Now().UTC()
	}
	data, err := json.Marshal(e)
	return record.LoggedEvent{Env: e.Env, Kind: string(e.Kind), Data: data, At: e.At}, err
}
