package amqp

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/tetherhq/tether/bus"
)

// maxInFlight bounds the messages one SendBatch has published and not yet
// seen confirmed: a larger batch goes in chunks of this many. It is a
// little below the broker's default credit for one channel's publishes.
const maxInFlight = 512

// outcome is what became of one message of a pipelined publish.
type outcome int

const (
	// unsent: not published (the channel broke first), or its confirm
	// was lost with the connection: it is sent again.
	unsent outcome = iota
	acked
	returned
	nacked
)

// SendBatch implements bus.Bus: the commands are published, mandatory,
// on one confirm-mode channel without waiting between them, and their
// confirms awaited together. The rare command the broker did not simply
// take (returned for want of a bound inbox, nacked, its confirm lost with
// the connection) is sent again alone by Send, which binds, retries and
// classifies as it does for any command.
func (b *Bus) SendBatch(ctx context.Context, msgs []bus.Outgoing) []error {
	errs := make([]error, len(msgs))
	if err := ctx.Err(); err != nil {
		for i := range errs {
			errs[i] = err
		}
		return errs
	}
	pubs := make([]amqp.Publishing, len(msgs))
	todo := make([]int, 0, len(msgs))
	for i, m := range msgs {
		e := m.Envelope
		if !e.Kind.Command() {
			errs[i] = fmt.Errorf("send %s: not a command kind", e.Kind)
			continue
		}
		msg, err := b.message(e)
		if err != nil {
			errs[i] = err
			continue
		}
		if m.Options.Expiration > 0 {
			msg.Expiration = strconv.FormatInt(max(m.Options.Expiration.Milliseconds(), 1), 10)
		}
		pubs[i] = msg
		todo = append(todo, i)
	}
	for len(todo) > 0 {
		chunk := todo[:min(len(todo), maxInFlight)]
		todo = todo[len(chunk):]
		if err := b.sendChunk(ctx, msgs, pubs, chunk, errs); err != nil {
			for _, i := range todo {
				errs[i] = err
			}
			return errs
		}
	}
	return errs
}

// sendChunk sends the commands which names (at most maxInFlight), as
// SendBatch does, setting errs. Commands the broker nacked (a full inbox,
// or a queue just declared electing its leader) are published again
// together, maxNacks times in all, pausing as publishConfirmed does. err
// is set when ctx ended or the bus closed: the rest of the batch is not
// sent.
func (b *Bus) sendChunk(ctx context.Context, msgs []bus.Outgoing, pubs []amqp.Publishing, which []int, errs []error) error {
	for nacks := 0; len(which) > 0; nacks++ {
		outcomes, err := b.publishPipelined(ctx, msgs, pubs, which)
		if err != nil && (ctx.Err() != nil || errors.Is(err, bus.ErrClosed)) {
			for _, i := range which {
				if outcomeOf(outcomes, i) != acked {
					errs[i] = err
				}
			}
			return err
		}
		var again []int
		for _, i := range which {
			e := msgs[i].Envelope
			switch o := outcomeOf(outcomes, i); {
			case o == acked:
			case o == returned && (b.cfg.Agent || !b.inboxExists(ctx, e.Env, e.Agent)):
				errs[i] = fmt.Errorf("send %s to %s/%s: %w", e.Kind, e.Env, e.Agent, bus.ErrNoInbox)
			case o == nacked && nacks+1 < maxNacks:
				again = append(again, i)
			case o == nacked:
				errs[i] = fmt.Errorf("send %s to %s/%s: %w (%d messages)", e.Kind, e.Env, e.Agent, bus.ErrInboxFull, b.cfg.InboxMaxLength)
			default:
				// Returned from an inbox that exists (not bound
				// yet), or its confirm lost with the connection:
				// Send binds, waits for the connection, classifies.
				errs[i] = b.Send(ctx, e, msgs[i].Options)
			}
		}
		which = again
		if len(which) > 0 {
			select {
			case <-time.After(nackPause << (nacks + 1)):
			case <-ctx.Done():
				for _, i := range which {
					errs[i] = ctx.Err()
				}
				return ctx.Err()
			}
		}
	}
	return nil
}

func outcomeOf(outcomes map[int]outcome, i int) outcome {
	if outcomes == nil {
		return unsent
	}
	return outcomes[i]
}

// publishPipelined publishes pubs[i] for each i of which on one publisher,
// mandatory, then waits for all their confirms, and says what became of
// each. err is set when no publisher could be had, or ctx ended (then
// the outcomes known so far come with it).
func (b *Bus) publishPipelined(ctx context.Context, msgs []bus.Outgoing, pubs []amqp.Publishing, which []int) (map[int]outcome, error) {
	s, p, err := b.takePublisher(ctx)
	if err != nil {
		return nil, err
	}
	out := make(map[int]outcome, len(which))
	byID := make(map[string]int, len(which))
	wasReturned := map[int]bool{}
	drain := func() {
		for {
			select {
			case r, ok := <-p.returns:
				if !ok {
					return
				}
				if i, found := byID[r.MessageId]; found {
					wasReturned[i] = true
				}
			default:
				return
			}
		}
	}
	confirms := make([]*amqp.DeferredConfirmation, 0, len(which))
	now := time.Now()
	for _, i := range which {
		e := msgs[i].Envelope
		msg := pubs[i]
		msg.Timestamp = now
		byID[msg.MessageId] = i
		messagesPublished.Add(1)
		dc, err := p.ch.PublishWithDeferredConfirmWithContext(ctx, b.cmdExchange(), bus.CommandKey(e.Env, e.Agent), true, false, msg)
		if err != nil {
			break // the rest stay unsent
		}
		confirms = append(confirms, dc)
		drain() // never let the returns fill and block the connection's reader
	}
	for k, dc := range confirms {
		i := which[k]
	wait:
		for {
			select {
			case <-dc.Done():
				break wait
			case r, ok := <-p.returns:
				if !ok {
					<-dc.Done() // the channel closed: its confirms fail
					break wait
				}
				if j, found := byID[r.MessageId]; found {
					wasReturned[j] = true
				}
			case <-ctx.Done():
				b.givePublisher(s, p, false)
				return out, ctx.Err()
			}
		}
		if dc.Acked() {
			out[i] = acked
		} else {
			out[i] = nacked
		}
	}
	// The broker sends a return before the confirm of its message: every
	// return of the batch is in by now.
	drain()
	closed := p.ch.IsClosed()
	b.givePublisher(s, p, !closed && len(confirms) == len(which))
	for i := range wasReturned {
		out[i] = returned
	}
	if closed {
		// Confirms failed with the channel: unknown, so sent again (at
		// least once; agents deduplicate by envelope id).
		for i, o := range out {
			if o == nacked {
				out[i] = unsent
			}
		}
	}
	return out, nil
}
