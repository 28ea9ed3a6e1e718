-- Users, organizations and sessions. Organizations group environments,
-- users and API tokens and see nothing of each other; what existed before
-- them belongs to the organization "default".

CREATE TABLE orgs (
    name       TEXT PRIMARY KEY,
    created_at TIMESTAMPTZ NOT NULL
);

INSERT INTO orgs (name, created_at) VALUES ('default', now());

-- An organization with environments cannot be deleted (no cascade).
ALTER TABLE environments ADD COLUMN org TEXT NOT NULL DEFAULT 'default' REFERENCES orgs(name);
CREATE INDEX environments_org ON environments (org, name);

-- A user's password is an argon2id hash encoded with its parameters; role
-- is the user's role in every environment of the organization ('' none).
CREATE TABLE users (
    id          TEXT PRIMARY KEY,
    org         TEXT NOT NULL REFERENCES orgs(name) ON DELETE CASCADE,
    name        TEXT NOT NULL,
    password    TEXT NOT NULL,
    role        TEXT NOT NULL DEFAULT '' CHECK (role IN ('', 'admin', 'operator', 'viewer')),
    created_by  TEXT NOT NULL,
    created_at  TIMESTAMPTZ NOT NULL,
    password_at TIMESTAMPTZ NOT NULL,
    UNIQUE (org, name)
);

-- A user's roles in single environments.
CREATE TABLE user_roles (
    user_id TEXT NOT NULL REFERENCES users(id) ON DELETE CASCADE,
    env     TEXT NOT NULL REFERENCES environments(name) ON DELETE CASCADE,
    role    TEXT NOT NULL CHECK (role IN ('admin', 'operator', 'viewer')),
    PRIMARY KEY (user_id, env)
);

-- Sessions by the SHA-256 of their secret (the cookie): deleted with
-- their user, and when the user's password changes.
CREATE TABLE sessions (
    hash       BYTEA PRIMARY KEY,
    user_id    TEXT NOT NULL REFERENCES users(id) ON DELETE CASCADE,
    created_at TIMESTAMPTZ NOT NULL,
    last_seen  TIMESTAMPTZ NOT NULL,
    expires_at TIMESTAMPTZ NOT NULL
);

CREATE INDEX sessions_user ON sessions (user_id);

-- A token belongs to an organization, and to a user (owner) or to the
-- organization itself (owner NULL).
ALTER TABLE tokens ADD COLUMN org TEXT NOT NULL DEFAULT 'default' REFERENCES orgs(name) ON DELETE CASCADE;
ALTER TABLE tokens ADD COLUMN owner TEXT REFERENCES users(id) ON DELETE CASCADE;

ALTER TABLE audit ADD COLUMN org TEXT NOT NULL DEFAULT 'default';
CREATE INDEX audit_org ON audit (org, seq);
