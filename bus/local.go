package bus

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/rs/zerolog"
)

// Local is the in-process bus of the embedded mode. It keeps the semantics of
// the RabbitMQ transport: messages travel encoded (every delivery goes
// through the codec), inboxes exist once the server declared them (their
// consumers wait for them, calling OnInboxMissing), are bounded and have one
// active consumer, unacknowledged messages return to the head of their
// queue, expired commands are dropped, undecodable or rejected messages are
// dead-lettered and counted, and a server queue deleted under its consumers
// (DeleteQueue, as a client with rights on the broker could) is declared
// again by them, an inbox waited for again.
//
// Nothing survives the process: it is for one embedded run.
type Local struct {
	log    zerolog.Logger
	maxLen int

	mu     sync.Mutex
	queues map[string]*queue
	// declared is closed and replaced whenever a queue is created (and on
	// Close), waking the consumers waiting for an inbox.
	declared chan struct{}
	dead     []DeadLetter
	claims   map[string]*localClaim
	// told holds, by inbox name, the last message told to an agent
	// without an inbox (Tell), for its consumer while it waits.
	told   map[string]message
	closed bool
}

// DeadLetter is a message the bus gave up on.
type DeadLetter struct {
	Queue  string
	Data   []byte
	Reason string
}

type queue struct {
	name      string
	msgs      []message
	consumers []*consumer // consumers[0] is the active one
	// changed is closed and replaced whenever the queue changes, waking
	// its consumers.
	changed chan struct{}
	// deleted is set when DeleteQueue removed the queue: its consumers
	// declare it again (a server queue) or wait for it (an inbox).
	deleted bool
}

// consumer identifies one Consume call. It must not be zero-sized: pointers
// to zero-sized values may all be equal.
type consumer struct{ queue string }

type message struct {
	data        []byte
	redelivered bool
	expires     time.Time
}

// DefaultInboxLength bounds an agent's inbox (commands, not resources: a
// desired state is one message).
const DefaultInboxLength = 10000

// Redelivery pauses after a handler error, doubling up to the cap.
const (
	redeliveryPause    = 50 * time.Millisecond
	maxRedeliveryPause = 5 * time.Second
)

// An inbox's consumer that finds it missing calls OnInboxMissing again
// after missingPause, doubling up to the cap, until it is declared.
const (
	missingPause    = 100 * time.Millisecond
	maxMissingPause = 30 * time.Second
)

var _ Bus = (*Local)(nil)

// NewLocal returns an in-process bus with the server queues declared.
func NewLocal(log zerolog.Logger) *Local {
	b := &Local{
		log:      log.With().Str("component", "bus").Logger(),
		maxLen:   DefaultInboxLength,
		queues:   map[string]*queue{},
		declared: make(chan struct{}),
		claims:   map[string]*localClaim{},
		told:     map[string]message{},
	}
	for _, q := range []Queue{QueueEvents, QueueCompliance} {
		b.queues[string(q)] = newQueue(string(q))
	}
	return b
}

func newQueue(name string) *queue {
	return &queue{name: name, changed: make(chan struct{})}
}

func (q *queue) notify() {
	close(q.changed)
	q.changed = make(chan struct{})
}

// Close stops the bus: consumers return and sends fail with ErrClosed.
func (b *Local) Close() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.closed = true
	for _, q := range b.queues {
		q.notify()
	}
	b.notifyDeclared()
	for name, c := range b.claims {
		close(c.lost)
		delete(b.claims, name)
	}
}

// localClaim is a claim on the in-process bus.
type localClaim struct {
	b    *Local
	name string
	lost chan struct{}
}

// Claim implements Bus.
func (b *Local) Claim(ctx context.Context, env, agent string) (Claim, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return nil, ErrClosed
	}
	name := InboxName(env, agent)
	if _, held := b.claims[name]; held {
		return nil, fmt.Errorf("claim %s: %w", name, ErrClaimed)
	}
	c := &localClaim{b: b, name: name, lost: make(chan struct{})}
	b.claims[name] = c
	return c, nil
}

func (c *localClaim) Lost() <-chan struct{} { return c.lost }

