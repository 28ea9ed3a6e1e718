package record

import (
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strings"
	"time"
)

// LoggedEvent is one event of the stored event log, which every replica
// streams and a follower resumes from (Last-Event-ID is its ID).
type LoggedEvent struct {
	ID   int64  `json:"id"`
	Org  string `json:"org"`
	Env  string `json:"env"`
	Kind string `json:"kind"`
	// Data is the event's JSON, as it is streamed.
	Data []byte    `json:"data"`
	At   time.Time `json:"at"`
}

// EventLogBounds are the oldest ID the event log keeps (First, zero when
// it keeps none) and the newest it ever gave (Last, kept or not: pruned,
// or of a deleted environment), with every ID up to Last committed.
type EventLogBounds struct {
	First, Last int64
}

// WebhookAllKinds, as a webhook's only kind, asks for every event.
const WebhookAllKinds = "*"

// DefaultWebhookKinds are the kinds a webhook gets when it names none:
// the alerts.
var DefaultWebhookKinds = []string{"compliance.drift", "security.alert", "compile.alert", "compile.recovered"}

// Webhook is where an environment's events are posted, signed with its
// secret.
type Webhook struct {
	ID   int64  `json:"id"`
	Env  string `json:"env"`
	Name string `json:"name"`
	URL  string `json:"url"`
	// Secret signs the deliveries; shown only by the call that made it.
	Secret    string    `json:"secret,omitempty"`
	Kinds     []string  `json:"kinds"`
	Enabled   bool      `json:"enabled"`
	CreatedBy string    `json:"created_by,omitempty"`
	CreatedAt time.Time `json:"created_at"`
	UpdatedAt time.Time `json:"updated_at"`
}

// Matches reports whether the webhook asks for events of kind.
func (w Webhook) Matches(kind string) bool {
	return slices.Contains(w.Kinds, WebhookAllKinds) || slices.Contains(w.Kinds, kind)
}

// WebhookRequest creates or changes a webhook; a field left out (nil)
// keeps its value (or takes its default, on create).
type WebhookRequest struct {
	Name    string    `json:"name,omitempty"`
	URL     *string   `json:"url,omitempty"`
	Secret  *string   `json:"secret,omitempty"`
	Kinds   *[]string `json:"kinds,omitempty"`
	Enabled *bool     `json:"enabled,omitempty"`
	// RotateSecret makes a new secret (shown once in the answer).
	RotateSecret bool `json:"rotate_secret,omitempty"`
}

// ErrInvalidHook is wrapped by what ValidateWebhook refuses (an outgoing webhook; ErrInvalidWebhook is an incoming push).
var ErrInvalidHook = errors.New("invalid webhook")

// Limits of a webhook's fields.
const (
	MaxWebhookURL    = 2048
	MaxWebhookName   = 64
	MaxWebhookKinds  = 64
	MinWebhookSecret = 16
	MaxWebhookSecret = 256
)

// ValidateWebhook checks a webhook before it is stored.
func ValidateWebhook(w Webhook) error {
	if w.Name == "" || len(w.Name) > MaxWebhookName || strings.ContainsFunc(w.Name, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '-' || r == '_' || r == '.')
	}) {
		return fmt.Errorf("%w: name %q: want 1 to %d of a-z, 0-9, '-', '_', '.'", ErrInvalidHook, clipName(w.Name), MaxWebhookName)
	}
	if len(w.URL) > MaxWebhookURL {
		return fmt.Errorf("%w: url longer than %d characters", ErrInvalidHook, MaxWebhookURL)
	}
	u, err := url.Parse(w.URL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("%w: url %q: want http:// or https:// and a host", ErrInvalidHook, clipName(w.URL))
	}
	if u.User != nil {
		return fmt.Errorf("%w: url: credentials in the URL would be logged; the deliveries are signed with the webhook's secret instead", ErrInvalidHook)
	}
	if n := len(w.Secret); n < MinWebhookSecret || n > MaxWebhookSecret {
		return fmt.Errorf("%w: a secret has %d to %d characters; leave it out and the server makes one", ErrInvalidHook, MinWebhookSecret, MaxWebhookSecret)
	}
	if len(w.Kinds) == 0 || len(w.Kinds) > MaxWebhookKinds {
		return fmt.Errorf("%w: kinds: want 1 to %d event kinds (%q for all)", ErrInvalidHook, MaxWebhookKinds, WebhookAllKinds)
	}
	for _, k := range w.Kinds {
		if k == "" || len(k) > 64 || strings.ContainsAny(k, " \t\r\n") {
			return fmt.Errorf("%w: kind %q: want an event kind such as compliance.drift, or %q", ErrInvalidHook, clipName(k), WebhookAllKinds)
		}
		if k == EventResults {
			return fmt.Errorf("%w: kind %s is how the event log stores a report's results; ask for %s: one delivery per result", ErrInvalidHook, EventResults, EventResult)
		}
	}
	return nil
}

func clipName(s string) string {
	if len(s) > 80 {
		return s[:80] + "…"
	}
	return s
}

// DeliveryState is where a webhook delivery is.
type DeliveryState string

// Delivery states.
const (
	DeliveryPending   DeliveryState = "pending"
	DeliveryDelivered DeliveryState = "delivered"
	DeliveryFailed    DeliveryState = "failed"
)

// Delivery is one event to post to one webhook: the outbox row, and the
// log of its attempts.
type Delivery struct {
	ID        int64         `json:"id"`
	WebhookID int64         `json:"webhook_id"`
	EventID   int64         `json:"event_id"`
	Kind      string        `json:"kind"`
	State     DeliveryState `json:"state"`
	Attempts  int           `json:"attempts"`
	// StatusCode is the receiver's answer to the last attempt (0: none,
	// Error says why).
	StatusCode int       `json:"status_code"`
	Error      string    `json:"error,omitempty"`
	LatencyMS  int64     `json:"latency_ms"`
	NextAt     time.Time `json:"next_at"`
	CreatedAt  time.Time `json:"created_at"`
	// FinishedAt is when it was delivered or given up.
	FinishedAt *time.Time `json:"finished_at,omitempty"`
	// Payload is the event's JSON (not listed by the API).
	Payload []byte `json:"-"`
}

// DeliveryOutcome is what one attempt came to.
type DeliveryOutcome struct {
	State      DeliveryState
	StatusCode int
	Error      string
	Latency    time.Duration
	// NextAt is when to try again (DeliveryPending).
	NextAt time.Time
}

// DeliveryClaim is a delivery claimed for sending, with what it needs.
type DeliveryClaim struct {
	Delivery
	URL    string
	Secret string
}

// FleetCounts are the counts the fleet gauges of /metrics show.
type FleetCounts struct {
	// Resources counts resource statuses by environment, state and
	// compliance.
	Resources []ResourceCount
	// Agents counts agents by environment and status: online, offline
	// (accepted, not connected), pending, rejected.
	Agents []AgentCount
	// Deliveries counts webhook deliveries by state.
	Deliveries map[DeliveryState]int
}

// ResourceCount is a number of resource statuses.
type ResourceCount struct {
	Env, State, Compliance string
	N                      int
}

// AgentCount is a number of agents.
type AgentCount struct {
	Env, Status string
	N           int
}
