package bus

import (
	"context"
	"errors"
	"strings"
	"time"

	"github.com/tetherhq/tether/model"
)

// Bus moves envelopes between the server and the agents. Commands go to one
// agent's inbox (a durable per-agent queue); events go to the server's
// queues. Delivery is at least once: a message is removed only when its
// handler returns nil, so receivers deduplicate by envelope id.
//
// The server uses Send, DeclareInbox and ConsumeEvents; an agent uses
// ConsumeInbox and Publish. Both sides declare the narrower interface they
// need. Only the server declares inboxes: where each agent has its own
// rights on the broker, an agent may read its inbox, never declare, delete
// or bind it, so it cannot give it other arguments (no bound, a
// dead-letter exchange of its choosing).
type Bus interface {
	// Send puts a command in the inbox of e.Agent in e.Env and returns once
	// the bus has durably accepted it. It fails with ErrNoInbox when that
	// agent's inbox does not exist (the server has not heard its hello).
	Send(ctx context.Context, e *Envelope, opts SendOptions) error
	// SendBatch sends many commands, each as Send would, with the bus's
	// confirms outstanding together instead of one after another: it
	// returns once each command was durably accepted or refused. errs[i]
	// is what Send would have returned for msgs[i] (nil: accepted;
	// ErrNoInbox, ErrInboxFull, ...). Commands for one inbox in one batch
	// may arrive in any order: a caller that needs order (a desired state
	// before its deploy) sends them in successive batches.
	SendBatch(ctx context.Context, msgs []Outgoing) (errs []error)
	// Publish puts an event on the server's queues and returns once the bus
	// has durably accepted it. It fails with ErrUnroutable when no server
	// queue takes the event (the queue was deleted and its consumer has
	// not declared it again yet): the event is not lost silently, the
	// caller keeps it and tries again.
	Publish(ctx context.Context, e *Envelope) error
	// DeclareInbox creates agent's inbox in env, with its arguments, if it
	// does not exist, and routes the agent's commands to it. The server
	// declares it on the hello of an agent it records (pending or
	// accepted), so the answer has somewhere to go.
	DeclareInbox(ctx context.Context, env, agent string) error
	// ConsumeInbox delivers the commands of agent's inbox in env to h in
	// order, one at a time, until ctx ends. Of several consumers of one
	// inbox only one is active; the next takes over when it leaves. It
	// never declares the inbox: while the inbox is missing (not declared
	// yet, or deleted under it) it calls the OnInboxMissing callback and
	// looks again, with back-off, until the server has declared it. Once
	// it consumes again an inbox deleted under it, it calls the
	// OnInboxLost callback.
	ConsumeInbox(ctx context.Context, env, agent string, h Handler, opts ...InboxOption) error
	// ConsumeEvents delivers the events of one server queue to h until ctx
	// ends. When the queue is deleted under it, the consumer declares it
	// again, with its routing, and consumes again.
	ConsumeEvents(ctx context.Context, q Queue, h Handler) error
	// Claim makes this process the primary of agent in env: of several
	// processes hosting one agent, only the one holding the claim acts. It
	// fails with ErrClaimed while another process holds it. The claim ends
	// when released, or when this process loses the bus (then another may
	// take it): Lost says so.
	Claim(ctx context.Context, env, agent string) (Claim, error)
}

// Claim is a held primacy over one agent name.
type Claim interface {
	// Lost is closed when the claim ended.
	Lost() <-chan struct{}
	// Release gives the claim up; another process may take it at once.
	Release()
}

// InboxOption tunes ConsumeInbox.
type InboxOption func(*InboxOptions)

// InboxOptions are the options of one ConsumeInbox; implementations of Bus
// read them with NewInboxOptions.
type InboxOptions struct {
	// Lost is called after the consumer resumed consuming because the
	// inbox had been deleted under it (not after a reconnect: a durable
	// inbox outlives its connection).
	Lost func()
	// LookAfter delays the first look for the inbox (LookAfter).
	LookAfter time.Duration
	// Missing is called each time the consumer finds the inbox missing,
	// before it looks again.
	Missing func()
}

// OnInboxLost calls fn each time the inbox was deleted under its consumer
// and is consumed again. The commands it held, and those sent while it was
// missing, are gone: an agent says hello again, so the server sends what
// it lacks.
func OnInboxLost(fn func()) InboxOption {
	return func(o *InboxOptions) { o.Lost = fn }
}

// OnInboxMissing calls fn each time the consumer finds the inbox missing
// (not declared yet, or deleted), before it looks again with back-off. The
// server declares an inbox on its agent's hello: an enrolled agent whose
// inbox is gone says hello.
func OnInboxMissing(fn func()) InboxOption {
	return func(o *InboxOptions) { o.Missing = fn }
}

