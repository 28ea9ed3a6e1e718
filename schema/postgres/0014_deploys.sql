-- Deploys: one row per deploy, repair or dry run sent to agents (a
-- release's fan-out, an operator's request, a periodic retry or repair, an
-- agent's catch-up), with what set it off and who asked. seq orders them;
-- (env, id) names one. A deploy's agents are the ones it was sent to, each
-- with how its run ended once the agent said so.

CREATE TABLE deploys (
    seq        BIGSERIAL PRIMARY KEY,
    id         TEXT NOT NULL,
    env        TEXT NOT NULL REFERENCES environments(name) ON DELETE CASCADE,
    kind       TEXT NOT NULL,
    trigger_kind TEXT NOT NULL,
    who        TEXT NOT NULL DEFAULT '',
    version    BIGINT NOT NULL,
    started_at TIMESTAMPTZ NOT NULL,
    UNIQUE (env, id)
);

CREATE INDEX deploys_env ON deploys (env, seq);
CREATE INDEX deploys_started ON deploys (started_at);

CREATE TABLE deploy_agents (
    env         TEXT NOT NULL,
    deploy_id   TEXT NOT NULL,
    agent       TEXT NOT NULL,
    -- failed counts the resources the agent reported failed in this run.
    failed      INTEGER NOT NULL DEFAULT 0,
    -- run_error is why the run could not complete, as the agent said.
    run_error   TEXT NOT NULL DEFAULT '',
    -- finished_at is set when the agent said its run is done.
    finished_at TIMESTAMPTZ,
    -- No foreign key: an agent's answer may be recorded a moment before
    -- the deploy is (it is recorded right after it is sent). Pruning
    -- deletes an agent's row with its deploy.
    PRIMARY KEY (env, deploy_id, agent)
);

CREATE INDEX deploy_agents_agent ON deploy_agents (env, agent);
