package amqp

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/rs/zerolog"

	"github.com/tetherhq/tether/bus"
)

// Bus is the RabbitMQ transport. Its zero value is not usable: make one
// with New and Close it.
type Bus struct {
	cfg Config
	log zerolog.Logger

	mu         sync.Mutex
	current    *session      // nil while disconnected
	changed    chan struct{} // closed when current changes or a dial fails
	dialErr    error
	generation int

	pubSlots chan struct{} // bounds publishing channels
	opSlots  chan *opSlot  // bounds operations' channels (takeOp): a free slot is in it
	closing  chan struct{}
	done     chan struct{} // closed when the supervisor returned
	closeMu  sync.Once

	deadLettered atomic.Int64
	lostSubs     atomic.Int64
	subs         *subscriptions

	// nudges: the server's nudges (nudge.go).
	nudges nudges

	// claims are the claims this bus holds: the broker's exclusive queue
	// keeps other connections out, this keeps out a second claim of the
	// same connection.
	claimMu sync.Mutex
	claims  map[string]bool
}

var _ bus.Bus = (*Bus)(nil)

// New validates cfg and starts connecting in the background; operations
// wait for the connection (bounded by their context). Call Ready to wait for
// it, and Close to stop.
func New(cfg Config, log zerolog.Logger) (*Bus, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if _, err := cfg.tlsConfig(); err != nil {
		return nil, err
	}
	b := &Bus{
		cfg:      cfg,
		log:      log.With().Str("component", "bus").Str("broker", redactURL(cfg.URL)).Logger(),
		changed:  make(chan struct{}),
		pubSlots: make(chan struct{}, cfg.PublisherChannels),
		opSlots:  make(chan *opSlot, maxOperations),
		closing:  make(chan struct{}),
		done:     make(chan struct{}),
		subs:     newSubscriptions(),
	}
	for range maxOperations {
		b.opSlots <- &opSlot{}
	}
	go b.supervise()
	return b, nil
}

// Close stops the bus: consumers return, operations fail with ErrClosed,
// and the connection is closed. It waits for the supervisor.
func (b *Bus) Close() {
	b.closeMu.Do(func() { close(b.closing) })
	<-b.done
}

// Relogin closes the connection, so the bus dials again with fresh
// credentials from Config.Login: an agent whose key rolled over logs in as
// its new self. Consumers and claims come back as after any reconnect.
func (b *Bus) Relogin() {
	b.mu.Lock()
	s := b.current
	b.mu.Unlock()
	if s != nil {
		b.log.Info().Msg("logging in to the broker again (the agent's key changed)")
		_ = s.conn.Close()
	}
}

// DeadLettered counts the messages this bus moved to the dead-letter queue.
func (b *Bus) DeadLettered() int64 { return b.deadLettered.Load() }

// Names of the topology.
func (b *Bus) cmdExchange() string    { return b.cfg.Namespace + ".cmd" }
func (b *Bus) eventsExchange() string { return b.cfg.Namespace + ".events" }
func (b *Bus) deadExchange() string   { return b.cfg.Namespace + ".dead" }

// DeadQueue is the name of the dead-letter queue.
func (b *Bus) DeadQueue() string { return b.cfg.Namespace + ".dead" }

// ServerQueue is the name of a server queue in this namespace.
func (b *Bus) ServerQueue(q bus.Queue) string {
	switch q {
	case bus.QueueCompliance:
		return b.cfg.Namespace + ".server.compliance"
	default:
		return b.cfg.Namespace + ".server.events"
	}
}

// InboxQueue is the name of an agent's inbox in this namespace.
func (b *Bus) InboxQueue(env, agent string) string {
	return b.cfg.Namespace + ".agent." + env + "." + agent
}

func (b *Bus) queueArgs() amqp.Table {
	return amqp.Table{"x-queue-type": b.cfg.QueueType}
}

