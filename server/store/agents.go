package store

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/tetherhq/tether/model"
	"github.com/tetherhq/tether/server/record"
)

// UpsertAgent implements Store.
func (s *SQL) UpsertAgent(ctx context.Context, a record.Agent) error {
	_, err := s.upsertAgent(ctx, s.db, a, nil)
	return err
}

// UpsertAgentIf implements Store.
func (s *SQL) UpsertAgentIf(ctx context.Context, a record.Agent, was record.Agent) (bool, error) {
	return s.upsertAgent(ctx, s.db, a, &was)
}

// AddPendingAgent implements Store. The count and the insert are one
// transaction, serialised with the others of the kind (LockPending, or
// the whole database): hellos handled at once, by several replicas too,
// never take one place twice.
func (s *SQL) AddPendingAgent(ctx context.Context, a record.Agent, max int) (int, error) {
	if a.State != record.AgentPending {
		return 0, fmt.Errorf("add pending agent %s: %w: state %q, want %q", a.Name, model.ErrInvalid, a.State, record.AgentPending)
	}
	var n int
	err := s.db.Tx(ctx, func(tx Tx) error {
		if err := run(ctx, tx, s.d.LockPending); err != nil {
			return err
		}
		// Counted up to max: a full environment costs no more than that.
		if err := tx.QueryRow(ctx, `SELECT COUNT(*) FROM (SELECT 1 FROM agents WHERE env = $1 AND state = $2 LIMIT $3) p`,
			a.Env, record.AgentPending, max).Scan(&n); err != nil {
			return err
		}
		if n >= max {
			return fmt.Errorf("%d agents of %q wait for acceptance: %w", n, a.Env, ErrMaxPending)
		}
		wrote, err := s.upsertAgent(ctx, tx, a, &record.Agent{})
		if err != nil {
			return err
		}
		if !wrote {
			return fmt.Errorf("agent %s of %q was recorded meanwhile: %w", a.Name, a.Env, model.ErrConflict)
		}
		n++
		return nil
	})
	return n, wrap("add pending agent "+a.Name, err)
}

// upsertAgent writes a through c; when was is given, over a stored record
// only if its state and pause are still was's.
func (s *SQL) upsertAgent(ctx context.Context, c Conn, a record.Agent, was *record.Agent) (bool, error) {
	if err := model.ValidateAgentName(a.Name); err != nil {
		return false, fmt.Errorf("upsert agent: %w: %w", model.ErrInvalid, err)
	}
	if a.State == "" {
		a.State = record.AgentPending
	}
	now := time.Now()
	if a.FirstSeen.IsZero() {
		a.FirstSeen = now
	}
	if a.LastSeen.IsZero() {
		a.LastSeen = now
	}
	labels, facts, kinds, err := encodeAgent(&a)
	if err != nil {
		return false, fmt.Errorf("upsert agent: %w", err)
	}
	serverKeys := encodeList(a.ServerKeys)
	args := []any{a.Env, a.Name, a.State, a.PublicKey, labels, facts, kinds, a.Generation, a.Paused, a.FirstSeen, a.LastSeen, a.Connected, a.LastSeq, a.KeyAgreementKey,
		a.PreviousKey, a.PreviousUntil, serverKeys, a.ServerKeysSeq, a.Note, a.AgentVersion, a.Protocol, a.FactsSeq}
	guard := ""
	if was != nil {
		guard = ` WHERE agents.state = $23 AND agents.paused = $24`
		args = append(args, was.State, was.Paused)
	}
	// An unknown environment fails the foreign key: model.ErrNotFound.
	n, err := c.Exec(ctx, `
		INSERT INTO agents (env, name, state, public_key, labels, facts, kinds, generation, paused, first_seen, last_seen, online, last_seq, key_agreement_key, previous_key, previous_until, server_keys, server_keys_seq, note, agent_version, protocol, facts_seq)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18, $19, $20, $21, $22)
		ON CONFLICT (env, name) DO UPDATE SET
			state = excluded.state, note = excluded.note, key_agreement_key = excluded.key_agreement_key,
			generation = excluded.generation, paused = excluded.paused,
			-- What the agent said of itself stays as the latest event
			-- said it: a write from a record read before a later event
			-- was recorded puts nothing older back.
			labels = CASE WHEN agents.facts_seq > excluded.facts_seq THEN agents.labels ELSE excluded.labels END,
			facts = CASE WHEN agents.facts_seq > excluded.facts_seq THEN agents.facts ELSE excluded.facts END,
			kinds = CASE WHEN agents.facts_seq > excluded.facts_seq THEN agents.kinds ELSE excluded.kinds END,
			facts_seq = CASE WHEN agents.facts_seq > excluded.facts_seq THEN agents.facts_seq ELSE excluded.facts_seq END,
			agent_version = CASE WHEN agents.last_seq > excluded.last_seq THEN agents.agent_version ELSE excluded.agent_version END,
			protocol = CASE WHEN agents.last_seq > excluded.last_seq THEN agents.protocol ELSE excluded.protocol END,
			last_seen = CASE WHEN agents.last_seq > excluded.last_seq THEN agents.last_seen ELSE excluded.last_seen END,
			online = CASE WHEN agents.last_seq > excluded.last_seq THEN agents.online ELSE excluded.online END,
			last_seq = CASE WHEN agents.last_seq > excluded.last_seq THEN agents.last_seq ELSE excluded.last_seq END,
			server_keys = CASE WHEN agents.server_keys_seq > excluded.server_keys_seq THEN agents.server_keys ELSE excluded.server_keys END,
			server_keys_seq = CASE WHEN agents.server_keys_seq > excluded.server_keys_seq THEN agents.server_keys_seq ELSE excluded.server_keys_seq END`+guard,
		args...)
	if err != nil {
		return false, wrap("upsert agent "+a.Name, err)
	}
	return n == 1, nil
}

