package amqp

import (
	"context"
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/tetherhq/tether/bus"
)

// Admin does through RabbitMQ's management API what AMQP cannot: list
// and close other clients' connections. Revoking an agent, or a key its
// name no longer holds, must end the connections logged in so, whose
// channels keep the rights they were given; and the broker bounds the
// connections of its own users only, not of the agents its HTTP backend
// lets in, which the server bounds itself.
type Admin struct {
	base   *url.URL
	client *http.Client
}

// NewAdmin returns an Admin for the management API at rawURL
// (http://user:password@host:15672, https://… behind TLS).
func NewAdmin(rawURL string) (*Admin, error) {
	u, err := url.Parse(rawURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.User == nil {
		return nil, fmt.Errorf("%w: management URL %q: want http://user:password@host:15672", ErrConfig, redactURL(rawURL))
	}
	return &Admin{base: u, client: &http.Client{Timeout: 30 * time.Second}}, nil
}

// connection is what the management API says of one connection.
type connection struct {
	Name string `json:"name"`
	User string `json:"user"`
	// ConnectedAt is in milliseconds since the epoch.
	ConnectedAt int64 `json:"connected_at"`
	Channels    int   `json:"channels"`
}

// Connections lists the broker's client connections. The management API
// lists a connection once the broker has reported its statistics (every
// few seconds): one just opened may be missing.
func (a *Admin) Connections(ctx context.Context) ([]bus.BrokerConnection, error) {
	var conns []connection
	if err := a.do(ctx, http.MethodGet, "/api/connections?columns=name,user,connected_at,channels", "", &conns); err != nil {
		return nil, err
	}
	out := make([]bus.BrokerConnection, len(conns))
	for i, c := range conns {
		out[i] = bus.BrokerConnection{Name: c.Name, User: c.User, ConnectedAt: time.UnixMilli(c.ConnectedAt), Channels: c.Channels}
	}
	return out, nil
}

// CloseConnection closes the connection the broker names name; reason is
// what its client is told. One gone already is no error.
func (a *Admin) CloseConnection(ctx context.Context, name, reason string) error {
	err := a.do(ctx, http.MethodDelete, "/api/connections/"+url.PathEscape(name), reason, nil)
	if errors.Is(err, errGone) {
		return nil
	}
	return err
}

// CloseAgentConnections closes the connections of the agent env/name
// logged in with key (its broker user, bus.BrokerLogin.User), or with any
// key when key is nil, and returns how many it closed.
func (a *Admin) CloseAgentConnections(ctx context.Context, env, name string, key ed25519.PublicKey) (int, error) {
	prefix := bus.BrokerUserPrefix(env, name)
	match := func(user string) bool { return strings.HasPrefix(user, prefix) }
	if key != nil {
		only := bus.BrokerLogin{Env: env, Agent: name, Key: key}.User()
		match = func(user string) bool { return user == only }
	}
	conns, err := a.Connections(ctx)
	if err != nil {
		return 0, err
	}
	closed := 0
	var errs []error
	for _, c := range conns {
		if !match(c.User) {
			continue
		}
		if err := a.CloseConnection(ctx, c.Name, "tether: the agent was revoked, or this key is no longer its"); err != nil {
			errs = append(errs, err)
			continue
		}
		closed++
	}
	return closed, errors.Join(errs...)
}

// errGone: the management API knows no such thing (any more).
var errGone = errors.New("not found")

// do asks the management API; reason, when set, says why (X-Reason: the
// broker tells the client of a connection it closes).
func (a *Admin) do(ctx context.Context, method, path, reason string, out any) error {
	u := *a.base
	u.User = nil
	ref, err := url.Parse(path)
	if err != nil {
		return err
	}
	target := u.ResolveReference(ref)
	req, err := http.NewRequestWithContext(ctx, method, target.String(), nil)
	if err != nil {
		return err
	}
	pw, _ := a.base.User.Password()
	req.SetBasicAuth(a.base.User.Username(), pw)
	if reason != "" {
		req.Header.Set("X-Reason", reason)
	}
	resp, err := a.client.Do(req)
	if err != nil {
		return fmt.Errorf("broker management API %s %s: %w", method, target.Path, err)
	}
	defer resp.Body.Close()
	switch {
	case resp.StatusCode == http.StatusNotFound:
		return errGone
	case resp.StatusCode >= 300:
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return fmt.Errorf("broker management API %s %s: %s: %s", method, target.Path, resp.Status, strings.TrimSpace(string(body)))
	case out != nil:
		if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
			return fmt.Errorf("broker management API %s %s: %w", method, target.Path, err)
		}
	}
	return nil
}

// DeleteInboxes deletes the inboxes of env's agents with what they hold,
// on one channel: a channel opened and closed per queue is what the broker
// pays most for, and pending agents' inboxes (an older server declared
// them) may be thousands. A missing inbox is no error.
func (b *Bus) DeleteInboxes(ctx context.Context, env string, agents []string) error {
	return b.withChannel(ctx, func(conn *amqp.Connection, ch *amqp.Channel) error {
		var opened []*amqp.Channel
		defer func() {
			for _, c := range opened {
				_ = c.Close()
			}
		}()
		for _, a := range agents {
			if err := ctx.Err(); err != nil {
				return err
			}
			_, err := ch.QueueDelete(b.InboxQueue(env, a), false, false, false)
			if isAMQPError(err, amqp.NotFound) {
				// The broker closed the channel over it: go on on another.
				if ch, err = openChannel(conn); err != nil {
					return err
				}
				opened = append(opened, ch)
				continue
			}
			if err != nil {
				return fmt.Errorf("delete inbox %s: %w", b.InboxQueue(env, a), err)
			}
		}
		return nil
	})
}

// DeleteInbox deletes the inbox of env/agent with the commands it holds
// (an agent revoked or deleted). A missing inbox is no error.
func (b *Bus) DeleteInbox(ctx context.Context, env, agent string) error {
	return b.withChannel(ctx, func(_ *amqp.Connection, ch *amqp.Channel) error {
		_, err := ch.QueueDelete(b.InboxQueue(env, agent), false, false, false)
		if isAMQPError(err, amqp.NotFound) {
			return nil
		}
		return err
	})
}