// declareTopology declares the exchanges, the server queues and their
// bindings, and the dead-letter queue (bounded). It runs after every
// (re)connect of the server. An agent declares nothing here: the server owns
// the topology, and an agent may not declare exchanges.
func (b *Bus) declareTopology(s *session) error {
	if b.cfg.Agent {
		return nil
	}
	ch, err := openChannel(s.conn)
	if err != nil {
		return err
	}
	defer ch.Close()
	for _, x := range []struct{ name, kind string }{
		{b.cmdExchange(), amqp.ExchangeDirect},
		{b.eventsExchange(), amqp.ExchangeTopic},
		{b.deadExchange(), amqp.ExchangeFanout},
	} {
		if err := ch.ExchangeDeclare(x.name, x.kind, true, false, false, false, nil); err != nil {
			return fmt.Errorf("exchange %s: %w", x.name, err)
		}
	}
	// Bounded, dropping the oldest: a flood of bad messages cannot fill
	// the broker. A dead-letter queue an older version declared without
	// a bound is used as it is (declaring it with other arguments fails).
	if !queueExists(s.conn, b.DeadQueue()) {
		args := b.queueArgs()
		args["x-max-length"] = int64(b.cfg.DeadLetterMax)
		args["x-overflow"] = "drop-head"
		if _, err := ch.QueueDeclare(b.DeadQueue(), true, false, false, false, args); err != nil {
			return fmt.Errorf("queue %s: %w", b.DeadQueue(), err)
		}
	}
	if err := ch.QueueBind(b.DeadQueue(), "", b.deadExchange(), false, nil); err != nil {
		return err
	}
	for _, q := range []bus.Queue{bus.QueueEvents, bus.QueueCompliance} {
		if err := b.declareServerQueue(ch, q); err != nil {
			return err
		}
	}
	return nil
}

// declareServerQueue declares server queue q and binds it to the events
// exchange (declared too: it may have been deleted with the queue's
// bindings) for each event kind routed to it. Agents never declare server
// queues: the server owns them and their type.
func (b *Bus) declareServerQueue(ch *amqp.Channel, q bus.Queue) error {
	if b.cfg.Agent {
		return nil
	}
	name := b.ServerQueue(q)
	if err := ch.ExchangeDeclare(b.eventsExchange(), amqp.ExchangeTopic, true, false, false, false, nil); err != nil {
		return fmt.Errorf("exchange %s: %w", b.eventsExchange(), err)
	}
	if _, err := ch.QueueDeclare(name, true, false, false, false, b.queueArgs()); err != nil {
		return fmt.Errorf("queue %s: %w", name, err)
	}
	// Routing keys are <env>.<agent>.<kind>; agent names and kinds may hold
	// dots, so each event kind is bound by its suffix.
	for _, k := range bus.EventKinds() {
		if bus.QueueFor(k) != q {
			continue
		}
		if err := ch.QueueBind(name, "#."+string(k), b.eventsExchange(), false, nil); err != nil {
			return fmt.Errorf("bind queue %s: %w", name, err)
		}
	}
	return nil
}

// declareInbox declares an agent's inbox when it does not exist (an inbox
// is used as it is, of whatever type and arguments it was made with:
// declaring it with others would fail) and binds it to the commands
// exchange (declared too: it may have been deleted with the binding). The
// server's alone: an agent may not declare its inbox (it could give it
// other arguments: no bound, a dead-letter exchange of its choosing) nor
// bind it (with rights on the commands exchange any queue could be bound
// to any agent's commands).
func (b *Bus) declareInbox(conn *amqp.Connection, ch *amqp.Channel, env, agent string) error {
	name := b.InboxQueue(env, agent)
	if err := ch.ExchangeDeclare(b.cmdExchange(), amqp.ExchangeDirect, true, false, false, false, nil); err != nil {
		return fmt.Errorf("exchange %s: %w", b.cmdExchange(), forbidden(err))
	}
	if !queueExists(conn, name) {
		if _, err := ch.QueueDeclare(name, true, false, false, false, b.inboxArgs()); err != nil {
			return fmt.Errorf("declare inbox %s: %w", name, forbidden(err))
		}
	}
	if err := ch.QueueBind(name, bus.CommandKey(env, agent), b.cmdExchange(), false, nil); err != nil {
		return fmt.Errorf("bind inbox %s: %w", name, err)
	}
	return nil
}

// forbidden marks a refusal for lack of rights with bus.ErrForbidden.
func forbidden(err error) error {
	if isAMQPError(err, amqp.AccessRefused) {
		return fmt.Errorf("%w: %w", bus.ErrForbidden, err)
	}
	return err
}

