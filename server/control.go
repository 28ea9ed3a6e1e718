package server

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/tetherhq/tether/model"
)

// CreateEnv creates an environment.
func (s *Server) CreateEnv(ctx context.Context, env model.Environment) error {
	if err := env.Settings.Validate(); err != nil {
		return fmt.Errorf("create environment %s: %w: %w", env.Name, model.ErrInvalid, err)
	}
	return s.store.CreateEnv(ctx, env)
}

// UpdateEnvSettings changes an environment's settings; halting pauses its
// agents, resuming resumes them.
func (s *Server) UpdateEnvSettings(ctx context.Context, name string, fn func(*model.EnvSettings) error) (model.Environment, error) {
	var wasHalted bool
	env, err := s.store.UpdateEnvSettings(ctx, name, func(st *model.EnvSettings) error {
		wasHalted = st.Halted
		return fn(st)
	})
	if err != nil {
		return env, err
	}
	if env.Settings.Halted != wasHalted {
		if err := s.sched.Halt(ctx, name, env.Settings.Halted); err != nil {
			s.log.Warn().Err(err).Str("env", name).Bool("halted", env.Settings.Halted).Msg("not every agent was told; they learn it on their next hello")
		}
		s.feed.publish(Event{Kind: EventEnvHalted, Env: name, Error: fmt.Sprintf("halted=%v", env.Settings.Halted)})
	}
	return env, nil
}

// AgentAction accepts, rejects, pauses or resumes an agent.
func (s *Server) AgentAction(ctx context.Context, env, name string, action model.AgentAction) (model.Agent, error) {
	if !action.Valid() {
		return model.Agent{}, fmt.Errorf("%w: agent action %q", model.ErrInvalid, action)
	}
	a, err := s.store.GetAgent(ctx, env, name)
	if err != nil {
		return a, err
	}
	switch action {
	case model.AgentAccept:
		if a.State == model.AgentAccepted {
			return a, nil
		}
		a.State = model.AgentAccepted
	case model.AgentReject:
		a.State = model.AgentRejected
	case model.AgentPause, model.AgentResume:
		if a.State != model.AgentAccepted {
			return a, fmt.Errorf("%w: agent %s is %s: accept it first", model.ErrConflict, name, a.State)
		}
		a.Paused = action == model.AgentPause
	}
	if err := s.store.UpsertAgent(ctx, a); err != nil {
		return a, err
	}
	s.agents.put(a)
	switch action {
	case model.AgentAccept:
		// Enrolled now; it gets its state at once if connected, else on
		// its next hello.
		if err := s.enroll(ctx, a); err != nil {
			s.log.Info().Err(err).Str("agent", name).Msg("accepted agent is not connected; it is enrolled on its next hello")
		}
	case model.AgentReject:
		if err := s.refuse(ctx, a, "rejected by an operator"); err != nil {
			s.log.Info().Err(err).Str("agent", name).Msg("rejected agent not told; it is on its next hello")
		}
	case model.AgentPause, model.AgentResume:
		if err := s.sched.Pause(ctx, env, name, a.Paused); err != nil {
			s.log.Warn().Err(err).Str("agent", name).Msg("agent not told of pause/resume")
		}
	}
	s.feed.publish(Event{Kind: EventAgentChanged, Env: env, Agent: name, Error: string(action)})
	return a, nil
}

// DeployActions returns what a deploy, repair or dry run reported.
func (s *Server) DeployActions(ctx context.Context, env, deployID string, limit int) ([]model.Action, error) {
	return s.store.DeployActions(ctx, env, deployID, limit)
}

// Follow calls send with each live event of env ("" for all) until ctx ends
// or send fails.
func (s *Server) Follow(ctx context.Context, env string, send func(kind string, data []byte) error) error {
	sub := s.Subscribe()
	defer sub.Close()
	for {
		e, err := sub.Next(ctx)
		if err != nil {
			return err
		}
		if env != "" && e.Env != env {
			continue
		}
		b, err := json.Marshal(e)
		if err != nil {
			return err
		}
		if err := send(string(e.Kind), b); err != nil {
			return err
		}
	}
}
