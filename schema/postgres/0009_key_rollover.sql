-- An agent's key before its last key rollover, and until when its events
-- and broker login still hold (NULL: until the agent is first heard from
-- with its new key).
ALTER TABLE agents ADD COLUMN previous_key BYTEA;
ALTER TABLE agents ADD COLUMN previous_until TIMESTAMPTZ;
