-- The server store. Hashes are raw SHA-256 bytes; resource bodies are the
-- exact JSON the server received (bytea, not jsonb, so they read back
-- byte for byte), stored once per content hash.

CREATE TABLE environments (
    name       TEXT PRIMARY KEY,
    settings   JSONB NOT NULL,
    created_at TIMESTAMPTZ NOT NULL
);

CREATE TABLE versions (
    env            TEXT NOT NULL REFERENCES environments(name) ON DELETE CASCADE,
    number         BIGINT NOT NULL,
    state          TEXT NOT NULL CHECK (state IN ('candidate', 'released', 'retired')),
    set_hash       BYTEA NOT NULL,
    resource_count INTEGER NOT NULL,
    meta           JSONB NOT NULL,
    created_at     TIMESTAMPTZ NOT NULL,
    released_at    TIMESTAMPTZ,
    PRIMARY KEY (env, number)
);

-- At most one released version per environment, whatever happens.
CREATE UNIQUE INDEX versions_one_released ON versions (env) WHERE state = 'released';

CREATE TABLE resource_bodies (
    key  BYTEA PRIMARY KEY,
    body BYTEA NOT NULL
);

CREATE TABLE version_resources (
    env         TEXT NOT NULL,
    number      BIGINT NOT NULL,
    resource_id TEXT NOT NULL,
    agent       TEXT NOT NULL,
    hash        BYTEA NOT NULL,
    body_key    BYTEA NOT NULL REFERENCES resource_bodies(key),
    PRIMARY KEY (env, number, resource_id),
    FOREIGN KEY (env, number) REFERENCES versions(env, number) ON DELETE CASCADE
);

CREATE INDEX version_resources_agent ON version_resources (env, number, agent);
CREATE INDEX version_resources_body ON version_resources (body_key);
CREATE INDEX version_resources_id ON version_resources (env, resource_id);

CREATE TABLE agents (
    env        TEXT NOT NULL REFERENCES environments(name) ON DELETE CASCADE,
    name       TEXT NOT NULL,
    state      TEXT NOT NULL CHECK (state IN ('pending', 'accepted', 'rejected')),
    public_key BYTEA,
    labels     JSONB NOT NULL DEFAULT '{}',
    facts      JSONB NOT NULL DEFAULT '{}',
    kinds      JSONB NOT NULL DEFAULT '[]',
    generation BIGINT NOT NULL DEFAULT 0,
    paused     BOOLEAN NOT NULL DEFAULT false,
    first_seen TIMESTAMPTZ NOT NULL,
    last_seen  TIMESTAMPTZ NOT NULL,
    PRIMARY KEY (env, name)
);

CREATE TABLE resource_status (
    env           TEXT NOT NULL REFERENCES environments(name) ON DELETE CASCADE,
    resource_id   TEXT NOT NULL,
    agent         TEXT NOT NULL,
    version       BIGINT NOT NULL,
    hash          BYTEA NOT NULL,
    state         TEXT NOT NULL,
    compliance    TEXT NOT NULL DEFAULT 'unknown',
    last_verified TIMESTAMPTZ,
    message       TEXT NOT NULL DEFAULT '',
    updated_at    TIMESTAMPTZ NOT NULL,
    -- The agent's message counters of the newest result applied to the
    -- state, and of the newest report applied to the compliance: a message
    -- arriving after a newer one (several ingest consumers, results and
    -- drift reports on separate queues) is not applied over it.
    seq            BIGINT NOT NULL DEFAULT 0,
    compliance_seq BIGINT NOT NULL DEFAULT 0,
    PRIMARY KEY (env, resource_id)
);

CREATE INDEX resource_status_agent ON resource_status (env, agent);

CREATE TABLE actions (
    seq         BIGSERIAL PRIMARY KEY,
    env         TEXT NOT NULL REFERENCES environments(name) ON DELETE CASCADE,
    resource_id TEXT NOT NULL,
    agent       TEXT NOT NULL,
    kind        TEXT NOT NULL,
    deploy_id   TEXT NOT NULL,
    version     BIGINT NOT NULL,
    state       TEXT NOT NULL,
    changes     JSONB,
    message     TEXT NOT NULL DEFAULT '',
    at          TIMESTAMPTZ NOT NULL,
    duration_ns BIGINT NOT NULL
);

CREATE INDEX actions_resource ON actions (env, resource_id, seq);
CREATE INDEX actions_deploy ON actions (env, deploy_id, seq);

-- One row per recorded result batch, to drop redeliveries.
CREATE TABLE ingested (
    env   TEXT NOT NULL,
    agent TEXT NOT NULL,
    seq   BIGINT NOT NULL,
    at    TIMESTAMPTZ NOT NULL,
    PRIMARY KEY (env, agent, seq)
);

CREATE INDEX ingested_at ON ingested (at);

CREATE TABLE alerts (
    seq         BIGSERIAL PRIMARY KEY,
    env         TEXT NOT NULL REFERENCES environments(name) ON DELETE CASCADE,
    agent       TEXT NOT NULL DEFAULT '',
    kind        TEXT NOT NULL,
    resource_id TEXT,
    message     TEXT NOT NULL,
    changes     JSONB,
    compliance  TEXT NOT NULL DEFAULT '',
    version     BIGINT NOT NULL DEFAULT 0,
    at          TIMESTAMPTZ NOT NULL
);

CREATE INDEX alerts_env ON alerts (env, seq);

CREATE TABLE tokens (
    id         TEXT PRIMARY KEY,
    name       TEXT NOT NULL,
    role       TEXT NOT NULL CHECK (role IN ('admin', 'operator', 'viewer')),
    env        TEXT REFERENCES environments(name) ON DELETE CASCADE,
    hash       BYTEA NOT NULL UNIQUE,
    created_by TEXT NOT NULL,
    created_at TIMESTAMPTZ NOT NULL,
    expires_at TIMESTAMPTZ
);

-- Kept when an environment is deleted: the log says who deleted it.
CREATE TABLE audit (
    seq    BIGSERIAL PRIMARY KEY,
    at     TIMESTAMPTZ NOT NULL,
    actor  TEXT NOT NULL,
    action TEXT NOT NULL,
    env    TEXT NOT NULL DEFAULT '',
    target TEXT NOT NULL DEFAULT '',
    detail TEXT NOT NULL DEFAULT ''
);

-- Installation-wide secrets (the server's signing key), shared by replicas.
CREATE TABLE secrets (
    name  TEXT PRIMARY KEY,
    value BYTEA NOT NULL
);
