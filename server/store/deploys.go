package store

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/tetherhq/tether/model"
	"github.com/tetherhq/tether/server/record"
)

// deployAgentsChunk bounds the agents one statement of RecordDeploy adds.
const deployAgentsChunk = 500

// RecordDeploy implements Store.
func (s *SQL) RecordDeploy(ctx context.Context, d record.Deploy, agents []string) error {
	op := fmt.Sprintf("record deploy %s of %q", model.Clip(d.ID, 64), d.Env)
	switch {
	case d.ID == "":
		return fmt.Errorf("%s: %w: no id", op, model.ErrInvalid)
	case !d.Kind.Valid():
		return fmt.Errorf("%s: %w: kind %q: want deploy, repair or dryrun", op, model.ErrInvalid, model.Clip(string(d.Kind), 32))
	case d.Trigger == "":
		return fmt.Errorf("%s: %w: no trigger", op, model.ErrInvalid)
	}
	if d.StartedAt.IsZero() {
		d.StartedAt = time.Now()
	}
	return wrap(op, s.db.Tx(ctx, func(tx Tx) error {
		_, err := tx.Exec(ctx, `INSERT INTO deploys (id, env, kind, trigger_kind, who, version, started_at) VALUES ($1, $2, $3, $4, $5, $6, $7)
			ON CONFLICT (env, id) DO NOTHING`,
			d.ID, d.Env, d.Kind, d.Trigger, model.Clip(d.Who, 256), d.Version, d.StartedAt.UTC())
		if err != nil {
			return err
		}
		for len(agents) > 0 {
			chunk := agents[:min(len(agents), deployAgentsChunk)]
			agents = agents[len(chunk):]
			a := args{d.Env, d.ID}
			values := make([]string, len(chunk))
			for i, name := range chunk {
				values[i] = `($1, $2, ` + a.add(name) + `)`
			}
			if _, err := tx.Exec(ctx, `INSERT INTO deploy_agents (env, deploy_id, agent) VALUES `+strings.Join(values, ", ")+`
				ON CONFLICT (env, deploy_id, agent) DO NOTHING`, a...); err != nil {
				return err
			}
		}
		return nil
	}))
}

// deployColumns reads a deploy with its counts, from deploys d.
const deployColumns = `d.id, d.env, d.kind, d.trigger_kind, d.who, d.version, d.started_at,
	(SELECT COUNT(*) FROM deploy_agents x WHERE x.env = d.env AND x.deploy_id = d.id),
	(SELECT COUNT(*) FROM deploy_agents x WHERE x.env = d.env AND x.deploy_id = d.id AND x.finished_at IS NOT NULL),
	(SELECT COUNT(*) FROM deploy_agents x WHERE x.env = d.env AND x.deploy_id = d.id AND x.finished_at IS NOT NULL AND (x.failed > 0 OR x.run_error != '')),
	(SELECT MAX(x.finished_at) FROM deploy_agents x WHERE x.env = d.env AND x.deploy_id = d.id)`

func scanDeploy(r Row) (record.Deploy, error) {
	var d record.Deploy
	if err := r.Scan(&d.ID, &d.Env, &d.Kind, &d.Trigger, &d.Who, &d.Version, timeCol{&d.StartedAt},
		&d.Asked, &d.Answered, &d.Failed, nullTimeCol{&d.FinishedAt}); err != nil {
		return d, err
	}
	d.OK = d.Answered - d.Failed
	d.Settle()
	return d, nil
}

// ListDeploys implements Store.
func (s *SQL) ListDeploys(ctx context.Context, env string, f record.DeployFilter) ([]record.Deploy, error) {
	if err := f.Validate(); err != nil {
		return nil, fmt.Errorf("deploys of %q: %w: %w", env, model.ErrInvalid, err)
	}
	a := args{env}
	q := `SELECT ` + deployColumns + ` FROM deploys d WHERE d.env = $1`
	if f.Kind != "" {
		q += ` AND d.kind = ` + a.add(string(f.Kind))
	}
	if f.Agent != "" {
		q += ` AND EXISTS (SELECT 1 FROM deploy_agents x WHERE x.env = d.env AND x.deploy_id = d.id AND x.agent = ` + a.add(f.Agent) + `)`
	}
	q += ` ORDER BY d.seq DESC LIMIT ` + a.add(limitOf(f.Limit))
	out, err := queryAll(ctx, s.db, scanDeploy, q, a...)
	return out, wrap(fmt.Sprintf("deploys of %q", env), err)
}

