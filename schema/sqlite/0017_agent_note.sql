-- Why an agent is not accepted, as the server last found on its hello (an
-- enrollment token refused, waiting for an operator): shown by agent list.

ALTER TABLE agents ADD COLUMN note TEXT NOT NULL DEFAULT '';