// queueExists looks for a queue with a passive declare on conn.
func queueExists(conn *amqp.Connection, name string) bool {
	found, _, _ := inspectQueue(conn, name)
	return found
}

// inspectQueue looks at a queue with a passive declare (which needs no
// rights), on a channel of its own of conn (a failed passive declare
// closes its channel): whether it exists, and how many messages wait in
// it. err is set when the broker could not be asked.
func inspectQueue(conn *amqp.Connection, name string) (found bool, ready int, err error) {
	ch, err := openChannel(conn)
	if err != nil {
		return false, 0, err
	}
	defer ch.Close()
	q, err := ch.QueueDeclarePassive(name, true, false, false, false, nil)
	if isAMQPError(err, amqp.NotFound) {
		return false, 0, nil
	}
	if err != nil {
		return false, 0, err
	}
	return true, q.Messages, nil
}

// DeclareInbox implements bus.Bus. The server declares an agent's inbox
// at each of its hellos, so the common case is made cheap: on a channel
// kept open for it, the inbox is declared with this bus's arguments and
// bound (two round trips). Anything else — an inbox made with other
// arguments (the broker refuses the declare and closes the channel), a
// missing commands exchange, a channel or connection that broke — takes
// the full path on a fresh channel (declareInbox), which decides.
func (b *Bus) DeclareInbox(ctx context.Context, env, agent string) error {
	sl, err := b.takeSlot(ctx)
	if err != nil {
		return err
	}
	defer b.giveSlot(sl)
	if ch := b.keptChannel(ctx, sl); ch != nil {
		if q, err := b.declareInboxFast(ch, env, agent); err == nil {
			if q.Consumers == 0 {
				b.nudge(ch, env, agent)
			}
			return nil
		}
		sl.drop()
	}
	return b.onChannel(ctx, func(conn *amqp.Connection, ch *amqp.Channel) error {
		if err := b.declareInbox(conn, ch, env, agent); err != nil {
			return err
		}
		b.nudge(ch, env, agent)
		return nil
	})
}

// keptChannel returns the slot's kept channel on the current session,
// opened if need be; nil when none can be had.
func (b *Bus) keptChannel(ctx context.Context, sl *opSlot) *amqp.Channel {
	s, err := b.session(ctx)
	if err != nil {
		return nil
	}
	if sl.ch == nil || sl.s != s || sl.ch.IsClosed() {
		sl.drop()
		if ch, err := openChannel(s.conn); err == nil {
			sl.s, sl.ch = s, ch
			go b.watchNudges(ch.NotifyClose(make(chan *amqp.Error, 1)))
		}
	}
	return sl.ch
}

// AnswerWaiting reports whether env/agent's inbox exists and holds
// messages no consumer has taken yet: what the server sent the agent
// still waits for it there. When nobody consumes the inbox, the agent is
// nudged to look for it. A look at an inbox that exists costs the broker
// a lookup on a kept channel, against a declaration, a binding and an
// answer for a hello handled in full.
func (b *Bus) AnswerWaiting(ctx context.Context, env, agent string) (bool, error) {
	sl, err := b.takeSlot(ctx)
	if err != nil {
		return false, err
	}
	defer b.giveSlot(sl)
	ch := b.keptChannel(ctx, sl)
	if ch == nil {
		return false, fmt.Errorf("look at the inbox of %s/%s: %w", env, agent, amqp.ErrClosed)
	}
	q, err := ch.QueueDeclarePassive(b.InboxQueue(env, agent), true, false, false, false, nil)
	if err != nil {
		// The broker closed the channel (the inbox is missing), or it
		// was lost: the next operation opens another.
		sl.drop()
		if isAMQPError(err, amqp.NotFound) {
			return false, nil
		}
		return false, fmt.Errorf("look at the inbox of %s/%s: %w", env, agent, err)
	}
	if q.Messages > 0 && q.Consumers == 0 {
		b.nudge(ch, env, agent)
	}
	return q.Messages > 0, nil
}

// declareInboxFast declares env/agent's inbox with this bus's arguments
// and binds it to the commands exchange; an error closes ch (or found it
// closed) and leaves the rest to declareInbox.
func (b *Bus) declareInboxFast(ch *amqp.Channel, env, agent string) (amqp.Queue, error) {
	name := b.InboxQueue(env, agent)
	q, err := ch.QueueDeclare(name, true, false, false, false, b.inboxArgs())
	if err != nil {
		return q, err
	}
	return q, ch.QueueBind(name, bus.CommandKey(env, agent), b.cmdExchange(), false, nil)
}

