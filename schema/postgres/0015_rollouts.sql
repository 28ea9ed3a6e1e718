-- Staged rollouts: a release made in waves keeps its plan and progress in
-- rollout (NULL for a release to every agent at once), where it stands in
-- stage (deploying, waiting, halted, aborted, done), and counts the
-- operators' continues. agent_pins holds, for each agent a rollout has not
-- reached, the version it keeps (0: none) until a wave or a later release
-- reaches it.

ALTER TABLE releases ADD COLUMN rollout JSONB;
ALTER TABLE releases ADD COLUMN stage TEXT NOT NULL DEFAULT '';
ALTER TABLE releases ADD COLUMN continues INTEGER NOT NULL DEFAULT 0;

CREATE TABLE agent_pins (
    env     TEXT NOT NULL REFERENCES environments(name) ON DELETE CASCADE,
    agent   TEXT NOT NULL,
    version BIGINT NOT NULL,
    PRIMARY KEY (env, agent)
);
