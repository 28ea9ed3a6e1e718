-- The highest sequence number accepted from each agent's current key: a
-- later event may run ahead of it only so far, and a new key starts over.
-- Numbers past the protocol's limit (2^62) that an older server accepted
-- are dropped, so no resource stays frozen behind one.

UPDATE resource_status SET seq = 0 WHERE seq > 4611686018427387904 OR seq < 0;
UPDATE resource_status SET compliance_seq = 0 WHERE compliance_seq > 4611686018427387904 OR compliance_seq < 0;
DELETE FROM ingested WHERE seq > 4611686018427387904 OR seq < 0;

ALTER TABLE agents ADD COLUMN last_seq BIGINT NOT NULL DEFAULT 0;
UPDATE agents SET last_seq = COALESCE((SELECT max(i.seq) FROM ingested i WHERE i.env = agents.env AND i.agent = agents.name), 0);