func (c *localClaim) Release() {
	c.b.mu.Lock()
	defer c.b.mu.Unlock()
	if c.b.claims[c.name] == c {
		delete(c.b.claims, c.name)
		delete(c.b.told, c.name) // told to this claim's holder only
		close(c.lost)
	}
}

// Send implements Bus.
func (b *Local) Send(ctx context.Context, e *Envelope, opts SendOptions) error {
	if !e.Kind.Command() {
		return fmt.Errorf("send %s: not a command kind", e.Kind)
	}
	m := message{}
	if opts.Expiration > 0 {
		m.expires = time.Now().Add(opts.Expiration)
	}
	return b.enqueue(ctx, InboxName(e.Env, e.Agent), e, m, true)
}

// SendBatch implements Bus: each command is enqueued (or refused) at
// once, in order.
func (b *Local) SendBatch(ctx context.Context, msgs []Outgoing) []error {
	errs := make([]error, len(msgs))
	for i, m := range msgs {
		errs[i] = b.Send(ctx, m.Envelope, m.Options)
	}
	return errs
}

// Publish implements Bus.
func (b *Local) Publish(ctx context.Context, e *Envelope) error {
	if !e.Kind.Event() {
		return fmt.Errorf("publish %s: not an event kind", e.Kind)
	}
	return b.enqueue(ctx, string(QueueFor(e.Kind)), e, message{}, false)
}

func (b *Local) enqueue(ctx context.Context, name string, e *Envelope, m message, bounded bool) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	data, err := Encode(e)
	if err != nil {
		return err
	}
	m.data = data
	return b.push(name, m, bounded, e)
}

func (b *Local) push(name string, m message, bounded bool, e *Envelope) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return ErrClosed
	}
	q, ok := b.queues[name]
	switch {
	case !ok && e.Kind.Event():
		return fmt.Errorf("publish %s: %w", e, ErrUnroutable)
	case !ok:
		return fmt.Errorf("send %s to %s/%s: %w", e.Kind, e.Env, e.Agent, ErrNoInbox)
	}
	if bounded && len(q.msgs) >= b.maxLen {
		return fmt.Errorf("send %s to %s/%s: %w (%d messages)", e.Kind, e.Env, e.Agent, ErrInboxFull, len(q.msgs))
	}
	q.msgs = append(q.msgs, m)
	q.notify()
	return nil
}

// DeclareInbox implements Bus.
func (b *Local) DeclareInbox(ctx context.Context, env, agent string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	name := InboxName(env, agent)
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return ErrClosed
	}
	if _, ok := b.queues[name]; !ok {
		b.queues[name] = newQueue(name)
		b.notifyDeclared()
	}
	return nil
}

// AnswerWaiting reports whether env/agent's inbox exists and holds
// messages no consumer has taken yet, as the RabbitMQ transport does. Its
// consumers need no nudge: a look costs nothing here.
func (b *Local) AnswerWaiting(ctx context.Context, env, agent string) (bool, error) {
	if err := ctx.Err(); err != nil {
		return false, err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return false, ErrClosed
	}
	q, ok := b.queues[InboxName(env, agent)]
	return ok && len(q.msgs) > 0, nil
}

// Tell has an agent that has no inbox (a pending one) hear e, as the
// RabbitMQ transport does: the consumer of its inbox, waiting for the
// inbox or for its messages, is handed the latest message told while the
// process holding the agent's claim holds it, within ttl. Nothing is
// queued: an agent without its claim hears nothing. Only a refusal
// (KindRejected) may be told.
func (b *Local) Tell(ctx context.Context, e *Envelope, ttl time.Duration) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if e.Kind != KindRejected {
		return fmt.Errorf("tell %s: only %s is told to an agent without an inbox", e, KindRejected)
	}
	data, err := Encode(e)
	if err != nil {
		return err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return ErrClosed
	}
	name := InboxName(e.Env, e.Agent)
	if _, held := b.claims[name]; !held {
		// As on RabbitMQ, where it goes to the claim queue of the
		// connection holding the name: none, nobody hears it.
		return nil
	}
	now := time.Now()
	if len(b.told) >= DefaultInboxLength { // bounded: what nobody took is forgotten
		for n, m := range b.told {
			if !now.Before(m.expires) {
				delete(b.told, n)
			}
		}
	}
	b.told[name] = message{data: data, expires: now.Add(ttl)}
	b.notifyDeclared()
	if q, ok := b.queues[name]; ok {
		q.notify() // an inbox an older server left: its consumer hears it too
	}
	return nil
}

