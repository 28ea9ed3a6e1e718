package server

import (
	"context"
	"errors"
	"sync"

	"github.com/tetherhq/tether/bus"
)

// Inboxes: declaring an agent's inbox and binding it is the dearest thing
// a hello asks of the broker (two metadata transactions), and an agent
// that waits for its answer says hello again. The server remembers the
// inboxes it declared and declares them once: an answer to a hello whose
// inbox this process declared goes straight out, and should the inbox be
// gone meanwhile (deleted on the broker by someone else, another
// replica's reject, an expired queue), the answer comes back unroutable
// (every command is published mandatory) and the inbox is declared
// again before the answer is sent once more. What this process deletes it
// forgets first.

// maxInboxesKept bounds the inboxes remembered; beyond, the memory starts
// over (each inbox is declared once more on its next hello).
const maxInboxesKept = 1 << 20

type inboxSet struct {
	mu sync.Mutex
	m  map[agentKey]struct{}
}

func (s *inboxSet) has(env, name string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, ok := s.m[agentKey{env, name}]
	return ok
}

func (s *inboxSet) add(env, name string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.m == nil || len(s.m) >= maxInboxesKept {
		s.m = map[agentKey]struct{}{}
	}
	s.m[agentKey{env, name}] = struct{}{}
}

func (s *inboxSet) forget(env, name string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.m, agentKey{env, name})
}

func (s *inboxSet) forgetEnv(env string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for k := range s.m {
		if k.env == env {
			delete(s.m, k)
		}
	}
}

// declareInbox declares env/name's inbox and binds it, unless this process
// did already (again forces it).
func (s *Server) declareInbox(ctx context.Context, env, name string, again bool) error {
	if !again && s.inboxes.has(env, name) {
		s.metrics.inboxDeclares.WithLabelValues("remembered").Inc()
		return nil
	}
	if err := s.bus.DeclareInbox(ctx, env, name); err != nil {
		return err
	}
	s.metrics.inboxDeclares.WithLabelValues("declared").Inc()
	s.inboxes.add(env, name)
	return nil
}

// deleteInbox deletes env/name's inbox where the bus can, forgetting it was
// declared first.
func (s *Server) deleteInbox(ctx context.Context, env, name string) error {
	s.inboxes.forget(env, name)
	d, ok := s.bus.(inboxDeleter)
	if !ok {
		return nil
	}
	return d.DeleteInbox(ctx, env, name)
}

// sendDeclaring runs send, which sends commands to env/name's inbox; when
// the inbox was not there (bus.ErrNoInbox), it declares the inbox and runs
// send once more.
func (s *Server) sendDeclaring(ctx context.Context, env, name string, send func() error) error {
	err := send()
	if !errors.Is(err, bus.ErrNoInbox) {
		return err
	}
	s.inboxes.forget(env, name)
	if derr := s.declareInbox(ctx, env, name, true); derr != nil {
		return errors.Join(err, derr)
	}
	s.log.Info().Str("env", env).Str("agent", name).Msg("agent's inbox was gone from the broker: declared it again")
	return send()
}
