-- A compile whose revision and inputs are those of the last one that
-- succeeded is skipped: its report says so (outcome skipped) and names that
-- compile (same_as). inputs is the digest of what a compile read besides
-- its revision (record.Compile.Inputs); '' for the reports before it.
-- SQLite cannot change a CHECK: the table is made again.
CREATE TABLE compiles_new (
    seq                 INTEGER PRIMARY KEY AUTOINCREMENT,
    id                  TEXT NOT NULL UNIQUE,
    env                 TEXT NOT NULL REFERENCES environments(name) ON DELETE CASCADE,
    triggers            TEXT NOT NULL,    -- record.Triggers as JSON
    revision            TEXT NOT NULL DEFAULT '',
    started_at          INTEGER NOT NULL,
    finished_at         INTEGER,
    outcome             TEXT NOT NULL CHECK (outcome IN ('running', 'released', 'candidate', 'unchanged', 'failed', 'skipped')),
    diagnostics         TEXT,             -- []record.CompileDiagnostic as JSON
    diagnostics_total   INTEGER NOT NULL DEFAULT 0,
    resources_per_agent TEXT,             -- map[string]int as JSON
    undefined           TEXT,             -- []record.UndefinedBlock as JSON
    undefined_total     INTEGER NOT NULL DEFAULT 0,
    version             INTEGER NOT NULL DEFAULT 0,
    inputs              TEXT NOT NULL DEFAULT '',
    same_as             TEXT NOT NULL DEFAULT ''
);
INSERT INTO compiles_new (seq, id, env, triggers, revision, started_at, finished_at, outcome, diagnostics, diagnostics_total,
        resources_per_agent, undefined, undefined_total, version)
    SELECT seq, id, env, triggers, revision, started_at, finished_at, outcome, diagnostics, diagnostics_total,
        resources_per_agent, undefined, undefined_total, version FROM compiles;
DROP TABLE compiles;
ALTER TABLE compiles_new RENAME TO compiles;
CREATE INDEX compiles_env ON compiles (env, seq);

-- A compile that succeeds after failures is an alert of its own kind,
-- compile.recovered (it was a compile.failed alert marked compliant), sent
-- as an event of its own kind: the webhooks that asked for compile
-- alerts get it too.
UPDATE alerts SET kind = 'compile.recovered' WHERE kind = 'compile.failed' AND compliance = 'compliant';
UPDATE webhooks SET kinds = kinds || 'compile.recovered '
    WHERE kinds LIKE '% compile.alert %' AND kinds NOT LIKE '% compile.recovered %';