// SetAgentState implements Store.
func (s *SQL) SetAgentState(ctx context.Context, a, was record.Agent, events ...record.LoggedEvent) error {
	var n int64
	err := s.db.Tx(ctx, func(tx Tx) error {
		var err error
		n, err = tx.Exec(ctx, `UPDATE agents SET state = $3, paused = $4, note = $5
			WHERE env = $1 AND name = $2 AND state = $6 AND paused = $7`,
			a.Env, a.Name, a.State, a.Paused, a.Note, was.State, was.Paused)
		if err != nil || n != 1 {
			return err
		}
		_, err = s.appendEvents(ctx, tx, events)
		return err
	})
	if err != nil {
		return wrap("set the state of agent "+a.Name, err)
	}
	if n == 1 {
		return nil
	}
	if _, err := s.GetAgent(ctx, a.Env, a.Name); err != nil {
		return err // ErrNotFound: deleted
	}
	return fmt.Errorf("agent %s of %s: %w: another decision changed it meanwhile; look at it again (tether agent show) and retry", a.Name, a.Env, model.ErrConflict)
}

// SetAgentKey implements Store.
func (s *SQL) SetAgentKey(ctx context.Context, a record.Agent, from []byte) (bool, error) {
	n, err := s.db.Exec(ctx, `UPDATE agents SET public_key = $4, previous_key = $5, previous_until = $6
		WHERE env = $1 AND name = $2 AND public_key = $3`, a.Env, a.Name, from, a.PublicKey, a.PreviousKey, a.PreviousUntil)
	if err != nil {
		return false, wrap("set the key of agent "+a.Name, err)
	}
	return n == 1, nil
}

