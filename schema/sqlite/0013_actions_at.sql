-- The action log is pruned by age (the server's --keep-actions): the
-- oldest actions are found by their time.

CREATE INDEX actions_at ON actions (at);
