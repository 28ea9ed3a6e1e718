package store

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/tetherhq/tether/model"
	"github.com/tetherhq/tether/server/record"
)

// CheckBatch validates a result batch before any of it is written: every
// result names a valid resource of the batch's agent and a known state.
func CheckBatch(b *ResultBatch) error {
	if err := model.ValidateEnvName(b.Env); err != nil {
		return fmt.Errorf("%w: %w", model.ErrInvalid, err)
	}
	for i := range b.Results {
		r := &b.Results[i]
		if err := r.ID.Validate(); err != nil {
			return fmt.Errorf("%w: %w", model.ErrInvalid, err)
		}
		if !r.State.Valid() {
			return fmt.Errorf("%w: %s: state %q", model.ErrInvalid, r.ID, r.State)
		}
		if r.ID.Agent != b.Agent {
			return fmt.Errorf("%w: agent %s reported %s, which is not its resource", model.ErrInvalid, b.Agent, r.ID)
		}
	}
	for i := range b.Alerts {
		a := &b.Alerts[i]
		if a.Env != b.Env || a.Agent != b.Agent || (a.ID != nil && a.ID.Agent != b.Agent) {
			return fmt.Errorf("%w: agent %s of %s sent an alert about another agent or environment", model.ErrInvalid, b.Agent, b.Env)
		}
		if err := checkAlert(a); err != nil {
			return err
		}
	}
	for i := range b.Events {
		if e := &b.Events[i]; e.Env != b.Env || e.Kind == "" {
			return fmt.Errorf("%w: an event of batch of agent %s of %s: kind %q of environment %q: want a kind, of the batch's environment",
				model.ErrInvalid, b.Agent, b.Env, e.Kind, e.Env)
		}
	}
	return nil
}

// ReorderWindow bounds how far a stored state's sequence number may run
// ahead of a message that arrives after it and still hold over it. The
// order guards against messages of one agent handled out of order by
// concurrent consumers — a few hundred apart at most — never more: a row
// numbered further ahead (by a forged or replayed message, or before its
// agent's counter started over) yields to the agent's next message instead
// of freezing.
const ReorderWindow = 4096

// seqHolds reports whether what a message numbered stored set holds over a
// message numbered m: it is newer, within ReorderWindow.
func seqHolds(stored, m int64) bool {
	return stored > m && stored <= m+ReorderWindow
}

// seqAfter is a stored number after a message numbered m applied: the newer
// of the two, m when stored is beyond the window, stored for a message
// without a number (m = 0).
func seqAfter(stored, m int64) int64 {
	switch {
	case m == 0:
		return stored
	case stored > m+ReorderWindow:
		return m
	default:
		return max(stored, m)
	}
}

// StatusKey names a resource's status.
type StatusKey struct{ Env, ID string }

// Status is a resource's status as recording results reads and writes it:
// what the precedence rules look at and set.
type Status struct {
	StatusKey
	// Version and Hash are the desired state it is about.
	Version    int64
	Hash       []byte
	State      model.ResourceState
	Compliance model.Compliance
	Message    string
	// Seq and ComplianceSeq are the agent's message counters of the newest
	// result applied to the state, and of the newest report applied to the
	// compliance.
	Seq, ComplianceSeq int64
	// Updated and Verified ask the write to set updated_at and
	// last_verified to the transaction's time.
	Updated, Verified bool
}

// StatusColumns are the columns of resource_status ScanStatus reads.
const StatusColumns = `env, resource_id, version, hash, state, compliance, message, seq, compliance_seq`

// ScanStatus reads the StatusColumns of a row.
func ScanStatus(r Row) (Status, error) {
	var st Status
	err := r.Scan(&st.Env, &st.ID, &st.Version, &st.Hash, &st.State, &st.Compliance, &st.Message, &st.Seq, &st.ComplianceSeq)
	return st, err
}

// applyResult applies a deploy's result, of an agent's message numbered seq
// (0: unnumbered) about version, and reports whether it did. A result
// applies to a status of its version or an older one, or of a newer
// version with the desired state it was applied at: a late result of an
// old deploy never overwrites a newer state. It does not apply over what a
// later message of the agent set, nor set a compliance a later report set.
func (st *Status) applyResult(r *model.Result, version, seq int64) bool {
	sameIntent := !r.Hash.IsZero() && bytes.Equal(st.Hash, r.Hash[:])
	if st.Version > version && !sameIntent || seq != 0 && seqHolds(st.Seq, seq) {
		return false
	}
	verdict := r.State == model.StateDeployed || r.State == model.StateFailed
	if seq == 0 || !seqHolds(st.ComplianceSeq, seq) {
		switch r.State {
		case model.StateDeployed:
			st.Compliance, st.Verified = model.Compliant, true
		case model.StateFailed:
			st.Compliance = model.NonCompliant
		}
	}
	if verdict {
		st.ComplianceSeq = seqAfter(st.ComplianceSeq, seq)
	}
	st.State, st.Message, st.Updated = r.State, r.Message, true
	st.Seq = seqAfter(st.Seq, seq)
	return true
}