// SetAgentReport implements Store.
func (s *SQL) SetAgentReport(ctx context.Context, a record.Agent) (bool, error) {
	labels, facts, _, err := encodeAgent(&a)
	if err != nil {
		return false, fmt.Errorf("record the report of agent %s: %w", a.Name, err)
	}
	// Each part is written only if the event that says it is later than
	// the one that said what is stored: the latest event for whether it is
	// connected, its version and when it was seen (LastSeq), the latest
	// word on labels and facts (FactsSeq), on server keys (ServerKeysSeq).
	n, err := s.db.Exec(ctx, `UPDATE agents SET
			labels = CASE WHEN $12 > facts_seq THEN $3 ELSE labels END,
			facts = CASE WHEN $12 > facts_seq THEN $4 ELSE facts END,
			facts_seq = CASE WHEN $12 > facts_seq THEN $12 ELSE facts_seq END,
			online = CASE WHEN $9 > last_seq THEN $5 ELSE online END,
			agent_version = CASE WHEN $9 > last_seq THEN $6 ELSE agent_version END,
			protocol = CASE WHEN $9 > last_seq THEN $7 ELSE protocol END,
			last_seen = CASE WHEN $9 > last_seq THEN $8 ELSE last_seen END,
			last_seq = CASE WHEN last_seq > $9 THEN last_seq ELSE $9 END,
			server_keys = CASE WHEN server_keys_seq > $10 THEN server_keys ELSE $11 END,
			server_keys_seq = CASE WHEN server_keys_seq > $10 THEN server_keys_seq ELSE $10 END
		WHERE env = $1 AND name = $2`, a.Env, a.Name, labels, facts, a.Connected, a.AgentVersion, a.Protocol, a.LastSeen, a.LastSeq,
		a.ServerKeysSeq, encodeList(a.ServerKeys), a.FactsSeq)
	if err != nil {
		return false, wrap("record the report of agent "+a.Name, err)
	}
	return n == 1, nil
}

// SetAgentGeneration implements Store.
func (s *SQL) SetAgentGeneration(ctx context.Context, env, name string, generation int64) (bool, error) {
	n, err := s.db.Exec(ctx, `UPDATE agents SET generation = $3
		WHERE env = $1 AND name = $2 AND generation <> $3`, env, name, generation)
	if err != nil {
		return false, wrap("set the generation of agent "+name, err)
	}
	return n == 1, nil
}

// AgentSeen is an agent heard from at a time, in a message numbered Seq.
type AgentSeen struct {
	Env, Agent string
	Seq        int64
	At         time.Time
}

// MarkAgentsSeen implements Store.
func (s *SQL) MarkAgentsSeen(ctx context.Context, seen []AgentSeen) error {
	if len(seen) == 0 {
		return nil
	}
	return wrap(fmt.Sprintf("mark %d agents seen", len(seen)), s.db.Tx(ctx, func(tx Tx) error {
		return tx.MarkSeen(ctx, seen)
	}))
}

// ResetSequence implements Store.
func (s *SQL) ResetSequence(ctx context.Context, env, agent string) error {
	return wrap("reset the sequence of "+agent, s.db.Tx(ctx, func(tx Tx) error {
		if err := s.lockStatuses(ctx, tx, env, agent); err != nil {
			return err
		}
		for _, q := range []string{
			`UPDATE resource_status SET seq = 0, compliance_seq = 0 WHERE env = $1 AND agent = $2`,
			`UPDATE agents SET last_seq = 0, server_keys_seq = 0, facts_seq = 0 WHERE env = $1 AND name = $2`,
			`DELETE FROM ingested WHERE env = $1 AND agent = $2`,
		} {
			if _, err := tx.Exec(ctx, q, env, agent); err != nil {
				return err
			}
		}
		return nil
	}))
}

// DeleteAgent implements Store.
func (s *SQL) DeleteAgent(ctx context.Context, env, name string, events ...record.LoggedEvent) error {
	return wrap("delete agent "+name, s.db.Tx(ctx, func(tx Tx) error {
		if err := s.lockStatuses(ctx, tx, env, name); err != nil {
			return err
		}
		n, err := tx.Exec(ctx, `DELETE FROM agents WHERE env = $1 AND name = $2`, env, name)
		if err != nil {
			return err
		}
		if n == 0 {
			return fmt.Errorf("agent %q of %s: %w", name, env, model.ErrNotFound)
		}
		for _, q := range []string{
			// What the agent reported goes; what the released version
			// wants of the name stays, unknown until an agent of that
			// name reports again.
			`DELETE FROM resource_status WHERE env = $1 AND agent = $2 AND state = 'orphaned'`,
			`UPDATE resource_status SET state = 'available', compliance = 'unknown', message = '', last_verified = NULL,
				seq = 0, compliance_seq = 0, updated_at = now() WHERE env = $1 AND agent = $2`,
			`DELETE FROM ingested WHERE env = $1 AND agent = $2`,
		} {
			if _, err := tx.Exec(ctx, q, env, name); err != nil {
				return err
			}
		}
		// Last: the event log's lock is held for the rest of the
		// transaction only.
		_, err = s.appendEvents(ctx, tx, events)
		return err
	}))
}

