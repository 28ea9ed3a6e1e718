-- The reports of the compiles the server runs: one row per compile, written
-- when it starts and completed when it ends. seq orders them; id names one.

CREATE TABLE compiles (
    seq                 BIGSERIAL PRIMARY KEY,
    id                  TEXT NOT NULL UNIQUE,
    env                 TEXT NOT NULL REFERENCES environments(name) ON DELETE CASCADE,
    triggers            JSONB NOT NULL,
    revision            TEXT NOT NULL DEFAULT '',
    started_at          TIMESTAMPTZ NOT NULL,
    finished_at         TIMESTAMPTZ,
    outcome             TEXT NOT NULL CHECK (outcome IN ('running', 'released', 'candidate', 'unchanged', 'failed')),
    diagnostics         JSONB,
    diagnostics_total   INTEGER NOT NULL DEFAULT 0,
    resources_per_agent JSONB,
    undefined           JSONB,
    undefined_total     INTEGER NOT NULL DEFAULT 0,
    version             BIGINT NOT NULL DEFAULT 0
);

CREATE INDEX compiles_env ON compiles (env, seq);
