package store

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/google/uuid"

	"github.com/tetherhq/tether/model"
	"github.com/tetherhq/tether/server/record"
)

const compileColumns = `id, env, triggers, revision, started_at, finished_at, outcome,
	diagnostics, diagnostics_total, resources_per_agent, undefined, undefined_total, version, inputs, same_as`

// StartCompile implements Store.
func (s *SQL) StartCompile(ctx context.Context, c record.Compile) (record.Compile, error) {
	if c.ID == "" {
		c.ID = uuid.NewString()
	} else if _, err := uuid.Parse(c.ID); err != nil {
		return c, fmt.Errorf("start compile: %w: id %q is not a UUID", model.ErrInvalid, model.Clip(c.ID, 64))
	}
	if err := c.Triggers.Validate(); err != nil {
		return c, fmt.Errorf("start compile: %w: %w", model.ErrInvalid, err)
	}
	for i := range c.Triggers {
		c.Triggers[i].By = model.Clip(c.Triggers[i].By, model.MaxTextLen)
	}
	c.Revision = model.Clip(c.Revision, model.MaxTextLen)
	if c.StartedAt.IsZero() {
		c.StartedAt = time.Now()
	}
	c.StartedAt = c.StartedAt.UTC()
	c.FinishedAt, c.Outcome, c.CompileResult = nil, record.CompileRunning, record.CompileResult{}
	triggers, err := json.Marshal(c.Triggers)
	if err != nil {
		return c, fmt.Errorf("start compile: %w", err)
	}
	_, err = s.db.Exec(ctx, `INSERT INTO compiles (id, env, triggers, revision, started_at, outcome) VALUES ($1, $2, $3, $4, $5, $6)`,
		c.ID, c.Env, triggers, c.Revision, c.StartedAt, c.Outcome)
	return c, wrap(fmt.Sprintf("start compile of %q", c.Env), err)
}

// FinishCompile implements Store.
func (s *SQL) FinishCompile(ctx context.Context, c record.Compile) (record.Compile, error) {
	op := fmt.Sprintf("finish compile %s of %q", model.Clip(c.ID, 64), c.Env)
	switch {
	case !c.Outcome.Valid() || c.Outcome == record.CompileRunning:
		return c, fmt.Errorf("%s: %w: outcome %q: want released, candidate, unchanged, skipped or failed", op, model.ErrInvalid, model.Clip(string(c.Outcome), 32))
	case (c.Outcome == record.CompileReleased || c.Outcome == record.CompileCandidate) && c.Version <= 0:
		return c, fmt.Errorf("%s: %w: a %s compile names the version it stored", op, model.ErrInvalid, c.Outcome)
	case (c.Outcome == record.CompileFailed || c.Outcome == record.CompileSkipped) && c.Version != 0:
		return c, fmt.Errorf("%s: %w: a %s compile stored no version, yet names %d", op, model.ErrInvalid, c.Outcome, c.Version)
	case c.Outcome == record.CompileSkipped && c.SameAs == "":
		return c, fmt.Errorf("%s: %w: a skipped compile names the compile it is the same as", op, model.ErrInvalid)
	}
	c.Inputs = model.Clip(c.Inputs, 128)
	c.CompileResult = c.CompileResult.Bound()
	finished := time.Now()
	if c.FinishedAt != nil {
		finished = *c.FinishedAt
	}
	finished = finished.UTC()
	c.FinishedAt = &finished
	var cols [3][]byte
	for i, v := range []any{c.Diagnostics, c.ResourcesPerAgent, c.Undefined} {
		var err error
		if cols[i], err = marshalOmitEmpty(v); err != nil {
			return c, fmt.Errorf("%s: %w", op, err)
		}
	}
	var out record.Compile
	err := s.db.Tx(ctx, func(tx Tx) error {
		current, err := scanCompile(tx.QueryRow(ctx, `SELECT `+compileColumns+` FROM compiles WHERE env = $1 AND id = $2`+s.d.ForUpdate, c.Env, c.ID))
		if err != nil {
			return err
		}
		if current.Outcome != record.CompileRunning {
			return fmt.Errorf("%w: it ended already (%s)", model.ErrConflict, current.Outcome)
		}
		revision := current.Revision
		if c.Revision != "" {
			revision = model.Clip(c.Revision, model.MaxTextLen)
		}
		_, err = tx.Exec(ctx, `UPDATE compiles SET revision = $1, finished_at = $2, outcome = $3, diagnostics = $4, diagnostics_total = $5,
			resources_per_agent = $6, undefined = $7, undefined_total = $8, version = $9, inputs = $10, same_as = $11 WHERE env = $12 AND id = $13`,
			revision, finished, c.Outcome, cols[0], c.DiagnosticsTotal, cols[1], cols[2], c.UndefinedTotal, c.Version, c.Inputs, c.SameAs, c.Env, c.ID)
		if err != nil {
			return err
		}
		out = current
		out.Revision, out.FinishedAt, out.Outcome, out.CompileResult, out.Inputs = revision, &finished, c.Outcome, c.CompileResult, c.Inputs
		return nil
	})
	return out, wrap(op, err)
}

