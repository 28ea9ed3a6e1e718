package amqp

import (
	"context"
	"errors"
	"fmt"
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
// one takes over when it leaves.
func (b *Bus) ConsumeInbox(ctx context.Context, env, agent string, h bus.Handler) error {
	name := b.InboxQueue(env, agent)
	return b.consume(ctx, name, func(ch *amqp.Channel) error { return b.declareInbox(ch, env, agent) }, h)
}

// ConsumeEvents implements bus.Bus.
func (b *Bus) ConsumeEvents(ctx context.Context, q bus.Queue, h bus.Handler) error {
	if q != bus.QueueEvents && q != bus.QueueCompliance {
		return fmt.Errorf("consume %s: no such server queue", q)
	}
	return b.consume(ctx, b.ServerQueue(q), func(*amqp.Channel) error { return nil }, h)
}

// consume delivers a queue's messages to h until ctx ends, across
// reconnects: each connection gets a channel of its own, the queue is
// declared again, and unacknowledged deliveries of a lost channel come back
// marked redelivered.
func (b *Bus) consume(ctx context.Context, queue string, declare func(*amqp.Channel) error, h bus.Handler) error {
	log := b.log.With().Str("queue", queue).Logger()
	pause := time.Duration(0)
	for {
		s, err := b.session(ctx)
		if err != nil {
			return err
		}
		err = b.consumeOn(ctx, s, queue, declare, h, &pause)
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

func (b *Bus) consumeOn(ctx context.Context, s *session, queue string, declare func(*amqp.Channel) error, h bus.Handler, pause *time.Duration) error {
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
	if err := ch.Qos(b.cfg.Prefetch, 0, false); err != nil {
		return err
	}
	deliveries, err := ch.Consume(queue, "", false, false, false, false, nil)
	if err != nil {
		return fmt.Errorf("consume %s: %w", queue, err)
	}
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
		case d, ok := <-deliveries:
			if !ok {
				return amqp.ErrClosed
			}
			if err := b.handle(ctx, queue, d, h, pause); err != nil {
				return err
			}
		}
	}
}

// handle decodes one delivery and hands it to h: acknowledged when h
// returns nil, dead-lettered when it cannot be decoded or h rejects it,
// returned to the queue after a pause on any other error. A delivery whose
// handler was interrupted by ctx is left unacknowledged: it comes back.
func (b *Bus) handle(ctx context.Context, queue string, d amqp.Delivery, h bus.Handler, pause *time.Duration) error {
	e, err := bus.Decode(d.Body)
	if err != nil {
		return b.reject(ctx, queue, d, err)
	}
	herr := h(ctx, bus.Delivery{Envelope: e, Redelivered: d.Redelivered})
	switch {
	case herr == nil:
		if *pause != 0 {
			b.log.Info().Str("queue", queue).Msg("handler succeeds again; redeliveries resume at full speed")
		}
		*pause = 0
		return d.Ack(false)
	case ctx.Err() != nil:
		return ctx.Err()
	case errors.Is(herr, bus.ErrReject):
		return b.reject(ctx, queue, d, herr)
	}
	// A failing handler (its database away) is logged once per streak,
	// then at debug level, while redeliveries slow down.
	ev := b.log.Debug()
	if *pause == 0 {
		ev = b.log.Warn()
	}
	*pause = min(max(2**pause, redeliveryPause), maxRedeliveryPause)
	ev.Err(herr).Str("queue", queue).Str("envelope", e.String()).Dur("pause", *pause).Msg("handler failed; the message goes back to the queue and is retried")
	select {
	case <-time.After(*pause):
	case <-ctx.Done():
		return ctx.Err()
	}
	return d.Nack(false, true)
}

// reject moves a delivery to the dead-letter queue (a confirmed publish),
// then acknowledges it; if the dead-letter publish fails the delivery goes
// back to its queue, so nothing is lost.
func (b *Bus) reject(ctx context.Context, queue string, d amqp.Delivery, why error) error {
	msg := amqp.Publishing{
		ContentType:  d.ContentType,
		DeliveryMode: amqp.Persistent,
		MessageId:    d.MessageId,
		Type:         d.Type,
		Body:         d.Body,
		Headers:      amqp.Table{"x-tether-queue": queue, "x-tether-reason": truncate(why.Error(), 512)},
	}
	if err := b.publishConfirmed(ctx, b.deadExchange(), "", msg); err != nil {
		_ = d.Nack(false, true)
		return fmt.Errorf("dead-letter a message of %s: %w", queue, err)
	}
	b.deadLettered.Add(1)
	b.log.Warn().Str("queue", queue).Str("message_id", d.MessageId).Str("reason", truncate(why.Error(), 200)).Msg("message dead-lettered")
	return d.Ack(false)
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