// applyVerification applies a compliance found for version (by a dry run,
// or a drift report) and reports whether it did: it sets the compliance of
// the version a resource holds, only when the resource is deployed if
// deployedOnly (a dry run's; a drift report's also while its deploy's
// result is on the way), and not over a later message's.
func (st *Status) applyVerification(c model.Compliance, version, seq int64, deployedOnly bool) bool {
	if st.Version != version || deployedOnly && st.State != model.StateDeployed || seq != 0 && seqHolds(st.ComplianceSeq, seq) {
		return false
	}
	st.Compliance, st.Verified = c, true
	st.ComplianceSeq = seqAfter(st.ComplianceSeq, seq)
	return true
}

// Ingest is what recording a call's fresh batches writes.
type Ingest struct {
	// Statuses are the statuses the results and reports changed, by key.
	Statuses []Status
	// Actions are the action-log entries, in the order they were recorded.
	Actions []ActionRow
	// LastSeqs are the highest message numbers of the batches' agents, by
	// environment and agent.
	LastSeqs []AgentSeq
	// Statements are written as they are: the batches' alerts.
	Statements []Statement
}

// ActionRow is an action-log entry to write; the log stamps it with the
// transaction's time.
type ActionRow struct {
	Env, ID, Agent string
	Kind           record.ActionKind
	DeployID       string
	Version        int64
	State          model.ResourceState
	// Changes is the result's changes as JSON; nil when there are none.
	Changes  []byte
	Message  string
	Duration time.Duration
}

// AgentSeq is the highest message number recorded from an agent.
type AgentSeq struct {
	Env, Agent string
	Seq        int64
}

// Statement is a statement with its arguments.
type Statement struct {
	SQL  string
	Args []any
}

// RecordResults implements Store: it reads and locks the statuses the
// batches are about, applies the batches to them in order, writes what
// changed, and appends the events of the fresh batches to the event log.
func (s *SQL) RecordResults(ctx context.Context, batches []ResultBatch) ([]bool, error) {
	for i := range batches {
		if err := CheckBatch(&batches[i]); err != nil {
			return nil, fmt.Errorf("record results: %w", err)
		}
	}
	keys := statusKeys(batches)
	fresh := make([]bool, len(batches))
	err := s.db.Tx(ctx, func(tx Tx) error {
		stored, err := tx.BeginIngest(ctx, batches, fresh, keys)
		if err != nil {
			return err
		}
		in, err := apply(batches, fresh, stored)
		if err != nil {
			return err
		}
		if err := tx.WriteIngest(ctx, in); err != nil {
			return err
		}
		var events []record.LoggedEvent
		for i := range batches {
			if fresh[i] {
				events = append(events, batches[i].Events...)
			}
		}
		if len(events) == 0 {
			return nil
		}
		// Last: the event log's lock is held for the rest of the
		// transaction only.
		_, err = s.appendEvents(ctx, tx, events)
		return err
	})
	if err != nil {
		return nil, wrap("record results", err)
	}
	return fresh, nil
}

// statusKeys returns, sorted, the statuses batches may change: concurrent
// transactions lock them in one order and never deadlock.
func statusKeys(batches []ResultBatch) []StatusKey {
	set := map[StatusKey]bool{}
	for i := range batches {
		b := &batches[i]
		for j := range b.Results {
			if r := &b.Results[j]; !r.DryRun || r.State == model.StateDeployed {
				set[StatusKey{b.Env, r.ID.String()}] = true
			}
		}
		for j := range b.Alerts {
			if a := &b.Alerts[j]; setsCompliance(a) {
				set[StatusKey{b.Env, a.ID.String()}] = true
			}
		}
	}
	return slices.SortedFunc(maps.Keys(set), compareKeys)
}

func compareKeys(a, b StatusKey) int {
	return cmp.Or(cmp.Compare(a.Env, b.Env), cmp.Compare(a.ID, b.ID))
}

