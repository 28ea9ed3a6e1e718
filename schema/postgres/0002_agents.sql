-- Agents over the bus: enrollment tokens, and whether an agent is connected
-- (a goodbye clears it at once; heartbeats keep it).

ALTER TABLE agents ADD COLUMN online BOOLEAN NOT NULL DEFAULT false;

CREATE TABLE enroll_tokens (
    id         TEXT PRIMARY KEY,
    env        TEXT NOT NULL REFERENCES environments(name) ON DELETE CASCADE,
    name       TEXT NOT NULL,
    hash       BYTEA NOT NULL UNIQUE,
    max_uses   INTEGER NOT NULL DEFAULT 0 CHECK (max_uses >= 0),
    uses       INTEGER NOT NULL DEFAULT 0,
    created_by TEXT NOT NULL,
    created_at TIMESTAMPTZ NOT NULL,
    expires_at TIMESTAMPTZ
);

CREATE INDEX enroll_tokens_env ON enroll_tokens (env, created_at);
