// Package event holds what the server tells of what just happened: the
// live events, the Feed that fans them out to this process's subscribers
// and hands them to the stored event log, and the form the log keeps them
// in. Every subsystem of the server publishes through a Feed; none needs
// another's types to do so.
package event

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"time"

	"github.com/tetherhq/tether/model"
	"github.com/tetherhq/tether/server/record"
)

// Kind names a live server event.
type Kind string

// Live event kinds.
const (
	// AgentDiscovered: a new agent said hello and awaits acceptance.
	AgentDiscovered Kind = "agent.discovered"
	// AgentOnline: an accepted agent said hello and was sent its state.
	AgentOnline Kind = "agent.online"
	// AgentOffline: an agent said goodbye (a clean stop).
	AgentOffline Kind = "agent.offline"
	// Result: one resource result was recorded.
	Result Kind = record.EventResult
	// Results: the results of one report of an agent, as the event
	// log stores them (Results holds them): one row instead of one per
	// result. Subscribers never get it; the event stream and webhooks
	// unfold it into one Result per result (record.Unfold).
	Results Kind = record.EventResults
	// DeployDone: an agent finished a deploy or dry run.
	DeployDone Kind = "deploy.done"
	// Security: an event was dropped for its signer.
	Security Kind = "security.alert"
	// AgentChanged: an operator accepted, rejected, paused or resumed
	// an agent, its facts changed or its key rolled over (Error says
	// which).
	AgentChanged Kind = "agent.changed"
	// EnvHalted: an environment was halted or resumed.
	EnvHalted Kind = "env.halted"
	// Drift: an agent reported a resource drifted from its intent,
	// or back to it (Alert says which).
	Drift Kind = "compliance.drift"
	// Scheduled: the environment's scheduler started a periodic
	// retry or verification.
	Scheduled Kind = "deploy.scheduled"
	// CompileStarted: a server-side compile started (Compile holds
	// its report, running).
	CompileStarted Kind = "compile.started"
	// CompileFinished: a server-side compile ended (Compile holds
	// its report).
	CompileFinished Kind = "compile.finished"
	// CompileAlert: compiles of the environment started failing
	// (Alert holds the compile.failed alert).
	CompileAlert Kind = "compile.alert"
	// CompileRecovered: a compile succeeded after failures (Alert
	// holds the compile.recovered alert).
	CompileRecovered Kind = "compile.recovered"
	// ReleaseStarted: a version was released; its fan-out to agents
	// starts in the background (Release holds the release, running).
	ReleaseStarted Kind = "release.started"
	// ReleaseProgress: a release's fan-out went on (Release holds
	// its counts so far); at most once a second per release.
	ReleaseProgress Kind = "release.progress"
	// ReleaseDone: a release's fan-out ended (Release holds it: done,
	// or failed with its note).
	ReleaseDone Kind = "release.done"
	// HostState: a host of a blueprint moved from one state of its
	// provisioning to another (Host holds it, Error the event that moved
	// it and, for a failed host, why).
	HostState Kind = "host.state"
	// InstanceChanged: a machine's power state changed, or a control
	// of it ended (Instance holds it; Error says what failed).
	InstanceChanged Kind = "instance.changed"
)

// Event is something that just happened at the server, published after it
// was recorded. The event stream's IDs are those of the stored event log
// (the SSE "id:" line), not part of the event.
type Event struct {
	// ID is the event's ID in the stored event log, as the event stream
	// shows it (set by the stream, never by a publisher).
	ID       string    `json:"id,omitempty"`
	Kind     Kind      `json:"kind"`
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
	Host       *record.Host     `json:"host,omitempty"`
	Instance   *record.Instance `json:"instance,omitempty"`
	Error      string           `json:"error,omitempty"`
	// Results are the results of an Results, in the log only. Last:
	// an unfolded result event has its "result" where it stood.
	Results []model.Result `json:"results,omitempty"`
}

// Feed fans events out to this process's subscribers (the embedded mode's
// report, plans, tests), and hands each to sink: the stored event log,
// which the event stream of every replica follows. Events that were logged
// already, in the transaction that recorded what they tell (ingest's, an
// operator's decision about an agent), are published with Logged: to the
// subscribers only, waking what follows the log. Every subscriber sees
// every event published while it is subscribed, in order: a subscriber's
// queue grows instead of dropping events, so a slow reader never misses a
// result.
type Feed struct {
	mu       sync.Mutex
	subs     map[*Subscription]struct{}
	sink     func(Event)
	appended func()
}

// NewFeed returns a feed handing the events it publishes to sink (nil:
// none), and calling appended once events the log holds already were
// published (nil: nothing to wake).
func NewFeed(sink func(Event), appended func()) *Feed {
	if sink == nil {
		sink = func(Event) {}
	}
	if appended == nil {
		appended = func() {}
	}
	return &Feed{subs: map[*Subscription]struct{}{}, sink: sink, appended: appended}
}

// Subscription is one reader of a Feed.
type Subscription struct {
	feed   *Feed
	mu     sync.Mutex
	queue  []Event
	notify chan struct{}
}

// Subscribe follows the feed until the subscription is closed.
func (f *Feed) Subscribe() *Subscription {
	s := &Subscription{feed: f, notify: make(chan struct{}, 1)}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.subs[s] = struct{}{}
	return s
}

// Publish publishes e to the subscribers and hands it to the event log.
func (f *Feed) Publish(e Event) { f.deliver(e, true) }

// Logged publishes events the transaction of what they tell appended to
// the event log (InLog) to the subscribers, and wakes the streams and
// webhooks that follow the log.
func (f *Feed) Logged(events ...Event) {
	for _, e := range events {
		f.deliver(e, false)
	}
	f.appended()
}

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

// InLog returns events as the event log stores them, for the store
// write that records the change they tell to append them in its
// transaction: a crash between the two loses neither, and no event tells
// of a change that was not committed. Once it is, Feed.Logged publishes
// them.
// Their time is set here, as publishing would.
func InLog(events ...*Event) ([]record.LoggedEvent, error) {
	out := make([]record.LoggedEvent, len(events))
	for i, e := range events {
		if e.At.IsZero() {
			e.At = time.Now().UTC()
		}
		le, err := ToLog(*e)
		if err != nil {
			return nil, fmt.Errorf("event %s is not JSON: %w", e.Kind, err)
		}
		out[i] = le
	}
	return out, nil
}

// ToLog is e as the event log stores it.
func ToLog(e Event) (record.LoggedEvent, error) {
	if e.At.IsZero() {
		e.At = time.Now().UTC()
	}
	data, err := json.Marshal(e)
	return record.LoggedEvent{Env: e.Env, Kind: string(e.Kind), Data: data, At: e.At}, err
}