// inboxArgs are the arguments of the inboxes this bus declares.
func (b *Bus) inboxArgs() amqp.Table {
	args := b.queueArgs()
	args["x-single-active-consumer"] = true
	args["x-max-length"] = int64(b.cfg.InboxMaxLength)
	args["x-overflow"] = "reject-publish"
	return args
}

// Channels: the broker bounds the channels of one connection
// (channel_max, 64 where operations.md sets it), and the library fails an
// open beyond with "channel id space exhausted". A bus opens at most
//
//	consumers (one channel each: a consumer looks at its queue on it)
//	+ PublisherChannels
//	+ 2 × maxOperations (an operation's channel, kept open between inbox declarations, and one it may open to look at a queue)
//	+ 2 (the server's topology declaration and the queue it looks at)
//	+ claims (an agent's, one each)
//	+ 1 (an agent bus's nudges, nudge.go)
//
// however many callers run at once: 51 for a server with its 9 consumers,
// 43 for one agent. Operations beyond maxOperations wait for a slot.
const maxOperations = 16

// An opSlot is one of the maxOperations operation slots. It may keep a
// channel open for declaring inboxes (DeclareInbox) between operations;
// any other operation closes it first, so a slot never holds more than
// two channels.
type opSlot struct {
	s  *session      // the session ch is of
	ch *amqp.Channel // nil if none is kept
}

// drop closes the slot's kept channel, if any.
func (sl *opSlot) drop() {
	if sl.ch != nil {
		_ = sl.ch.Close()
	}
	sl.s, sl.ch = nil, nil
}

// takeSlot waits for an operation slot; giveSlot gives it back.
func (b *Bus) takeSlot(ctx context.Context) (*opSlot, error) {
	select {
	case sl := <-b.opSlots:
		return sl, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-b.closing:
		return nil, bus.ErrClosed
	}
}

func (b *Bus) giveSlot(sl *opSlot) { b.opSlots <- sl }

// takeOp waits for an operation slot, without a kept channel; the
// returned func gives it back.
func (b *Bus) takeOp(ctx context.Context) (release func(), err error) {
	sl, err := b.takeSlot(ctx)
	if err != nil {
		return nil, err
	}
	sl.drop()
	return func() { b.giveSlot(sl) }, nil
}

// withChannel runs fn on a fresh channel of the current connection,
// retrying once on a new connection if the channel broke under it. fn
// may open one more channel (queueExists); it holds an operation slot.
func (b *Bus) withChannel(ctx context.Context, fn func(conn *amqp.Connection, ch *amqp.Channel) error) error {
	release, err := b.takeOp(ctx)
	if err != nil {
		return err
	}
	defer release()
	return b.onChannel(ctx, fn)
}

// onChannel is withChannel for a caller that holds an operation slot.
func (b *Bus) onChannel(ctx context.Context, fn func(conn *amqp.Connection, ch *amqp.Channel) error) error {
	for attempt := 0; ; attempt++ {
		s, err := b.session(ctx)
		if err != nil {
			return err
		}
		ch, err := openChannel(s.conn)
		if err == nil {
			err = fn(s.conn, ch)
			_ = ch.Close()
			if err == nil {
				return nil
			}
		}
		if attempt > 0 || !isConnectionError(err) {
			return err
		}
		b.waitChange(ctx, s)
	}
}

// waitChange waits until the session is no longer s (or ctx ends).
func (b *Bus) waitChange(ctx context.Context, s *session) {
	b.mu.Lock()
	current, changed := b.current, b.changed
	b.mu.Unlock()
	if current != s {
		return
	}
	select {
	case <-changed:
	case <-ctx.Done():
	case <-b.closing:
	}
}

func isConnectionError(err error) bool {
	return errors.Is(err, amqp.ErrClosed) || isAMQPError(err, amqp.ChannelError) || isAMQPError(err, amqp.ConnectionForced)
}

func isAMQPError(err error, code int) bool {
	var ae *amqp.Error
	return errors.As(err, &ae) && ae.Code == code
}

