package amqp

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync"
	"time"

	"github.com/google/uuid"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/tetherhq/tether/bus"
)

// Redelivery pauses after a handler error, doubling up to the cap (as the
// in-process bus does).
const (
	redeliveryPause    = 50 * time.Millisecond
	maxRedeliveryPause = 5 * time.Second
)

// ConsumeInbox implements bus.Bus. Of several consumers of one inbox the
// broker keeps one active (x-single-active-consumer); the others wait and
// one takes over when it leaves. Commands are handled one at a time, in
// order. The consumer never declares the inbox (only the server does, and
// an agent has no right to): it looks for it with a passive declare, and
// while it is missing calls bus.OnInboxMissing's callback and looks again
// with back-off (ReconnectMin doubling up to ReconnectMax). An inbox
// deleted under its consumer is waited for so, and consumed again once the
// server declared it; then bus.OnInboxLost's callback runs. A consumer
// that hears nothing for SubscriptionCheck sends a probe through its
// inbox: one that does not come back means the inbox is gone or unbound,
// or the broker dropped the subscription without a cancel, and is handled
// the same way. An agent's consumer, which may not publish to the commands
// exchange, looks at its inbox instead: gone, or holding messages that do
// not come, is handled the same way.
func (b *Bus) ConsumeInbox(ctx context.Context, env, agent string, h bus.Handler, opts ...bus.InboxOption) error {
	o := bus.NewInboxOptions(opts...)
	name := b.InboxQueue(env, agent)
	return b.consume(ctx, &consumer{
		queue:     name,
		declare:   func(_ *amqp.Connection, ch *amqp.Channel) error { return findInbox(ch, name) },
		h:         h,
		conc:      1,
		probe:     bus.CommandKey(env, agent),
		inspect:   b.cfg.Agent,
		inbox:     true,
		lost:      o.Lost,
		missing:   o.Missing,
		lookAfter: o.LookAfter,
		env:       env,
		agent:     agent,
	})
}

// errNoInbox: the inbox a consumer looks for does not exist (yet).
var errNoInbox = errors.New("the inbox does not exist (yet): the server declares it when it hears the agent's hello")

// findInbox looks for an inbox with a passive declare on ch, the channel
// that is to consume it: errNoInbox when it is missing, and then the
// broker closed ch (each channel opened and closed costs the broker work
// that grows with the channels it holds: a look costs one, not two).
func findInbox(ch *amqp.Channel, name string) error {
	_, err := ch.QueueDeclarePassive(name, true, false, false, false, nil)
	switch {
	case isAMQPError(err, amqp.NotFound):
		return fmt.Errorf("%s: %w", name, errNoInbox)
	case err != nil:
		return fmt.Errorf("look for inbox %s: %w", name, err)
	}
	return nil
}

// ConsumeEvents implements bus.Bus. Up to EventConcurrency events are
// handed to h at once, each in a goroutine of its own, and acknowledged
// together as they finish: events carry no order the server relies on
// (each carries its sender's counter). A server queue deleted under its
// consumer is declared again, with its bindings, and consumed again; a
// consumer that hears nothing for SubscriptionCheck subscribes again, in
// case the broker dropped its subscription without a cancel.
func (b *Bus) ConsumeEvents(ctx context.Context, q bus.Queue, h bus.Handler) error {
	if q != bus.QueueEvents && q != bus.QueueCompliance {
		return fmt.Errorf("consume %s: no such server queue", q)
	}
	return b.consume(ctx, &consumer{
		queue:   b.ServerQueue(q),
		declare: func(_ *amqp.Connection, ch *amqp.Channel) error { return b.declareServerQueue(ch, q) },
		h:       h,
		conc:    b.cfg.EventConcurrency,
	})
}

