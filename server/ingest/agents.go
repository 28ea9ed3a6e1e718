package ingest

import (
	"context"
	"fmt"
	"sync"

	"github.com/tetherhq/tether/bus"
	"github.com/tetherhq/tether/model"
	"github.com/tetherhq/tether/server/event"
	"github.com/tetherhq/tether/server/record"
)

// Operators' decisions about one agent, carried out under the agent's lock
// as the ingest path changes its record: accept, reject, pause, resume,
// delete.

// AgentAction accepts, rejects, pauses or resumes an agent.
func (in *Ingester) AgentAction(ctx context.Context, env, name string, action record.AgentAction) (record.Agent, error) {
	if !action.Valid() {
		return record.Agent{}, fmt.Errorf("%w: agent action %q", model.ErrInvalid, action)
	}
	unlock := sync.OnceFunc(in.agentLocks.lock(env, name))
	defer unlock()
	since := in.agents.since(env, name)
	a, err := in.store.GetAgent(ctx, env, name)
	if err != nil {
		return a, err
	}
	was := a
	wasAccepted := false // a rejected agent leaves the inventory
	switch action {
	case record.AgentAccept:
		if a.State == record.AgentAccepted {
			return a, nil
		}
		a.State = record.AgentAccepted
	case record.AgentReject:
		wasAccepted = a.State == record.AgentAccepted
		a.State = record.AgentRejected
	case record.AgentPause, record.AgentResume:
		if a.State != record.AgentAccepted {
			return a, fmt.Errorf("%w: agent %s is %s: accept it first", model.ErrConflict, name, a.State)
		}
		a.Paused = action == record.AgentPause
	}
	if a.State == record.AgentAccepted {
		a.Note = ""
	} else if a.State == record.AgentRejected {
		a.Note = "rejected by an operator"
	}
	// The decision alone is written: what the agent reported meanwhile
	// (through another replica) stays. Its event is logged with it.
	changed := event.Event{Kind: event.AgentChanged, Env: env, Agent: name, Error: string(action)}
	events, err := event.InLog(&changed)
	if err != nil {
		return a, err
	}
	if err := in.store.SetAgentState(ctx, a, was, events...); err != nil {
		return a, err
	}
	in.agents.putRead(a, since)
	unlock()
	switch action {
	case record.AgentAccept:
		// Enrolled now; it gets its state at once if connected, else on
		// its next hello. A pending agent has no inbox (pending.go), a
		// rejected one had it deleted, and the agent may not declare
		// it: the server declares it now for an agent that said hello
		// (which nudges it to look for it), or was rejected; one never
		// heard from gets it at its first hello, as commands for it
		// would only pile up.
		if was.Connected || was.State == record.AgentRejected {
			if err := in.bus.DeclareInbox(ctx, env, name); err != nil {
				in.log.Warn().Err(err).Str("agent", name).Msg("cannot declare the accepted agent's inbox; it is declared on its next hello")
			}
		}
		if err := in.enroll(ctx, a, ""); err != nil {
			in.log.Info().Err(err).Str("agent", name).Msg("accepted agent is not connected; it is enrolled on its next hello")
		}
	case record.AgentReject:
		if err := in.refuse(ctx, a, bus.Rejected{Reason: "rejected by an operator"}, wasAccepted); err != nil {
			in.log.Info().Err(err).Str("agent", name).Msg("rejected agent not told; it is on its next hello")
		}
		in.revoke(ctx, env, name)
	case record.AgentPause, record.AgentResume:
		halted := false
		if e, err := in.store.GetEnv(ctx, env); err == nil {
			halted = e.Settings.Halted
		}
		switch {
		case !a.Paused && halted:
			// The halt keeps it paused; the environment's resume
			// resumes it.
		case a.Paused:
			if err := in.sched.Pause(ctx, env, name, true); err != nil {
				in.log.Warn().Err(err).Str("agent", name).Msg("agent not told of its pause; it is on its next hello")
			}
		default:
			if err := in.sched.Pause(ctx, env, name, false); err != nil {
				in.log.Warn().Err(err).Str("agent", name).Msg("agent not told of its resume")
			} else {
				in.Catchup(ctx, env, name)
			}
		}
	}
	in.feed.Logged(changed)
	if action == record.AgentAccept || wasAccepted {
		// The live inventory changed: the model may place resources
		// on the agent, or take them away.
		in.trigger(ctx, env, record.Trigger{Kind: record.TriggerAgent, By: name})
	}
	return a, nil
}

// DeleteAgent forgets an agent: its record and what it reported go from
// the store (store.DeleteAgent), its inbox (with what was queued for it)
// from the broker, and its connections are closed where the server has
// the broker's management API. Its claim queue is the agent's own (exclusive to its
// connection): it goes with the connection. An agent that says hello
// again is a new one: pending, or accepted as the enrollment policy says.
func (in *Ingester) DeleteAgent(ctx context.Context, env, name string) (record.Agent, error) {
	unlock := sync.OnceFunc(in.agentLocks.lock(env, name))
	defer unlock()
	a, err := in.store.GetAgent(ctx, env, name)
	if err != nil {
		return a, err
	}
	deleted := event.Event{Kind: event.AgentChanged, Env: env, Agent: name, Error: "deleted"}
	events, err := event.InLog(&deleted)
	if err != nil {
		return a, err
	}
	if err := in.store.DeleteAgent(ctx, env, name, events...); err != nil {
		return a, err
	}
	in.agents.forget(env, name)
	unlock()
	if err := in.deleteInbox(ctx, env, name); err != nil {
		in.log.Warn().Err(err).Str("env", env).Str("agent", name).Msg("cannot delete the deleted agent's inbox; delete the queue on the broker")
	}
	if in.cfg.Broker != nil {
		// Once: should it come back, it is a new agent, not one to keep
		// out.
		in.closeConnections(ctx, revocation{env: env, name: name, why: "the agent was deleted"})
	}
	in.log.Info().Str("env", env).Str("agent", name).Str("was", string(a.State)).Msg("agent deleted")
	in.feed.Logged(deleted)
	if a.State == record.AgentAccepted {
		in.trigger(ctx, env, record.Trigger{Kind: record.TriggerAgent, By: name})
	}
	return a, nil
}

// Catchup deploys what agents missed while paused or halted (all of env's
// when no names), now: an operator's resume does not wait for the next
// deploy-interval retry.
func (in *Ingester) Catchup(ctx context.Context, env string, names ...string) {
	if _, err := in.sched.Catchup(ctx, env, names...); err != nil {
		in.log.Warn().Err(err).Str("env", env).Strs("agents", names).Msg("what was missed while paused is not deployed now; it is with the next deploy-interval retry or deploy")
	}
}
