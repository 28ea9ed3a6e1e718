package server

import (
	"context"
	"errors"
	"time"

	"github.com/google/uuid"

	"github.com/tetherhq/tether/model"
	"github.com/tetherhq/tether/server/record"
)

// ownTokenLife is how long the token of an agent the server runs itself
// holds: it enrolls at once, or its next start gets a new token.
const ownTokenLife = 24 * time.Hour

// OwnAgentToken makes the enrollment token of agent, which this server
// runs itself (tether server --own-agent): one use, bound to the agent's
// name, valid for a day, and accepted whatever env's enrollment policy.
// The agent's earlier tokens that were never used are revoked, so that a
// server started again and again leaves one at most. model.ErrNotFound:
// the environment does not exist.
func (s *Server) OwnAgentToken(ctx context.Context, env, agent string) (string, error) {
	if err := model.ValidateAgentName(agent); err != nil {
		return "", err
	}
	toks, err := s.store.ListEnrollTokens(ctx, env)
	if err != nil {
		return "", err
	}
	for _, t := range toks {
		if t.OwnAgent == agent && t.Uses == 0 {
			if err := s.store.DeleteEnrollToken(ctx, env, t.ID); err != nil && !errors.Is(err, model.ErrNotFound) {
				return "", err
			}
		}
	}
	secret, err := model.NewEnrollmentToken(s.PublicKey())
	if err != nil {
		return "", err
	}
	now := time.Now().UTC()
	expires := now.Add(ownTokenLife)
	t := record.EnrollmentToken{ID: uuid.NewString(), Env: env, Name: "own agent " + agent, Hash: record.HashSecret(secret), MaxUses: 1,
		CreatedBy: "tether server", CreatedAt: now, ExpiresAt: &expires, OwnAgent: agent}
	if err := s.store.CreateEnrollToken(ctx, t); err != nil {
		return "", err
	}
	return secret, nil
}
