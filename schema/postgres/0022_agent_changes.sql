-- Each server keeps a copy of the agents it hears from (keys, state,
-- labels) on its ingest path. A change of an agent's record other than the
-- marks its events leave (last seen, online, last sequence number,
-- generation held), and its deletion, are told to every server listening
-- on the schema's channel (NOTIFY, at commit), which forgets its copy: an
-- agent rejected or re-keyed through one replica is refused by the others
-- at once. The channel is tether_agents_ and the MD5 of the schema's name
-- (within PostgreSQL's 63 bytes whatever the name); the payload is
-- ["env","name"].

CREATE FUNCTION tether_agent_changed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'DELETE' THEN
        PERFORM pg_notify('tether_agents_' || md5(TG_TABLE_SCHEMA), json_build_array(OLD.env, OLD.name)::text);
        RETURN OLD;
    END IF;
    PERFORM pg_notify('tether_agents_' || md5(TG_TABLE_SCHEMA), json_build_array(NEW.env, NEW.name)::text);
    RETURN NEW;
END
$$;

CREATE TRIGGER agents_changed AFTER UPDATE ON agents FOR EACH ROW
    WHEN ((OLD.state, OLD.public_key, OLD.labels, OLD.facts, OLD.kinds, OLD.paused, OLD.first_seen,
           OLD.key_agreement_key, OLD.previous_key, OLD.previous_until, OLD.server_keys, OLD.server_keys_seq,
           OLD.note, OLD.agent_version, OLD.protocol)
          IS DISTINCT FROM
          (NEW.state, NEW.public_key, NEW.labels, NEW.facts, NEW.kinds, NEW.paused, NEW.first_seen,
           NEW.key_agreement_key, NEW.previous_key, NEW.previous_until, NEW.server_keys, NEW.server_keys_seq,
           NEW.note, NEW.agent_version, NEW.protocol))
    EXECUTE FUNCTION tether_agent_changed();

CREATE TRIGGER agents_deleted AFTER DELETE ON agents FOR EACH ROW
    EXECUTE FUNCTION tether_agent_changed();
