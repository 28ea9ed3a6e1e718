package server

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"strconv"
	"strings"
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
	EventResult EventKind = "resource.result"
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
	// EventCompileAlert: compiles of the environment started failing, or
	// succeed again (Alert says which).
	EventCompileAlert EventKind = "compile.alert"
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
// was recorded.
type Event struct {
	// ID names the event in the stream of the server that published it
	// ("<origin>-<n>"): a follower that reconnects gives the last it saw
	// (Last-Event-ID) to get those after it.
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
}

// Feed fans events out to subscribers. Every subscriber sees every event
// published while it is subscribed, in order: a subscriber's queue grows
// instead of dropping events, so a slow reader never misses a result.
//
// Every event gets an ID, and the feed keeps the newest replayLen: a
// follower that lost its stream (a network blip, a proxy, a restart of
// its client) resumes after the last event it saw and misses nothing
// when that event is still kept. The IDs and the kept events are this
// process's (origin tells its IDs from another's): a server restarted, or
// another replica, cannot resume them, and says so (Resume).
type Feed struct {
	mu     sync.Mutex
	subs   map[*Subscription]struct{}
	origin string
	seq    uint64
	// recent are the newest events, oldest first: at most replayLen.
	recent []Event
}

// replayLen bounds the events a Feed keeps for followers that resume.
const replayLen = 4096

func newFeed() *Feed {
	var b [6]byte
	_, _ = rand.Read(b[:]) // crypto/rand does not fail
	return &Feed{subs: map[*Subscription]struct{}{}, origin: hex.EncodeToString(b[:])}
}

// Subscription is one reader of a Feed.
type Subscription struct {
	feed   *Feed
	mu     sync.Mutex
	queue  []Event
	notify chan struct{}
}

func (f *Feed) subscribe() *Subscription {
	s, _ := f.subscribeAfter("")
	return s
}

// subscribeAfter subscribes, with the kept events after the one named
// after already queued (at once: none is missed between them and the
// live ones, none is sent twice). resumed is false when after names an
// event this feed does not keep (too old, or another process's): then
// only live events follow.
func (f *Feed) subscribeAfter(after string) (s *Subscription, resumed bool) {
	s = &Subscription{feed: f, notify: make(chan struct{}, 1)}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.subs[s] = struct{}{}
	if after == "" {
		return s, true
	}
	origin, n, ok := strings.Cut(after, "-")
	seq, err := strconv.ParseUint(n, 10, 64)
	if !ok || err != nil || origin != f.origin || seq > f.seq {
		return s, false
	}
	oldest := f.seq + 1 - uint64(len(f.recent)) // of the kept events
	if seq+1 < oldest {
		return s, false // some after it are no longer kept
	}
	s.queue = append(s.queue, f.recent[seq+1-oldest:]...)
	if len(s.queue) > 0 {
		s.notify <- struct{}{}
	}
	return s, true
}

func (f *Feed) publish(e Event) {
	if e.At.IsZero() {
		e.At = time.Now().UTC()
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.seq++
	e.ID = f.origin + "-" + strconv.FormatUint(f.seq, 10)
	if len(f.recent) == replayLen {
		f.recent[0] = Event{}
		f.recent = f.recent[1:]
	}
	f.recent = append(f.recent, e)
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
