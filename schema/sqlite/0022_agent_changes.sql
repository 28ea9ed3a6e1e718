-- On PostgreSQL this step has a trigger tell every server of a change of an
-- agent's record, so that each forgets the copy its ingest path holds. The
-- embedded store has one process, which makes every change itself: there is
-- no one to tell, and nothing to change here.
SELECT 1;