// GetDeploy implements Store.
func (s *SQL) GetDeploy(ctx context.Context, env, id string) (record.Deploy, error) {
	op := fmt.Sprintf("deploy %s of %q", model.Clip(id, 64), env)
	d, err := scanDeploy(s.db.QueryRow(ctx, `SELECT `+deployColumns+` FROM deploys d WHERE d.env = $1 AND d.id = $2`, env, id))
	if err != nil {
		return d, wrap(op, err)
	}
	d.Agents, err = queryAll(ctx, s.db, func(r Row) (record.DeployAgent, error) {
		var a record.DeployAgent
		err := r.Scan(&a.Agent, &a.FailedResources, &a.Error, nullTimeCol{&a.FinishedAt})
		a.Outcome = record.OutcomeOf(a.FinishedAt != nil, a.FailedResources, a.Error)
		return a, err
	}, `SELECT agent, failed, run_error, finished_at FROM deploy_agents WHERE env = $1 AND deploy_id = $2 ORDER BY agent`, env, id)
	return d, wrap(op, err)
}

// PruneDeploys implements Store: the oldest deploys with their agents, and
// the answers to deploys never recorded.
func (s *SQL) PruneDeploys(ctx context.Context, before time.Time, limit int) (int, error) {
	var n int64
	err := s.db.Tx(ctx, func(tx Tx) error {
		var err error
		if _, err = tx.Exec(ctx, `DELETE FROM deploy_agents WHERE EXISTS (SELECT 1 FROM deploys d WHERE d.env = deploy_agents.env AND d.id = deploy_agents.deploy_id
			AND d.seq IN (SELECT seq FROM deploys WHERE started_at < $1 ORDER BY started_at LIMIT $2))`, before, limit); err != nil {
			return err
		}
		if n, err = tx.Exec(ctx, `DELETE FROM deploys WHERE seq IN (SELECT seq FROM deploys WHERE started_at < $1 ORDER BY started_at LIMIT $2)`, before, limit); err != nil {
			return err
		}
		_, err = tx.Exec(ctx, `DELETE FROM deploy_agents WHERE (finished_at IS NULL OR finished_at < $1)
			AND NOT EXISTS (SELECT 1 FROM deploys d WHERE d.env = deploy_agents.env AND d.id = deploy_agents.deploy_id)`, before)
		return err
	})
	return int(n), wrap("prune deploys", err)
}

// deployProgress returns the statements that record what a batch says of
// its agent's run of a deploy: resources that failed, and the run's end.
// The answer may come before the deploy is recorded (it is recorded right
// after it is sent): recording it then keeps what the answer said.
func deployProgress(b *ResultBatch) []Statement {
	if b.DeployID == "" {
		return nil
	}
	failed := 0
	for i := range b.Results {
		if b.Results[i].State == model.StateFailed {
			failed++
		}
	}
	if failed == 0 && !b.Done {
		return nil
	}
	return []Statement{{
		SQL: `INSERT INTO deploy_agents (env, deploy_id, agent, failed, run_error, finished_at)
				VALUES ($4, $5, $6, $1, $2, CASE WHEN $3 THEN now() ELSE NULL END)
			ON CONFLICT (env, deploy_id, agent) DO UPDATE SET failed = deploy_agents.failed + excluded.failed,
				run_error = CASE WHEN excluded.run_error = '' THEN deploy_agents.run_error ELSE excluded.run_error END,
				finished_at = COALESCE(deploy_agents.finished_at, excluded.finished_at)`,
		Args: []any{failed, model.Clip(b.Error, 1024), b.Done, b.Env, b.DeployID, b.Agent},
	}}
}

// EndDeployAgents implements Store.
func (s *SQL) EndDeployAgents(ctx context.Context, env, id string, agents []string, why string) error {
	why = model.Clip(why, 1024)
	if why == "" {
		why = "not sent"
	}
	return wrap(fmt.Sprintf("end agents of deploy %s of %q", model.Clip(id, 64), env), s.db.Tx(ctx, func(tx Tx) error {
		for len(agents) > 0 {
			chunk := agents[:min(len(agents), deployAgentsChunk)]
			agents = agents[len(chunk):]
			a := args{env, id, why}
			in := make([]string, len(chunk))
			for i, name := range chunk {
				in[i] = a.add(name)
			}
			if _, err := tx.Exec(ctx, `UPDATE deploy_agents SET run_error = $3, finished_at = COALESCE(finished_at, now())
				WHERE env = $1 AND deploy_id = $2 AND agent IN (`+strings.Join(in, ", ")+`)`, a...); err != nil {
				return err
			}
		}
		return nil
	}))
}
