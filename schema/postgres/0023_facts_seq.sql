-- The sequence number of the event whose labels and facts an agent's record
-- holds (its hello, or a facts report): a report numbered at or below it is
-- older news — one delivered late, or a captured message replayed — and
-- leaves the labels and facts as they are. Like last_seq, it starts over
-- with a new key. The change tells the servers nothing of its own: a copy
-- of the record is never written back with it.

ALTER TABLE agents ADD COLUMN facts_seq BIGINT NOT NULL DEFAULT 0;