// consumer is one Consume call.
type consumer struct {
	queue   string
	declare func(*amqp.Connection, *amqp.Channel) error
	h       bus.Handler
	conc    int
	// probe is the routing key on the commands exchange that reaches the
	// queue (an inbox); "" for a server queue, which other replicas
	// consume too, so a probe could not tell.
	probe string
	// inspect: instead of a probe (an agent has no right to publish to
	// the commands exchange), a silent consumer looks at its queue: one
	// gone, or holding messages that do not come, means the subscription
	// is lost; else it subscribes again, as a server queue's consumer
	// does.
	inspect bool
	// inbox: an agent's inbox, which the consumer never declares.
	inbox bool
	// lost runs once the queue is consumed again after it was lost;
	// missing each time the inbox is found missing, before the next look.
	lost, missing func()
	// lookAfter delays the first look for the queue (bus.LookAfter).
	lookAfter time.Duration
	// env and agent name an inbox's agent.
	env, agent string
	sub        *subscription
	// told brings what the server tells an agent that has no inbox
	// (Tell), handed to h between deliveries, or while the consumer
	// waits for the inbox; nil but for an agent's inbox consumer.
	told chan *bus.Envelope
}

// Why a subscription ended, besides a lost connection or a channel error.
var (
	// errCancelled: the broker cancelled the consumer (basic.cancel):
	// its queue was deleted, or moved to another node.
	errCancelled = errors.New("the broker cancelled the consumer (queue deleted?)")
	// errDropped: the broker dropped the subscription without a cancel.
	// RabbitMQ does so to the consumers of a deleted quorum queue whose
	// channels hear of the deletion after the queue was declared again:
	// so when one consumer of a queue is cancelled, this bus subscribes
	// its other consumers of the queue again too, and a probe through an
	// inbox that does not come back tells the same.
	errDropped = errors.New("the broker dropped the subscription (queue deleted and declared again?)")
	// errSilent: nothing came for SubscriptionCheck; subscribing again
	// costs little and heals a subscription dropped unseen.
	errSilent = errors.New("no delivery for a whole subscription check")
)

// cancelSettle is the pause after a cancel before the queue is declared
// again, so that every other consumer of it (other replicas too) hears of
// the deletion before the queue exists again: RabbitMQ drops, without a
// cancel, the quorum-queue consumers that hear of it after.
const cancelSettle = 200 * time.Millisecond

// missingInboxMin is the least pause between two looks for a missing
// inbox.
const missingInboxMin = time.Second

// resubscribeEvery: an agent's consumer that heard nothing subscribes
// again on a new channel at every resubscribeEvery-th silent check
// (inspect), not at each.
const resubscribeEvery = 10

// probeType marks the probes a consumer sends through its own inbox; they
// are acknowledged and never reach the handler.
const probeType = "tether.probe"