// Send implements bus.Bus: a mandatory, confirmed publish to the agent's
// inbox.
func (b *Bus) Send(ctx context.Context, e *bus.Envelope, opts bus.SendOptions) error {
	if !e.Kind.Command() {
		return fmt.Errorf("send %s: not a command kind", e.Kind)
	}
	msg, err := b.message(e)
	if err != nil {
		return err
	}
	if opts.Expiration > 0 {
		msg.Expiration = strconv.FormatInt(max(opts.Expiration.Milliseconds(), 1), 10)
	}
	err = b.publishConfirmed(ctx, b.cmdExchange(), bus.CommandKey(e.Env, e.Agent), msg)
	if errors.Is(err, errReturned) && !b.cfg.Agent && b.inboxExists(ctx, e.Env, e.Agent) {
		// The inbox is there but unbound: the commands exchange was
		// deleted with its bindings, or a client with rights on the
		// broker unbound it. The server owns bindings: bind it, send
		// again.
		if berr := b.DeclareInbox(ctx, e.Env, e.Agent); berr != nil {
			return fmt.Errorf("send %s to %s/%s: bind the inbox: %w", e.Kind, e.Env, e.Agent, berr)
		}
		err = b.publishConfirmed(ctx, b.cmdExchange(), bus.CommandKey(e.Env, e.Agent), msg)
	}
	switch {
	case errors.Is(err, errReturned):
		return fmt.Errorf("send %s to %s/%s: %w", e.Kind, e.Env, e.Agent, bus.ErrNoInbox)
	case errors.Is(err, errNacked):
		return fmt.Errorf("send %s to %s/%s: %w (%d messages)", e.Kind, e.Env, e.Agent, bus.ErrInboxFull, b.cfg.InboxMaxLength)
	case err != nil:
		return fmt.Errorf("send %s to %s/%s: %w", e.Kind, e.Env, e.Agent, err)
	}
	return nil
}

// Publish implements bus.Bus: a mandatory, confirmed publish to the events
// exchange.
func (b *Bus) Publish(ctx context.Context, e *bus.Envelope) error {
	if !e.Kind.Event() {
		return fmt.Errorf("publish %s: not an event kind", e.Kind)
	}
	msg, err := b.message(e)
	if err != nil {
		return err
	}
	err = b.publishConfirmed(ctx, b.eventsExchange(), bus.EventKey(e.Env, e.Agent, e.Kind), msg)
	var refused *refusedError
	switch {
	case errors.As(err, &refused) && refused.code == amqp.NotFound:
		return fmt.Errorf("publish %s: %w (%w)", e, b.noExchange(b.eventsExchange()), err)
	case errors.Is(err, errReturned):
		return fmt.Errorf("publish %s: %w (was %s deleted? the server declares it again)", e, bus.ErrUnroutable, b.ServerQueue(bus.QueueFor(e.Kind)))
	case errors.Is(err, errNacked):
		return fmt.Errorf("publish %s: the broker refused the message: %w", e, errNacked)
	case err != nil:
		return fmt.Errorf("publish %s: %w", e, err)
	}
	return nil
}

// noExchange says that the broker has no exchange named exchange, which
// a server of the bus's namespace declares, and what to check.
func (b *Bus) noExchange(exchange string) error {
	return fmt.Errorf("%w %s in namespace %s of this broker: is the server running with the same --amqp-namespace (TETHER_AMQP_NAMESPACE), "+
		"on this broker and virtual host (--amqp)? A server declares its namespace's exchanges when it starts (and again when they are deleted); until one does, nothing sent here arrives",
		bus.ErrNoExchange, exchange, b.cfg.Namespace)
}

// inboxExists reports whether env/agent's inbox exists.
func (b *Bus) inboxExists(ctx context.Context, env, agent string) bool {
	release, err := b.takeOp(ctx)
	if err != nil {
		return false
	}
	defer release()
	s, err := b.session(ctx)
	return err == nil && queueExists(s.conn, b.InboxQueue(env, agent))
}

// ErrTooLarge is returned for an envelope larger than Config.MaxMessageSize.
var ErrTooLarge = errors.New("message too large")

