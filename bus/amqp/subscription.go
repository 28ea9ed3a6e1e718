package amqp

import (
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/rs/zerolog"

	"github.com/tetherhq/tether/bus"
)

// Why a consumer is not subscribed, besides the error that stopped it.
var (
	errNotSubscribed  = errors.New("not subscribed yet")
	errConnectionLost = errors.New("the connection to the broker is lost")
	errNoConsumer     = errors.New("no consumer runs")
)

// subscriptions tracks what the bus's consumers are doing: for Consuming,
// and so that a queue's loss and recovery are logged once however many
// consumers it has.
type subscriptions struct {
	mu  sync.Mutex
	all map[*subscription]struct{}
	// idle is when the last consumer of a queue left.
	idle map[string]time.Time
	// start stands for idle of queues never consumed.
	start time.Time
	// cancelled marks queues whose consumers lost their subscriptions,
	// until every one of them subscribed again.
	cancelled map[string]bool
}

// subscription is the state of one consume call.
type subscription struct {
	queue string
	up    bool
	// since is when up last changed (for a consumer never subscribed:
	// when it started trying).
	since time.Time
	why   error
	// warned: a streak of failures was logged at warn level.
	warned bool
	// kicked tells the consumer that another consumer of its queue was
	// cancelled: its own subscription went with the queue.
	kicked chan struct{}
}

// unkick drops a kick meant for an earlier subscription.
func (c *subscription) unkick() {
	select {
	case <-c.kicked:
	default:
	}
}

func newSubscriptions() *subscriptions {
	return &subscriptions{all: map[*subscription]struct{}{}, idle: map[string]time.Time{}, start: time.Now(), cancelled: map[string]bool{}}
}

func (s *subscriptions) join(queue string) *subscription {
	s.mu.Lock()
	defer s.mu.Unlock()
	c := &subscription{queue: queue, since: time.Now(), why: errNotSubscribed, kicked: make(chan struct{}, 1)}
	s.all[c] = struct{}{}
	return c
}

func (s *subscriptions) leave(c *subscription) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.all, c)
	for o := range s.all {
		if o.queue == c.queue {
			return
		}
	}
	s.idle[c.queue] = time.Now()
	delete(s.cancelled, c.queue)
}

// kickSiblings tells every other subscribed consumer of c's queue that c
// was cancelled: the broker may have dropped theirs without a cancel.
func (s *subscriptions) kickSiblings(c *subscription) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for o := range s.all {
		if o != c && o.queue == c.queue && o.up {
			select {
			case o.kicked <- struct{}{}:
			default:
			}
		}
	}
}

// up records that c subscribed.
func (s *subscriptions) up(c *subscription, log zerolog.Logger) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if c.warned {
		log.Info().Str("queue", c.queue).Msg("consumer subscribed again")
	}
	c.up, c.since, c.why, c.warned = true, time.Now(), nil, false
	if !s.cancelled[c.queue] {
		return
	}
	for o := range s.all {
		if o.queue == c.queue && !o.up {
			return
		}
	}
	delete(s.cancelled, c.queue)
	log.Info().Str("queue", c.queue).Msg("queue declared again; its consumers are back")
}

// down records that c stopped, and why. A cancel by the broker is logged
// once per queue, a failure once per streak of a consumer; a lost
// connection not at all (the supervisor logs it).
func (s *subscriptions) down(c *subscription, why error, log zerolog.Logger) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if c.up {
		c.up, c.since = false, time.Now()
	}
	c.why = why
	switch {
	case errors.Is(why, errConnectionLost):
	case errors.Is(why, errNoInbox):
		// Expected until the server has heard the agent's hello.
		if c.warned {
			log.Debug().Err(why).Str("queue", c.queue).Msg("inbox still missing")
			return
		}
		c.warned = true
		log.Info().Err(why).Str("queue", c.queue).Msg("inbox missing; looking again with back-off until the server declares it")
	case errors.Is(why, errCancelled), errors.Is(why, errDropped):
		if s.cancelled[c.queue] {
			log.Debug().Err(why).Str("queue", c.queue).Msg("subscription lost")
			return
		}
		s.cancelled[c.queue] = true
		log.Warn().Err(why).Str("queue", c.queue).Msg("subscription lost (queue deleted, or moved to another node); consuming again once the queue is back (a server queue is declared again at once, an inbox by the server)")
	case c.warned:
		log.Debug().Err(why).Str("queue", c.queue).Msg("consumer stopped again")
	default:
		c.warned = true
		log.Warn().Err(why).Str("queue", c.queue).Msg("consumer stopped; subscribing again with back-off")
	}
}

// consuming returns nil when every consumer of queue is subscribed (and
// there is one), else an error saying since when one is not, and why.
func (s *subscriptions) consuming(queue string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	var down *subscription
	n := 0
	for c := range s.all {
		if c.queue != queue {
			continue
		}
		n++
		if !c.up && (down == nil || c.since.Before(down.since)) {
			down = c
		}
	}
	since, why := time.Time{}, error(nil)
	switch {
	case n == 0:
		since, why = s.start, errNoConsumer
		if t, ok := s.idle[queue]; ok {
			since = t
		}
	case down != nil:
		since, why = down.since, down.why
	default:
		return nil
	}
	return fmt.Errorf("%s not consumed since %s (%s ago): %v", queue, since.UTC().Format(time.RFC3339),
		time.Since(since).Round(time.Second), why)
}

// Consuming reports whether server queue q is consumed by this bus: nil
// when every consumer of it is subscribed, else an error naming the
// queue, since when it is not consumed, and why (no consumer runs, the
// connection is lost, the broker cancelled the consumers and the queue is
// being declared again, …). A server's readiness check.
func (b *Bus) Consuming(q bus.Queue) error {
	return b.subs.consuming(b.ServerQueue(q))
}

// LostSubscriptions counts the subscriptions the broker cancelled or
// dropped (one per consumer of a deleted queue), each followed by a
// declare and a new subscription.
func (b *Bus) LostSubscriptions() int64 { return b.lostSubs.Load() }
