package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/tetherhq/tether/model"
	"github.com/tetherhq/tether/server/record"
)

// checkAlert refuses an alert that could not be stored or read back.
func checkAlert(a *record.Alert) error {
	if !a.Kind.Valid() {
		return fmt.Errorf("%w: alert kind %q", model.ErrInvalid, a.Kind)
	}
	if a.ID != nil {
		if err := a.ID.Validate(); err != nil {
			return fmt.Errorf("%w: alert: %w", model.ErrInvalid, err)
		}
	}
	if a.Compliance != "" && !a.Compliance.Valid() {
		return fmt.Errorf("%w: alert: compliance %q", model.ErrInvalid, a.Compliance)
	}
	return nil
}

// setsCompliance reports whether an alert sets its resource's compliance:
// a drift alert naming a resource, a version and a compliance.
func setsCompliance(a *record.Alert) bool {
	return a.Kind == record.AlertDrift && a.ID != nil && a.Version > 0 && a.Compliance != ""
}

// insertAlert is the statement that stores an alert. An unknown
// environment fails the foreign key: model.ErrNotFound.
func insertAlert(a *record.Alert) (Statement, error) {
	var id sql.NullString
	if a.ID != nil {
		id = sql.NullString{String: a.ID.String(), Valid: true}
	}
	var changes []byte
	if len(a.Changes) > 0 {
		var err error
		if changes, err = json.Marshal(a.Changes); err != nil {
			return Statement{}, fmt.Errorf("%w: %w", model.ErrInvalid, err)
		}
	}
	at := a.At
	if at.IsZero() {
		at = time.Now()
	}
	return Statement{
		SQL: `INSERT INTO alerts (env, agent, kind, resource_id, message, changes, compliance, version, at)
			VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)`,
		Args: []any{a.Env, a.Agent, a.Kind, id, a.Message, changes, a.Compliance, a.Version, at},
	}, nil
}

// RecordAlerts implements Store.
func (s *SQL) RecordAlerts(ctx context.Context, alerts []record.Alert, events ...record.LoggedEvent) error {
	in := &Ingest{}
	for i := range alerts {
		if err := checkAlert(&alerts[i]); err != nil {
			return fmt.Errorf("record alerts: %w", err)
		}
		st, err := insertAlert(&alerts[i])
		if err != nil {
			return fmt.Errorf("record alerts: %w", err)
		}
		in.Statements = append(in.Statements, st)
	}
	if len(alerts) == 0 && len(events) == 0 {
		return nil
	}
	return wrap("record alerts", s.db.Tx(ctx, func(tx Tx) error {
		if err := tx.WriteIngest(ctx, in); err != nil {
			return err
		}
		_, err := s.appendEvents(ctx, tx, events)
		return err
	}))
}

// Alerts implements Store.
func (s *SQL) Alerts(ctx context.Context, f record.AlertFilter) ([]record.Alert, error) {
	var a args
	var where []string
	for _, c := range []struct{ col, v string }{{"env", f.Env}, {"agent", f.Agent}, {"kind", string(f.Kind)}} {
		if c.v != "" {
			where = append(where, c.col+` = `+a.add(c.v))
		}
	}
	if len(f.Kinds) > 0 {
		in := make([]string, len(f.Kinds))
		for i, k := range f.Kinds {
			in[i] = a.add(string(k))
		}
		where = append(where, `kind IN (`+strings.Join(in, `, `)+`)`)
	}
	q := `SELECT seq, env, agent, kind, resource_id, message, changes, compliance, version, at FROM alerts`
	if len(where) > 0 {
		q += ` WHERE ` + strings.Join(where, ` AND `)
	}
	q += ` ORDER BY seq DESC LIMIT ` + a.add(limitOf(f.Limit))
	out, err := queryAll(ctx, s.db, scanAlert, q, a...)
	return out, wrap("alerts", err)
}

func scanAlert(r Row) (record.Alert, error) {
	var a record.Alert
	var id sql.NullString
	var changes []byte
	if err := r.Scan(&a.Seq, &a.Env, &a.Agent, &a.Kind, &id, &a.Message, &changes, &a.Compliance, &a.Version, timeCol{&a.At}); err != nil {
		return a, err
	}
	if id.Valid {
		parsed, err := model.ParseID(id.String)
		if err != nil {
			return a, fmt.Errorf("%w: alert %d: %w", ErrCorrupt, a.Seq, err)
		}
		a.ID = &parsed
	}
	if len(changes) > 0 {
		if err := model.DecodeJSON(changes, &a.Changes); err != nil {
			return a, fmt.Errorf("%w: alert %d: %w", ErrCorrupt, a.Seq, err)
		}
	}
	return a, nil
}
