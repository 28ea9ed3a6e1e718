-- Machines from blueprints (record.Platform, Distribution, Host, Instance),
-- each environment's own: they go with it (the cascades). A host's
-- platform and distribution are in its environment; one in use by a host
-- is not deleted (the store refuses it first, saying which host; the keys
-- below refuse what slips past). States and power are the records' words,
-- checked by the server, not here: a new state needs no new step.
-- Settings are kept as given (a secret's sealing is the server's).

CREATE TABLE platforms (
    env        TEXT NOT NULL REFERENCES environments(name) ON DELETE CASCADE,
    name       TEXT NOT NULL,
    driver     TEXT NOT NULL,
    agent      TEXT NOT NULL,
    settings   TEXT NOT NULL DEFAULT '{}',
    templates  TEXT NOT NULL DEFAULT '{}',
    discovered INTEGER NOT NULL DEFAULT 0,
    created_at INTEGER NOT NULL,
    updated_at INTEGER NOT NULL,
    PRIMARY KEY (env, name)
);

CREATE TABLE distributions (
    env            TEXT NOT NULL REFERENCES environments(name) ON DELETE CASCADE,
    name           TEXT NOT NULL,
    kind           TEXT NOT NULL,
    kernel         TEXT NOT NULL DEFAULT '',
    initrd         TEXT NOT NULL DEFAULT '',
    cmdline        TEXT NOT NULL DEFAULT '',
    install_format TEXT NOT NULL DEFAULT '',
    install        TEXT NOT NULL DEFAULT '',
    images         TEXT NOT NULL DEFAULT '{}',
    params         TEXT NOT NULL DEFAULT '[]',
    settings       TEXT NOT NULL DEFAULT '{}',
    created_at     INTEGER NOT NULL,
    updated_at     INTEGER NOT NULL,
    PRIMARY KEY (env, name)
);

CREATE TABLE hosts (
    env          TEXT NOT NULL REFERENCES environments(name) ON DELETE CASCADE,
    name         TEXT NOT NULL,
    platform     TEXT NOT NULL,
    distribution TEXT NOT NULL,
    applications TEXT NOT NULL DEFAULT '[]',
    labels       TEXT NOT NULL DEFAULT '{}',
    settings     TEXT NOT NULL DEFAULT '{}',
    state        TEXT NOT NULL,
    reason       TEXT NOT NULL DEFAULT '',
    instance     TEXT NOT NULL DEFAULT '',
    state_since  INTEGER NOT NULL,
    created_at   INTEGER NOT NULL,
    updated_at   INTEGER NOT NULL,
    PRIMARY KEY (env, name),
    FOREIGN KEY (env, platform) REFERENCES platforms(env, name),
    FOREIGN KEY (env, distribution) REFERENCES distributions(env, name)
);
CREATE INDEX hosts_platform ON hosts (env, platform);
CREATE INDEX hosts_distribution ON hosts (env, distribution);

-- An instance is the machine a host became ('' host: discovered), at most
-- one per host.
CREATE TABLE instances (
    env       TEXT NOT NULL REFERENCES environments(name) ON DELETE CASCADE,
    id        TEXT NOT NULL,
    platform  TEXT NOT NULL DEFAULT '',
    host      TEXT NOT NULL DEFAULT '',
    agent     TEXT NOT NULL DEFAULT '',
    power     TEXT NOT NULL,
    booted_at INTEGER,
    addresses TEXT NOT NULL DEFAULT '[]',
    hardware  TEXT NOT NULL DEFAULT '{}',
    labels    TEXT NOT NULL DEFAULT '{}',
    seen_at   INTEGER NOT NULL,
    PRIMARY KEY (env, id)
);
CREATE UNIQUE INDEX instances_host ON instances (env, host) WHERE host <> '';