// apply applies the fresh batches, in order, to the stored statuses, and
// returns what to write: the statuses that changed, an action-log entry for
// each result that changed, failed or skipped something (or found something
// to change) and for each heal, the alerts, and the agents' highest
// message numbers.
func apply(batches []ResultBatch, fresh []bool, stored []Status) (*Ingest, error) {
	statuses := make(map[StatusKey]*Status, len(stored))
	for i := range stored {
		statuses[stored[i].StatusKey] = &stored[i]
	}
	changed := map[StatusKey]bool{}
	high := map[AgentSeq]int64{} // by env and agent, Seq 0
	in := &Ingest{}
	for bi := range batches {
		if !fresh[bi] {
			continue
		}
		b := &batches[bi]
		seq := int64(b.Seq)
		if seq != 0 {
			k := AgentSeq{Env: b.Env, Agent: b.Agent}
			high[k] = max(high[k], seq)
		}
		for i := range b.Results {
			r := &b.Results[i]
			k := StatusKey{b.Env, r.ID.String()}
			if st := statuses[k]; st != nil {
				switch {
				case !r.DryRun:
					changed[k] = st.applyResult(r, b.Version, seq) || changed[k]
				case r.State == model.StateDeployed:
					changed[k] = st.applyVerification(verified(r), b.Version, seq, true) || changed[k]
				}
			}
			if len(r.Changes) == 0 && r.State == model.StateDeployed {
				continue // nothing to log
			}
			var changes []byte
			if len(r.Changes) > 0 {
				var err error
				if changes, err = json.Marshal(r.Changes); err != nil {
					return nil, fmt.Errorf("%w: changes of %s: %w", model.ErrInvalid, r.ID, err)
				}
			}
			kind := record.ActionDeploy
			if r.DryRun {
				kind = record.ActionDryRun
			}
			in.Actions = append(in.Actions, ActionRow{Env: b.Env, ID: k.ID, Agent: b.Agent, Kind: kind, DeployID: b.DeployID,
				Version: b.Version, State: r.State, Changes: changes, Message: r.Message, Duration: r.Duration})
		}
		in.Statements = append(in.Statements, deployProgress(b)...)
		for i := range b.Alerts {
			a := &b.Alerts[i]
			st, err := insertAlert(a)
			if err != nil {
				return nil, err
			}
			in.Statements = append(in.Statements, st)
			if (a.Healed || a.HealFailed) && a.ID != nil {
				var changes []byte
				if len(a.Changes) > 0 {
					if changes, err = json.Marshal(a.Changes); err != nil {
						return nil, fmt.Errorf("%w: changes of %s: %w", model.ErrInvalid, a.ID, err)
					}
				}
				state := model.StateDeployed
				if !a.Healed {
					state = model.StateFailed
				}
				in.Actions = append(in.Actions, ActionRow{Env: b.Env, ID: a.ID.String(), Agent: b.Agent, Kind: record.ActionHeal,
					Version: a.Version, State: state, Changes: changes, Message: a.Message})
			}
			if !setsCompliance(a) {
				continue
			}
			k := StatusKey{b.Env, a.ID.String()}
			if st := statuses[k]; st != nil {
				version := a.Version
				if st.Version > version && !a.Hash.IsZero() && bytes.Equal(st.Hash, a.Hash[:]) {
					// Found against an older version holding the same
					// intent: it is the newer one's compliance too.
					version = st.Version
				}
				changed[k] = st.applyVerification(a.Compliance, version, seq, false) || changed[k]
			}
		}
	}
	for _, k := range slices.SortedFunc(maps.Keys(changed), compareKeys) {
		if changed[k] {
			in.Statuses = append(in.Statuses, *statuses[k])
		}
	}
	for _, k := range slices.SortedFunc(maps.Keys(high), func(a, b AgentSeq) int {
		return cmp.Or(cmp.Compare(a.Env, b.Env), cmp.Compare(a.Agent, b.Agent))
	}) {
		in.LastSeqs = append(in.LastSeqs, AgentSeq{Env: k.Env, Agent: k.Agent, Seq: high[k]})
	}
	return in, nil
}

// verified is the compliance a successful dry run of a resource found.
func verified(r *model.Result) model.Compliance {
	if len(r.Changes) > 0 {
		return model.NonCompliant
	}
	return model.Compliant
}

// ForgetIngested implements Store.
func (s *SQL) ForgetIngested(ctx context.Context, before time.Time) error {
	_, err := s.db.Exec(ctx, `DELETE FROM ingested WHERE at < $1`, before)
	return wrap("forget ingested", err)
}

// PruneActions implements Store.
func (s *SQL) PruneActions(ctx context.Context, before time.Time, limit int) (int, error) {
	n, err := s.db.Exec(ctx, `DELETE FROM actions WHERE seq IN (SELECT seq FROM actions WHERE at < $1 ORDER BY at LIMIT $2)`, before, limit)
	return int(n), wrap("prune actions", err)
}

