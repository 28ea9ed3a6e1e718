-- Where each environment's model comes from, for the compiles the server
-- runs: a git repository or an uploaded archive. spec holds credentials
-- (tokens, SSH keys) and webhook_secret the push webhook's key: the server
-- reads them, its API never returns them. Protect backups accordingly.

CREATE TABLE sources (
    env            TEXT PRIMARY KEY REFERENCES environments(name) ON DELETE CASCADE,
    kind           TEXT NOT NULL CHECK (kind IN ('git', 'archive')),
    spec           BLOB NOT NULL,
    archive        BLOB,
    archive_size   INTEGER NOT NULL DEFAULT 0,
    archive_sha256 TEXT NOT NULL DEFAULT '',
    webhook_secret TEXT NOT NULL DEFAULT '',
    poll_seconds   INTEGER NOT NULL DEFAULT 0,
    updated_at     INTEGER NOT NULL,
    updated_by     TEXT NOT NULL DEFAULT ''
);