// ExpirePendingAgents implements Store. One statement decides and
// deletes, so that an operator's acceptance, or a hello, through another
// replica is never undone by it.
func (s *SQL) ExpirePendingAgents(ctx context.Context, env string, before time.Time, limit int) ([]string, error) {
	names, err := queryAll(ctx, s.db, func(r Row) (string, error) {
		var n string
		err := r.Scan(&n)
		return n, err
	}, `DELETE FROM agents WHERE env = $1 AND state = 'pending' AND last_seen < $2 AND name IN (
		SELECT name FROM agents WHERE env = $1 AND state = 'pending' AND last_seen < $2 ORDER BY name LIMIT $3)
		RETURNING name`, env, before, limitOf(limit))
	return names, wrap("expire pending agents of "+env, err)
}

const agentColumns = `env, name, state, public_key, labels, facts, kinds, generation, paused, first_seen, last_seen, online, last_seq, key_agreement_key, previous_key, previous_until, server_keys, server_keys_seq, note, agent_version, protocol, facts_seq`

func scanAgent(r Row) (record.Agent, error) {
	var a record.Agent
	var labels, facts, kinds, serverKeys []byte
	if err := r.Scan(&a.Env, &a.Name, &a.State, &a.PublicKey, &labels, &facts, &kinds, &a.Generation, &a.Paused,
		timeCol{&a.FirstSeen}, timeCol{&a.LastSeen}, &a.Connected, &a.LastSeq, &a.KeyAgreementKey,
		&a.PreviousKey, nullTimeCol{&a.PreviousUntil}, &serverKeys, &a.ServerKeysSeq, &a.Note, &a.AgentVersion, &a.Protocol, &a.FactsSeq); err != nil {
		return a, err
	}
	if err := json.Unmarshal(serverKeys, &a.ServerKeys); err != nil {
		return a, fmt.Errorf("%w: server keys of agent %s: %w", ErrCorrupt, a.Name, err)
	}
	if len(a.ServerKeys) == 0 {
		a.ServerKeys = nil
	}
	return a, decodeAgent(&a, labels, facts, kinds)
}

// encodeList returns a list of strings as stored (JSON, never null).
func encodeList(l []string) []byte {
	if len(l) == 0 {
		return []byte("[]")
	}
	b, _ := json.Marshal(l) // strings: cannot fail
	return b
}

// GetAgent implements Store.
func (s *SQL) GetAgent(ctx context.Context, env, name string) (record.Agent, error) {
	a, err := scanAgent(s.db.QueryRow(ctx, `SELECT `+agentColumns+` FROM agents WHERE env = $1 AND name = $2`, env, name))
	return a, wrap("agent "+name, err)
}

// ListAgents implements Store.
func (s *SQL) ListAgents(ctx context.Context, env string) ([]record.Agent, error) {
	out, err := queryAll(ctx, s.db, scanAgent, `SELECT `+agentColumns+` FROM agents WHERE env = $1 ORDER BY name`, env)
	return out, wrap("list agents", err)
}

// FindAgents implements Store.
func (s *SQL) FindAgents(ctx context.Context, env string, f record.AgentFilter) ([]record.Agent, int, error) {
	if f.Limit < 0 || f.Offset < 0 {
		return nil, 0, fmt.Errorf("find agents: %w: limit %d, offset %d: want 0 or more", model.ErrInvalid, f.Limit, f.Offset)
	}
	if f.LabelKey != "" {
		if err := model.ValidateLabels(map[string]string{f.LabelKey: ""}); err != nil {
			return nil, 0, fmt.Errorf("find agents: %w: %w", model.ErrInvalid, err)
		}
	}
	var a args
	where := s.agentWhere(&a, env, f)
	q := `SELECT ` + agentColumns + ` FROM agents WHERE ` + where + ` ORDER BY name`
	if f.Limit > 0 {
		q += ` LIMIT ` + a.add(f.Limit) + ` OFFSET ` + a.add(f.Offset)
	}
	out, err := queryAll(ctx, s.db, scanAgent, q, a...)
	if err != nil {
		return nil, 0, wrap("find agents", err)
	}
	total := len(out)
	if f.Limit <= 0 {
		// All of them were read: the page is cut here.
		return out[min(f.Offset, total):], total, nil
	}
	if f.Offset > 0 || total == f.Limit {
		// A page that is not all there is: count the rest in the store.
		var ca args
		if err := s.db.QueryRow(ctx, `SELECT count(*) FROM agents WHERE `+s.agentWhere(&ca, env, f), ca...).Scan(&total); err != nil {
			return nil, 0, wrap("count agents", err)
		}
	}
	return out, total, nil
}

