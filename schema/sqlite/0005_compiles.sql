-- The reports of the compiles the server runs: one row per compile, written
-- when it starts and completed when it ends. seq orders them; id names one.

CREATE TABLE compiles (
    seq                 INTEGER PRIMARY KEY AUTOINCREMENT,
    id                  TEXT NOT NULL UNIQUE,
    env                 TEXT NOT NULL REFERENCES environments(name) ON DELETE CASCADE,
    triggers            TEXT NOT NULL,    -- record.Triggers as JSON
    revision            TEXT NOT NULL DEFAULT '',
    started_at          INTEGER NOT NULL,
    finished_at         INTEGER,
    outcome             TEXT NOT NULL CHECK (outcome IN ('running', 'released', 'candidate', 'unchanged', 'failed')),
    diagnostics         TEXT,             -- []record.CompileDiagnostic as JSON
    diagnostics_total   INTEGER NOT NULL DEFAULT 0,
    resources_per_agent TEXT,             -- map[string]int as JSON
    undefined           TEXT,             -- []record.UndefinedBlock as JSON
    undefined_total     INTEGER NOT NULL DEFAULT 0,
    version             INTEGER NOT NULL DEFAULT 0
);

CREATE INDEX compiles_env ON compiles (env, seq);
