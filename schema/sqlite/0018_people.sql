-- Users, organizations and sessions. Organizations group environments,
-- users and API tokens and see nothing of each other; what existed before
-- them belongs to the organization "default". (SQLite cannot add a column
-- with a foreign key and a default: environments.org and tokens.org are
-- kept right by the store.)

CREATE TABLE orgs (
    name       TEXT PRIMARY KEY,
    created_at INTEGER NOT NULL
);

INSERT INTO orgs (name, created_at) VALUES ('default', CAST((julianday('now') - 2440587.5) * 86400000000000 AS INTEGER));

ALTER TABLE environments ADD COLUMN org TEXT NOT NULL DEFAULT 'default';
CREATE INDEX environments_org ON environments (org, name);

CREATE TABLE users (
    id          TEXT PRIMARY KEY,
    org         TEXT NOT NULL REFERENCES orgs(name) ON DELETE CASCADE,
    name        TEXT NOT NULL,
    password    TEXT NOT NULL,
    role        TEXT NOT NULL DEFAULT '' CHECK (role IN ('', 'admin', 'operator', 'viewer')),
    created_by  TEXT NOT NULL,
    created_at  INTEGER NOT NULL,
    password_at INTEGER NOT NULL,
    UNIQUE (org, name)
);

CREATE TABLE user_roles (
    user_id TEXT NOT NULL REFERENCES users(id) ON DELETE CASCADE,
    env     TEXT NOT NULL REFERENCES environments(name) ON DELETE CASCADE,
    role    TEXT NOT NULL CHECK (role IN ('admin', 'operator', 'viewer')),
    PRIMARY KEY (user_id, env)
);

CREATE TABLE sessions (
    hash       BLOB PRIMARY KEY,
    user_id    TEXT NOT NULL REFERENCES users(id) ON DELETE CASCADE,
    created_at INTEGER NOT NULL,
    last_seen  INTEGER NOT NULL,
    expires_at INTEGER NOT NULL
);

CREATE INDEX sessions_user ON sessions (user_id);

ALTER TABLE tokens ADD COLUMN org TEXT NOT NULL DEFAULT 'default';
ALTER TABLE tokens ADD COLUMN owner TEXT REFERENCES users(id) ON DELETE CASCADE;

ALTER TABLE audit ADD COLUMN org TEXT NOT NULL DEFAULT 'default';
CREATE INDEX audit_org ON audit (org, seq);