// LookAfter has the consumer look for the inbox first after d. An agent
// that has never been enrolled has no inbox until the server heard its
// first hello: looking at once would find none, and where a look costs
// the broker a channel, a fleet installed at once pays for it.
// Implementations whose looks cost nothing may look at once.
func LookAfter(d time.Duration) InboxOption {
	return func(o *InboxOptions) { o.LookAfter = d }
}

// NewInboxOptions applies opts.
func NewInboxOptions(opts ...InboxOption) InboxOptions {
	var o InboxOptions
	for _, opt := range opts {
		opt(&o)
	}
	return o
}

// Handler handles one delivery. Returning nil acknowledges it (it is gone);
// an error wrapping ErrReject dead-letters it; any other error returns it to
// the queue for redelivery after a pause.
type Handler func(ctx context.Context, d Delivery) error

// Delivery is a decoded envelope handed to a Handler.
type Delivery struct {
	Envelope *Envelope
	// Redelivered is set when an earlier delivery was not acknowledged.
	Redelivered bool
	// Login is the broker login the message was published with, as the
	// broker vouches for it (RabbitMQ checks a message's user_id against
	// the connection's login), when the publisher said it: an agent that
	// logs in as itself does. Empty otherwise (an older agent, a shared
	// login, the in-process bus).
	Login string
	// RoutingKey is the key the message was published with: an event's
	// <env>.<agent>.<kind>, which a broker that authorises topics lets an
	// agent's login publish under its own name only. Empty on the
	// in-process bus.
	RoutingKey string
}

// Outgoing is one command of a batch (SendBatch).
type Outgoing struct {
	Envelope *Envelope
	Options  SendOptions
}

// SendOptions tune one command.
type SendOptions struct {
	// Expiration drops the command if no agent took it within this time
	// (repairs and other periodic commands: an offline agent must not wake
	// up to a pile of stale ones). Zero: never expires.
	Expiration time.Duration
}

// Errors of the bus.
var (
	// ErrNoInbox: the target agent's inbox does not exist (the server
	// never heard its hello, or its inbox was deleted and not declared
	// again yet).
	ErrNoInbox = errors.New("agent inbox does not exist")
	// ErrUnroutable: no server queue takes the event (the queue was
	// deleted; the server declares it again).
	ErrUnroutable = errors.New("no server queue takes the event")
	// ErrInboxFull: the inbox holds its maximum number of messages.
	ErrInboxFull = errors.New("agent inbox is full")
	// ErrReject, wrapped in a handler's error, dead-letters the delivery.
	ErrReject = errors.New("message rejected")
	// ErrClosed: the bus was closed.
	ErrClosed = errors.New("bus closed")
	// ErrClaimed: another process is the primary of that agent.
	ErrClaimed = errors.New("another process is primary for this agent")
	// ErrForbidden: the broker refused an operation this identity has no
	// right to (an agent the server does not know yet, or no longer
	// accepts).
	ErrForbidden = errors.New("the broker refused: no right to do this")
	// ErrNoExchange: the broker has no exchange of the bus's namespace to
	// publish to: no server declared the namespace there (a server on
	// another namespace, virtual host or broker, or none running yet).
	// Every publish fails so until one does. Its message goes on with the
	// exchange's name and what to check.
	ErrNoExchange = errors.New("no exchange")
)

// Queue names a server queue.
type Queue string

// Server queues.
const (
	// QueueEvents receives status, facts, discovery: everything but drift.
	QueueEvents Queue = "tether.server.events"
	// QueueCompliance receives drift alerts, kept apart so they never wait
	// behind bulk status.
	QueueCompliance Queue = "tether.server.compliance"
)

// QueueFor returns the server queue an event kind is routed to.
func QueueFor(k Kind) Queue {
	if k == KindCompliance {
		return QueueCompliance
	}
	return QueueEvents
}

// InboxName is the name of an agent's inbox queue.
func InboxName(env, agent string) string {
	return "tether.agent." + env + "." + agent
}

// CommandKey is the routing key of commands for an agent.
func CommandKey(env, agent string) string { return env + "." + agent }

// EventKey is the routing key of an agent's events.
func EventKey(env, agent string, k Kind) string { return env + "." + agent + "." + string(k) }

// ParseEventKey reads an event's routing key (EventKey) back. Agent names
// and kinds may hold dots, environment names may not, and no event kind
// ends with another after a dot: a key reads one way only.
func ParseEventKey(key string) (env, agent string, kind Kind, ok bool) {
	env, rest, found := strings.Cut(key, ".")
	if !found || model.ValidateEnvName(env) != nil {
		return "", "", "", false
	}
	for _, k := range EventKinds() {
		if a, cut := strings.CutSuffix(rest, "."+string(k)); cut && model.ValidateAgentName(a) == nil {
			return env, a, k, true
		}
	}
	return "", "", "", false
}
