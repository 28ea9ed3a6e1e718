// Package amqp is the bus over RabbitMQ: a direct exchange of
// per-agent inboxes for commands, a topic exchange of events feeding the
// server's queues, a dead-letter queue for what cannot be decoded or
// verified, publisher confirms on every publish, manual acknowledgements,
// and a connection supervisor that reconnects with exponential back-off and
// full jitter and redeclares the topology after every reconnect.
//
// amqp091-go types never leave this package.
package amqp

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net/url"
	"os"
	"time"

	"github.com/tetherhq/tether/bus"
)

// Queue types (Config.QueueType).
const (
	// QueueQuorum: replicated (Raft) queues; the default, for small and
	// medium fleets.
	QueueQuorum = "quorum"
	// QueueClassic: one node's queues; for very large fleets, where one Raft
	// group per agent inbox costs too much.
	QueueClassic = "classic"
)

// Config configures the connection and the topology.
type Config struct {
	// URL is amqp://user:password@host:port/vhost or amqps://….
	URL string
	// Namespace prefixes every exchange and queue name ("tether": tether.cmd,
	// tether.agent.<env>.<agent>, …). Tests use a namespace of their own.
	Namespace string
	// QueueType is QueueQuorum or QueueClassic.
	QueueType string
	// InboxMaxLength bounds an agent inbox; a send to a full inbox fails
	// with bus.ErrInboxFull.
	InboxMaxLength int
	// MaxMessageSize bounds an encoded envelope. Larger ones are refused
	// with an error naming both sizes (they are never split).
	MaxMessageSize int
	// Heartbeat keeps NAT mappings alive and detects dead peers.
	Heartbeat time.Duration
	// Prefetch is how many unacknowledged deliveries a consumer holds.
	Prefetch int
	// EventConcurrency is how many events of a server queue one consumer
	// hands to its handler at once (acknowledged together as they
	// finish). Agent inboxes are always handled one command at a time,
	// in order.
	EventConcurrency int
	// PublisherChannels bounds the channels publishing at once.
	PublisherChannels int
	// ReconnectMin and ReconnectMax bound the back-off between reconnect
	// attempts (full jitter: a random delay up to the current bound), and
	// between subscriptions of a consumer whose queue keeps being deleted
	// or cannot be declared.
	ReconnectMin, ReconnectMax time.Duration
	// TopologyCheck is how often the server declares its topology again
	// (exchanges, server and dead-letter queues, bindings), so that what a
	// client with rights on the broker deleted or unbound comes back
	// without a restart. A deleted server queue comes back at once: its
	// consumers declare it. Agents do not check.
	TopologyCheck time.Duration
	// SubscriptionCheck is how long a consumer may hear nothing before it
	// makes sure its subscription still works: a server queue's consumer
	// subscribes again, an inbox's consumer sends a probe through its
	// inbox and subscribes again (the inbox lost) when the probe does not
	// come back by the next check. RabbitMQ can drop a quorum queue's
	// consumers without a cancel when the queue is deleted and declared
	// again at once; this bounds how long one stays deaf.
	SubscriptionCheck time.Duration
	// TLS: CA certificate to trust (empty: the system's CAs), client
	// certificate and key (PEM files), for amqps:// URLs. They are read
	// again at every connection attempt, so replacing them needs no
	// restart.
	CAFile, CertFile, KeyFile string
	// ConnectionName is shown in RabbitMQ's management (e.g. agent web-1).
	ConnectionName string
	// Agent declares nothing: the server owns the exchanges, its queues,
	// every inbox (which it declares on the agent's hello, with its
	// arguments), the queue type and every binding; an agent only reads
	// its inbox. An agent never publishes to the commands or dead-letter
	// exchanges: a command it cannot read is dropped (and logged), and its
	// inbox is checked without a probe.
	Agent bool
	// Login, when set, gives the user name and password of each new
	// connection (an agent's signed, short-lived login; see
	// bus.LoginCredentials) instead of the URL's.
	Login func() (user, password string, err error)
	// DeadLetterMax bounds the dead-letter queue (the oldest message
	// goes first): what a flood of bad messages leaves there is bounded.
	DeadLetterMax int
}

// Default returns the configuration for a local broker.
func Default() Config {
	return Config{
		URL:               "amqp://guest:guest@127.0.0.1:5672/",
		Namespace:         "tether",
		QueueType:         QueueQuorum,
		InboxMaxLength:    bus.DefaultInboxLength,
		MaxMessageSize:    bus.MaxEnvelopeSize,
		Heartbeat:         20 * time.Second,
		Prefetch:          32,
		EventConcurrency:  64,
		PublisherChannels: 8,
		ReconnectMin:      500 * time.Millisecond,
		ReconnectMax:      60 * time.Second,
		TopologyCheck:     30 * time.Second,
		SubscriptionCheck: 60 * time.Second,
		ConnectionName:    "tether",
		DeadLetterMax:     10000,
	}
}