// consume delivers a queue's messages to c.h until ctx ends: after a lost
// connection on the next one, after a lost subscription (errCancelled,
// errDropped) once cancelSettle passed (then c.lost, if any, runs), after
// a channel error with back-off. Each subscription is on a channel of its
// own, after c.declare; unacknowledged deliveries of a lost channel come
// back marked redelivered.
func (b *Bus) consume(ctx context.Context, c *consumer) error {
	c.sub = b.subs.join(c.queue)
	defer b.subs.leave(c.sub)
	// An agent's inbox consumer also looks when the server nudges it
	// (nudge.go), at most once per nudgeLookGap.
	// What the server tells an agent without an inbox (Tell) comes
	// through the claim queue too, and is handed to c.h.
	var nudged chan struct{}
	var looked time.Time
	if c.inbox && b.cfg.Agent {
		nudged = b.nudges.signal(b.ClaimQueue(c.env, c.agent))
		c.told = b.nudges.toldTo(b.ClaimQueue(c.env, c.agent))
	}
	pauseFor := func(d time.Duration) error {
		t := time.NewTimer(d)
		defer t.Stop()
		for {
			select {
			case <-t.C:
			case e := <-c.told:
				// Not a queue's message: nothing to acknowledge,
				// nothing to dead-letter.
				_ = c.h(ctx, bus.Delivery{Envelope: e})
				continue
			case <-nudged:
				if gap := nudgeLookGap - time.Since(looked); gap > 0 {
					select {
					case <-time.After(gap):
					case <-ctx.Done():
						return ctx.Err()
					}
				}
			case <-ctx.Done():
				return ctx.Err()
			case <-b.closing:
				return bus.ErrClosed
			}
			return nil
		}
	}
	if c.lookAfter > 0 {
		if err := pauseFor(c.lookAfter); err != nil {
			return err
		}
	}
	c.conc = max(c.conc, 1)
	pause := &backoff{}
	var retry time.Duration // before subscribing again; doubles while stops repeat
	pendingLost := false
	for {
		s, err := b.session(ctx)
		if err != nil {
			return err
		}
		var subscribedAt time.Time
		looked = time.Now()
		err = b.consumeOn(ctx, s, c, pause, func() {
			subscribedAt = time.Now()
			b.subs.up(c.sub, b.log)
			if pendingLost && c.lost != nil {
				c.lost()
			}
			pendingLost = false
		})
		if ctx.Err() != nil {
			return ctx.Err()
		}
		select {
		case <-b.closing:
			return bus.ErrClosed
		default:
		}
		if s.conn.IsClosed() {
			// The supervisor logs the loss and reconnects.
			b.subs.down(c.sub, errConnectionLost, b.log)
			b.waitChange(ctx, s)
			continue
		}
		if errors.Is(err, errSilent) {
			continue // still counted as consuming: the gap is a round trip
		}
		if err == nil {
			err = amqp.ErrClosed
		}
		lostSub := errors.Is(err, errCancelled) || errors.Is(err, errDropped)
		if lostSub {
			b.lostSubs.Add(1)
			pendingLost = true
		}
		if errors.Is(err, errNoInbox) && c.missing != nil {
			c.missing()
		}
		if errors.Is(err, errCancelled) {
			b.subs.kickSiblings(c.sub)
		}
		b.subs.down(c.sub, err, b.log)
		// Stops in a row (a queue deleted again and again, a declare
		// that keeps failing) back off; the first after a steady
		// subscription waits only for the cancel to settle.
		prev := retry
		if !subscribedAt.IsZero() && time.Since(subscribedAt) >= b.cfg.ReconnectMax {
			retry = 0
		} else {
			retry = min(max(2*retry, b.cfg.ReconnectMin), b.cfg.ReconnectMax)
		}
		wait := retry
		if errors.Is(err, errNoInbox) {
			// An agent looks for an inbox the server has not declared
			// yet: each look costs the broker a channel, so looks are
			// spread (a fleet started at once does not look in step)
			// and never closer than missingInboxMin. While the agent
			// listens for the server's nudges (it holds its claim), a
			// look only makes up for a nudge lost: from nudgedInboxMin,
			// doubling up to nudgedInboxMax.
			if nudged != nil && b.nudges.listens(b.ClaimQueue(c.env, c.agent)) {
				retry = min(max(2*prev, nudgedInboxMin), nudgedInboxMax)
			} else {
				retry = max(retry, missingInboxMin)
			}
			wait = retry/2 + rand.N(retry/2+1)
			if err := pauseFor(wait); err != nil {
				return err
			}
			continue
		}
		if lostSub {
			wait = max(wait, cancelSettle)
		}
		select {
		case <-time.After(wait):
		case <-ctx.Done():
			return ctx.Err()
		case <-b.closing:
			return bus.ErrClosed
		}
	}
}

