-- The embedded store: one process, one file. Times are Unix nanoseconds.

CREATE TABLE environments (
    name       TEXT PRIMARY KEY,
    settings   TEXT NOT NULL,             -- model.EnvSettings as JSON
    created_at INTEGER NOT NULL
);

CREATE TABLE versions (
    env            TEXT NOT NULL REFERENCES environments(name) ON DELETE CASCADE,
    number         INTEGER NOT NULL,
    state          TEXT NOT NULL CHECK (state IN ('candidate', 'released', 'retired')),
    set_hash       BLOB NOT NULL,         -- model.SetHash of the resource set
    resource_count INTEGER NOT NULL,
    meta           TEXT NOT NULL,         -- model.VersionMeta as JSON
    created_at     INTEGER NOT NULL,
    released_at    INTEGER,
    PRIMARY KEY (env, number)
);

-- Resource bodies are stored once, addressed by the SHA-256 of the stored
-- JSON, however many versions use them.
CREATE TABLE resource_bodies (
    key  BLOB PRIMARY KEY,
    body BLOB NOT NULL
) WITHOUT ROWID;

CREATE TABLE version_resources (
    env         TEXT NOT NULL,
    number      INTEGER NOT NULL,
    resource_id TEXT NOT NULL,
    agent       TEXT NOT NULL,
    hash        BLOB NOT NULL,            -- intent hash (model.Resource.Hash)
    body_key    BLOB NOT NULL REFERENCES resource_bodies(key),
    PRIMARY KEY (env, number, resource_id),
    FOREIGN KEY (env, number) REFERENCES versions(env, number) ON DELETE CASCADE
) WITHOUT ROWID;

CREATE INDEX version_resources_agent ON version_resources (env, number, agent);

CREATE TABLE agents (
    env        TEXT NOT NULL REFERENCES environments(name) ON DELETE CASCADE,
    name       TEXT NOT NULL,
    state      TEXT NOT NULL CHECK (state IN ('pending', 'accepted', 'rejected')),
    public_key BLOB,
    labels     TEXT NOT NULL DEFAULT '{}',
    facts      TEXT NOT NULL DEFAULT '{}',
    kinds      TEXT NOT NULL DEFAULT '[]',
    generation INTEGER NOT NULL DEFAULT 0,
    first_seen INTEGER NOT NULL,
    last_seen  INTEGER NOT NULL,
    PRIMARY KEY (env, name)
);

-- Where each resource of the released version (and of earlier ones, as
-- orphans) stands.
CREATE TABLE resource_status (
    env           TEXT NOT NULL REFERENCES environments(name) ON DELETE CASCADE,
    resource_id   TEXT NOT NULL,
    agent         TEXT NOT NULL,
    version       INTEGER NOT NULL,
    hash          BLOB NOT NULL,
    state         TEXT NOT NULL,
    compliance    TEXT NOT NULL DEFAULT 'unknown',
    last_verified INTEGER,
    message       TEXT NOT NULL DEFAULT '',
    updated_at    INTEGER NOT NULL,
    PRIMARY KEY (env, resource_id)
) WITHOUT ROWID;

CREATE INDEX resource_status_agent ON resource_status (env, agent);

CREATE TABLE actions (
    seq         INTEGER PRIMARY KEY AUTOINCREMENT,
    env         TEXT NOT NULL REFERENCES environments(name) ON DELETE CASCADE,
    resource_id TEXT NOT NULL,
    agent       TEXT NOT NULL,
    kind        TEXT NOT NULL,
    deploy_id   TEXT NOT NULL,
    version     INTEGER NOT NULL,
    state       TEXT NOT NULL,
    changes     TEXT,
    message     TEXT NOT NULL DEFAULT '',
    at          INTEGER NOT NULL,
    duration_ns INTEGER NOT NULL
);

CREATE INDEX actions_resource ON actions (env, resource_id, seq);
