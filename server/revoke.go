package server

import (
	"context"
	"time"
)

// Revocation: a rejected agent is taken off the broker. Its inbox, with the
// desired state it holds, is deleted at once; its connections are closed
// through the broker's management API (its channels would keep the rights
// they were given). The management API lists a connection only once the
// broker has reported its statistics (every few seconds, later just after
// the broker started), and a connection opened before the broker's
// authentication cache expired is let in: so connections are closed again
// a few times over the following minute.

// reclose is when, after a rejection, the agent's connections are closed
// again.
var reclose = []time.Duration{5 * time.Second, 15 * time.Second, 30 * time.Second, time.Minute}

// revocation is one rejected agent whose connections are closed again.
type revocation struct {
	env, name string
	at        time.Time // of the rejection
	next      int       // index in reclose
}

// revoke takes a rejected agent off the broker now, and hands it to
// closeRevoked (when Run runs) to close what connects again meanwhile.
// What fails is logged: the agent is rejected in the store whatever the
// broker says, and where the broker asks the server about each agent it
// cannot log in again.
func (s *Server) revoke(ctx context.Context, env, name string) {
	if s.cfg.Broker != nil {
		s.closeConnections(ctx, env, name)
		select {
		case s.revoked <- revocation{env: env, name: name, at: time.Now()}:
		default: // Run is not running, or a storm of rejections: once is done
		}
	}
	if d, ok := s.bus.(inboxDeleter); ok {
		if err := d.DeleteInbox(ctx, env, name); err != nil {
			s.log.Warn().Err(err).Str("env", env).Str("agent", name).Msg("cannot delete the rejected agent's inbox")
		}
	}
}

func (s *Server) closeConnections(ctx context.Context, env, name string) {
	n, err := s.cfg.Broker.CloseAgentConnections(ctx, env, name)
	s.metrics.brokerClosed.WithLabelValues("revoked").Add(float64(n))
	switch {
	case err != nil:
		s.log.Warn().Err(err).Str("env", env).Str("agent", name).Msg("cannot close the rejected agent's broker connections")
	case n > 0:
		s.log.Info().Str("env", env).Str("agent", name).Int("connections", n).Msg("closed the rejected agent's broker connections")
	}
}

// closeRevoked closes again the connections of agents rejected lately, on
// the reclose schedule, until ctx ends.
func (s *Server) closeRevoked(ctx context.Context) {
	var pending []revocation
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case r := <-s.revoked:
			pending = append(pending, r)
		case now := <-tick.C:
			kept := pending[:0]
			for _, r := range pending {
				if now.Sub(r.at) >= reclose[r.next] {
					s.closeConnections(ctx, r.env, r.name)
					r.next++
				}
				if r.next < len(reclose) {
					kept = append(kept, r)
				}
			}
			pending = kept
		}
	}
}
