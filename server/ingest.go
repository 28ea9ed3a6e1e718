package server

import (
	"context"

	"github.com/tetherhq/tether/bus"
	"github.com/tetherhq/tether/server/ingest"
	"github.com/tetherhq/tether/server/record"
	"github.com/tetherhq/tether/server/trust"
)

// The ingest of what agents send is package ingest's: the server hands
// its ingester the store, the bus, the scheduler, its keys and its feed
// (New), runs its loops and consumers (Run), and answers the API's
// decisions about agents through it.

// IngestStats counts what the ingest path did since the server started.
type IngestStats = ingest.Stats

// PreviousKeyGrace is how long an agent's previous key still holds after
// the agent was first heard from with its new one.
const PreviousKeyGrace = ingest.PreviousKeyGrace

// RotateKeyExpiry bounds how long a key.rotate waits in an offline
// agent's inbox: an agent away longer is asked again by its operator.
const RotateKeyExpiry = ingest.RotateKeyExpiry

// IngestStats returns the ingest counters.
func (s *Server) IngestStats() IngestStats { return s.ingester.Stats() }

// SecurityAlert raises a security alert about agent in env that no
// message carried (a refused broker login).
func (s *Server) SecurityAlert(ctx context.Context, env, agent, what string) {
	s.ingester.SecurityAlert(ctx, env, agent, what)
}

// SecurityNotice raises a security alert about an organization's users
// that no environment holds (see ingest.Ingester.SecurityNotice).
func (s *Server) SecurityNotice(ctx context.Context, org, what string) {
	s.ingester.SecurityNotice(ctx, org, what)
}

// AgentAction accepts, rejects, pauses or resumes an agent.
func (s *Server) AgentAction(ctx context.Context, env, name string, action record.AgentAction) (record.Agent, error) {
	return s.ingester.AgentAction(ctx, env, name, action)
}

// DeleteAgent forgets an agent: its record, its inbox, its connections
// (see ingest.Ingester.DeleteAgent).
func (s *Server) DeleteAgent(ctx context.Context, env, name string) (record.Agent, error) {
	return s.ingester.DeleteAgent(ctx, env, name)
}

// RotateKey asks an accepted agent to replace its key, and returns the
// agent as recorded now: its key changes when its rollover arrives.
func (s *Server) RotateKey(ctx context.Context, env, name string) (record.Agent, error) {
	return s.ingester.RotateKey(ctx, env, name)
}

var (
	_ ingest.Keys = (*trust.Keys)(nil)
	_ ingest.Bus  = bus.Bus(nil)
)
