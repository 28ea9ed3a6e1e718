-- Each agent's X25519 key-agreement key, from its hello: the server seals
-- sensitive values to it before they enter the bus. NULL for agents older
-- than sealed values, which are sent none.
ALTER TABLE agents ADD COLUMN key_agreement_key BYTEA;
