package amqp

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

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
// order.
func (b *Bus) ConsumeInbox(ctx context.Context, env, agent string, h bus.Handler) error {
	name := b.InboxQueue(env, agent)
	return b.consume(ctx, name, func(ch *amqp.Channel) error { return b.declareInbox(ch, env, agent) }, h, 1)
}

// ConsumeEvents implements bus.Bus. Up to EventConcurrency events are
// handed to h at once, each in a goroutine of its own, and acknowledged
// together as they finish: events carry no order the server relies on
// (each carries its sender's counter).
func (b *Bus) ConsumeEvents(ctx context.Context, q bus.Queue, h bus.Handler) error {
	if q != bus.QueueEvents && q != bus.QueueCompliance {
		return fmt.Errorf("consume %s: no such server queue", q)
	}
	return b.consume(ctx, b.ServerQueue(q), func(*amqp.Channel) error { return nil }, h, b.cfg.EventConcurrency)
}

// consume delivers a queue's messages to h until ctx ends, across
// reconnects: each connection gets a channel of its own, the queue is
// declared again, and unacknowledged deliveries of a lost channel come back
// marked redelivered. conc deliveries are handled at once.
func (b *Bus) consume(ctx context.Context, queue string, declare func(*amqp.Channel) error, h bus.Handler, conc int) error {
	log := b.log.With().Str("queue", queue).Logger()
	pause := &backoff{}
	for {
		s, err := b.session(ctx)
		if err != nil {
			return err
		}
		err = b.consumeOn(ctx, s, queue, declare, h, pause, max(conc, 1))
		if ctx.Err() != nil {
			return ctx.Err()
		}
		select {
		case <-b.closing:
			return bus.ErrClosed
		default:
		}
		if err != nil && !isConnectionError(err) {
			log.Warn().Err(err).Msg("consumer stopped; starting again")
			// Not a lost connection: do not spin on a persistent error.
			select {
			case <-time.After(b.cfg.ReconnectMin):
			case <-ctx.Done():
				return ctx.Err()
			}
			continue
		}
		b.waitChange(ctx, s)
	}
}

func (b *Bus) consumeOn(ctx context.Context, s *session, queue string, declare func(*amqp.Channel) error, h bus.Handler, pause *backoff, conc int) error {
	ch, err := s.conn.Channel()
	if err != nil {
		return err
	}
	// Closing the channel returns every unacknowledged delivery to the
	// queue, marked redelivered.
	defer ch.Close()
	closed := ch.NotifyClose(make(chan *amqp.Error, 1))
	if err := declare(ch); err != nil {
		return err
	}
	if err := ch.Qos(max(b.cfg.Prefetch, conc), 0, false); err != nil {
		return err
	}
	deliveries, err := ch.Consume(queue, "", false, false, false, false, nil)
	if err != nil {
		return fmt.Errorf("consume %s: %w", queue, err)
	}
	// Deliveries in flight: handled in goroutines, settled through acks.
	acks := &acker{ch: ch, settled: map[uint64]bool{}}
	slots := make(chan struct{}, conc)
	var wg sync.WaitGroup
	defer wg.Wait()
	failed := make(chan error, 1)
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
		case err := <-failed:
			return err
		case d, ok := <-deliveries:
			if !ok {
				return amqp.ErrClosed
			}
			if conc == 1 {
				if err := b.handle(ctx, queue, d, h, pause, acks); err != nil {
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
				if err := b.handle(ctx, queue, d, h, pause, acks); err != nil {
					select {
					case failed <- err:
					default:
					}
				}
			}()
		}
	}
}

// handle decodes one delivery and hands it to h: acknowledged when h
// returns nil, dead-lettered when it cannot be decoded or h rejects it,
// returned to the queue after a pause on any other error. A delivery whose
// handler was interrupted by ctx is left unacknowledged: it comes back.
func (b *Bus) handle(ctx context.Context, queue string, d amqp.Delivery, h bus.Handler, pause *backoff, acks *acker) error {
	e, err := bus.Decode(d.Body)
	if err != nil {
		return b.reject(ctx, queue, d, err, acks)
	}
	herr := h(ctx, bus.Delivery{Envelope: e, Redelivered: d.Redelivered})
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