// Statuses implements Store.
func (s *SQL) Statuses(ctx context.Context, env string, f record.StatusFilter) ([]record.ResourceStatus, error) {
	var a args
	q := `SELECT resource_id, version, hash, state, compliance, last_verified, message, updated_at
		FROM resource_status WHERE ` + statusWhere(&a, env, f)
	if f.Limit > 0 {
		q += ` ORDER BY resource_id LIMIT ` + a.add(f.Limit) + ` OFFSET ` + a.add(max(f.Offset, 0))
	}
	out, err := queryAll(ctx, s.db, func(r Row) (record.ResourceStatus, error) {
		var st record.ResourceStatus
		err := r.Scan(idCol{&st.ID}, &st.Version, hashCol{&st.Hash}, &st.State, &st.Compliance,
			nullTimeCol{&st.LastVerified}, &st.Message, timeCol{&st.UpdatedAt})
		return st, err
	}, q, a...)
	if err != nil {
		return nil, wrap("statuses", err)
	}
	if f.Limit <= 0 {
		slices.SortFunc(out, func(a, b record.ResourceStatus) int { return a.ID.Compare(b.ID) })
	}
	return out, nil
}

// statusWhere is the condition of the statuses of env f keeps.
func statusWhere(a *args, env string, f record.StatusFilter) string {
	q := `env = ` + a.add(env)
	if f.Agent != "" {
		q += ` AND agent = ` + a.add(f.Agent)
	}
	if f.Type != "" {
		prefix := f.Type + "["
		q += ` AND substr(resource_id, 1, ` + a.add(utf8.RuneCountInString(prefix)) + `) = ` + a.add(prefix)
	}
	if f.State != "" {
		q += ` AND state = ` + a.add(f.State)
	}
	if f.Compliance != "" {
		q += ` AND compliance = ` + a.add(f.Compliance)
	}
	if f.Search != "" {
		q += ` AND lower(resource_id) LIKE ` + a.add(containing(f.Search)) + ` ESCAPE '\'`
	}
	return q
}

// containing is the LIKE pattern (escaped with \) of the text that holds
// s, in lower case.
func containing(s string) string {
	return "%" + strings.NewReplacer(`\`, `\\`, `%`, `\%`, `_`, `\_`).Replace(strings.ToLower(s)) + "%"
}

// CountStatuses implements Store.
func (s *SQL) CountStatuses(ctx context.Context, env string, f record.StatusFilter, version int64) (int, error) {
	var a args
	q := `SELECT count(*) FROM resource_status WHERE ` + statusWhere(&a, env, f)
	if version != 0 {
		q += ` AND version = ` + a.add(version)
	}
	var n int
	if err := s.db.QueryRow(ctx, q, a...).Scan(&n); err != nil {
		return 0, wrap("count statuses", err)
	}
	return n, nil
}

// StatusCounts implements Store.
func (s *SQL) StatusCounts(ctx context.Context, env string) ([]record.StatusCount, error) {
	out, err := queryAll(ctx, s.db, func(r Row) (record.StatusCount, error) {
		var c record.StatusCount
		err := r.Scan(&c.State, &c.Compliance, &c.N)
		return c, err
	}, `SELECT state, compliance, count(*) FROM resource_status WHERE env = $1 GROUP BY state, compliance`, env)
	return out, wrap("count statuses", err)
}

// Actions implements Store.
func (s *SQL) Actions(ctx context.Context, env string, id model.ID, limit int) ([]record.Action, error) {
	return s.actions(ctx, "actions of "+id.String(), `env = $1 AND resource_id = $2 ORDER BY seq DESC LIMIT $3`, env, id.String(), limitOf(limit))
}

// DeployActions implements Store.
func (s *SQL) DeployActions(ctx context.Context, env, deployID string, limit int) ([]record.Action, error) {
	return s.actions(ctx, "actions of deploy "+deployID, `env = $1 AND deploy_id = $2 ORDER BY seq LIMIT $3`, env, deployID, limitOf(limit))
}

func (s *SQL) actions(ctx context.Context, op, where string, args ...any) ([]record.Action, error) {
	out, err := queryAll(ctx, s.db, scanAction, `SELECT seq, resource_id, kind, deploy_id, version, state, changes, message, at, duration_ns
		FROM actions WHERE `+where, args...)
	return out, wrap(op, err)
}

func scanAction(r Row) (record.Action, error) {
	var a record.Action
	var changes []byte
	var dur int64
	if err := r.Scan(&a.Seq, idCol{&a.ID}, &a.Kind, &a.DeployID, &a.Version, &a.State, &changes, &a.Message, timeCol{&a.At}, &dur); err != nil {
		return a, err
	}
	a.Duration = time.Duration(dur)
	if len(changes) > 0 {
		if err := model.DecodeJSON(changes, &a.Changes); err != nil {
			return a, fmt.Errorf("%w: action %d: %w", ErrCorrupt, a.Seq, err)
		}
	}
	return a, nil
}
