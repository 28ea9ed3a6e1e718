-- An enrollment token the server made for an agent it runs itself (tether
-- server --own-agent) names that agent: only it enrolls with the token,
-- which accepts it whatever the environment's enrollment policy ('' for
-- any other token).
ALTER TABLE enroll_tokens ADD COLUMN own_agent TEXT NOT NULL DEFAULT '';
