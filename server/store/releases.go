package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/tetherhq/tether/model"
	"github.com/tetherhq/tether/server/record"
)

const releaseColumns = `id, env, version, state, agents, sent, up_to_date, pending, pending_count, note, started_at, finished_at, rollout, stage, continues`

// StartRelease implements Store.
func (s *SQL) StartRelease(ctx context.Context, r record.Release) (record.Release, error) {
	if r.ID == "" {
		r.ID = uuid.NewString()
	} else if _, err := uuid.Parse(r.ID); err != nil {
		return r, fmt.Errorf("start release: %w: id %q is not a UUID", model.ErrInvalid, model.Clip(r.ID, 64))
	}
	if r.Version <= 0 {
		return r, fmt.Errorf("start release of %q: %w: version %d: want a version number", r.Env, model.ErrInvalid, r.Version)
	}
	if r.StartedAt.IsZero() {
		r.StartedAt = time.Now()
	}
	r.StartedAt = r.StartedAt.UTC()
	r.State, r.FinishedAt = record.ReleaseRunning, nil
	r.Agents, r.Sent, r.UpToDate, r.Fanout = 0, 0, 0, record.Fanout{}
	_, err := s.db.Exec(ctx, `INSERT INTO releases (id, env, version, state, started_at) VALUES ($1, $2, $3, $4, $5)`,
		r.ID, r.Env, r.Version, r.State, r.StartedAt)
	return r, wrap(fmt.Sprintf("start release of version %d of %q", r.Version, r.Env), err)
}

// UpdateRelease implements Store.
func (s *SQL) UpdateRelease(ctx context.Context, r record.Release) (record.Release, error) {
	op := fmt.Sprintf("update release %s of %q", model.Clip(r.ID, 64), r.Env)
	if err := r.ValidateUpdate(); err != nil {
		return r, fmt.Errorf("%s: %w: %w", op, model.ErrInvalid, err)
	}
	if len(r.Pending) > record.MaxListedPending {
		r.Pending = r.Pending[:record.MaxListedPending]
	}
	r.PendingCount = max(r.PendingCount, len(r.Pending))
	r.Note = model.Clip(r.Note, record.MaxReleaseNote)
	var finished *time.Time
	if r.State != record.ReleaseRunning {
		t := time.Now()
		if r.FinishedAt != nil {
			t = *r.FinishedAt
		}
		t = t.UTC()
		finished = &t
	}
	pending, err := marshalOmitEmpty(r.Pending)
	if err != nil {
		return r, fmt.Errorf("%s: %w", op, err)
	}
	var rollout []byte
	var stage record.RolloutStage
	if r.Rollout != nil {
		if rollout, err = json.Marshal(r.Rollout); err != nil {
			return r, fmt.Errorf("%s: %w", op, err)
		}
		stage = r.Rollout.Stage
	}
	var out record.Release
	err = s.db.Tx(ctx, func(tx Tx) error {
		current, err := scanRelease(tx.QueryRow(ctx, `SELECT `+releaseColumns+` FROM releases WHERE env = $1 AND id = $2`+s.d.ForUpdate, r.Env, r.ID))
		if err != nil {
			return err
		}
		if current.State != record.ReleaseRunning {
			return fmt.Errorf("%w: it ended already (%s)", model.ErrConflict, current.State)
		}
		_, err = tx.Exec(ctx, `UPDATE releases SET state = $1, agents = $2, sent = $3, up_to_date = $4, pending = $5, pending_count = $6,
			note = $7, finished_at = $8, rollout = $9, stage = $10 WHERE env = $11 AND id = $12`,
			r.State, r.Agents, r.Sent, r.UpToDate, pending, r.PendingCount, r.Note, finished, rollout, stage, r.Env, r.ID)
		if err != nil {
			return err
		}
		out = current
		out.State, out.Agents, out.Sent, out.UpToDate, out.Fanout, out.FinishedAt = r.State, r.Agents, r.Sent, r.UpToDate, r.Fanout, finished
		if r.Rollout != nil {
			ro := *r.Rollout
			if current.Rollout != nil {
				ro.Asked = current.Rollout.Asked
			}
			out.Rollout = &ro
		}
		return nil
	})
	return out, wrap(op, err)
}