// consumeOn subscribes to c's queue on a new channel of s, calls
// subscribed, and handles deliveries until ctx ends or the subscription
// ends: errCancelled when the broker cancelled it, errDropped when a
// sibling was cancelled or a probe did not come back, errSilent after a
// silent SubscriptionCheck of a queue without probes.
func (b *Bus) consumeOn(ctx context.Context, s *session, c *consumer, pause *backoff, subscribed func()) error {
	ch, err := openChannel(s.conn)
	if errors.Is(err, amqp.ErrChannelMax) {
		return fmt.Errorf("%w: the broker lets one connection open %d channels (channel_max): a server needs its ingest consumers + 42, "+
			"an agent process 2 per agent it hosts + 41: raise channel_max or run fewer consumers (see operations.md)", err, s.conn.Config.ChannelMax)
	}
	if err != nil {
		return err
	}
	// Closing the channel returns every unacknowledged delivery to the
	// queue, marked redelivered.
	defer ch.Close()
	closed := ch.NotifyClose(make(chan *amqp.Error, 1))
	cancelled := ch.NotifyCancel(make(chan string, 1))
	if err := c.declare(s.conn, ch); err != nil {
		return err
	}
	if err := ch.Qos(max(b.cfg.Prefetch, c.conc), 0, false); err != nil {
		return err
	}
	c.sub.unkick()
	deliveries, err := ch.Consume(c.queue, "", false, false, false, false, nil)
	if c.inbox && isAMQPError(err, amqp.NotFound) {
		// Deleted since it was found.
		return fmt.Errorf("%s: %w", c.queue, errNoInbox)
	}
	if err != nil {
		return fmt.Errorf("consume %s: %w", c.queue, err)
	}
	subscribed()
	// Deliveries in flight: handled in goroutines, settled through acks.
	acks := &acker{ch: ch, settled: map[uint64]bool{}}
	slots := make(chan struct{}, c.conc)
	var wg sync.WaitGroup
	defer wg.Wait()
	failed := make(chan error, 1)
	check := time.NewTicker(b.cfg.SubscriptionCheck)
	defer check.Stop()
	heard, silent := false, 0
	waiting := false                    // messages seen waiting at the last silent look
	probe := ""                         // the probe out, "" for none
	probed := make(chan probeResult, 1) // the probe publisher's answer
	// Stopped before wg is waited for: a probe waiting for a connection
	// must not hold up the next subscription.
	probeCtx, stopProbes := context.WithCancel(ctx)
	defer stopProbes()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-b.closing:
			return bus.ErrClosed
		case err := <-closed:
			if err == nil {
				return amqp.ErrClosed
			}
			return err
		case <-cancelled:
			// What was prefetched and not handled yet returns to the
			// queue with the channel, if the queue still exists.
			return errCancelled
		case <-c.sub.kicked:
			return fmt.Errorf("%w: another consumer of the queue was cancelled", errDropped)
		case err := <-failed:
			return err
		case <-check.C:
			switch {
			case heard:
				heard, probe, waiting = false, "", false
			case c.inspect:
				// On the consuming channel, not a new one: with
				// thousands of agents per broker, a channel opened
				// and closed per agent per check is churn the
				// broker's channel registry pays for. A queue gone
				// closes this channel, which is then done anyway.
				q, err := ch.QueueDeclarePassive(c.queue, true, false, false, false, nil)
				silent++
				if err := inspected(q, err, &waiting, silent); err != nil {
					return err
				}
			case c.probe == "":
				return errSilent
			case probe != "":
				return fmt.Errorf("%w: a probe sent through the queue did not come back", errDropped)
			default:
				probe = b.sendProbe(probeCtx, c.probe, &wg, probed)
			}
		case e := <-c.told:
			// An inbox an older server declared for a pending agent:
			// what the server tells it comes through its claim queue
			// (not the inbox's: the subscription's checks ignore it).
			_ = c.h(ctx, bus.Delivery{Envelope: e})
		case r := <-probed:
			switch {
			case r.id != probe:
			case errors.Is(r.err, errReturned), errors.Is(r.err, errRefused):
				return fmt.Errorf("%w: a probe found no queue bound: %v", errDropped, r.err)
			case r.err != nil:
				probe = "" // not sent: no conclusion, try on the next check
			}
		case d, ok := <-deliveries:
			if !ok {
				// The library signals a cancel before it closes the
				// deliveries.
				select {
				case <-cancelled:
					return errCancelled
				default:
					return amqp.ErrClosed
				}
			}
			heard = true
			if c.probe != "" && d.Type == probeType {
				if d.MessageId == probe {
					probe = ""
				}
				if err := acks.ack(d.DeliveryTag); err != nil {
					return err
				}
				continue
			}
			if c.conc == 1 {
				if err := b.handle(ctx, c.queue, d, c.h, pause, acks); err != nil {
					return err
				}
				continue
			}
			select {
			case slots <- struct{}{}:
			case <-ctx.Done():
				return ctx.Err()
			}
			acks.add(d.DeliveryTag)
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer func() { <-slots }()
				if err := b.handle(ctx, c.queue, d, c.h, pause, acks); err != nil {
					select {
					case failed <- err:
					default:
					}
				}
			}()
		}
	}
}