// takeTold takes what was told to the agent of inbox name, if anything
// within its time.
func (b *Local) takeTold(name string) (message, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	m, ok := b.told[name]
	delete(b.told, name)
	return m, ok && time.Now().Before(m.expires)
}

// notifyDeclared wakes the consumers waiting for an inbox; b.mu is held.
func (b *Local) notifyDeclared() {
	close(b.declared)
	b.declared = make(chan struct{})
}

// ConsumeInbox implements Bus.
func (b *Local) ConsumeInbox(ctx context.Context, env, agent string, h Handler, opts ...InboxOption) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	return b.consume(ctx, InboxName(env, agent), h, false, NewInboxOptions(opts...))
}

// ConsumeEvents implements Bus.
func (b *Local) ConsumeEvents(ctx context.Context, q Queue, h Handler) error {
	if q != QueueEvents && q != QueueCompliance {
		return fmt.Errorf("consume %s: no such server queue", q)
	}
	return b.consume(ctx, string(q), h, true, InboxOptions{})
}

// DeleteQueue deletes a queue (an inbox by InboxName, or a server queue)
// with its messages, as a client with rights on a broker could; for tests
// of the consumers' recovery.
func (b *Local) DeleteQueue(name string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if q, ok := b.queues[name]; ok {
		delete(b.queues, name)
		q.msgs, q.deleted = nil, true
		q.notify()
	}
}

// DeleteInbox deletes the inbox of env/agent with the commands it holds,
// as the RabbitMQ transport does (an agent revoked, or its pending name
// given another key). A missing inbox is no error.
func (b *Local) DeleteInbox(ctx context.Context, env, agent string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	b.DeleteQueue(InboxName(env, agent))
	return nil
}

// DeleteInboxes deletes the inboxes of env's agents, as DeleteInbox does.
func (b *Local) DeleteInboxes(ctx context.Context, env string, agents []string) error {
	for _, a := range agents {
		if err := b.DeleteInbox(ctx, env, a); err != nil {
			return err
		}
	}
	return nil
}

// Why a consumer is not consuming.
var (
	// errDeleted tells a consumer its queue was deleted.
	errDeleted = errors.New("queue deleted")
	// errMissing: an inbox not declared (yet).
	errMissing = errors.New("inbox not declared")
)

// join adds c to the consumers of queue name, declaring it if it does not
// exist and declare is set; else it fails with errMissing and returns a
// channel closed when a queue is next declared.
func (b *Local) join(name string, c *consumer, declare bool) (*queue, <-chan struct{}, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return nil, nil, ErrClosed
	}
	q, ok := b.queues[name]
	switch {
	case !ok && !declare:
		return nil, b.declared, errMissing
	case !ok:
		q = newQueue(name)
		b.queues[name] = q
		b.notifyDeclared()
	}
	q.consumers = append(q.consumers, c)
	q.notify()
	return q, nil, nil
}