// GetRelease implements Store.
func (s *SQL) GetRelease(ctx context.Context, env, id string) (record.Release, error) {
	r, err := scanRelease(s.db.QueryRow(ctx, `SELECT `+releaseColumns+` FROM releases WHERE env = $1 AND id = $2`, env, id))
	return r, wrap(fmt.Sprintf("release %s of %q", model.Clip(id, 64), env), err)
}

// ListReleases implements Store.
func (s *SQL) ListReleases(ctx context.Context, env string, limit int) ([]record.Release, error) {
	out, err := queryAll(ctx, s.db, scanRelease, `SELECT `+releaseColumns+` FROM releases WHERE env = $1 ORDER BY seq DESC LIMIT $2`, env, limitOf(limit))
	return out, wrap(fmt.Sprintf("releases of %q", env), err)
}

// RunningReleases implements Store.
func (s *SQL) RunningReleases(ctx context.Context, env string) ([]record.Release, error) {
	out, err := queryAll(ctx, s.db, scanRelease, `SELECT `+releaseColumns+` FROM releases WHERE env = $1 AND state = 'running' ORDER BY seq DESC`, env)
	return out, wrap(fmt.Sprintf("running releases of %q", env), err)
}

// PruneReleases implements Store.
func (s *SQL) PruneReleases(ctx context.Context, env string, keep int) (int, error) {
	if keep <= 0 {
		return 0, nil
	}
	n, err := s.db.Exec(ctx, `DELETE FROM releases WHERE env = $1 AND state != 'running' AND seq NOT IN
		(SELECT seq FROM releases WHERE env = $1 ORDER BY seq DESC LIMIT $2)`, env, keep)
	if err != nil {
		return 0, wrap(fmt.Sprintf("prune releases of %q", env), err)
	}
	return int(n), nil
}

func scanRelease(row Row) (record.Release, error) {
	var r record.Release
	var pending, rollout []byte
	var stage record.RolloutStage
	var continues int
	if err := row.Scan(&r.ID, &r.Env, &r.Version, &r.State, &r.Agents, &r.Sent, &r.UpToDate, &pending, &r.PendingCount, &r.Note,
		timeCol{&r.StartedAt}, nullTimeCol{&r.FinishedAt}, &rollout, &stage, &continues); err != nil {
		return r, err
	}
	if len(rollout) > 0 {
		r.Rollout = &record.Rollout{}
		if err := json.Unmarshal(rollout, r.Rollout); err != nil {
			return r, fmt.Errorf("%w: rollout of release %s: %w", ErrCorrupt, r.ID, err)
		}
		if stage != "" {
			r.Rollout.Stage = stage
		}
		r.Rollout.Asked = continues
	}
	if len(pending) > 0 {
		if err := json.Unmarshal(pending, &r.Pending); err != nil {
			return r, fmt.Errorf("%w: pending agents of release %s: %w", ErrCorrupt, r.ID, err)
		}
	}
	return r, nil
}

// ListAgentsAfter implements Store.
func (s *SQL) ListAgentsAfter(ctx context.Context, env, after string, limit int) ([]record.Agent, error) {
	out, err := queryAll(ctx, s.db, scanAgent, `SELECT `+agentColumns+` FROM agents WHERE env = $1 AND name > $2 ORDER BY name LIMIT $3`,
		env, after, limitOf(limit))
	return out, wrap("list agents", err)
}

// CountAgents implements Store.
func (s *SQL) CountAgents(ctx context.Context, env string, state record.AgentState) (int, error) {
	var n int
	err := s.db.QueryRow(ctx, `SELECT COUNT(*) FROM agents WHERE env = $1 AND state = $2`, env, state).Scan(&n)
	return n, wrap(fmt.Sprintf("count %s agents of %q", state, env), err)
}

// VersionAgents implements Store.
func (s *SQL) VersionAgents(ctx context.Context, env string, n int64, after string, limit int) ([]string, error) {
	out, err := queryAll(ctx, s.db, func(r Row) (string, error) {
		var a string
		err := r.Scan(&a)
		return a, err
	}, `SELECT DISTINCT agent FROM version_resources WHERE env = $1 AND number = $2 AND agent > $3 ORDER BY agent LIMIT $4`, env, n, after, limitOf(limit))
	return out, wrap(fmt.Sprintf("agents of version %d of %q", n, env), err)
}

// MaxSlicesAtOnce bounds the agents one AgentSlices call reads.
const MaxSlicesAtOnce = 1000