// agentWhere is the condition of the agents of env f keeps.
func (s *SQL) agentWhere(a *args, env string, f record.AgentFilter) string {
	q := `env = ` + a.add(env)
	if f.State != "" {
		q += ` AND state = ` + a.add(f.State)
	}
	if f.Online != nil {
		online := `(online AND last_seen > ` + a.add(f.OnlineSince) + `)`
		if !*f.Online {
			online = `NOT ` + online
		}
		q += ` AND state = 'accepted' AND ` + online
	}
	if f.LabelKey != "" {
		value := fmt.Sprintf(s.d.LabelValue, a.add(f.LabelKey))
		if f.LabelValue != nil {
			q += ` AND ` + value + ` = ` + a.add(*f.LabelValue)
		} else {
			q += ` AND ` + value + ` IS NOT NULL`
		}
	}
	if f.Search != "" {
		like := a.add(containing(f.Search))
		q += ` AND (lower(name) LIKE ` + like + ` ESCAPE '\' OR EXISTS (SELECT 1 FROM ` + s.d.EachText + `(labels) l
			WHERE lower(l.key || '=' || l.value) LIKE ` + like + ` ESCAPE '\'))`
	}
	return q
}

// CountAgentsByState implements Store.
func (s *SQL) CountAgentsByState(ctx context.Context, env string, onlineSince time.Time) (record.AgentCounts, error) {
	var c record.AgentCounts
	rows, err := s.db.Query(ctx, `SELECT state, state = 'accepted' AND online AND last_seen > $2, state = 'accepted' AND paused, count(*)
		FROM agents WHERE env = $1 GROUP BY 1, 2, 3`, env, onlineSince)
	if err != nil {
		return c, wrap("count agents", err)
	}
	defer rows.Close()
	for rows.Next() {
		var state record.AgentState
		var online, paused bool
		var n int
		if err := rows.Scan(&state, &online, &paused, &n); err != nil {
			return c, wrap("count agents", err)
		}
		switch {
		case state == record.AgentPending:
			c.Pending += n
		case state == record.AgentRejected:
			c.Rejected += n
		case online:
			c.Online += n
		default:
			c.Offline += n
		}
		if paused {
			c.Paused += n
		}
	}
	return c, wrap("count agents", rows.Err())
}

// encodeAgent returns an agent's labels, facts and kinds as stored (JSON,
// never null).
func encodeAgent(a *record.Agent) (labels, facts, kinds []byte, err error) {
	labels, _ = json.Marshal(orEmpty(a.Labels))
	if facts, err = json.Marshal(orEmpty(a.Facts)); err != nil {
		return nil, nil, nil, fmt.Errorf("agent %s: facts: %w: %w", a.Name, model.ErrInvalid, err)
	}
	if a.Kinds == nil {
		kinds = []byte("[]")
	} else {
		kinds, _ = json.Marshal(a.Kinds)
	}
	return labels, facts, kinds, nil
}

// decodeAgent fills an agent's labels, facts and kinds from their stored form.
func decodeAgent(a *record.Agent, labels, facts, kinds []byte) error {
	if err := json.Unmarshal(labels, &a.Labels); err != nil {
		return fmt.Errorf("%w: labels of agent %s: %w", ErrCorrupt, a.Name, err)
	}
	if err := model.DecodeJSON(facts, &a.Facts); err != nil {
		return fmt.Errorf("%w: facts of agent %s: %w", ErrCorrupt, a.Name, err)
	}
	if err := json.Unmarshal(kinds, &a.Kinds); err != nil {
		return fmt.Errorf("%w: kinds of agent %s: %w", ErrCorrupt, a.Name, err)
	}
	return nil
}

func orEmpty[V any](m map[string]V) map[string]V {
	if m == nil {
		return map[string]V{}
	}
	return m
}