// inspected judges what a silent consumer's look at its queue found (q,
// err: a passive declare), at its silent-th silent check in a row: nil to
// go on consuming, else why the subscription ends. Messages waiting while
// none came mean a subscription lost only when the look before found them
// too (waiting, kept across looks): a broker busy with thousands of agents
// may take seconds to deliver what was just put in the queue, and an
// agent taking that for a lost subscription subscribes again and says
// hello, which has the server send it everything again: more work for the
// busy broker.
func inspected(q amqp.Queue, err error, waiting *bool, silent int) error {
	switch {
	case isAMQPError(err, amqp.NotFound):
		return fmt.Errorf("%w: the queue is gone", errDropped)
	case err != nil:
		return err
	case q.Messages > 0 && *waiting:
		return fmt.Errorf("%w: %d messages wait in the queue and none came since the last look", errDropped, q.Messages)
	case q.Consumers == 0:
		return fmt.Errorf("%w: the queue has no consumer", errDropped)
	}
	*waiting = q.Messages > 0
	if !*waiting && silent%resubscribeEvery == 0 {
		// A subscription the broker dropped unseen, while another
		// process stands by on the queue, may hold what was sent as
		// unacknowledged: now and then a new channel gets it back.
		return errSilent
	}
	return nil
}

// probeResult is how publishing a probe went.
type probeResult struct {
	id  string
	err error
}

// sendProbe publishes a probe to the commands exchange with key, in a
// goroutine wg tracks, and answers on out; it returns the probe's id. The
// probe expires after two checks, so one no consumer takes does not pile
// up.
func (b *Bus) sendProbe(ctx context.Context, key string, wg *sync.WaitGroup, out chan<- probeResult) string {
	id := uuid.NewString()
	msg := amqp.Publishing{
		Type:       probeType,
		MessageId:  id,
		Expiration: strconv.FormatInt((2 * b.cfg.SubscriptionCheck).Milliseconds(), 10),
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		pctx, cancel := context.WithTimeout(ctx, b.cfg.SubscriptionCheck)
		defer cancel()
		r := probeResult{id: id, err: b.publishConfirmed(pctx, b.cmdExchange(), key, msg)}
		select {
		case out <- r:
		default: // consumeOn returned: nobody reads
		}
	}()
	return id
}

// handle decodes one delivery and hands it to h: acknowledged when h
// returns nil, dead-lettered when it cannot be decoded or h rejects it,
// returned to the queue after a pause on any other error. A delivery whose
// handler was interrupted by ctx is left unacknowledged: it comes back.
func (b *Bus) handle(ctx context.Context, queue string, d amqp.Delivery, h bus.Handler, pause *backoff, acks *acker) error {
	messagesDelivered.Add(1)
	e, err := bus.Decode(d.Body)
	if err != nil {
		return b.reject(ctx, queue, d, err, acks)
	}
	herr := h(ctx, bus.Delivery{Envelope: e, Redelivered: d.Redelivered, Login: d.UserId, RoutingKey: d.RoutingKey})
	switch {
	case herr == nil:
		if pause.ok() {
			b.log.Info().Str("queue", queue).Msg("handler succeeds again; redeliveries resume at full speed")
		}
		return acks.ack(d.DeliveryTag)
	case ctx.Err() != nil:
		return ctx.Err()
	case errors.Is(herr, bus.ErrReject):
		return b.reject(ctx, queue, d, herr, acks)
	}
	// A failing handler (its database away) is logged once per streak,
	// then at debug level, while redeliveries slow down.
	wait, first := pause.fail()
	ev := b.log.Debug()
	if first {
		ev = b.log.Warn()
	}
	ev.Err(herr).Str("queue", queue).Str("envelope", e.String()).Dur("pause", wait).Msg("handler failed; the message goes back to the queue and is retried")
	select {
	case <-time.After(wait):
	case <-ctx.Done():
		return ctx.Err()
	}
	return acks.nack(d.DeliveryTag)
}

