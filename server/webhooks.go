package server

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"time"

	"github.com/tetherhq/tether/model"
	"github.com/tetherhq/tether/server/notify"
	"github.com/tetherhq/tether/server/record"
)

// EventWebhookTest is the kind of the delivery a webhook test sends.
const EventWebhookTest = "webhook.test"

// CreateWebhook creates a webhook of env: without a secret the server
// makes one; without kinds it gets the alerts (record.DefaultWebhookKinds).
// The answer holds the secret, this once.
func (s *Server) CreateWebhook(ctx context.Context, env string, req record.WebhookRequest, by string) (record.Webhook, error) {
	w := record.Webhook{Env: env, Name: req.Name, Kinds: slices.Clone(record.DefaultWebhookKinds), Enabled: true, CreatedBy: by}
	if req.URL != nil {
		w.URL = *req.URL
	}
	if req.Kinds != nil {
		w.Kinds = *req.Kinds
	}
	if req.Enabled != nil {
		w.Enabled = *req.Enabled
	}
	if req.Secret != nil {
		w.Secret = *req.Secret
	} else {
		var err error
		if w.Secret, err = notify.NewSecret(); err != nil {
			return w, err
		}
	}
	// Bad input is refused before the URL's host is looked up.
	if err := record.ValidateWebhook(w); err != nil {
		return w, fmt.Errorf("%w: %w", model.ErrInvalid, err)
	}
	if err := s.checkWebhookURL(ctx, w.URL); err != nil {
		return w, err
	}
	return s.store.CreateWebhook(ctx, w)
}

// UpdateWebhook changes what req sets of a webhook; the answer holds the
// secret only when this call made or set it.
func (s *Server) UpdateWebhook(ctx context.Context, env string, id int64, req record.WebhookRequest) (record.Webhook, error) {
	var secret string
	if req.RotateSecret {
		if req.Secret != nil {
			return record.Webhook{}, fmt.Errorf("%w: %w: give a secret or ask to rotate it, not both", model.ErrInvalid, record.ErrInvalidHook)
		}
		var err error
		if secret, err = notify.NewSecret(); err != nil {
			return record.Webhook{}, err
		}
	} else if req.Secret != nil {
		secret = *req.Secret
	}
	if req.URL != nil {
		if err := s.checkWebhookURL(ctx, *req.URL); err != nil {
			return record.Webhook{}, err
		}
	}
	w, err := s.store.UpdateWebhook(ctx, env, id, func(w *record.Webhook) error {
		if req.Name != "" {
			w.Name = req.Name
		}
		if req.URL != nil {
			w.URL = *req.URL
		}
		if req.Kinds != nil {
			w.Kinds = *req.Kinds
		}
		if req.Enabled != nil {
			w.Enabled = *req.Enabled
		}
		if secret != "" {
			w.Secret = secret
		}
		return nil
	})
	if secret == "" {
		w.Secret = ""
	}
	return w, err
}

// checkWebhookURL refuses a URL whose host the webhook policy denies
// (an address, or a name resolving to one), so that an admin hears of it
// when setting the webhook; the sender checks again, on the address it
// dials, which is the guard.
func (s *Server) checkWebhookURL(ctx context.Context, url string) error {
	if err := s.cfg.Webhooks.Policy.CheckURL(ctx, url); err != nil {
		return fmt.Errorf("%w: %w", model.ErrInvalid, fmt.Errorf("%w: url: %w", record.ErrInvalidHook, err))
	}
	return nil
}

// GetWebhook returns a webhook of env, without its secret.
func (s *Server) GetWebhook(ctx context.Context, env string, id int64) (record.Webhook, error) {
	w, err := s.store.GetWebhook(ctx, env, id)
	w.Secret = ""
	return w, err
}

// ListWebhooks returns the webhooks of env, without their secrets.
func (s *Server) ListWebhooks(ctx context.Context, env string) ([]record.Webhook, error) {
	return s.store.ListWebhooks(ctx, env)
}

// DeleteWebhook deletes a webhook and its deliveries.
func (s *Server) DeleteWebhook(ctx context.Context, env string, id int64) error {
	return s.store.DeleteWebhook(ctx, env, id)
}

// WebhookDeliveries returns the newest deliveries of a webhook.
func (s *Server) WebhookDeliveries(ctx context.Context, env string, id int64, limit int) ([]record.Delivery, error) {
	return s.store.Deliveries(ctx, env, id, limit)
}

// TestWebhook queues a delivery of kind webhook.test to a webhook, sent
// as any other (signed, retried), whether it is enabled or not.
func (s *Server) TestWebhook(ctx context.Context, env string, id int64) (record.Delivery, error) {
	data, err := json.Marshal(struct {
		Kind    string    `json:"kind"`
		Env     string    `json:"env"`
		At      time.Time `json:"at"`
		Message string    `json:"message"`
	}{EventWebhookTest, env, time.Now().UTC(), "a test delivery, asked for by tether webhook test"})
	if err != nil {
		return record.Delivery{}, err
	}
	d, err := s.store.QueueDelivery(ctx, env, id, EventWebhookTest, data)
	if err == nil {
		s.sender.Wake()
	}
	return d, err
}
