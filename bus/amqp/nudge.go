package amqp

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/tetherhq/tether/bus"
)

// Nudges. An agent never enrolled has no inbox until the server heard its
// hello and declared it, and a look for a missing inbox costs the broker a
// channel opened and closed. Closing one is a message to the broker's
// registry of channels, a single process whose work per message grows with
// its backlog: thousands of agents looking again and again while the
// server works through their hellos can stall the whole broker (RabbitMQ
// 3.10 was seen with a million such messages queued). So the server, when
// it declares an inbox nobody consumes, nudges its agent: an empty message
// through the default exchange to the agent's claim queue (claim.go),
// which the agent consumes for nudges alone. The agent looks for its inbox
// when nudged, and by itself only seldom. A nudge carries nothing: a
// forged one makes the agent look once more, and nudges make an agent
// look at most once per nudgeLookGap.

const (
	nudgeType = "tether.nudge"
	// toldType marks what the server tells an agent that has no inbox
	// (Tell): a signed envelope, not a nudge.
	toldType = "tether.told"
	// nudgeTTL: a nudge no agent takes (it is not connected) expires.
	nudgeTTL = "60000"
	// nudgeLookGap is the least time between two looks for an inbox
	// that nudges cause.
	nudgeLookGap = time.Second
	// nudgedInboxMin is the least pause between two looks of an agent
	// for a missing inbox when nudges can reach it (missingInboxMin when
	// they cannot); the pause doubles up to nudgedInboxMax. The server
	// nudges an agent each time it hears a hello of its and finds its
	// inbox not consumed, and an agent not enrolled says hello again
	// until answered: looks only make up for nudges lost. At 10,000
	// agents enrolling at once, looks every 15 to 60 s while the server
	// worked through the hellos were some 48,000 channels opened and
	// closed on the broker (68,050 with the claims and consumers).
	nudgedInboxMin = time.Minute
	nudgedInboxMax = 2 * time.Minute
)

type nudges struct {
	// refused: the broker refused this server's nudges (its broker user
	// may not publish to amq.default): none are sent any more.
	refused atomic.Bool
	// failed: the broker refused this agent's bus consuming a claim
	// queue (a server that does not grant it): nudges are not listened
	// for any more.
	failed atomic.Bool
	mu     sync.Mutex
	// signals are the agents' signals, by claim queue.
	signals map[string]chan struct{}
	// listening counts the nudge consumers of each claim queue.
	listening map[string]int
	tags      int
	// told holds, by claim queue, the last envelope the server told the
	// agent (Tell) until its inbox consumer takes it.
	told map[string]chan *bus.Envelope
}

// toldTo returns where what the server tells the agent of claim queue name
// waits for its inbox consumer: the latest only.
func (n *nudges) toldTo(name string) chan *bus.Envelope {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.told == nil {
		n.told = map[string]chan *bus.Envelope{}
	}
	c, ok := n.told[name]
	if !ok {
		c = make(chan *bus.Envelope, 1)
		n.told[name] = c
	}
	return c
}

// hear keeps e as the latest told to the agent of claim queue name.
func (n *nudges) hear(name string, e *bus.Envelope) {
	c := n.toldTo(name)
	for {
		select {
		case c <- e:
			return
		default:
		}
		select {
		case <-c: // an older one: the latest stands
		default:
		}
	}
}

// listens reports whether nudges to claim queue name are listened for.
func (n *nudges) listens(name string) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.listening[name] > 0
}

// listen counts a nudge consumer of claim queue name in (+1) or out (-1).
func (n *nudges) listen(name string, d int) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.listening == nil {
		n.listening = map[string]int{}
	}
	n.listening[name] += d
	if n.listening[name] <= 0 {
		delete(n.listening, name)
	}
}

// signal returns the signal of claim queue name: it holds a nudge until
// taken.
func (n *nudges) signal(name string) chan struct{} {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.signals == nil {
		n.signals = map[string]chan struct{}{}
	}
	c, ok := n.signals[name]
	if !ok {
		c = make(chan struct{}, 1)
		n.signals[name] = c
	}
	return c
}

