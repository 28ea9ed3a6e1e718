// Package sqlite is the embedded store: the server's state in one SQLite file
// (modernc.org/sqlite, pure Go), for `tether deploy` and development. It is
// single-process: Open takes an exclusive lock next to the database file.
package sqlite

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	sqlite3 "modernc.org/sqlite"
	sqlitelib "modernc.org/sqlite/lib"

	"github.com/tetherhq/tether/model"
	"github.com/tetherhq/tether/schema"
	"github.com/tetherhq/tether/server/store"
)

// Options tune Open.
type Options struct {
	// BusyTimeout is how long a statement waits for a lock held by another
	// connection before failing with store.ErrLocked.
	BusyTimeout time.Duration
}

// DefaultOptions are the options Open uses for zero fields.
func DefaultOptions() Options { return Options{BusyTimeout: 5 * time.Second} }

// Store is the SQLite store.
type Store struct {
	path string
	db   *sql.DB
	lock *os.File

	leaseMu sync.Mutex
	leases  map[string]*lease
}

var _ store.Store = (*Store)(nil)

// Open opens (creating if needed) the store at path, takes the process lock
// and applies pending migrations. Errors name the file and say what to do.
func Open(ctx context.Context, path string, opts Options) (*Store, error) {
	if opts.BusyTimeout <= 0 {
		opts.BusyTimeout = DefaultOptions().BusyTimeout
	}
	lock, err := takeLock(path + ".lock")
	if err != nil {
		return nil, err
	}
	dsn := "file:" + path +
		"?_pragma=busy_timeout(" + strconv.FormatInt(opts.BusyTimeout.Milliseconds(), 10) + ")" +
		"&_pragma=journal_mode(WAL)&_pragma=synchronous(NORMAL)&_pragma=foreign_keys(ON)&_txlock=immediate"
	db, err := sql.Open("sqlite", dsn)
	if err != nil {
		lock.Close()
		return nil, fmt.Errorf("open store %s: %w", path, err)
	}
	// One connection: the embedded store serves one process, and a single
	// writer never meets SQLITE_BUSY from itself.
	db.SetMaxOpenConns(1)
	s := &Store{path: path, db: db, lock: lock}
	if err := s.migrate(ctx); err != nil {
		s.Close()
		return nil, err
	}
	return s, nil
}

// takeLock holds an exclusive flock on path for the life of the store, so two
// processes never share the embedded store.
func takeLock(path string) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("open store lock %s: %w", path, err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		holder, _ := os.ReadFile(path)
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			who := strings.TrimSpace(string(holder))
			if who != "" {
				who = " (pid " + who + ")"
			}
			return nil, fmt.Errorf("%w: %s is in use by another tether process%s: wait for it to finish, or stop it", store.ErrLocked, strings.TrimSuffix(path, ".lock"), who)
		}
		return nil, fmt.Errorf("lock %s: %w", path, err)
	}
	_ = f.Truncate(0)
	_, _ = f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	return f, nil
}

// Close implements store.Store.
func (s *Store) Close() error {
	err := s.db.Close()
	if s.lock != nil {
		s.lock.Close()
	}
	return err
}

// Ping implements store.Store.
func (s *Store) Ping(ctx context.Context) error { return s.wrap("ping", s.db.PingContext(ctx)) }

// Path returns the database file's path.
func (s *Store) Path() string { return s.path }

