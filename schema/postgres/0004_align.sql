-- No change to the schema. SQLite's 0002_server added what this store's
-- 0001_init created from the start, so SQLite counts one step more; this
-- empty step evens the count, and from 0005 on a step has the same number
-- and name in both stores (schema_test.go checks it).
SELECT 1;