// nudge has the server nudge env/agent's agent on ch (not in confirm
// mode: a nudge is not waited for). A refusal closes ch; watchNudges
// tells.
func (b *Bus) nudge(ch *amqp.Channel, env, agent string) {
	if b.cfg.Agent || b.nudges.refused.Load() {
		return
	}
	_ = ch.Publish("", b.ClaimQueue(env, agent), false, false, amqp.Publishing{Type: nudgeType, Expiration: nudgeTTL})
}

// watchNudges waits for a kept channel's close (closed is its
// NotifyClose): one the broker closed over a refused nudge stops nudges,
// said once.
func (b *Bus) watchNudges(closed <-chan *amqp.Error) {
	e, ok := <-closed
	if ok && e != nil && e.Code == amqp.AccessRefused && strings.Contains(e.Reason, "amq.default") && !b.nudges.refused.Swap(true) {
		b.log.Warn().Str("reason", e.Reason).Msg("the broker refuses this server's nudges to new agents (publishing to amq.default): " +
			"they find their inboxes only by looking for them, which they do seldom (a new agent may wait minutes for its first desired state); give the server's broker user write on amq.default (operations.md)")
	}
}

// listenNudges has an agent's bus consume claim queue name for nudges, on
// the session's nudge channel (one per connection, shared by its
// agents' claims, so that a refusal closes it and never a claim).
func (b *Bus) listenNudges(s *session, name string) {
	if !b.cfg.Agent || b.nudges.failed.Load() {
		return
	}
	s.nudgeMu.Lock()
	defer s.nudgeMu.Unlock()
	if s.nudgeCh == nil || s.nudgeCh.IsClosed() {
		ch, err := openChannel(s.conn)
		if err != nil {
			return
		}
		s.nudgeCh = ch
	}
	b.nudges.mu.Lock()
	b.nudges.tags++
	tag := "nudge." + strconv.Itoa(b.nudges.tags)
	b.nudges.mu.Unlock()
	deliveries, err := s.nudgeCh.Consume(name, tag, true, false, false, false, nil)
	if err != nil {
		s.nudgeCh = nil
		if isAMQPError(err, amqp.AccessRefused) && !b.nudges.failed.Swap(true) {
			b.log.Info().Err(err).Msg("the broker does not let this agent consume its claim queue: it looks for a new inbox by itself, without the server's nudges")
		}
		return
	}
	sig := b.nudges.signal(name)
	b.nudges.listen(name, 1)
	// Ends when the claim queue goes (released, or its connection
	// closed) or the channel does.
	go func() {
		defer b.nudges.listen(name, -1)
		for d := range deliveries {
			if d.Type == toldType {
				// The server's answer to an agent without an inbox
				// (pending): a refusal, the one kind that may come so.
				if e, err := bus.Decode(d.Body); err == nil && e.Kind == bus.KindRejected {
					b.nudges.hear(name, e)
				}
				continue
			}
			select {
			case sig <- struct{}{}:
			default:
			}
		}
	}()
}

// Tell implements what the server tells an agent that has no inbox (a
// pending one, see docs/protocol.md): e, through the default exchange to
// the agent's claim queue, which its connection holds while it runs and
// the broker drops with it. Nothing durable is made: e is not persistent,
// expires after ttl, and goes nowhere when the agent is not connected (it
// hears it at its next hello). Only a refusal (bus.KindRejected) may be
// told: the agent takes nothing else this way.
func (b *Bus) Tell(ctx context.Context, e *bus.Envelope, ttl time.Duration) error {
	if e.Kind != bus.KindRejected {
		return fmt.Errorf("tell %s: only %s is told to an agent without an inbox", e, bus.KindRejected)
	}
	if b.cfg.Agent || b.nudges.refused.Load() {
		return nil
	}
	data, err := bus.Encode(e)
	if err != nil {
		return err
	}
	sl, err := b.takeSlot(ctx)
	if err != nil {
		return err
	}
	defer b.giveSlot(sl)
	ch := b.keptChannel(ctx, sl)
	if ch == nil {
		return fmt.Errorf("tell %s: %w", e, amqp.ErrClosed)
	}
	msg := amqp.Publishing{Type: toldType, ContentType: "application/json", Body: data,
		Expiration: strconv.FormatInt(max(ttl.Milliseconds(), 1), 10)}
	if err := ch.PublishWithContext(ctx, "", b.ClaimQueue(e.Env, e.Agent), false, false, msg); err != nil {
		sl.drop()
		return fmt.Errorf("tell %s: %w", e, err)
	}
	return nil
}
