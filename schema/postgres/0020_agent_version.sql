-- The version of the agent's build and the protocol version it speaks, as
-- it last said (hello, heartbeats): shown by agent list and agent show.

ALTER TABLE agents ADD COLUMN agent_version TEXT NOT NULL DEFAULT '';
ALTER TABLE agents ADD COLUMN protocol TEXT NOT NULL DEFAULT '';
