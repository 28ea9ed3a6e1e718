-- The event log: every event the server streams, kept for Last-Event-ID
-- resumes and shared by every replica. One process appends, so
-- ids are in commit order and a follower reading after an id misses none.
CREATE TABLE event_log (
    id   INTEGER PRIMARY KEY AUTOINCREMENT,
    org  TEXT NOT NULL DEFAULT '',
    env  TEXT NOT NULL DEFAULT '',
    kind TEXT NOT NULL,
    data TEXT NOT NULL,
    at   INTEGER NOT NULL
);
CREATE INDEX event_log_at ON event_log (at);
CREATE INDEX event_log_env ON event_log (env, id);

-- Webhooks: where an environment's events are posted. kinds is the
-- event kinds, space-separated with a space either side (' * ': all).
CREATE TABLE webhooks (
    id         INTEGER PRIMARY KEY AUTOINCREMENT,
    env        TEXT NOT NULL REFERENCES environments(name) ON DELETE CASCADE,
    name       TEXT NOT NULL,
    url        TEXT NOT NULL,
    secret     TEXT NOT NULL,
    kinds      TEXT NOT NULL,
    enabled    INTEGER NOT NULL,
    created_by TEXT NOT NULL DEFAULT '',
    created_at INTEGER NOT NULL,
    updated_at INTEGER NOT NULL,
    UNIQUE (env, name)
);

-- The outbox: one row per event and webhook, written in the transaction
-- that appends the event; claimed by one sender at a time (claimed_until).
CREATE TABLE webhook_deliveries (
    id            INTEGER PRIMARY KEY AUTOINCREMENT,
    webhook_id    BIGINT NOT NULL REFERENCES webhooks(id) ON DELETE CASCADE,
    event_id      BIGINT NOT NULL DEFAULT 0,
    kind          TEXT NOT NULL,
    payload       TEXT NOT NULL,
    state         TEXT NOT NULL CHECK (state IN ('pending', 'delivered', 'failed')),
    attempts      INTEGER NOT NULL DEFAULT 0,
    next_at       INTEGER NOT NULL,
    claimed_until INTEGER,
    status_code   INTEGER NOT NULL DEFAULT 0,
    error         TEXT NOT NULL DEFAULT '',
    latency_ms    BIGINT NOT NULL DEFAULT 0,
    created_at    INTEGER NOT NULL,
    finished_at   INTEGER
);
CREATE INDEX webhook_deliveries_due ON webhook_deliveries (next_at) WHERE state = 'pending';
CREATE INDEX webhook_deliveries_hook ON webhook_deliveries (webhook_id, id);
