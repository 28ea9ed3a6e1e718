-- Server mode shares the store contract: paused agents, ingest
-- deduplication, alerts, API tokens and the audit log.

ALTER TABLE agents ADD COLUMN paused INTEGER NOT NULL DEFAULT 0;

-- The agent's message counters of the newest result applied to a status's
-- state, and of the newest report applied to its compliance: a message that
-- arrives after a newer one (several ingest consumers, results and drift
-- reports on separate queues) is not applied over it.
ALTER TABLE resource_status ADD COLUMN seq INTEGER NOT NULL DEFAULT 0;
ALTER TABLE resource_status ADD COLUMN compliance_seq INTEGER NOT NULL DEFAULT 0;

-- One row per recorded result batch (agent message), to drop redeliveries.
CREATE TABLE ingested (
    env   TEXT NOT NULL,
    agent TEXT NOT NULL,
    seq   INTEGER NOT NULL,
    at    INTEGER NOT NULL,
    PRIMARY KEY (env, agent, seq)
) WITHOUT ROWID;

CREATE INDEX ingested_at ON ingested (at);

CREATE TABLE alerts (
    seq         INTEGER PRIMARY KEY AUTOINCREMENT,
    env         TEXT NOT NULL REFERENCES environments(name) ON DELETE CASCADE,
    agent       TEXT NOT NULL DEFAULT '',
    kind        TEXT NOT NULL,
    resource_id TEXT,
    message     TEXT NOT NULL,
    changes     TEXT,
    compliance  TEXT NOT NULL DEFAULT '',
    version     INTEGER NOT NULL DEFAULT 0,
    at          INTEGER NOT NULL
);

CREATE INDEX alerts_env ON alerts (env, seq);

CREATE TABLE tokens (
    id         TEXT PRIMARY KEY,
    name       TEXT NOT NULL,
    role       TEXT NOT NULL CHECK (role IN ('admin', 'operator', 'viewer')),
    env        TEXT REFERENCES environments(name) ON DELETE CASCADE,
    hash       BLOB NOT NULL UNIQUE,
    created_by TEXT NOT NULL,
    created_at INTEGER NOT NULL,
    expires_at INTEGER
);

-- Kept when an environment is deleted: the log says who deleted it.
CREATE TABLE audit (
    seq    INTEGER PRIMARY KEY AUTOINCREMENT,
    at     INTEGER NOT NULL,
    actor  TEXT NOT NULL,
    action TEXT NOT NULL,
    env    TEXT NOT NULL DEFAULT '',
    target TEXT NOT NULL DEFAULT '',
    detail TEXT NOT NULL DEFAULT ''
);

-- Pruning finds unused bodies; history finds a resource across versions.
CREATE INDEX version_resources_body ON version_resources (body_key);
CREATE INDEX version_resources_id ON version_resources (env, resource_id);

-- Dry-run reports read one deploy's entries.
CREATE INDEX actions_deploy ON actions (env, deploy_id, seq);

-- Installation-wide secrets (the server's signing key).
CREATE TABLE secrets (
    name  TEXT PRIMARY KEY,
    value BLOB NOT NULL
);
