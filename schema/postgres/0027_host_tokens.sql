-- An enrollment token may be bound to a host of a blueprint: only the
-- agent of that name enrolls with it ('' for a token of any agent).
ALTER TABLE enroll_tokens ADD COLUMN host TEXT NOT NULL DEFAULT '';
