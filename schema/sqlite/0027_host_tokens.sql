-- An enrollment token may be bound to a host of a blueprint: only the
-- agent of that name enrolls with it ('' for a token of any agent).
ALTER TABLE enroll_tokens ADD COLUMN host TEXT NOT NULL DEFAULT '';

-- Where the environment's model declares a platform, distribution or host
-- (file:line): such a record changes with the model only ('' for one an
-- operator made, or an agent reported).
ALTER TABLE platforms ADD COLUMN declared_in TEXT NOT NULL DEFAULT '';
ALTER TABLE distributions ADD COLUMN declared_in TEXT NOT NULL DEFAULT '';
ALTER TABLE hosts ADD COLUMN declared_in TEXT NOT NULL DEFAULT '';