// marshalOmitEmpty is v as JSON, or nil (NULL) when v is empty.
func marshalOmitEmpty(v any) ([]byte, error) {
	b, err := json.Marshal(v)
	if err != nil || string(b) == "null" || string(b) == "[]" || string(b) == "{}" {
		return nil, err
	}
	return b, nil
}

// GetCompile implements Store.
func (s *SQL) GetCompile(ctx context.Context, env, id string) (record.Compile, error) {
	c, err := scanCompile(s.db.QueryRow(ctx, `SELECT `+compileColumns+` FROM compiles WHERE env = $1 AND id = $2`, env, id))
	return c, wrap(fmt.Sprintf("compile %s of %q", model.Clip(id, 64), env), err)
}

// ListCompiles implements Store.
func (s *SQL) ListCompiles(ctx context.Context, env string, limit int) ([]record.Compile, error) {
	out, err := queryAll(ctx, s.db, scanCompile, `SELECT `+compileColumns+` FROM compiles WHERE env = $1 ORDER BY seq DESC LIMIT $2`, env, limitOf(limit))
	return out, wrap(fmt.Sprintf("compiles of %q", env), err)
}

// PruneCompiles implements Store.
func (s *SQL) PruneCompiles(ctx context.Context, env string, keep int) (int, error) {
	if keep <= 0 {
		return 0, nil
	}
	n, err := s.db.Exec(ctx, `DELETE FROM compiles WHERE env = $1 AND outcome != 'running' AND seq NOT IN
		(SELECT seq FROM compiles WHERE env = $1 ORDER BY seq DESC LIMIT $2)`, env, keep)
	if err != nil {
		return 0, wrap(fmt.Sprintf("prune compiles of %q", env), err)
	}
	return int(n), nil
}

func scanCompile(r Row) (record.Compile, error) {
	var c record.Compile
	var triggers, diags, perAgent, undefined []byte
	if err := r.Scan(&c.ID, &c.Env, &triggers, &c.Revision, timeCol{&c.StartedAt}, nullTimeCol{&c.FinishedAt}, &c.Outcome,
		&diags, &c.DiagnosticsTotal, &perAgent, &undefined, &c.UndefinedTotal, &c.Version, &c.Inputs, &c.SameAs); err != nil {
		return c, err
	}
	for _, col := range []struct {
		name string
		b    []byte
		v    any
	}{{"triggers", triggers, &c.Triggers}, {"diagnostics", diags, &c.Diagnostics}, {"resources per agent", perAgent, &c.ResourcesPerAgent}, {"undefined", undefined, &c.Undefined}} {
		if len(col.b) == 0 {
			continue
		}
		if err := json.Unmarshal(col.b, col.v); err != nil {
			return c, fmt.Errorf("%w: %s of compile %s: %w", ErrCorrupt, col.name, c.ID, err)
		}
	}
	return c, nil
}
