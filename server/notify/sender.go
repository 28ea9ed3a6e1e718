package notify

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/rs/zerolog"

	"github.com/tetherhq/tether/server/record"
)

// Outbox is the store's queue of webhook deliveries.
type Outbox interface {
	ClaimDeliveries(ctx context.Context, now, until time.Time, limit int) ([]record.DeliveryClaim, error)
	FinishDelivery(ctx context.Context, id int64, o record.DeliveryOutcome) error
}

// SenderConfig configures a Sender. Zero fields take the defaults.
type SenderConfig struct {
	// Workers bounds the deliveries in flight (default 8); each webhook
	// has at most one, so a slow receiver holds one worker at most.
	Workers int
	// Timeout bounds one attempt (default 10s).
	Timeout time.Duration
	// MaxAge is how long a delivery is retried before it is marked
	// failed (default 24h).
	MaxAge time.Duration
	// FirstRetry is the pause after a first failure (default 10s); it
	// doubles with each failure, up to MaxRetry (default 1h), with up to
	// a fifth of jitter either way.
	FirstRetry, MaxRetry time.Duration
	// Poll is how often the outbox is looked at without a wake (default
	// 1s): deliveries queued by another replica, retries come due.
	Poll time.Duration
	// Policy says which addresses deliveries may connect to (the zero
	// Policy refuses DefaultDeny). Redirects are never followed: a
	// receiver's 3xx is a failed attempt, so no answer leads a delivery
	// anywhere the policy did not check.
	Policy Policy
}

// DefaultSender returns the configuration zero fields take.
func DefaultSender() SenderConfig {
	return SenderConfig{Workers: 8, Timeout: 10 * time.Second, MaxAge: 24 * time.Hour, FirstRetry: 10 * time.Second, MaxRetry: time.Hour, Poll: time.Second}
}

func (c SenderConfig) withDefaults() SenderConfig {
	d := DefaultSender()
	orDefault(&c.Workers, d.Workers)
	orDefault(&c.Timeout, d.Timeout)
	orDefault(&c.MaxAge, d.MaxAge)
	orDefault(&c.FirstRetry, d.FirstRetry)
	orDefault(&c.MaxRetry, d.MaxRetry)
	orDefault(&c.Poll, d.Poll)
	return c
}

func orDefault[T int | time.Duration](v *T, d T) {
	if *v <= 0 {
		*v = d
	}
}

// Sender posts the outbox's deliveries to their webhooks. Several
// replicas may run one each: a delivery is claimed by one (for longer
// than an attempt lasts) before it is sent.
type Sender struct {
	outbox Outbox
	cfg    SenderConfig
	client *http.Client
	logger zerolog.Logger
	wake   chan struct{}
}

// NewSender returns a sender over outbox.
func NewSender(outbox Outbox, cfg SenderConfig, logger zerolog.Logger) *Sender {
	return &Sender{outbox: outbox, cfg: cfg.withDefaults(), client: newClient(cfg.Policy), logger: logger.With().Str("component", "webhooks").Logger(), wake: make(chan struct{}, 1)}
}

// newClient returns the client deliveries are posted with: it connects
// only where policy allows, follows no redirect, and ignores the proxy
// variables (HTTPS_PROXY…): through a proxy, the address checked would
// be the proxy's, and the receiver's would go unchecked.
func newClient(policy Policy) *http.Client {
	t := &http.Transport{
		Proxy:                 nil,
		DialContext:           policy.Dial(net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}),
		ForceAttemptHTTP2:     true,
		MaxIdleConns:          100,
		IdleConnTimeout:       90 * time.Second,
		TLSHandshakeTimeout:   10 * time.Second,
		ExpectContinueTimeout: time.Second,
	}
	return &http.Client{Transport: t, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
}

// Wake tells the sender deliveries may be due. It never blocks.
func (s *Sender) Wake() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// claimTimeout bounds one claim of deliveries in the store.
const claimTimeout = 10 * time.Second

// Run sends deliveries until ctx ends. Then it claims no more and waits
// for the attempts in flight to end (each at most Timeout) and be
// recorded, so that none is sent twice by a restart.
func (s *Sender) Run(ctx context.Context) error {
	var wg sync.WaitGroup
	defer wg.Wait()
	free := make(chan struct{}, s.cfg.Workers)
	for range s.cfg.Workers {
		free <- struct{}{}
	}
	t := time.NewTicker(s.cfg.Poll)
	defer t.Stop()
	failing := false
	for {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if n := len(free); n > 0 {
			now := time.Now()
			// A claim outlives the attempt: no other sender takes it
			// while this one may still send it. It is not cut short by
			// a stop: a claim committed in the store as its caller gave
			// up would hold its deliveries from every sender until it
			// expires; the attempts of a claim made go on (a graceful
			// stop waits for them).
			cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), claimTimeout)
			claims, err := s.outbox.ClaimDeliveries(cctx, now, now.Add(s.cfg.Timeout+time.Minute), n)
			cancel()
			switch {
			case err != nil && ctx.Err() == nil && !failing:
				s.logger.Warn().Err(err).Msg("claim webhook deliveries: retrying")
				failing = true
			case err == nil && failing:
				failing = false
			}
			for _, c := range claims {
				<-free
				wg.Add(1)
				go func() { // owned by Run: waited for above
					defer wg.Done()
					s.deliver(ctx, c)
					free <- struct{}{}
					s.Wake()
				}()
			}
			if len(claims) == n {
				continue // maybe more are due
			}
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-s.wake:
		case <-t.C:
		}
	}
}

