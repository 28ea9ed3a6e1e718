-- No change to the schema. PostgreSQL's step drops the foreign keys of
-- version_resources and resource_status, whose checks cost a query per row
-- there; SQLite's are lookups in the same process, and one writer holds the
-- database, so this store keeps them (and their cascades).
SELECT 1;
