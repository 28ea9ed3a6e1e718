-- Releases: one row per release of a version, written when the version is
-- released and updated as its fan-out to agents goes on. seq orders them;
-- id names one.

CREATE TABLE releases (
    seq           BIGSERIAL PRIMARY KEY,
    id            TEXT NOT NULL UNIQUE,
    env           TEXT NOT NULL REFERENCES environments(name) ON DELETE CASCADE,
    version       BIGINT NOT NULL,
    state         TEXT NOT NULL CHECK (state IN ('running', 'done', 'failed')),
    agents        INTEGER NOT NULL DEFAULT 0,
    sent          INTEGER NOT NULL DEFAULT 0,
    up_to_date    INTEGER NOT NULL DEFAULT 0,
    pending       JSONB,
    pending_count INTEGER NOT NULL DEFAULT 0,
    note          TEXT NOT NULL DEFAULT '',
    started_at    TIMESTAMPTZ NOT NULL,
    finished_at   TIMESTAMPTZ
);

CREATE INDEX releases_env ON releases (env, seq);