func (s *Store) migrate(ctx context.Context) error {
	migrations, err := schema.SQLite()
	if err != nil {
		return err
	}
	if _, err := s.db.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS schema_migrations (
		version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at INTEGER NOT NULL)`); err != nil {
		return s.wrap("migrate", err)
	}
	var current int
	if err := s.db.QueryRowContext(ctx, `SELECT COALESCE(MAX(version), 0) FROM schema_migrations`).Scan(&current); err != nil {
		return s.wrap("migrate", err)
	}
	if current > len(migrations) {
		return fmt.Errorf("store %s has schema version %d, newer than this tether knows (%d): upgrade tether", s.path, current, len(migrations))
	}
	for _, m := range migrations[current:] {
		err := s.tx(ctx, "migrate", func(tx *sql.Tx) error {
			if _, err := tx.ExecContext(ctx, m.SQL); err != nil {
				return fmt.Errorf("migration %d (%s): %w", m.Version, m.Name, err)
			}
			_, err := tx.ExecContext(ctx, `INSERT INTO schema_migrations (version, name, applied_at) VALUES (?, ?, ?)`,
				m.Version, m.Name, time.Now().UnixNano())
			return err
		})
		if err != nil {
			return err
		}
	}
	return nil
}

// tx runs fn in a transaction, committing if it returns nil.
func (s *Store) tx(ctx context.Context, op string, fn func(*sql.Tx) error) error {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return s.wrap(op, err)
	}
	if err := fn(tx); err != nil {
		_ = tx.Rollback()
		return s.wrap(op, err)
	}
	if err := tx.Commit(); err != nil {
		return s.wrap(op, err)
	}
	return nil
}

// wrap adds the operation and classifies SQLite failures so callers (and
// users) learn what happened and what to do.
func (s *Store) wrap(op string, err error) error {
	if err == nil {
		return nil
	}
	for _, known := range []error{store.ErrNotFound, store.ErrExists, store.ErrConflict, store.ErrInvalid, store.ErrLocked, store.ErrCorrupt} {
		if errors.Is(err, known) {
			return fmt.Errorf("%s: %w", op, err)
		}
	}
	if errors.Is(err, sql.ErrNoRows) {
		return fmt.Errorf("%s: %w", op, store.ErrNotFound)
	}
	var se *sqlite3.Error
	if errors.As(err, &se) {
		switch se.Code() & 0xff { // primary result code
		case sqlitelib.SQLITE_BUSY, sqlitelib.SQLITE_LOCKED:
			return fmt.Errorf("%s: %w: %s is locked by another program (an open sqlite3 shell, another tether?): close it and retry (%v)", op, store.ErrLocked, s.path, err)
		case sqlitelib.SQLITE_CORRUPT, sqlitelib.SQLITE_NOTADB:
			return fmt.Errorf("%s: %w: %s is damaged or not a Tether store (%v): move it aside or delete it; it only holds deploy history, the model is the source of truth", op, store.ErrCorrupt, s.path, err)
		case sqlitelib.SQLITE_CONSTRAINT:
			return fmt.Errorf("%s: %w: %v", op, store.ErrConflict, err)
		case sqlitelib.SQLITE_READONLY, sqlitelib.SQLITE_CANTOPEN, sqlitelib.SQLITE_PERM:
			return fmt.Errorf("%s: cannot write %s (%v): check the directory's permissions", op, s.path, err)
		case sqlitelib.SQLITE_FULL:
			return fmt.Errorf("%s: the disk holding %s is full: %w", op, s.path, err)
		}
	}
	return fmt.Errorf("%s: %w", op, err)
}

func nanos(t time.Time) int64 { return t.UnixNano() }

func fromNanos(n int64) time.Time { return time.Unix(0, n).UTC() }

// CreateEnv implements store.Store.
func (s *Store) CreateEnv(ctx context.Context, env model.Environment) error {
	if err := model.ValidateEnvName(env.Name); err != nil {
		return fmt.Errorf("create environment: %w: %w", store.ErrInvalid, err)
	}
	settings, err := json.Marshal(env.Settings)
	if err != nil {
		return err
	}
	if env.CreatedAt.IsZero() {
		env.CreatedAt = time.Now()
	}
	_, err = s.db.ExecContext(ctx, `INSERT INTO environments (name, settings, created_at) VALUES (?, ?, ?)`,
		env.Name, settings, nanos(env.CreatedAt))
	var se *sqlite3.Error
	if errors.As(err, &se) && se.Code()&0xff == sqlitelib.SQLITE_CONSTRAINT {
		return fmt.Errorf("create environment %q: %w", env.Name, store.ErrExists)
	}
	return s.wrap("create environment "+env.Name, err)
}

// GetEnv implements store.Store.
func (s *Store) GetEnv(ctx context.Context, name string) (model.Environment, error) {
	row := s.db.QueryRowContext(ctx, `SELECT name, settings, created_at FROM environments WHERE name = ?`, name)
	env, err := scanEnv(row)
	return env, s.wrap("environment "+name, err)
}

// ListEnvs implements store.Store.
func (s *Store) ListEnvs(ctx context.Context) ([]model.Environment, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT name, settings, created_at FROM environments ORDER BY name`)
	if err != nil {
		return nil, s.wrap("list environments", err)
	}
	defer rows.Close()
	var out []model.Environment
	for rows.Next() {
		env, err := scanEnv(rows)
		if err != nil {
			return nil, s.wrap("list environments", err)
		}
		out = append(out, env)
	}
	return out, s.wrap("list environments", rows.Err())
}

