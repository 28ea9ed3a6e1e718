package amqp

import (
	"context"
	"fmt"
	"sync"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/tetherhq/tether/bus"
)

// A claim is an exclusive queue named after the agent: the broker lets one
// connection hold it and deletes it the moment that connection closes (a
// process killed, a broken network once heartbeats time out), so a standby
// that keeps trying takes over within one retry of the primary's end.

// ClaimQueue is the name of the queue that holds env/agent's claim.
func (b *Bus) ClaimQueue(env, agent string) string {
	return b.cfg.Namespace + ".primary." + env + "." + agent
}

type claim struct {
	lost    chan struct{}
	release chan struct{}
	once    sync.Once
	done    chan struct{}
}

var _ bus.Claim = (*claim)(nil)

// Claim implements bus.Bus.
func (b *Bus) Claim(ctx context.Context, env, agent string) (bus.Claim, error) {
	name := b.ClaimQueue(env, agent)
	b.claimMu.Lock()
	if b.claims[name] {
		b.claimMu.Unlock()
		return nil, fmt.Errorf("claim %s/%s: %w", env, agent, bus.ErrClaimed)
	}
	if b.claims == nil {
		b.claims = map[string]bool{}
	}
	b.claims[name] = true
	b.claimMu.Unlock()
	c, err := b.claim(ctx, name)
	if err != nil {
		b.claimMu.Lock()
		delete(b.claims, name)
		b.claimMu.Unlock()
		return nil, fmt.Errorf("claim %s/%s: %w", env, agent, err)
	}
	return c, nil
}

func (b *Bus) claim(ctx context.Context, name string) (*claim, error) {
	s, err := b.session(ctx)
	if err != nil {
		return nil, err
	}
	ch, err := openChannel(s.conn)
	if err != nil {
		return nil, err
	}
	// Not durable, auto-deleted, exclusive to this connection.
	if _, err := ch.QueueDeclare(name, false, true, true, false, nil); err != nil {
		_ = ch.Close()
		if isAMQPError(err, amqp.ResourceLocked) {
			return nil, bus.ErrClaimed
		}
		return nil, forbidden(err)
	}
	b.listenNudges(s, name)
	c := &claim{lost: make(chan struct{}), release: make(chan struct{}), done: make(chan struct{})}
	closed := s.conn.NotifyClose(make(chan *amqp.Error, 1))
	chClosed := ch.NotifyClose(make(chan *amqp.Error, 1))
	// The watcher is owned by the claim: Release waits for it, and a
	// closed connection (Bus.Close included) ends it.
	go func() {
		defer close(c.done)
		defer close(c.lost)
		defer func() {
			b.claimMu.Lock()
			delete(b.claims, name)
			b.claimMu.Unlock()
		}()
		select {
		case <-closed:
		case <-chClosed:
		case <-c.release:
			_, _ = ch.QueueDelete(name, false, false, false)
			_ = ch.Close()
		}
	}()
	return c, nil
}

func (c *claim) Lost() <-chan struct{} { return c.lost }

func (c *claim) Release() {
	c.once.Do(func() { close(c.release) })
	<-c.done
}