// ErrConfig is wrapped by every error Validate returns.
var ErrConfig = errors.New("invalid bus configuration")

// Validate checks the configuration.
func (c Config) Validate() error {
	u, err := url.Parse(c.URL)
	if err != nil || (u.Scheme != "amqp" && u.Scheme != "amqps") || u.Host == "" {
		return fmt.Errorf("%w: URL %q: want amqp://user:password@host:5672/vhost or amqps://…", ErrConfig, redactURL(c.URL))
	}
	switch {
	case c.Namespace == "":
		return fmt.Errorf("%w: empty namespace", ErrConfig)
	case c.QueueType != QueueQuorum && c.QueueType != QueueClassic:
		return fmt.Errorf("%w: queue type %q: want %s or %s", ErrConfig, c.QueueType, QueueQuorum, QueueClassic)
	case c.InboxMaxLength < 1:
		return fmt.Errorf("%w: inbox max length %d: want at least 1", ErrConfig, c.InboxMaxLength)
	case c.MaxMessageSize < 1024:
		return fmt.Errorf("%w: max message size %d: want at least 1024 bytes", ErrConfig, c.MaxMessageSize)
	case c.Heartbeat < time.Second || c.Heartbeat > 5*time.Minute:
		return fmt.Errorf("%w: heartbeat %v: want 1s to 5m (10-30s keeps NAT mappings alive)", ErrConfig, c.Heartbeat)
	case c.DeadLetterMax < 1:
		return fmt.Errorf("%w: dead-letter max %d: want at least 1", ErrConfig, c.DeadLetterMax)
	case c.EventConcurrency < 1:
		return fmt.Errorf("%w: event concurrency %d: want at least 1", ErrConfig, c.EventConcurrency)
	case c.Prefetch < 1:
		return fmt.Errorf("%w: prefetch %d: want at least 1", ErrConfig, c.Prefetch)
	case c.PublisherChannels < 1:
		return fmt.Errorf("%w: publisher channels %d: want at least 1", ErrConfig, c.PublisherChannels)
	case c.ReconnectMin <= 0 || c.ReconnectMax < c.ReconnectMin:
		return fmt.Errorf("%w: reconnect back-off %v..%v: want 0 < min <= max", ErrConfig, c.ReconnectMin, c.ReconnectMax)
	case c.TopologyCheck < time.Second:
		return fmt.Errorf("%w: topology check every %v: want at least 1s", ErrConfig, c.TopologyCheck)
	case c.SubscriptionCheck < time.Second:
		return fmt.Errorf("%w: subscription check every %v: want at least 1s", ErrConfig, c.SubscriptionCheck)
	case (c.CertFile == "") != (c.KeyFile == ""):
		return fmt.Errorf("%w: a client certificate needs both a certificate and a key file", ErrConfig)
	case (c.CAFile != "" || c.CertFile != "") && u.Scheme != "amqps":
		return fmt.Errorf("%w: TLS files are set but the URL is %s://, not amqps://", ErrConfig, u.Scheme)
	}
	return nil
}

// tlsConfig builds the TLS configuration of an amqps:// URL (nil for
// amqp://).
func (c Config) tlsConfig() (*tls.Config, error) {
	u, _ := url.Parse(c.URL)
	if u.Scheme != "amqps" {
		return nil, nil
	}
	t := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: u.Hostname()}
	if c.CAFile != "" {
		pem, err := os.ReadFile(c.CAFile)
		if err != nil {
			return nil, fmt.Errorf("%w: CA file: %w", ErrConfig, err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("%w: CA file %s holds no PEM certificate", ErrConfig, c.CAFile)
		}
		t.RootCAs = pool
	}
	if c.CertFile != "" {
		cert, err := tls.LoadX509KeyPair(c.CertFile, c.KeyFile)
		if err != nil {
			return nil, fmt.Errorf("%w: client certificate: %w", ErrConfig, err)
		}
		t.Certificates = []tls.Certificate{cert}
	}
	return t, nil
}

// redactURL hides the password of a URL for messages and logs.
func redactURL(s string) string {
	u, err := url.Parse(s)
	if err != nil {
		return "(unparsable URL)"
	}
	return u.Redacted()
}