// AgentSlices implements Store.
func (s *SQL) AgentSlices(ctx context.Context, env string, n int64, agents []string) ([]model.Slice, error) {
	op := fmt.Sprintf("slices of %d agents in version %d of %q", len(agents), n, env)
	if len(agents) > MaxSlicesAtOnce {
		return nil, fmt.Errorf("%s: %w: at most %d at once", op, model.ErrInvalid, MaxSlicesAtOnce)
	}
	out := make([]model.Slice, len(agents))
	if len(agents) == 0 {
		return out, nil
	}
	var q strings.Builder
	q.WriteString(`SELECT vr.agent, b.body FROM version_resources vr JOIN resource_bodies b ON b.key = vr.body_key
		WHERE vr.env = $1 AND vr.number = $2 AND vr.agent IN (`)
	args := make([]any, 0, len(agents)+2)
	args = append(args, env, n)
	index := make(map[string]int, len(agents))
	for i, a := range agents {
		if i > 0 {
			q.WriteByte(',')
		}
		q.WriteString("$" + strconv.Itoa(i+3))
		args = append(args, a)
		index[a] = i
		out[i] = model.Slice{Agent: a, Generation: n}
	}
	q.WriteByte(')')
	rows, err := s.db.Query(ctx, q.String(), args...)
	if err != nil {
		return nil, wrap(op, err)
	}
	defer rows.Close()
	perAgent := make([]bodies, len(agents))
	for rows.Next() {
		var agent string
		var body []byte
		if err := rows.Scan(&agent, &body); err != nil {
			return nil, wrap(op, err)
		}
		if i, ok := index[agent]; ok {
			perAgent[i].add(body)
		}
	}
	if err := rows.Err(); err != nil {
		return nil, wrap(op, err)
	}
	for i := range perAgent {
		rs, err := perAgent[i].resources()
		if err != nil {
			return nil, fmt.Errorf("%s: %w", op, err)
		}
		out[i].Resources = rs
	}
	return out, nil
}

// insertWaits writes the cross-agent requirements of version n: who waits
// for what, a few hundred rows a statement.
func insertWaits(ctx context.Context, tx Tx, env string, n int64, waits []setWait) error {
	const perStatement = 250
	for len(waits) > 0 {
		chunk := waits[:min(len(waits), perStatement)]
		waits = waits[len(chunk):]
		var q strings.Builder
		q.WriteString(`INSERT INTO version_waits (env, number, required, agent) VALUES `)
		args := make([]any, 0, 2+2*len(chunk))
		args = append(args, env, n)
		for i, w := range chunk {
			if i > 0 {
				q.WriteByte(',')
			}
			fmt.Fprintf(&q, "($1, $2, $%d, $%d)", len(args)+1, len(args)+2)
			args = append(args, w.required, w.agent)
		}
		if _, err := tx.Exec(ctx, q.String(), args...); err != nil {
			return err
		}
	}
	return nil
}

// VersionWaits implements Store.
func (s *SQL) VersionWaits(ctx context.Context, env string, n int64) (map[model.ID][]string, bool, error) {
	op := fmt.Sprintf("cross-agent requirements of version %d of %q", n, env)
	var known bool
	if err := s.db.QueryRow(ctx, `SELECT waits_known FROM versions WHERE env = $1 AND number = $2`, env, n).Scan(&known); err != nil {
		return nil, false, wrap(op, err)
	}
	if !known {
		return nil, false, nil
	}
	rows, err := s.db.Query(ctx, `SELECT required, agent FROM version_waits WHERE env = $1 AND number = $2 ORDER BY required, agent`, env, n)
	if err != nil {
		return nil, false, wrap(op, err)
	}
	defer rows.Close()
	out := map[model.ID][]string{}
	for rows.Next() {
		var id model.ID
		var agent string
		if err := rows.Scan(idCol{&id}, &agent); err != nil {
			return nil, false, wrap(op, err)
		}
		out[id] = append(out[id], agent)
	}
	return out, true, wrap(op, rows.Err())
}

// inList appends to args the values given and returns the placeholders
// of an IN list for them.
func inList[T any](args []any, values []T) (string, []any) {
	var q strings.Builder
	q.WriteByte('(')
	for i, v := range values {
		if i > 0 {
			q.WriteByte(',')
		}
		args = append(args, v)
		q.WriteString("$" + strconv.Itoa(len(args)))
	}
	q.WriteByte(')')
	return q.String(), args
}

