-- Releases: one row per release of a version, written when the version is
-- released and updated as its fan-out to agents goes on. seq orders them;
-- id names one.

CREATE TABLE releases (
    seq           INTEGER PRIMARY KEY AUTOINCREMENT,
    id            TEXT NOT NULL UNIQUE,
    env           TEXT NOT NULL REFERENCES environments(name) ON DELETE CASCADE,
    version       INTEGER NOT NULL,
    state         TEXT NOT NULL CHECK (state IN ('running', 'done', 'failed')),
    agents        INTEGER NOT NULL DEFAULT 0,
    sent          INTEGER NOT NULL DEFAULT 0,
    up_to_date    INTEGER NOT NULL DEFAULT 0,
    pending       TEXT,             -- []record.PendingAgent as JSON
    pending_count INTEGER NOT NULL DEFAULT 0,
    note          TEXT NOT NULL DEFAULT '',
    started_at    INTEGER NOT NULL,
    finished_at   INTEGER
);

CREATE INDEX releases_env ON releases (env, seq);