// backoff is the pause before returning a failed delivery: it doubles
// while handlers fail and resets when one succeeds.
type backoff struct {
	mu    sync.Mutex
	pause time.Duration
}

// fail returns the pause to take, and whether it starts a streak.
func (p *backoff) fail() (time.Duration, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	first := p.pause == 0
	p.pause = min(max(2*p.pause, redeliveryPause), maxRedeliveryPause)
	return p.pause, first
}

// ok resets the pause and reports whether a streak of failures ended.
func (p *backoff) ok() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	was := p.pause != 0
	p.pause = 0
	return was
}

// acker settles the deliveries of one channel. Deliveries handled at once
// finish in any order; acknowledgements go out as one multiple-ack up to
// the highest delivery before which every one is settled, so a group of
// events written together costs the broker one ack.
type acker struct {
	ch *amqp.Channel
	mu sync.Mutex
	// pending are delivery tags in flight, in delivery order (added
	// only in concurrent mode); settled marks those done: true for an
	// ack still to send, false for one nacked or dead-lettered alone.
	pending []uint64
	settled map[uint64]bool
}

func (a *acker) add(tag uint64) {
	a.mu.Lock()
	a.pending = append(a.pending, tag)
	a.mu.Unlock()
}

// ack acknowledges tag, with the others settled before it.
func (a *acker) ack(tag uint64) error { return a.settle(tag, true) }

// nack returns tag to its queue at once.
func (a *acker) nack(tag uint64) error {
	if err := a.ch.Nack(tag, false, true); err != nil {
		return err
	}
	return a.settle(tag, false)
}

// done records a delivery acknowledged on its own (dead-lettered).
func (a *acker) done(tag uint64) error { return a.settle(tag, false) }

func (a *acker) settle(tag uint64, ack bool) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if len(a.pending) == 0 { // one at a time
		if ack {
			return a.ch.Ack(tag, false)
		}
		return nil
	}
	a.settled[tag] = ack
	var last uint64
	n := 0
	for n < len(a.pending) {
		ackIt, ok := a.settled[a.pending[n]]
		if !ok {
			break
		}
		if ackIt {
			last = a.pending[n]
		}
		delete(a.settled, a.pending[n])
		n++
	}
	a.pending = a.pending[n:]
	if last == 0 {
		return nil
	}
	// Every delivery up to last is settled: those not nacked or
	// dead-lettered on their own are acknowledged here, at once.
	return a.ch.Ack(last, true)
}

// reject moves a delivery to the dead-letter queue (a confirmed publish),
// then acknowledges it; if the dead-letter publish fails the delivery goes
// back to its queue, so nothing is lost.
func (b *Bus) reject(ctx context.Context, queue string, d amqp.Delivery, why error, acks *acker) error {
	if b.cfg.Agent {
		// An agent has no right to publish to the dead-letter exchange:
		// what it cannot read (only the server writes to its inbox) is
		// dropped, and said.
		b.log.Warn().Str("queue", queue).Str("message_id", d.MessageId).Str("reason", truncate(why.Error(), 200)).Msg("message dropped")
		if err := d.Nack(false, false); err != nil {
			return err
		}
		b.deadLettered.Add(1)
		return acks.done(d.DeliveryTag)
	}
	msg := amqp.Publishing{
		ContentType:  d.ContentType,
		DeliveryMode: amqp.Persistent,
		MessageId:    d.MessageId,
		Type:         d.Type,
		Body:         d.Body,
		Headers:      amqp.Table{"x-tether-queue": queue, "x-tether-reason": truncate(why.Error(), 512)},
	}
	if err := b.publishConfirmed(ctx, b.deadExchange(), "", msg); err != nil {
		_ = acks.nack(d.DeliveryTag)
		return fmt.Errorf("dead-letter a message of %s: %w", queue, err)
	}
	b.deadLettered.Add(1)
	b.log.Warn().Str("queue", queue).Str("message_id", d.MessageId).Str("reason", truncate(why.Error(), 200)).Msg("message dead-lettered")
	if err := d.Ack(false); err != nil {
		return err
	}
	return acks.done(d.DeliveryTag)
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