// Body is the JSON a webhook receives: the event, with the delivery's ID
// (the HeaderID), its kind, the environment and when it happened.
type Body struct {
	ID        string          `json:"id"`
	Type      string          `json:"type"`
	Timestamp time.Time       `json:"timestamp"`
	Data      json.RawMessage `json:"data"`
}

// deliver makes one attempt and records it. Neither is cut short by ctx:
// a graceful stop waits for them.
func (s *Sender) deliver(ctx context.Context, c record.DeliveryClaim) {
	ctx = context.WithoutCancel(ctx)
	o := s.attempt(ctx, c)
	log := s.logger.With().Int64("delivery", c.ID).Int64("webhook", c.WebhookID).Str("kind", c.Kind).Int("attempt", c.Attempts).Logger()
	if o.State == record.DeliveryPending {
		backoff := min(s.cfg.FirstRetry<<min(c.Attempts-1, 20), s.cfg.MaxRetry)
		backoff += time.Duration((rand.Float64()*0.4 - 0.2) * float64(backoff))
		o.NextAt = time.Now().Add(backoff)
		if o.NextAt.After(c.CreatedAt.Add(s.cfg.MaxAge)) {
			o.State = record.DeliveryFailed
			log.Warn().Str("error", o.Error).Msg("webhook delivery failed for good: retried for as long as allowed")
		} else {
			log.Info().Str("error", o.Error).Time("next", o.NextAt).Msg("webhook delivery failed: will retry")
		}
	}
	fctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := s.outbox.FinishDelivery(fctx, c.ID, o); err != nil {
		// The claim expires; another attempt follows (the receiver
		// deduplicates by the delivery's ID).
		log.Error().Err(err).Msg("record a webhook delivery")
	}
}

func (s *Sender) attempt(ctx context.Context, c record.DeliveryClaim) record.DeliveryOutcome {
	id := strconv.FormatInt(c.ID, 10)
	body, err := json.Marshal(Body{ID: id, Type: c.Kind, Timestamp: c.CreatedAt.UTC(), Data: json.RawMessage(c.Payload)})
	if err != nil {
		return record.DeliveryOutcome{State: record.DeliveryFailed, Error: fmt.Sprintf("the event is not JSON: %v", err)}
	}
	ctx, cancel := context.WithTimeout(ctx, s.cfg.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.URL, bytes.NewReader(body))
	if err != nil {
		return record.DeliveryOutcome{State: record.DeliveryFailed, Error: err.Error()}
	}
	now := time.Now()
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "tether-webhook")
	req.Header.Set(HeaderID, id)
	req.Header.Set(HeaderTimestamp, strconv.FormatInt(now.Unix(), 10))
	req.Header.Set(HeaderSignature, Sign(c.Secret, id, now, body))
	req.Header.Set("Tether-Event", c.Kind)
	resp, err := s.client.Do(req)
	latency := time.Since(now)
	// Refused by the policy: retried as any failure, so that deliveries
	// queued before the operator allows a receiver's network still go
	// once it is allowed; an attempt refused sends no packet.
	var denied *DeniedError
	if errors.As(err, &denied) {
		return record.DeliveryOutcome{State: record.DeliveryPending, Error: "refused by the server's webhook policy: " + denied.Error(), Latency: latency}
	}
	if err != nil {
		return record.DeliveryOutcome{State: record.DeliveryPending, Error: err.Error(), Latency: latency}
	}
	defer resp.Body.Close()
	snippet, _ := io.ReadAll(io.LimitReader(resp.Body, 256))
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	if resp.StatusCode >= 200 && resp.StatusCode < 300 {
		return record.DeliveryOutcome{State: record.DeliveryDelivered, StatusCode: resp.StatusCode, Latency: latency}
	}
	return record.DeliveryOutcome{State: record.DeliveryPending, StatusCode: resp.StatusCode, Latency: latency,
		Error: fmt.Sprintf("the receiver answered %s: %s", resp.Status, bytes.ToValidUTF8(bytes.TrimSpace(snippet), nil))}
}
