-- Storing and releasing a version write a row per resource: its row of
-- version_resources (once, by the transaction that stores the version,
-- right after the version's row and the bodies it refers to, under the
-- shared lock that keeps the bodies' clean-up out) and, on its first
-- release, its row of resource_status (by the release's transaction, which
-- holds the environment's row locked). Nothing else inserts either. Their
-- foreign keys checked every row again, a query per row and per key: 2.2 s
-- of the 4.7 s it took to write 200,000 of each; the check of a body also
-- locked its row (FOR KEY SHARE), writing to every body a version refers
-- to, those it shares with the versions before included. They go; what
-- they did stays done:
-- * a version's deletion (pruned, or its environment's) deletes its rows,
--   and an environment's its statuses, by the triggers below, as the
--   cascades did;
-- * a body is deleted only under the exclusive lock of the bodies'
--   clean-up, and only when no row refers to it (store.deleteUnusedBodies);
-- * a version's rows and a release's statuses are written while the
--   environment's row is locked (its deletion waits) or its version's row
--   was just written in the same transaction.

ALTER TABLE version_resources DROP CONSTRAINT version_resources_body_key_fkey;
ALTER TABLE version_resources DROP CONSTRAINT version_resources_env_number_fkey;
ALTER TABLE resource_status DROP CONSTRAINT resource_status_env_fkey;

CREATE FUNCTION tether_version_deleted() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    EXECUTE format('DELETE FROM %I.version_resources WHERE env = $1 AND number = $2', TG_TABLE_SCHEMA)
        USING OLD.env, OLD.number;
    RETURN OLD;
END
$$;

CREATE TRIGGER versions_deleted AFTER DELETE ON versions FOR EACH ROW
    EXECUTE FUNCTION tether_version_deleted();

CREATE FUNCTION tether_env_deleted() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    EXECUTE format('DELETE FROM %I.resource_status WHERE env = $1', TG_TABLE_SCHEMA)
        USING OLD.name;
    RETURN OLD;
END
$$;

CREATE TRIGGER environments_deleted AFTER DELETE ON environments FOR EACH ROW
    EXECUTE FUNCTION tether_env_deleted();
