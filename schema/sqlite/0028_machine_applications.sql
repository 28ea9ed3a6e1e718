-- What an environment's model says of its applications for the machines
-- made to run them (record.Application): machine settings, a layer of the
-- context of every host that lists the application. The model's own: each
-- compile the server runs replaces an environment's rows.
CREATE TABLE machine_applications (
    env              TEXT NOT NULL REFERENCES environments(name) ON DELETE CASCADE,
    name             TEXT NOT NULL,
    machine_settings TEXT NOT NULL DEFAULT '{}',
    declared_in      TEXT NOT NULL DEFAULT '',
    updated_at       INTEGER NOT NULL,
    PRIMARY KEY (env, name)
);
