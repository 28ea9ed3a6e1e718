package server

import (
	"context"
	"fmt"

	"github.com/tetherhq/tether/model"
	"github.com/tetherhq/tether/server/record"
)

// CreateEnv creates an environment.
func (s *Server) CreateEnv(ctx context.Context, env record.Environment) error {
	if err := env.Settings.Validate(); err != nil {
		return fmt.Errorf("create environment %s: %w: %w", env.Name, model.ErrInvalid, err)
	}
	return s.store.CreateEnv(ctx, env)
}

// UpdateEnvSettings changes an environment's settings; halting pauses its
// agents, resuming resumes them, deploys what they missed at once and
// compiles the environment's model (whose machines wait while halted). The
// settings agents hold between deploys (the drift policy) are sent to them
// when they change.
func (s *Server) UpdateEnvSettings(ctx context.Context, name string, fn func(*record.EnvSettings) error) (record.Environment, error) {
	var (
		was    record.EnvSettings
		halted *Event
	)
	env, err := s.store.UpdateEnvSettings(ctx, name, func(st *record.EnvSettings) error {
		was = *st
		return fn(st)
	}, func(was, now record.EnvSettings) ([]record.LoggedEvent, error) {
		halted = nil
		if now.Halted == was.Halted {
			return nil, nil
		}
		halted = &Event{Kind: EventEnvHalted, Env: name, Error: fmt.Sprintf("halted=%v", now.Halted)}
		return inLog(halted)
	})
	if err != nil {
		return env, err
	}
	if halted != nil {
		s.logged(*halted)
	}
	if env.Settings.DriftPolicy != was.DriftPolicy {
		if err := s.sched.Settings(ctx, name, env.Settings); err != nil {
			s.log.Warn().Err(err).Str("env", name).Msg("not every agent was told the new drift policy; they learn it on their next hello or deploy")
		}
	}
	if env.Settings.Halted != was.Halted {
		if err := s.sched.Halt(ctx, name, env.Settings.Halted); err != nil {
			s.log.Warn().Err(err).Str("env", name).Bool("halted", env.Settings.Halted).Msg("not every agent was told; they learn it on their next hello")
		}
		if !env.Settings.Halted {
			s.ingester.Catchup(ctx, name)
			// The machines its model declares wait for a compile to be
			// provisioned: one is asked for (nothing without a source).
			s.compiles.Trigger(ctx, name, record.Trigger{Kind: record.TriggerOperator, By: "environment resumed"})
		}
	}
	return env, nil
}

// DeleteEnv deletes an environment with everything in it, and its agents'
// inboxes from the broker: an agent of a deleted environment has nothing
// left to read, and its hello is refused. Their connections are not
// closed one by one (a call to the broker's management API each, for
// possibly thousands): where the broker asks the server, their logins
// are refused once its cache expires.
func (s *Server) DeleteEnv(ctx context.Context, name string) error {
	agents, err := s.store.ListAgents(ctx, name)
	if err != nil {
		return err
	}
	if err := s.store.DeleteEnv(ctx, name); err != nil {
		return err
	}
	s.ingester.ForgetEnv(name)
	s.compiles.ForgetSource(ctx, name)
	if d, ok := s.bus.(inboxDeleter); ok {
		for i, a := range agents {
			if err := d.DeleteInbox(ctx, name, a.Name); err != nil {
				// Once, not once per agent: the broker is away.
				s.log.Warn().Err(err).Str("env", name).Int("inboxes_left", len(agents)-i).
					Msg("cannot delete the inboxes of the deleted environment's agents; delete its agents' queues on the broker")
				break
			}
		}
	}
	s.log.Info().Str("env", name).Int("agents", len(agents)).Msg("environment deleted, with its agents' inboxes")
	return nil
}

// RefreshFacts asks an accepted agent to report its facts again and
// returns the agent as recorded now: its facts are updated when its report
// arrives. An agent that is not connected reports them in its next hello.
func (s *Server) RefreshFacts(ctx context.Context, env, name string) (record.Agent, error) {
	a, err := s.store.GetAgent(ctx, env, name)
	if err != nil {
		return a, err
	}
	if a.State != record.AgentAccepted {
		return a, fmt.Errorf("%w: agent %s is %s: accept it first", model.ErrConflict, name, a.State)
	}
	if err := s.sched.RefreshFacts(ctx, env, name); err != nil {
		return a, fmt.Errorf("%w: ask agent %s for its facts: %w", model.ErrUnavailable, name, err)
	}
	return a, nil
}

// DeployActions returns what a deploy, repair or dry run reported.
func (s *Server) DeployActions(ctx context.Context, env, deployID string, limit int) ([]record.Action, error) {
	return s.store.DeployActions(ctx, env, deployID, limit)
}

// ListDeploys returns env's newest deploys, repairs and dry runs.
func (s *Server) ListDeploys(ctx context.Context, env string, f record.DeployFilter) ([]record.Deploy, error) {
	return s.store.ListDeploys(ctx, env, f)
}

// GetDeploy returns one deploy with each agent's outcome.
func (s *Server) GetDeploy(ctx context.Context, env, id string) (record.Deploy, error) {
	return s.store.GetDeploy(ctx, env, id)
}

// Follow streams the events of env ("" for all) from the stored event
// log, which every replica appends to: opened is called once, then send
// with each event until ctx ends or send fails. After is the ID of the last
// event the follower saw ("" for none): the events after it come first,
// if the log still keeps them; opened is told the ID the follower is at
// (to resume after, should it reconnect before any event comes) and
// whether the log still keeps what followed after (false: some may be
// missed).
func (s *Server) Follow(ctx context.Context, env, after string, opened func(at string, resumed bool) error, send func(id, kind string, data []byte) error) error {
	return s.stream.Follow(ctx, env, after, opened, send)
}
