package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/tetherhq/tether/model"
	"github.com/tetherhq/tether/server/record"
)

const envColumns = `name, org, settings, created_at`

func scanEnv(r Row) (record.Environment, error) {
	var env record.Environment
	var settings []byte
	if err := r.Scan(&env.Name, &env.Org, &settings, timeCol{&env.CreatedAt}); err != nil {
		return env, err
	}
	if err := json.Unmarshal(settings, &env.Settings); err != nil {
		return env, fmt.Errorf("%w: settings of %s: %w", ErrCorrupt, env.Name, err)
	}
	return env, nil
}

// CreateEnv implements Store.
func (s *SQL) CreateEnv(ctx context.Context, env record.Environment) error {
	if err := model.ValidateEnvName(env.Name); err != nil {
		return fmt.Errorf("create environment: %w: %w", model.ErrInvalid, err)
	}
	settings, err := json.Marshal(env.Settings)
	if err != nil {
		return err
	}
	if env.CreatedAt.IsZero() {
		env.CreatedAt = time.Now()
	}
	if record.OrgOr(env.Org) == record.DefaultOrg {
		// The column's default: the statement also suits a database
		// from before organizations (the upgrade contract writes one).
		_, err = s.db.Exec(ctx, `INSERT INTO environments (name, settings, created_at) VALUES ($1, $2, $3)`,
			env.Name, settings, env.CreatedAt)
		return wrap(fmt.Sprintf("create environment %q", env.Name), err)
	}
	// The organization must exist (SQLite has no foreign key for it):
	// the insert takes its name from the organizations table.
	n, err := s.db.Exec(ctx, `INSERT INTO environments (name, org, settings, created_at)
		SELECT $1, name, $3, $4 FROM orgs WHERE name = $2`, env.Name, env.Org, settings, env.CreatedAt)
	if err == nil && n == 0 {
		err = fmt.Errorf("organization %q: %w", env.Org, model.ErrNotFound)
	}
	return wrap(fmt.Sprintf("create environment %q", env.Name), err)
}

// GetEnv implements Store.
func (s *SQL) GetEnv(ctx context.Context, name string) (record.Environment, error) {
	env, err := scanEnv(s.db.QueryRow(ctx, `SELECT `+envColumns+` FROM environments WHERE name = $1`, name))
	return env, wrap(fmt.Sprintf("environment %q", name), err)
}

// ListEnvs implements Store.
func (s *SQL) ListEnvs(ctx context.Context) ([]record.Environment, error) {
	out, err := queryAll(ctx, s.db, scanEnv, `SELECT `+envColumns+` FROM environments ORDER BY name`)
	return out, wrap("list environments", err)
}

// UpdateEnvSettings implements Store.
func (s *SQL) UpdateEnvSettings(ctx context.Context, name string, fn func(*record.EnvSettings) error, tell ...func(was, now record.EnvSettings) ([]record.LoggedEvent, error)) (record.Environment, error) {
	var env record.Environment
	err := s.db.Tx(ctx, func(tx Tx) error {
		var err error
		env, err = scanEnv(tx.QueryRow(ctx, `SELECT `+envColumns+` FROM environments WHERE name = $1`+s.d.ForUpdate, name))
		if err != nil {
			return err
		}
		was := env.Settings
		if err := fn(&env.Settings); err != nil {
			return fmt.Errorf("%w: %w", model.ErrInvalid, err)
		}
		if err := env.Settings.Validate(); err != nil {
			return fmt.Errorf("%w: %w", model.ErrInvalid, err)
		}
		settings, err := json.Marshal(env.Settings)
		if err != nil {
			return err
		}
		if _, err = tx.Exec(ctx, `UPDATE environments SET settings = $1 WHERE name = $2`, settings, name); err != nil {
			return err
		}
		for _, t := range tell {
			events, err := t(was, env.Settings)
			if err != nil {
				return err
			}
			if _, err := s.appendEvents(ctx, tx, events); err != nil {
				return err
			}
		}
		return nil
	})
	return env, wrap(fmt.Sprintf("update settings of %q", name), err)
}

// DeleteEnv implements Store. The database deletes what refers to the
// environment (webhooks and their deliveries too); the deduplication
// marks and the event log refer to nothing. The environment's events go
// with it: an environment made later with its name, maybe in another
// organization, must not stream them to a follower resuming.
func (s *SQL) DeleteEnv(ctx context.Context, name string) error {
	return wrap(fmt.Sprintf("delete environment %q", name), s.db.Tx(ctx, func(tx Tx) error {
		// In the order ingest takes them (its statuses, its agents, then
		// the environment's row for its action log's key): the cascade
		// below would take them in any order, and an ingest running
		// meanwhile would wait on it while it waits on the ingest.
		if err := s.lockEnv(ctx, tx, name); err != nil {
			return err
		}
		if err := s.lockStatuses(ctx, tx, name, ""); err != nil {
			return err
		}
		if err := s.lockEnvAgents(ctx, tx, name); err != nil {
			return err
		}
		n, err := tx.Exec(ctx, `DELETE FROM environments WHERE name = $1`, name)
		if err != nil {
			return err
		}
		if n == 0 {
			return fmt.Errorf("environment %q: %w", name, model.ErrNotFound)
		}
		if _, err := tx.Exec(ctx, `DELETE FROM ingested WHERE env = $1`, name); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `DELETE FROM event_log WHERE env = $1`, name); err != nil {
			return err
		}
		return s.deleteUnusedBodies(ctx, tx)
	}))
}

// lockEnv checks that env exists and locks it for the transaction (where
// the dialect locks rows): versions of one environment are numbered one at
// a time, and a deleted environment is reported missing.
func (s *SQL) lockEnv(ctx context.Context, c Conn, env string) error {
	var one int
	err := c.QueryRow(ctx, `SELECT 1 FROM environments WHERE name = $1`+s.d.ForUpdate, env).Scan(&one)
	if errors.Is(err, model.ErrNotFound) {
		return fmt.Errorf("environment %q: %w", env, model.ErrNotFound)
	}
	return err
}