// SliceHashes implements Store.
func (s *SQL) SliceHashes(ctx context.Context, env string, n int64, agents []string) ([][]record.ResourceHash, error) {
	op := fmt.Sprintf("resource hashes of %d agents in version %d of %q", len(agents), n, env)
	if len(agents) > MaxSlicesAtOnce {
		return nil, fmt.Errorf("%s: %w: at most %d at once", op, model.ErrInvalid, MaxSlicesAtOnce)
	}
	out := make([][]record.ResourceHash, len(agents))
	if len(agents) == 0 {
		return out, nil
	}
	index := make(map[string]int, len(agents))
	for i, a := range agents {
		index[a] = i
	}
	in, args := inList([]any{env, n}, agents)
	rows, err := s.db.Query(ctx, `SELECT agent, resource_id, hash, number FROM version_resources WHERE env = $1 AND number = $2 AND agent IN `+in, args...)
	if err != nil {
		return nil, wrap(op, err)
	}
	defer rows.Close()
	for rows.Next() {
		var agent string
		var rh record.ResourceHash
		if err := rows.Scan(&agent, idCol{&rh.ID}, hashCol{&rh.Hash}, &rh.Version); err != nil {
			return nil, wrap(op, err)
		}
		if i, ok := index[agent]; ok {
			out[i] = append(out[i], rh)
		}
	}
	if err := rows.Err(); err != nil {
		return nil, wrap(op, err)
	}
	for _, hs := range out {
		slices.SortFunc(hs, func(a, b record.ResourceHash) int { return a.ID.Compare(b.ID) })
	}
	return out, nil
}

// ResourcesByID implements Store.
func (s *SQL) ResourcesByID(ctx context.Context, env string, n int64, ids []model.ID) ([]model.Resource, error) {
	op := fmt.Sprintf("%d resources of version %d of %q", len(ids), n, env)
	if len(ids) > MaxSlicesAtOnce {
		return nil, fmt.Errorf("%s: %w: at most %d at once", op, model.ErrInvalid, MaxSlicesAtOnce)
	}
	if len(ids) == 0 {
		return []model.Resource{}, nil
	}
	names := make([]string, len(ids))
	var agents []string
	seen := map[string]bool{}
	for i, id := range ids {
		names[i] = id.String()
		if !seen[id.Agent] {
			seen[id.Agent] = true
			agents = append(agents, id.Agent)
		}
	}
	// The agents too, though the ids name them: the rows of a version
	// just stored have no statistics yet, and a planner that takes the
	// version's index by agent then reads every agent's rows of it, for
	// each page of a fan-out.
	in, args := inList([]any{env, n}, names)
	inAgents, args := inList(args, agents)
	rows, err := s.db.Query(ctx, `SELECT b.body FROM version_resources vr JOIN resource_bodies b ON b.key = vr.body_key
		WHERE vr.env = $1 AND vr.number = $2 AND vr.resource_id IN `+in+` AND vr.agent IN `+inAgents, args...)
	if err != nil {
		return nil, wrap(op, err)
	}
	defer rows.Close()
	var all bodies
	for rows.Next() {
		var body []byte
		if err := rows.Scan(&body); err != nil {
			return nil, wrap(op, err)
		}
		all.add(body)
	}
	if err := rows.Err(); err != nil {
		return nil, wrap(op, err)
	}
	out, err := all.resources()
	if err != nil {
		return nil, fmt.Errorf("%s: %w", op, err)
	}
	return out, nil
}

// ContinueRelease implements Store.
func (s *SQL) ContinueRelease(ctx context.Context, env, id string) (record.Release, error) {
	op := fmt.Sprintf("continue release %s of %q", model.Clip(id, 64), env)
	r, err := s.stagedRunning(ctx, env, id, "continue")
	if err != nil {
		return r, err
	}
	if _, err := s.db.Exec(ctx, `UPDATE releases SET continues = continues + 1 WHERE env = $1 AND id = $2 AND state = 'running'`, env, id); err != nil {
		return r, wrap(op, err)
	}
	return s.GetRelease(ctx, env, id)
}

