package amqp

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/tetherhq/tether/bus"
)

// session is one connection and what was made on it; it is replaced as a
// whole when the connection drops.
type session struct {
	conn *amqp.Connection
	// publishers is the free list of confirm-mode channels of this
	// connection.
	mu         sync.Mutex
	publishers []*publisher
	// nudgeCh consumes an agent bus's claim queues for the server's
	// nudges (nudge.go); nil until needed.
	nudgeMu sync.Mutex
	nudgeCh *amqp.Channel
	// user is the agent's own broker login (Config.Login) the session
	// logged in with, which its events name (user_id): the broker checks
	// it, and the server learns who published each event. "" for a
	// login of the URL's.
	user string
}

// supervise keeps a connection open until the bus closes: it dials with
// exponential back-off and full jitter (the first attempt after a loss waits
// a random delay too, so a restarted broker is not met by every agent at
// once), declares the topology, publishes the session, and waits for it to
// close. It is the one goroutine the bus owns; Close waits for it.
func (b *Bus) supervise() {
	defer close(b.done)
	bound := b.cfg.ReconnectMin
	first := true
	for {
		if !first {
			var delay time.Duration
			delay, bound = reconnectDelay(bound, b.cfg.ReconnectMax)
			select {
			case <-b.closing:
				return
			case <-time.After(delay):
			}
		}
		first = false
		s, err := b.dial()
		if err != nil {
			b.setDialError(err)
			continue
		}
		bound = b.cfg.ReconnectMin
		closed := s.conn.NotifyClose(make(chan *amqp.Error, 1))
		b.publish(s)
		if b.watch(s, closed) {
			return
		}
	}
}

// reconnectDelay returns the pause before the next attempt to connect,
// full jitter: anywhere between zero and bound, so that agents that lost
// the broker together do not come back together; and the bound for the
// attempt after it, doubled up to most.
func reconnectDelay(bound, most time.Duration) (delay, next time.Duration) {
	return time.Duration(rand.Int64N(int64(bound) + 1)), min(2*bound, most)
}

// watch waits for s to close, declaring the topology again every
// TopologyCheck meanwhile (server only), and reports whether the bus is
// closing.
func (b *Bus) watch(s *session, closed <-chan *amqp.Error) bool {
	var check <-chan time.Time
	if !b.cfg.Agent {
		t := time.NewTicker(b.cfg.TopologyCheck)
		defer t.Stop()
		check = t.C
	}
	failing := false
	for {
		select {
		case <-b.closing:
			b.publish(nil)
			_ = s.conn.Close()
			return true
		case err := <-closed:
			b.publish(nil)
			if err != nil {
				b.log.Warn().Err(err).Msg("connection to the broker lost; reconnecting")
			}
			return false
		case <-check:
			err := b.declareTopology(s)
			switch {
			case err != nil && !failing && !s.conn.IsClosed():
				b.log.Warn().Err(err).Msg("cannot declare the topology again; trying on the next check")
			case err == nil && failing:
				b.log.Info().Msg("topology declared again")
			}
			failing = err != nil
		}
	}
}

func (b *Bus) dial() (*session, error) {
	conn, err := b.cfg.connect(30*time.Second, amqp.Table{"connection_name": b.cfg.ConnectionName, "product": "tether"})
	if err != nil {
		return nil, err
	}
	s := &session{conn: conn}
	if b.cfg.Login != nil && len(conn.Config.SASL) > 0 {
		if plain, ok := conn.Config.SASL[0].(*amqp.PlainAuth); ok {
			s.user = plain.Username
		}
	}
	if err := b.declareTopology(s); err != nil {
		_ = conn.Close()
		return nil, fmt.Errorf("declare the topology on %s: %w", redactURL(b.cfg.URL), err)
	}
	return s, nil
}

// connect opens a connection to the broker, over TLS for amqps://, with
// properties shown in the broker's management. A failure says what is
// wrong where it can (explain).
func (c Config) connect(timeout time.Duration, properties amqp.Table) (*amqp.Connection, error) {
	tlsConf, err := c.tlsConfig()
	if err != nil {
		return nil, err
	}
	w := &wire{}
	ac := amqp.Config{
		Heartbeat:  c.Heartbeat,
		Locale:     "en_US",
		Properties: properties,
		Dial:       w.dial(tlsConf, timeout, c.Heartbeat),
	}
	if c.Login != nil {
		user, password, err := c.Login()
		if err != nil {
			return nil, fmt.Errorf("log in to %s: %w", redactURL(c.URL), err)
		}
		ac.SASL = []amqp.Authentication{&amqp.PlainAuth{Username: user, Password: password}}
	}
	conn, err := amqp.DialConfig(dialURL(c.URL), ac)
	if err != nil {
		if isAMQPError(err, amqp.AccessRefused) && c.Login != nil {
			return nil, fmt.Errorf("connect to %s: %w: the broker refused this agent's login (%v): an operator rejected or revoked it, "+
				"its name is enrolled with another key, or this host's clock is further from the server's than --broker-login-skew allows; "+
				"`tether agent list` and the security alerts on the server say which", redactURL(c.URL), bus.ErrForbidden, err)
		}
		return nil, fmt.Errorf("connect to %s: %w", redactURL(c.URL), c.explain(err, w))
	}
	if w.live != nil {
		// The broker may have asked for heartbeats more often.
		w.live.setHeartbeat(conn.Config.Heartbeat)
	}
	return conn, nil
}

