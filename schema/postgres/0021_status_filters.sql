-- The resources of a state or of a compliance, in ID order: the overview's
-- failed and drifted resources and a filtered listing's page are found, and
-- counted, without reading an environment's every status.

CREATE INDEX resource_status_state ON resource_status (env, state, resource_id);
CREATE INDEX resource_status_compliance ON resource_status (env, compliance, resource_id);
