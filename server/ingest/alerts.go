package ingest

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/tetherhq/tether/bus"
	"github.com/tetherhq/tether/model"
	"github.com/tetherhq/tether/server/event"
	"github.com/tetherhq/tether/server/record"
)

// security logs, stores and publishes a security alert about an event,
// filed under its sender (origin.go), who pays for it: never under the
// agent a forgery claims to be.
func (in *Ingester) security(ctx context.Context, e *bus.Envelope, what string) {
	from := in.senderOf(ctx, e)
	what += from.describe(e)
	in.alertSecurity(ctx, from.env, from.agent, what, fmt.Sprintf("%s (%s message %s)", what, e.Kind, e.ID))
}

// SecurityAlert raises a security alert about agent in env that no
// message carried (a refused broker login).
func (in *Ingester) SecurityAlert(ctx context.Context, env, agent, what string) {
	in.alertSecurity(ctx, env, agent, what, what)
}

// SecurityNotice raises a security alert about an organization's users
// that no environment holds (a password guessed from many addresses): it
// is counted, logged, and published on the event stream without an
// environment, which the server's admins follow. It is not stored with
// the environments' alerts; the API writes it to the organization's
// audit log.
func (in *Ingester) SecurityNotice(_ context.Context, org, what string) {
	in.metrics.Security()
	in.log.Warn().Str("org", org).Msg("security: " + what)
	now := time.Now().UTC()
	in.feed.Publish(event.Event{Kind: event.Security, At: now, Error: what, Alert: &record.Alert{At: now, Kind: record.AlertSecurity, Message: what}})
}

func (in *Ingester) alertSecurity(ctx context.Context, env, agent, what, message string) {
	in.metrics.Security()
	now := time.Now()
	store, firstHeld := in.flood.alert(env, agent, what, now)
	if !store {
		in.metrics.SecurityHeld()
		if firstHeld {
			in.log.Warn().Str("env", env).Str("agent", agent).Dur("window", in.flood.window).
				Msg("security: more alerts about this agent than are stored one by one; the rest of this window's are counted and summed up after it")
		}
		return
	}
	in.log.Warn().Str("env", env).Str("agent", agent).Msg("security: " + what)
	in.storeAlert(ctx, record.Alert{At: now.UTC(), Env: env, Agent: agent, Kind: record.AlertSecurity, Message: message})
}

// storeAlert records a security alert and streams it: its event is
// appended to the event log in the alert's transaction. An alert the
// store does not take (no such environment, the database away) is
// still streamed, appended in the background.
func (in *Ingester) storeAlert(ctx context.Context, alert record.Alert) {
	ev := event.Event{Kind: event.Security, Env: alert.Env, Agent: alert.Agent, Error: alert.Message, Alert: &alert, At: alert.At}
	events, err := event.InLog(&ev)
	if err == nil {
		if err = in.store.RecordAlerts(ctx, []record.Alert{alert}, events...); err == nil {
			in.feed.Logged(ev)
			return
		}
	}
	if !errors.Is(err, model.ErrNotFound) {
		in.log.Warn().Err(err).Msg("cannot store the security alert; it was logged above")
	}
	in.feed.Publish(ev)
}