// publish makes s (nil: none) the current session and wakes waiters.
func (b *Bus) publish(s *session) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.current = s
	if s != nil {
		if b.dialErr != nil {
			b.log.Info().Msg("connected to the broker")
		}
		b.dialErr = nil
		b.generation++
	}
	close(b.changed)
	b.changed = make(chan struct{})
}

// setDialError records why the last dial failed. It is logged once until
// a dial succeeds, and again when the cause changes from one that needs a
// fix (a certificate, a port: dialCause) to another, so that the log
// says what is wrong now without repeating every attempt.
func (b *Bus) setDialError(err error) {
	b.mu.Lock()
	prev := b.dialErr
	b.dialErr = err
	b.mu.Unlock()
	cause := dialCause(err)
	switch {
	case prev != nil && cause == dialCause(prev):
	case cause != nil:
		b.log.Error().Err(err).Msg("cannot connect to the broker until this is fixed; retrying with back-off")
	default:
		b.log.Warn().Err(err).Msg("cannot reach the broker; retrying with back-off")
	}
	// Wake Ready, which returns on some dial errors, once the log says why.
	b.mu.Lock()
	close(b.changed)
	b.changed = make(chan struct{})
	b.mu.Unlock()
}

// session waits for a connected session, until ctx ends or the bus closes.
func (b *Bus) session(ctx context.Context) (*session, error) {
	return b.await(ctx, false)
}

// await waits for a connected session, until ctx ends or the bus closes,
// and with failFast until a dial fails for a reason that needs a fix
// (dialCause).
func (b *Bus) await(ctx context.Context, failFast bool) (*session, error) {
	for {
		b.mu.Lock()
		s, changed, dialErr := b.current, b.changed, b.dialErr
		b.mu.Unlock()
		if s != nil {
			return s, nil
		}
		if failFast && dialCause(dialErr) != nil {
			return nil, fmt.Errorf("not connected to the broker: %w", dialErr)
		}
		select {
		case <-b.closing:
			return nil, bus.ErrClosed
		case <-ctx.Done():
			if dialErr != nil {
				return nil, fmt.Errorf("not connected to the broker (%w); last attempt: %w", ctx.Err(), dialErr)
			}
			return nil, ctx.Err()
		case <-changed:
		}
	}
}

// Ready waits until the bus is connected: a caller that wants to fail fast
// on a wrong URL or password calls it with a deadline. It returns at once
// when the last attempt failed for a reason that retrying does not fix (a
// certificate, a port that speaks TLS or does not: ErrUntrustedCert and
// its siblings), with that reason; the bus keeps trying meanwhile, so the
// fix, on the broker or in the files the configuration names, takes
// without a restart.
func (b *Bus) Ready(ctx context.Context) error {
	_, err := b.await(ctx, true)
	return err
}

// Backlog counts the messages of a server queue that wait for a consumer
// (not those delivered and not yet acknowledged).
func (b *Bus) Backlog(ctx context.Context, q bus.Queue) (int, error) {
	release, err := b.takeOp(ctx)
	if err != nil {
		return 0, err
	}
	defer release()
	s, err := b.session(ctx)
	if err != nil {
		return 0, err
	}
	ch, err := openChannel(s.conn)
	if err != nil {
		return 0, err
	}
	defer ch.Close()
	info, err := ch.QueueDeclarePassive(b.ServerQueue(q), true, false, false, false, b.queueArgs())
	if err != nil {
		return 0, fmt.Errorf("backlog of %s: %w", q, err)
	}
	return info.Messages, nil
}

// channelsOpened counts the channels this process opened, on every bus.
var channelsOpened atomic.Int64

// openChannel opens a channel of conn, counted. A channel costs the
// broker a process and an entry in its channel registry, and closing one
// a message to that registry: so the buses keep channels open where they
// can, and a fleet's channel churn (ChannelsOpened) is a figure to watch.
func openChannel(conn *amqp.Connection) (*amqp.Channel, error) {
	channelsOpened.Add(1)
	return conn.Channel()
}

// ChannelsOpened returns how many channels the buses of this process
// opened so far.
func ChannelsOpened() int64 { return channelsOpened.Load() }

// messagesPublished and messagesDelivered count the messages the buses of
// this process published (each publish tried, confirmed or not) and had
// delivered to their handlers, on every bus.
var messagesPublished, messagesDelivered atomic.Int64

// Messages returns how many messages the buses of this process published
// and had delivered so far: with ChannelsOpened, what a process asks of
// the broker.
func Messages() (published, delivered int64) {
	return messagesPublished.Load(), messagesDelivered.Load()
}