func (b *Bus) message(e *bus.Envelope) (amqp.Publishing, error) {
	data, err := bus.Encode(e)
	if err != nil {
		return amqp.Publishing{}, err
	}
	if len(data) > b.cfg.MaxMessageSize {
		return amqp.Publishing{}, fmt.Errorf("%w: %s is %d bytes, the bus takes at most %d (a desired state this large must be sent as diffs)",
			ErrTooLarge, e, len(data), b.cfg.MaxMessageSize)
	}
	return amqp.Publishing{
		ContentType:  "application/json",
		DeliveryMode: amqp.Persistent,
		MessageId:    e.ID,
		Type:         string(e.Kind),
		Body:         data,
	}, nil
}

var (
	errReturned = errors.New("message returned: no queue bound")
	errNacked   = errors.New("message nacked by the broker")
	// errRefused: the broker closed the publishing channel over the
	// message (an exchange deleted on the broker), the connection staying
	// up: publishing again would meet the same refusal.
	errRefused = errors.New("the broker refused the publish")
)

// publisher is a confirm-mode channel with its returns and the reason the
// broker closed it.
type publisher struct {
	ch      *amqp.Channel
	returns chan amqp.Return
	closed  chan *amqp.Error
}

func (b *Bus) takePublisher(ctx context.Context) (*session, *publisher, error) {
	select {
	case b.pubSlots <- struct{}{}:
	case <-ctx.Done():
		return nil, nil, ctx.Err()
	case <-b.closing:
		return nil, nil, bus.ErrClosed
	}
	s, err := b.session(ctx)
	if err != nil {
		<-b.pubSlots
		return nil, nil, err
	}
	s.mu.Lock()
	if n := len(s.publishers); n > 0 {
		p := s.publishers[n-1]
		s.publishers = s.publishers[:n-1]
		s.mu.Unlock()
		return s, p, nil
	}
	s.mu.Unlock()
	ch, err := openChannel(s.conn)
	if err != nil {
		<-b.pubSlots
		return s, nil, err
	}
	if err := ch.Confirm(false); err != nil {
		_ = ch.Close()
		<-b.pubSlots
		return s, nil, err
	}
	// Buffered so the connection's reader never blocks on them; returns
	// are drained after each confirm.
	p := &publisher{
		ch:      ch,
		returns: ch.NotifyReturn(make(chan amqp.Return, 16)),
		closed:  ch.NotifyClose(make(chan *amqp.Error, 1)),
	}
	return s, p, nil
}

func (b *Bus) givePublisher(s *session, p *publisher, healthy bool) {
	if healthy {
		s.mu.Lock()
		s.publishers = append(s.publishers, p)
		s.mu.Unlock()
	} else {
		_ = p.ch.Close()
	}
	<-b.pubSlots
}

// refusedError is errRefused with the broker's reply code and reason.
type refusedError struct {
	code   int
	reason string
}

func (e *refusedError) Error() string        { return errRefused.Error() + ": " + e.reason }
func (e *refusedError) Is(target error) bool { return target == errRefused }

// refusal says why the broker closed p's channel (a *refusedError). The
// library sends the reason before it fails the pending confirms; the
// bound is a guard.
func (p *publisher) refusal() error {
	select {
	case e, ok := <-p.closed:
		if ok && e != nil {
			return &refusedError{code: e.Code, reason: e.Reason}
		}
	case <-time.After(time.Second):
	}
	return errRefused
}

