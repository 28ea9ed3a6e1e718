-- A compile whose revision and inputs are those of the last one that
-- succeeded is skipped: its report says so (outcome skipped) and names that
-- compile (same_as). inputs is the digest of what a compile read besides
-- its revision (record.Compile.Inputs); '' for the reports before it.
ALTER TABLE compiles DROP CONSTRAINT compiles_outcome_check;
ALTER TABLE compiles ADD CONSTRAINT compiles_outcome_check
    CHECK (outcome IN ('running', 'released', 'candidate', 'unchanged', 'failed', 'skipped'));
ALTER TABLE compiles ADD COLUMN inputs TEXT NOT NULL DEFAULT '';
ALTER TABLE compiles ADD COLUMN same_as TEXT NOT NULL DEFAULT '';

-- A compile that succeeds after failures is an alert of its own kind,
-- compile.recovered (it was a compile.failed alert marked compliant), sent
-- as an event of its own kind: the webhooks that asked for compile
-- alerts get it too.
UPDATE alerts SET kind = 'compile.recovered' WHERE kind = 'compile.failed' AND compliance = 'compliant';
UPDATE webhooks SET kinds = kinds || 'compile.recovered '
    WHERE kinds LIKE '% compile.alert %' AND kinds NOT LIKE '% compile.recovered %';
