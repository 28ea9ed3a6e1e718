-- A rollover of the server's signing key under way (tether server
-- signing-key new): the next key, its private half sealed with the server's
-- key file as the secrets are, and, once an operator switched to it, when
-- every server signs with it. The current key stays in the secrets table
-- (server-signing-key) until the old one is retired. One row at most.
CREATE TABLE signing_key_rollover (
    id          INTEGER PRIMARY KEY CHECK (id = 1),
    public_key  BLOB NOT NULL,
    private_key BLOB NOT NULL,
    made_at     INTEGER NOT NULL,
    switch_at   INTEGER
);

-- The fingerprints of the server keys an agent takes commands signed by,
-- as it last said (hello, server.rollover.ack), and the sequence number of
-- the event that said it: one handled late never overwrites a later word.
ALTER TABLE agents ADD COLUMN server_keys TEXT NOT NULL DEFAULT '[]';
ALTER TABLE agents ADD COLUMN server_keys_seq INTEGER NOT NULL DEFAULT 0;