// publishConfirmed publishes msg with mandatory set and waits for the
// broker's confirm. A message the broker returned (no queue bound) gives
// errReturned, one nacked maxNacks times errNacked, a channel the broker
// closed over it
// (an exchange missing) errRefused. When the connection breaks before the
// confirm, the message is published again on the next connection:
// delivery is at least once, and receivers deduplicate by envelope id.
func (b *Bus) publishConfirmed(ctx context.Context, exchange, key string, msg amqp.Publishing) error {
	nacks := 0
	for {
		s, p, err := b.takePublisher(ctx)
		if err != nil {
			if s != nil && s.conn.IsClosed() {
				b.waitChange(ctx, s)
				continue
			}
			return err
		}
		msg.Timestamp = time.Now()
		if exchange == b.eventsExchange() {
			// The login this connection has, which the broker checks:
			// the server knows who published the event.
			msg.UserId = s.user
		}
		messagesPublished.Add(1)
		dc, err := p.ch.PublishWithDeferredConfirmWithContext(ctx, exchange, key, true, false, msg)
		if err != nil {
			b.givePublisher(s, p, false)
			if ctx.Err() != nil {
				return ctx.Err()
			}
			if s.conn.IsClosed() {
				b.waitChange(ctx, s)
				continue
			}
			return err
		}
		acked, err := dc.WaitContext(ctx)
		if err != nil { // ctx ended: the channel's state is unknown
			b.givePublisher(s, p, false)
			return err
		}
		returned := false
	drain:
		for {
			select {
			case r, ok := <-p.returns:
				if !ok { // closed with the channel
					break drain
				}
				if r.MessageId == msg.MessageId {
					returned = true
				}
			default:
				break drain
			}
		}
		if p.ch.IsClosed() {
			b.givePublisher(s, p, false)
			switch {
			case s.conn.IsClosed():
				// The confirm was lost with the connection: publish
				// again on the next one.
				b.waitChange(ctx, s)
				continue
			case !acked:
				// The connection is up: the broker closed the
				// channel over this message. Waiting for a
				// reconnect would wait forever.
				return p.refusal()
			}
		} else {
			b.givePublisher(s, p, true)
		}
		switch {
		case returned:
			return errReturned
		case !acked:
			// A queue just declared (a quorum queue electing its
			// leader, after a deletion) refuses for a moment; a full
			// inbox keeps refusing.
			if nacks++; nacks < maxNacks {
				select {
				case <-time.After(nackPause << nacks):
					continue
				case <-ctx.Done():
					return ctx.Err()
				}
			}
			return errNacked
		}
		return nil
	}
}

// A nacked publish is tried maxNacks times in all, pausing nackPause,
// doubling, in between.
const (
	maxNacks  = 4
	nackPause = 10 * time.Millisecond
)

// DeleteQueue deletes one queue of the broker cfg names, with its
// messages: an inbox whose queue type must change (its agent, finding it
// missing, says hello, and the server declares it again), or, in tests, a
// server queue, as any client with rights on the broker could.
func DeleteQueue(ctx context.Context, cfg Config, name string) error {
	conn, err := cfg.connect(10*time.Second, nil)
	if err != nil {
		return fmt.Errorf("delete queue %s: %w", name, err)
	}
	defer conn.Close()
	if err := ctx.Err(); err != nil {
		return err
	}
	ch, err := openChannel(conn)
	if err != nil {
		return fmt.Errorf("delete queue %s: %w", name, err)
	}
	defer ch.Close()
	if _, err := ch.QueueDelete(name, false, false, false); err != nil {
		return fmt.Errorf("delete queue %s: %w", name, err)
	}
	return nil
}

// DeleteTopology removes what a namespace declared on the broker: its
// exchanges, its server and dead-letter queues, and the inboxes given (by
// queue name, see InboxQueue), with any messages they hold. Tests clean
// up with it; an operator uninstalling a namespace can too.
func DeleteTopology(ctx context.Context, cfg Config, inboxes []string) error {
	conn, err := cfg.connect(10*time.Second, nil)
	if err != nil {
		return fmt.Errorf("delete topology of %s: %w", cfg.Namespace, err)
	}
	defer conn.Close()
	names := &Bus{cfg: cfg}
	queues := append([]string{names.DeadQueue(), names.ServerQueue(bus.QueueEvents), names.ServerQueue(bus.QueueCompliance)}, inboxes...)
	var errs []error
	ch, err := openChannel(conn)
	for _, q := range queues {
		if err != nil {
			return errors.Join(append(errs, err)...)
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if _, qerr := ch.QueueDelete(q, false, false, false); qerr != nil {
			errs = append(errs, fmt.Errorf("delete %s: %w", q, qerr))
			ch, err = openChannel(conn) // a failed delete closes the channel
		}
	}
	if err != nil {
		return errors.Join(append(errs, err)...)
	}
	defer ch.Close()
	for _, x := range []string{names.cmdExchange(), names.eventsExchange(), names.deadExchange()} {
		if xerr := ch.ExchangeDelete(x, false, false); xerr != nil {
			errs = append(errs, fmt.Errorf("delete exchange %s: %w", x, xerr))
			if ch, err = openChannel(conn); err != nil {
				return errors.Join(append(errs, err)...)
			}
		}
	}
	return errors.Join(errs...)
}