type scanner interface{ Scan(dest ...any) error }

func scanEnv(r scanner) (model.Environment, error) {
	var env model.Environment
	var settings []byte
	var created int64
	if err := r.Scan(&env.Name, &settings, &created); err != nil {
		return env, err
	}
	env.CreatedAt = fromNanos(created)
	if err := json.Unmarshal(settings, &env.Settings); err != nil {
		return env, fmt.Errorf("%w: settings of %s: %w", store.ErrCorrupt, env.Name, err)
	}
	return env, nil
}

func (s *Store) requireEnv(ctx context.Context, q interface {
	QueryRowContext(context.Context, string, ...any) *sql.Row
}, env string) error {
	var one int
	err := q.QueryRowContext(ctx, `SELECT 1 FROM environments WHERE name = ?`, env).Scan(&one)
	if errors.Is(err, sql.ErrNoRows) {
		return fmt.Errorf("environment %q: %w", env, store.ErrNotFound)
	}
	return err
}

// PutVersion implements store.Store.
func (s *Store) PutVersion(ctx context.Context, env string, meta model.VersionMeta, resources []model.Resource) (model.Version, error) {
	if err := model.ValidateSet(resources); err != nil {
		return model.Version{}, fmt.Errorf("put version: %w: %w", store.ErrInvalid, err)
	}
	type row struct {
		id    string
		agent string
		hash  model.Hash
		key   [sha256.Size]byte
		body  []byte
	}
	rows := make([]row, len(resources))
	hashes := make([]model.Hash, len(resources))
	for i := range resources {
		r := &resources[i]
		h, err := r.Hash()
		if err != nil {
			return model.Version{}, fmt.Errorf("put version: %w: %w", store.ErrInvalid, err)
		}
		body, err := json.Marshal(r)
		if err != nil {
			return model.Version{}, fmt.Errorf("put version: encode %s: %w", r.ID, err)
		}
		rows[i] = row{id: r.ID.String(), agent: r.ID.Agent, hash: h, key: sha256.Sum256(body), body: body}
		hashes[i] = h
	}
	v := model.Version{
		Env:       env,
		State:     model.VersionCandidate,
		Meta:      meta,
		SetHash:   model.SetHashOf(hashes),
		Count:     len(resources),
		CreatedAt: time.Now().UTC(),
	}
	metaJSON, err := json.Marshal(meta)
	if err != nil {
		return model.Version{}, err
	}
	err = s.tx(ctx, "put version", func(tx *sql.Tx) error {
		if err := s.requireEnv(ctx, tx, env); err != nil {
			return err
		}
		if err := tx.QueryRowContext(ctx, `SELECT COALESCE(MAX(number), 0) + 1 FROM versions WHERE env = ?`, env).Scan(&v.Number); err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, `INSERT INTO versions (env, number, state, set_hash, resource_count, meta, created_at)
			VALUES (?, ?, ?, ?, ?, ?, ?)`, env, v.Number, v.State, v.SetHash[:], v.Count, metaJSON, nanos(v.CreatedAt)); err != nil {
			return err
		}
		bodyStmt, err := tx.PrepareContext(ctx, `INSERT INTO resource_bodies (key, body) VALUES (?, ?) ON CONFLICT (key) DO NOTHING`)
		if err != nil {
			return err
		}
		defer bodyStmt.Close()
		resStmt, err := tx.PrepareContext(ctx, `INSERT INTO version_resources (env, number, resource_id, agent, hash, body_key)
			VALUES (?, ?, ?, ?, ?, ?)`)
		if err != nil {
			return err
		}
		defer resStmt.Close()
		for i := range rows {
			r := &rows[i]
			if _, err := bodyStmt.ExecContext(ctx, r.key[:], r.body); err != nil {
				return err
			}
			if _, err := resStmt.ExecContext(ctx, env, v.Number, r.id, r.agent, r.hash[:], r.key[:]); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return model.Version{}, err
	}
	return v, nil
}

const versionColumns = `env, number, state, set_hash, resource_count, meta, created_at, released_at`

func scanVersion(r scanner) (model.Version, error) {
	var v model.Version
	var setHash, meta []byte
	var created int64
	var released sql.NullInt64
	if err := r.Scan(&v.Env, &v.Number, &v.State, &setHash, &v.Count, &meta, &created, &released); err != nil {
		return v, err
	}
	copy(v.SetHash[:], setHash)
	v.CreatedAt = fromNanos(created)
	if released.Valid {
		t := fromNanos(released.Int64)
		v.ReleasedAt = &t
	}
	if err := json.Unmarshal(meta, &v.Meta); err != nil {
		return v, fmt.Errorf("%w: metadata of version %d: %w", store.ErrCorrupt, v.Number, err)
	}
	return v, nil
}

// GetVersion implements store.Store.
func (s *Store) GetVersion(ctx context.Context, env string, n int64, withResources bool) (model.Version, error) {
	op := fmt.Sprintf("version %d of %s", n, env)
	v, err := scanVersion(s.db.QueryRowContext(ctx, `SELECT `+versionColumns+` FROM versions WHERE env = ? AND number = ?`, env, n))
	if err != nil {
		return model.Version{}, s.wrap(op, err)
	}
	if withResources {
		if v.Resources, err = s.resources(ctx, env, n, ""); err != nil {
			return model.Version{}, s.wrap(op, err)
		}
	}
	return v, nil
}

// resources loads the resources of version n (of one agent if agent != "").
func (s *Store) resources(ctx context.Context, env string, n int64, agent string) ([]model.Resource, error) {
	q := `SELECT b.body FROM version_resources vr JOIN resource_bodies b ON b.key = vr.body_key
		WHERE vr.env = ? AND vr.number = ?`
	args := []any{env, n}
	if agent != "" {
		q += ` AND vr.agent = ?`
		args = append(args, agent)
	}
	rows, err := s.db.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var bodies store.Bodies
	for rows.Next() {
		var body []byte
		if err := rows.Scan(&body); err != nil {
			return nil, err
		}
		bodies.Add(body)
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	return bodies.Resources()
}

// LatestVersion implements store.Store.
func (s *Store) LatestVersion(ctx context.Context, env string) (model.Version, error) {
	v, err := scanVersion(s.db.QueryRowContext(ctx, `SELECT `+versionColumns+` FROM versions WHERE env = ? ORDER BY number DESC LIMIT 1`, env))
	return v, s.wrap("latest version of "+env, err)
}

// ReleasedVersion implements store.Store.
func (s *Store) ReleasedVersion(ctx context.Context, env string) (model.Version, error) {
	v, err := scanVersion(s.db.QueryRowContext(ctx, `SELECT `+versionColumns+` FROM versions WHERE env = ? AND state = 'released'`, env))
	return v, s.wrap("released version of "+env, err)
}

// ListVersions implements store.Store.
func (s *Store) ListVersions(ctx context.Context, env string) ([]model.Version, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT `+versionColumns+` FROM versions WHERE env = ? ORDER BY number DESC`, env)
	if err != nil {
		return nil, s.wrap("list versions", err)
	}
	defer rows.Close()
	var out []model.Version
	for rows.Next() {
		v, err := scanVersion(rows)
		if err != nil {
			return nil, s.wrap("list versions", err)
		}
		out = append(out, v)
	}
	return out, s.wrap("list versions", rows.Err())
}

// Release implements store.Store.
func (s *Store) Release(ctx context.Context, env string, n int64) (model.Version, error) {
	op := fmt.Sprintf("release version %d of %s", n, env)
	now := nanos(time.Now())
	err := s.tx(ctx, op, func(tx *sql.Tx) error {
		var state model.VersionState
		err := tx.QueryRowContext(ctx, `SELECT state FROM versions WHERE env = ? AND number = ?`, env, n).Scan(&state)
		if err != nil {
			return err
		}
		switch state {
		case model.VersionReleased:
			return nil
		case model.VersionRetired:
			return fmt.Errorf("%w: version %d is retired; export it again to roll back", store.ErrConflict, n)
		}
		if _, err := tx.ExecContext(ctx, `UPDATE versions SET state = 'retired' WHERE env = ? AND state = 'released'`, env); err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, `UPDATE versions SET state = 'released', released_at = ? WHERE env = ? AND number = ?`, now, env, n); err != nil {
			return err
		}
		// New or changed resources become available; unchanged ones keep
		// their state and compliance.
		if _, err := tx.ExecContext(ctx, `
			INSERT INTO resource_status (env, resource_id, agent, version, hash, state, compliance, updated_at)
			SELECT env, resource_id, agent, number, hash, 'available', 'unknown', ? FROM version_resources
			WHERE env = ? AND number = ?
			ON CONFLICT (env, resource_id) DO UPDATE SET
				agent = excluded.agent,
				version = excluded.version,
				state = CASE WHEN resource_status.hash = excluded.hash AND resource_status.state != 'orphaned'
					THEN resource_status.state ELSE 'available' END,
				compliance = CASE WHEN resource_status.hash = excluded.hash AND resource_status.state != 'orphaned'
					THEN resource_status.compliance ELSE 'unknown' END,
				message = CASE WHEN resource_status.hash = excluded.hash AND resource_status.state != 'orphaned'
					THEN resource_status.message ELSE '' END,
				updated_at = CASE WHEN resource_status.hash = excluded.hash AND resource_status.state != 'orphaned'
					THEN resource_status.updated_at ELSE excluded.updated_at END,
				hash = excluded.hash`, now, env, n); err != nil {
			return err
		}
		_, err = tx.ExecContext(ctx, `UPDATE resource_status SET state = 'orphaned', message = 'left the model', updated_at = ?
			WHERE env = ? AND version != ? AND state != 'orphaned'`, now, env, n)
		return err
	})
	if err != nil {
		return model.Version{}, err
	}
	return s.GetVersion(ctx, env, n, false)
}

// AgentSlice implements store.Store.
func (s *Store) AgentSlice(ctx context.Context, env string, n int64, agent string) (model.Slice, error) {
	rs, err := s.resources(ctx, env, n, agent)
	if err != nil {
		return model.Slice{}, s.wrap(fmt.Sprintf("slice of %s in version %d", agent, n), err)
	}
	return model.Slice{Agent: agent, Generation: n, Resources: rs}, nil
}

// UpsertAgent implements store.Store.
func (s *Store) UpsertAgent(ctx context.Context, a model.Agent) error {
	if err := model.ValidateAgentName(a.Name); err != nil {
		return fmt.Errorf("upsert agent: %w: %w", store.ErrInvalid, err)
	}
	if a.State == "" {
		a.State = model.AgentPending
	}
	now := time.Now()
	if a.FirstSeen.IsZero() {
		a.FirstSeen = now
	}
	if a.LastSeen.IsZero() {
		a.LastSeen = now
	}
	labels, facts, kinds, err := store.EncodeAgent(&a)
	if err != nil {
		return fmt.Errorf("upsert agent: %w", err)
	}
	return s.tx(ctx, "upsert agent "+a.Name, func(tx *sql.Tx) error {
		if err := s.requireEnv(ctx, tx, a.Env); err != nil {
			return err
		}
		_, err := tx.ExecContext(ctx, `
			INSERT INTO agents (env, name, state, public_key, labels, facts, kinds, generation, paused, first_seen, last_seen, online)
			VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
			ON CONFLICT (env, name) DO UPDATE SET
				state = excluded.state, public_key = excluded.public_key, labels = excluded.labels,
				facts = excluded.facts, kinds = excluded.kinds, generation = excluded.generation,
				paused = excluded.paused, last_seen = excluded.last_seen, online = excluded.online`,
			a.Env, a.Name, a.State, a.PublicKey, labels, facts, kinds, a.Generation, a.Paused, nanos(a.FirstSeen), nanos(a.LastSeen), a.Connected)
		return err
	})
}

const agentColumns = `env, name, state, public_key, labels, facts, kinds, generation, paused, first_seen, last_seen, online`

func scanAgent(r scanner) (model.Agent, error) {
	var a model.Agent
	var labels, facts, kinds []byte
	var first, last int64
	if err := r.Scan(&a.Env, &a.Name, &a.State, &a.PublicKey, &labels, &facts, &kinds, &a.Generation, &a.Paused, &first, &last, &a.Connected); err != nil {
		return a, err
	}
	a.FirstSeen, a.LastSeen = fromNanos(first), fromNanos(last)
	return a, store.DecodeAgent(&a, labels, facts, kinds)
}

// GetAgent implements store.Store.
func (s *Store) GetAgent(ctx context.Context, env, name string) (model.Agent, error) {
	a, err := scanAgent(s.db.QueryRowContext(ctx, `SELECT `+agentColumns+` FROM agents WHERE env = ? AND name = ?`, env, name))
	return a, s.wrap("agent "+name, err)
}

// ListAgents implements store.Store.
func (s *Store) ListAgents(ctx context.Context, env string) ([]model.Agent, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT `+agentColumns+` FROM agents WHERE env = ? ORDER BY name`, env)
	if err != nil {
		return nil, s.wrap("list agents", err)
	}
	defer rows.Close()
	var out []model.Agent
	for rows.Next() {
		a, err := scanAgent(rows)
		if err != nil {
			return nil, s.wrap("list agents", err)
		}
		out = append(out, a)
	}
	return out, s.wrap("list agents", rows.Err())
}

// RecordResults implements store.Store.
func (s *Store) RecordResults(ctx context.Context, batches []store.ResultBatch) ([]bool, error) {
	for i := range batches {
		if err := store.CheckBatch(&batches[i]); err != nil {
			return nil, fmt.Errorf("record results: %w", err)
		}
	}
	fresh := make([]bool, len(batches))
	now := nanos(time.Now())
	err := s.tx(ctx, "record results", func(tx *sql.Tx) error {
		// A result only updates a status row of its version or an older one,
		// or of a newer version with the same desired state (?8): a late
		// result of an old deploy never overwrites a newer state,
		// nor does a result older (by the agent's counter) than the one
		// applied last.
		statusStmt, err := tx.PrepareContext(ctx, `UPDATE resource_status SET
				state = ?1,
				compliance = CASE WHEN ?7 != 0 AND compliance_seq > ?7 THEN compliance
					ELSE CASE ?1 WHEN 'deployed' THEN 'compliant' WHEN 'failed' THEN 'non_compliant' ELSE compliance END END,
				last_verified = CASE WHEN ?1 = 'deployed' AND (?7 = 0 OR compliance_seq <= ?7) THEN ?2 ELSE last_verified END,
				compliance_seq = CASE WHEN ?1 IN ('deployed', 'failed') THEN MAX(compliance_seq, ?7) ELSE compliance_seq END,
				message = ?3, updated_at = ?2, seq = MAX(seq, ?7)
			WHERE env = ?4 AND resource_id = ?5 AND (version <= ?6 OR hash = ?8) AND (?7 = 0 OR seq <= ?7)`)
		if err != nil {
			return err
		}
		defer statusStmt.Close()
		// A verification of the version a resource holds sets its
		// compliance only: a dry run's only when the resource is deployed
		// (?7), a drift report's also while its deploy's result is on the
		// way.
		verifyStmt, err := tx.PrepareContext(ctx, `UPDATE resource_status SET
				compliance = ?1, last_verified = ?2, compliance_seq = MAX(compliance_seq, ?6)
			WHERE env = ?3 AND resource_id = ?4 AND version = ?5 AND (?7 = 0 OR state = 'deployed')
				AND (?6 = 0 OR compliance_seq <= ?6)`)
		if err != nil {
			return err
		}
		defer verifyStmt.Close()
		var actionStmt *sql.Stmt
		for bi := range batches {
			b := &batches[bi]
			seq := int64(b.Seq)
			if b.Seq != 0 {
				res, err := tx.ExecContext(ctx, `INSERT INTO ingested (env, agent, seq, at) VALUES (?, ?, ?, ?)
					ON CONFLICT DO NOTHING`, b.Env, b.Agent, seq, now)
				if err != nil {
					return err
				}
				if n, err := res.RowsAffected(); err != nil || n == 0 {
					continue // recorded before
				}
			}
			fresh[bi] = true
			for i := range b.Results {
				r := &b.Results[i]
				id := r.ID.String()
				switch {
				case !r.DryRun:
					if _, err := statusStmt.ExecContext(ctx, r.State, now, r.Message, b.Env, id, b.Version, seq, store.AppliedHash(r)); err != nil {
						return err
					}
				case r.State == model.StateDeployed:
					if _, err := verifyStmt.ExecContext(ctx, store.Verified(r), now, b.Env, id, b.Version, seq, 1); err != nil {
						return err
					}
				}
				if !store.Logged(r) {
					continue
				}
				if actionStmt == nil {
					if actionStmt, err = tx.PrepareContext(ctx, `INSERT INTO actions
						(env, resource_id, agent, kind, deploy_id, version, state, changes, message, at, duration_ns)
						VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`); err != nil {
						return err
					}
					defer actionStmt.Close()
				}
				changes, err := store.EncodeChanges(r)
				if err != nil {
					return err
				}
				if _, err := actionStmt.ExecContext(ctx, b.Env, id, b.Agent, store.ActionKindOf(r), b.DeployID, b.Version, r.State, changes,
					r.Message, now, int64(r.Duration)); err != nil {
					return err
				}
			}
			if err := insertAlerts(ctx, tx, b.Alerts); err != nil {
				return err
			}
			for _, a := range b.Alerts {
				if store.SetsCompliance(&a) {
					if _, err := verifyStmt.ExecContext(ctx, a.Compliance, now, b.Env, a.ID.String(), a.Version, seq, 0); err != nil {
						return err
					}
				}
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return fresh, nil
}

// ForgetIngested implements store.Store.
func (s *Store) ForgetIngested(ctx context.Context, before time.Time) error {
	_, err := s.db.ExecContext(ctx, `DELETE FROM ingested WHERE at < ?`, nanos(before))
	return s.wrap("forget ingested", err)
}

// Statuses implements store.Store.
func (s *Store) Statuses(ctx context.Context, env string, f store.StatusFilter) ([]model.ResourceStatus, error) {
	q := `SELECT resource_id, version, hash, state, compliance, last_verified, message, updated_at
		FROM resource_status WHERE env = ?`
	args := []any{env}
	if f.Agent != "" {
		q += ` AND agent = ?`
		args = append(args, f.Agent)
	}
	if f.Type != "" {
		q += ` AND substr(resource_id, 1, ?) = ?`
		args = append(args, len(f.Type)+1, f.Type+"[")
	}
	if f.State != "" {
		q += ` AND state = ?`
		args = append(args, f.State)
	}
	if f.Compliance != "" {
		q += ` AND compliance = ?`
		args = append(args, f.Compliance)
	}
	rows, err := s.db.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, s.wrap("statuses", err)
	}
	defer rows.Close()
	var out []model.ResourceStatus
	for rows.Next() {
		var st model.ResourceStatus
		var id string
		var hash []byte
		var verified sql.NullInt64
		var updated int64
		if err := rows.Scan(&id, &st.Version, &hash, &st.State, &st.Compliance, &verified, &st.Message, &updated); err != nil {
			return nil, s.wrap("statuses", err)
		}
		if st.ID, err = model.ParseID(id); err != nil {
			return nil, s.wrap("statuses", fmt.Errorf("%w: %w", store.ErrCorrupt, err))
		}
		copy(st.Hash[:], hash)
		st.UpdatedAt = fromNanos(updated)
		if verified.Valid {
			t := fromNanos(verified.Int64)
			st.LastVerified = &t
		}
		out = append(out, st)
	}
	if err := rows.Err(); err != nil {
		return nil, s.wrap("statuses", err)
	}
	sortStatuses(out)
	return out, nil
}

// Actions implements store.Store.
func (s *Store) Actions(ctx context.Context, env string, id model.ID, limit int) ([]model.Action, error) {
	if limit <= 0 {
		limit = 100
	}
	return s.actions(ctx, "actions of "+id.String(), `env = ? AND resource_id = ? ORDER BY seq DESC LIMIT ?`, env, id.String(), limit)
}

// DeployActions implements store.Store.
func (s *Store) DeployActions(ctx context.Context, env, deployID string, limit int) ([]model.Action, error) {
	return s.actions(ctx, "actions of deploy "+deployID, `env = ? AND deploy_id = ? ORDER BY seq LIMIT ?`, env, deployID, limitOf(limit))
}

func (s *Store) actions(ctx context.Context, op, where string, args ...any) ([]model.Action, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT seq, resource_id, kind, deploy_id, version, state, changes, message, at, duration_ns
		FROM actions WHERE `+where, args...)
	if err != nil {
		return nil, s.wrap(op, err)
	}
	defer rows.Close()
	var out []model.Action
	for rows.Next() {
		var a model.Action
		var id string
		var changes []byte
		var at, dur int64
		if err := rows.Scan(&a.Seq, &id, &a.Kind, &a.DeployID, &a.Version, &a.State, &changes, &a.Message, &at, &dur); err != nil {
			return nil, s.wrap(op, err)
		}
		a.At, a.Duration = fromNanos(at), time.Duration(dur)
		if err := store.DecodeAction(&a, id, changes); err != nil {
			return nil, s.wrap(op, err)
		}
		out = append(out, a)
	}
	return out, s.wrap(op, rows.Err())
}

func sortStatuses(st []model.ResourceStatus) {
	slices.SortFunc(st, func(a, b model.ResourceStatus) int { return a.ID.Compare(b.ID) })
}
