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

-- Cross-agent requirements of each version, written with it: agent has a
-- resource that requires resource required of another agent, and is told
-- how it ends. waits_known says a version's were written (versions stored
-- before this migration have none: they are read from the resources).

CREATE TABLE version_waits (
    env      TEXT NOT NULL,
    number   INTEGER NOT NULL,
    required TEXT NOT NULL,
    agent    TEXT NOT NULL,
    PRIMARY KEY (env, number, required, agent),
    FOREIGN KEY (env, number) REFERENCES versions(env, number) ON DELETE CASCADE
);

ALTER TABLE versions ADD COLUMN waits_known INTEGER NOT NULL DEFAULT 0;
