// Package machines is the server's side of machines made from blueprints:
// platforms, distributions and hosts as operators and models declare them
// (checked against each other), a host's provisioning state machine moved
// by operators, by the platform's agent's reports and by the machine's own
// agent enrolling with the one-time token bound to its host, the controls
// of an instance (start, stop, reboot, destroy) sent to the agent serving
// its platform, and hypervisor discovery from that agent's inventories.
//
// The machines themselves are made by drivers on agents (a libvirt
// hypervisor's agent), never here: the server sends signed machine
// commands to the agent's inbox and hears back machine reports, so
// provisioning crosses NAT the way configuration does. Every transition
// of a host is an event on the stream (webhooks take it from there) and an
// entry of the audit log.
package machines

import (
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/rs/zerolog"

	"github.com/tetherhq/tether/bus"
	"github.com/tetherhq/tether/model"
	"github.com/tetherhq/tether/server/event"
	"github.com/tetherhq/tether/server/record"
	"github.com/tetherhq/tether/server/store"
)

// Config configures the room (the server's Config names each field).
type Config struct {
	// ProvisionTimeout bounds how long a host may be provisioning before
	// its machine's agent enrolls: past it, the host fails and its
	// machine is destroyed. A host's setting provision_timeout overrides
	// it.
	ProvisionTimeout time.Duration
	// StopGrace is how long a stop waits for the guest before forcing it
	// off.
	StopGrace time.Duration
	// Sweep is how often hosts past their timeout are looked for.
	Sweep time.Duration
}

func (c Config) withDefaults() Config {
	if c.ProvisionTimeout <= 0 {
		c.ProvisionTimeout = 10 * time.Minute
	}
	if c.StopGrace <= 0 {
		c.StopGrace = 30 * time.Second
	}
	if c.Sweep <= 0 {
		c.Sweep = min(5*time.Second, c.ProvisionTimeout/4)
	}
	return c
}

// Services are what the room works with, handed over by the server.
type Services struct {
	Store store.Store
	// Send seals a command and sends it to an agent's inbox, where it
	// expires after expire (zero: never).
	Send func(ctx context.Context, kind bus.Kind, env, agent string, body any, expire time.Duration) error
	Feed *event.Feed
	// ServerKey is the key the server signs with: a host's token carries
	// its fingerprint, so the machine's agent trusts only this server.
	ServerKey func() ed25519.PublicKey
	// ForgetAgent deletes an agent's record and inbox (the ingester's):
	// a destroyed machine's agent, so that the next machine of the host
	// enrolls afresh.
	ForgetAgent func(ctx context.Context, env, name string) error
	// Seal and Open seal a secret setting at rest and open it, for
	// purpose (the setting's name): trust.Keys' SealValue and OpenValue.
	Seal func(ctx context.Context, purpose, plain string) (string, error)
	Open func(ctx context.Context, purpose, sealed string) (string, error)
	Log  zerolog.Logger
	// Now is the clock (nil: time.Now).
	Now func() time.Time
}

// Room owns machines' records, states and controls. Its zero value is not
// usable: New.
type Room struct {
	cfg Config
	svc Services
	// ops remembers the operations sent and not answered yet, by op ID:
	// what a report answers (lost on a restart: the inventory that follows
	// tells the instances' state anyway).
	mu  sync.Mutex
	ops map[string]pendingOp
}

type pendingOp struct {
	env, host, platform string
	op                  model.MachineOp
	by                  string
	sent                time.Time
}

// New returns a room over svc, configured by cfg.
func New(cfg Config, svc Services) *Room {
	if svc.Now == nil {
		svc.Now = time.Now
	}
	return &Room{cfg: cfg.withDefaults(), svc: svc, ops: map[string]pendingOp{}}
}

// Run sweeps hosts provisioning past their timeout until ctx ends.
func (r *Room) Run(ctx context.Context) {
	t := time.NewTicker(r.cfg.Sweep)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if err := r.sweep(ctx); err != nil && ctx.Err() == nil {
				r.svc.Log.Warn().Err(err).Msg("looking for hosts past their provisioning timeout")
			}
		}
	}
}

// notHalted refuses a change of machines in a halted environment.
func (r *Room) notHalted(ctx context.Context, env string) error {
	e, err := r.svc.Store.GetEnv(ctx, env)
	if err != nil {
		return err
	}
	if e.Settings.Halted {
		return record.Refuse(record.ErrHalted, "environment %s is halted: machines are neither made nor controlled while it is (resume it: tether env resume %s)", env, env)
	}
	return nil
}

// move moves a host, and tells of it: an event on the stream and an
// entry of the audit log by actor.
func (r *Room) move(ctx context.Context, env, name string, from record.HostState, ev record.HostEvent, reason, instance, actor string) (record.Host, error) {
	h, err := r.svc.Store.MoveHost(ctx, env, name, from, ev, reason, instance)
	if err != nil {
		return h, err
	}
	detail := fmt.Sprintf("%s: now %s", ev, h.State)
	if reason != "" {
		detail += ": " + reason
	}
	r.svc.Feed.Publish(event.Event{Kind: event.HostState, Env: env, Agent: name, Host: &h, Error: detail})
	r.audit(ctx, actor, "host."+string(ev), env, name, detail)
	r.svc.Log.Info().Str("env", env).Str("host", name).Str("event", string(ev)).Str("state", string(h.State)).Str("reason", reason).Msg("host moved")
	return h, nil
}

// audit records what the server did on its own, or on an agent's word;
// an entry that cannot be written is logged.
func (r *Room) audit(ctx context.Context, actor, action, env, target, detail string) {
	e := record.AuditEntry{Actor: model.Clip(actor, model.MaxAuditLen), Action: action, Env: env,
		Target: model.Clip(target, model.MaxAuditLen), Detail: model.Clip(detail, model.MaxAuditLen)}
	if err := r.svc.Store.RecordAudit(ctx, e); err != nil {
		r.svc.Log.Error().Err(err).Str("action", action).Msg("audit log entry lost")
	}
}

// send sends a machine command to the agent serving platform p,
// remembering it until its report comes. A command that waits in the
// agent's inbox longer than it is worth expires there: a provision when
// the host's token does (the host failed meanwhile), a control when the
// operator no longer waits for it; a destroy never does.
func (r *Room) send(ctx context.Context, p record.Platform, host, by string, m bus.Machine, expire time.Duration) error {
	m.Platform, m.Driver = p.Name, p.Driver
	if uri, ok := p.Settings["uri"].(string); ok {
		m.URI = uri
	}
	r.mu.Lock()
	r.ops[m.OpID] = pendingOp{env: p.Env, host: host, platform: p.Name, op: m.Op, by: by, sent: r.svc.Now()}
	r.mu.Unlock()
	if err := r.svc.Send(ctx, bus.KindMachine, p.Env, p.Agent, m, expire); err != nil {
		r.mu.Lock()
		delete(r.ops, m.OpID)
		r.mu.Unlock()
		if errors.Is(err, bus.ErrNoInbox) {
			return record.Refuse(model.ErrUnavailable, "platform %s is served by agent %s, which the server has never heard from: start it with --platform %s", p.Name, p.Agent, p.Driver)
		}
		return fmt.Errorf("%w: send %s to platform %s's agent %s: %w", model.ErrUnavailable, m.Op, p.Name, p.Agent, err)
	}
	return nil
}

// answered takes the operation a report answers ("" op ID: none).
func (r *Room) answered(id string) (pendingOp, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	op, ok := r.ops[id]
	delete(r.ops, id)
	return op, ok
}