// AbortRelease implements Store.
func (s *SQL) AbortRelease(ctx context.Context, env, id, note string) (record.Release, error) {
	op := fmt.Sprintf("abort release %s of %q", model.Clip(id, 64), env)
	if _, err := s.stagedRunning(ctx, env, id, "abort"); err != nil {
		return record.Release{}, err
	}
	n, err := s.db.Exec(ctx, `UPDATE releases SET state = 'done', stage = 'aborted', note = $1, finished_at = $2
		WHERE env = $3 AND id = $4 AND state = 'running'`, model.Clip(note, record.MaxReleaseNote), time.Now().UTC(), env, id)
	if err != nil {
		return record.Release{}, wrap(op, err)
	}
	if n == 0 {
		return record.Release{}, fmt.Errorf("%s: %w: %w: it ended meanwhile", op, model.ErrConflict, record.ErrReleaseFinished)
	}
	return s.GetRelease(ctx, env, id)
}

// stagedRunning returns release id of env when it is a running staged
// rollout; ErrNotFound, or ErrConflict naming why the operator's verb does
// not apply.
func (s *SQL) stagedRunning(ctx context.Context, env, id, verb string) (record.Release, error) {
	r, err := s.GetRelease(ctx, env, id)
	if err != nil {
		return r, err
	}
	if r.Rollout == nil {
		return r, fmt.Errorf("%w: release %s of %s (version %d) went to every agent at once: %w, nothing to %s", model.ErrConflict, r.ID, env, r.Version, record.ErrNotStaged, verb)
	}
	if r.State != record.ReleaseRunning {
		return r, fmt.Errorf("%w: %w: release %s of %s (version %d) ended %s; nothing to %s, nothing changed", model.ErrConflict, record.ErrReleaseFinished, r.ID, env, r.Version, r.Rollout.Stage, verb)
	}
	return r, nil
}

// PinAgents implements Store.
func (s *SQL) PinAgents(ctx context.Context, env string, version int64, agents []string) error {
	op := fmt.Sprintf("pin agents of %q to version %d", env, version)
	for len(agents) > 0 {
		chunk := agents[:min(len(agents), 500)]
		agents = agents[len(chunk):]
		var b strings.Builder
		args := []any{env, version}
		b.WriteString(`INSERT INTO agent_pins (env, agent, version) VALUES `)
		for i, a := range chunk {
			if i > 0 {
				b.WriteString(", ")
			}
			args = append(args, a)
			fmt.Fprintf(&b, "($1, $%d, $2)", len(args))
		}
		b.WriteString(` ON CONFLICT (env, agent) DO NOTHING`)
		if _, err := s.db.Exec(ctx, b.String(), args...); err != nil {
			return wrap(op, err)
		}
	}
	return nil
}

// UnpinAgents implements Store.
func (s *SQL) UnpinAgents(ctx context.Context, env string, agents []string) error {
	op := fmt.Sprintf("unpin agents of %q", env)
	if agents == nil {
		_, err := s.db.Exec(ctx, `DELETE FROM agent_pins WHERE env = $1`, env)
		return wrap(op, err)
	}
	for len(agents) > 0 {
		chunk := agents[:min(len(agents), 500)]
		agents = agents[len(chunk):]
		in, args := inList([]any{env}, chunk)
		if _, err := s.db.Exec(ctx, `DELETE FROM agent_pins WHERE env = $1 AND agent IN `+in, args...); err != nil {
			return wrap(op, err)
		}
	}
	return nil
}

// AgentPins implements Store.
func (s *SQL) AgentPins(ctx context.Context, env string) (map[string]int64, error) {
	type pin struct {
		agent   string
		version int64
	}
	rows, err := queryAll(ctx, s.db, func(r Row) (pin, error) {
		var p pin
		err := r.Scan(&p.agent, &p.version)
		return p, err
	}, `SELECT agent, version FROM agent_pins WHERE env = $1`, env)
	if err != nil {
		return nil, wrap(fmt.Sprintf("agent pins of %q", env), err)
	}
	out := make(map[string]int64, len(rows))
	for _, p := range rows {
		out[p.agent] = p.version
	}
	return out, nil
}

// AgentPin implements Store.
func (s *SQL) AgentPin(ctx context.Context, env, agent string) (int64, bool, error) {
	var v int64
	err := s.db.QueryRow(ctx, `SELECT version FROM agent_pins WHERE env = $1 AND agent = $2`, env, agent).Scan(&v)
	if errors.Is(err, model.ErrNotFound) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, wrap(fmt.Sprintf("pin of agent %s of %q", agent, env), err)
	}
	return v, true, nil
}