// await joins c to queue name: a server queue (declare) is declared if
// missing; an inbox is waited for until the server declared it, calling
// missing (if not nil) at once and then after a pause that doubles.
func (b *Local) await(ctx context.Context, name string, c *consumer, declare bool, missing func(), h Handler) (*queue, error) {
	pause := missingPause
	var again <-chan time.Time // when to call missing again; nil: now
	for {
		q, declared, err := b.join(name, c, declare)
		if !errors.Is(err, errMissing) {
			return q, err
		}
		if m, ok := b.takeTold(name); ok {
			if e, err := Decode(m.data); err == nil {
				_ = h(ctx, Delivery{Envelope: e}) // not a queue's: nothing to settle
			}
			continue
		}
		if again == nil {
			if missing != nil {
				missing()
			}
			again = time.After(pause)
			pause = min(2*pause, maxMissingPause)
		}
		select {
		case <-declared:
		case <-again:
			again = nil
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// consume delivers the messages of queue name to h until ctx ends. A
// server queue (declare) missing or deleted under it is declared again; an
// inbox is waited for (o.Missing), and once an inbox deleted under it is
// consumed again, o.Lost runs.
func (b *Local) consume(ctx context.Context, name string, h Handler, declare bool, o InboxOptions) error {
	c := &consumer{queue: name}
	q, err := b.await(ctx, name, c, declare, o.Missing, h)
	if err != nil {
		return err
	}
	defer func() {
		if q != nil {
			b.leave(q, c)
		}
	}()

	pause := time.Duration(0)
	for {
		if m, ok := b.takeTold(name); ok {
			if e, err := Decode(m.data); err == nil {
				_ = h(ctx, Delivery{Envelope: e}) // not the queue's: nothing to settle
			}
		}
		m, wait, err := b.next(q, c)
		if errors.Is(err, errDeleted) {
			b.leave(q, c)
			if q, err = b.await(ctx, name, c, declare, o.Missing, h); err != nil {
				return err
			}
			b.log.Warn().Str("queue", name).Msg("queue deleted under its consumer; consuming it again")
			if o.Lost != nil {
				o.Lost()
			}
			continue
		}
		if err != nil {
			return err
		}
		if m == nil {
			select {
			case <-wait:
				continue
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		e, err := Decode(m.data)
		if err != nil {
			b.deadLetter(q, m.data, err)
			continue
		}
		herr := h(ctx, Delivery{Envelope: e, Redelivered: m.redelivered})
		switch {
		case herr == nil:
			pause = 0
		case errors.Is(herr, ErrReject):
			b.deadLetter(q, m.data, herr)
		default:
			b.requeue(q, *m)
			if ctx.Err() != nil {
				return ctx.Err()
			}
			pause = min(max(2*pause, redeliveryPause), maxRedeliveryPause)
			b.log.Warn().Err(herr).Str("queue", q.name).Str("message", e.String()).
				Dur("retry_in", pause).Msg("handler failed; message returned to the queue")
			select {
			case <-time.After(pause):
			case <-ctx.Done():
				return ctx.Err()
			}
		}
	}
}

// next takes the head message if c is the active consumer, dropping expired
// ones. With nothing to take it returns a channel that is closed on change.
func (b *Local) next(q *queue, c *consumer) (*message, <-chan struct{}, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return nil, nil, ErrClosed
	}
	if q.deleted {
		return nil, nil, errDeleted
	}
	if q.consumers[0] != c {
		return nil, q.changed, nil
	}
	now := time.Now()
	for len(q.msgs) > 0 {
		m := q.msgs[0]
		q.msgs[0] = message{}
		q.msgs = q.msgs[1:]
		if !m.expires.IsZero() && now.After(m.expires) {
			continue
		}
		return &m, nil, nil
	}
	return nil, q.changed, nil
}

func (b *Local) requeue(q *queue, m message) {
	b.mu.Lock()
	defer b.mu.Unlock()
	m.redelivered = true
	q.msgs = append([]message{m}, q.msgs...)
	q.notify()
}

func (b *Local) leave(q *queue, c *consumer) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for i, x := range q.consumers {
		if x == c {
			q.consumers = append(q.consumers[:i], q.consumers[i+1:]...)
			break
		}
	}
	q.notify()
}

func (b *Local) deadLetter(q *queue, data []byte, reason error) {
	b.mu.Lock()
	b.dead = append(b.dead, DeadLetter{Queue: q.name, Data: data, Reason: reason.Error()})
	b.mu.Unlock()
	b.log.Warn().Str("queue", q.name).Err(reason).Int("bytes", len(data)).Msg("message dead-lettered")
}

// DeadLetters returns the messages dead-lettered so far.
func (b *Local) DeadLetters() []DeadLetter {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]DeadLetter(nil), b.dead...)
}

// DeadLetterCount returns how many messages were dead-lettered.
func (b *Local) DeadLetterCount(context.Context) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.dead), nil
}

// SendRaw puts arbitrary bytes in an agent's inbox, as a broken or hostile
// peer could; for tests of the receiving side.
func (b *Local) SendRaw(_ context.Context, env, agent string, data []byte) error {
	return b.push(InboxName(env, agent), message{data: data}, true, &Envelope{Kind: "raw", Env: env, Agent: agent})
}
