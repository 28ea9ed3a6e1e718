package store

import (
	"context"
	"fmt"
	"strconv"

	"github.com/tetherhq/tether/model"
	"github.com/tetherhq/tether/schema"
)

// The two SQL stores share one implementation, SQL: their queries, written
// once in PostgreSQL's SQL, and the rules that are not storage (validation,
// which result wins over a stored status). A store brings its Database —
// how statements run, how its driver's errors read, and the bulk writes it
// does its own way for speed — and the few statements a Dialect names.

// Conn runs statements. They are PostgreSQL's SQL with numbered placeholders
// ($1, $2…), which SQLite reads too: its store binds $N to the Nth argument,
// and now() to the start of the transaction, as PostgreSQL does. Time
// arguments are time.Time. Errors come back classified: model.ErrNotFound
// when Row.Scan finds no row, model.ErrExists for a duplicate key,
// model.ErrNotFound for a missing referenced row, ErrLocked, ErrCorrupt,
// model.ErrUnavailable, with what to do.
type Conn interface {
	Exec(ctx context.Context, query string, args ...any) (rows int64, err error)
	Query(ctx context.Context, query string, args ...any) (Rows, error)
	QueryRow(ctx context.Context, query string, args ...any) Row
}

// Row is one row of a result.
type Row interface {
	Scan(dest ...any) error
}

// Rows is a result, read row by row and closed.
type Rows interface {
	Row
	Next() bool
	Err() error
	Close()
}

// Database is a store's database.
type Database interface {
	Conn
	// Tx runs fn in a transaction, committing when fn returns nil.
	Tx(ctx context.Context, fn func(Tx) error) error
}

// Tx is a transaction: the shared statements, and the bulk writes.
type Tx interface {
	Conn
	Bulk
}

// Bulk is what each store writes its own way, for speed (COPY and arrays
// in PostgreSQL, prepared statements in SQLite), inside a transaction.
type Bulk interface {
	// InsertResources stores the resources of the new version v (its
	// number set), and the bodies not stored yet.
	InsertResources(ctx context.Context, v *model.Version, rows *Set) error
	// BeginIngest marks batches as ingested (env, agent, seq), setting
	// fresh[i] for each batch seen for the first time (a batch without a
	// seq is always fresh), and returns the status rows of keys that
	// exist, locked until the transaction ends.
	BeginIngest(ctx context.Context, batches []ResultBatch, fresh []bool, keys []StatusKey) ([]Status, error)
	// WriteIngest writes what recording results decided.
	WriteIngest(ctx context.Context, in *Ingest) error
	// MarkSeen writes agents' last-seen times, as MarkAgentsSeen says.
	MarkSeen(ctx context.Context, seen []AgentSeen) error
}

// Dialect is the SQL the stores cannot share.
type Dialect struct {
	// ForUpdate ends a SELECT that locks the rows it reads until the
	// transaction ends, against other writers of them (not against rows
	// being written that refer to them: no key of the row changes): empty
	// where a transaction holds the whole database.
	ForUpdate string
	// ShareBodies runs before a transaction refers to resource bodies, and
	// LockBodies before it deletes the unused ones, so that a body about to
	// be referred to is never deleted under it: empty where transactions
	// never overlap.
	ShareBodies, LockBodies string
	// LockMigrations runs before migrating, so that processes opening one
	// database at once migrate it once: empty where one process holds it.
	LockMigrations string
	// MigrationsTable creates the table of applied migrations if there is
	// none.
	MigrationsTable string
	// SkipLocked ends a SELECT that locks the rows it reads, skipping
	// those another transaction holds: empty where a transaction holds
	// the whole database.
	SkipLocked string
	// LockEvents runs before appending to the event log, so that ids are
	// given in commit order, and has the followers of other processes
	// woken at commit; ShareEvents before reading the newest ID given,
	// so that no append is in flight. Empty where one process holds the
	// database.
	LockEvents, ShareEvents string
	// LockPending runs before a transaction counts an environment's
	// pending agents to add one, so that two never both take the last
	// place: empty where a transaction holds the whole database.
	LockPending string
	// EventsGiven is a query of the newest ID the event log ever gave
	// (0: none), kept or not: its sequence's.
	EventsGiven string
	// EachText is the function that reads a JSON object column as rows
	// of key and value, as text: an agent's labels.
	EachText string
	// LabelValue is the value of an agent's label as text, NULL if it has
	// none: a format of the placeholder of the label's key (a valid key).
	LabelValue string
}

// SQL is what the stores share of store.Store: every method but Close,
// Ping and Lead. A store embeds it.
type SQL struct {
	db    Database
	d     Dialect
	where string
}

// NewSQL returns the shared implementation over db; where names the
// database in messages ("store /var/lib/tether/tether.db").
func NewSQL(db Database, d Dialect, where string) SQL {
	return SQL{db: db, d: d, where: where}
}

// Migrate applies the migrations load returns that the database has not
// applied yet, all in one transaction: a failed step leaves the database as
// it was.
func (s *SQL) Migrate(ctx context.Context, load func() ([]schema.Migration, error)) error {
	migrations, err := load()
	if err != nil {
		return err
	}
	return wrap("migrate", s.db.Tx(ctx, func(tx Tx) error {
		if err := run(ctx, tx, s.d.LockMigrations); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, s.d.MigrationsTable); err != nil {
			return err
		}
		applied, err := queryAll(ctx, tx, func(r Row) (int, error) {
			var v int
			return v, r.Scan(&v)
		}, `SELECT version FROM schema_migrations`)
		if err != nil {
			return err
		}
		known := map[int]bool{}
		for _, m := range migrations {
			known[m.Version] = true
		}
		done := map[int]bool{}
		for _, v := range applied {
			if !known[v] {
				return fmt.Errorf("%s has schema step %d, which this tether does not know (it is newer): upgrade tether", s.where, v)
			}
			done[v] = true
		}
		// Every step not applied yet, in order: numbers may have gaps,
		// and a step numbered below one applied (merged later) still runs.
		for _, m := range migrations {
			if done[m.Version] {
				continue
			}
			if _, err := tx.Exec(ctx, m.SQL); err != nil {
				return fmt.Errorf("migration %d (%s): %w", m.Version, m.Name, err)
			}
			if _, err := tx.Exec(ctx, `INSERT INTO schema_migrations (version, name, applied_at) VALUES ($1, $2, now())`, m.Version, m.Name); err != nil {
				return err
			}
		}
		return nil
	}))
}

// SchemaVersion returns the newest migration applied.
func (s *SQL) SchemaVersion(ctx context.Context) (int, error) {
	var v int
	err := s.db.QueryRow(ctx, `SELECT COALESCE(MAX(version), 0) FROM schema_migrations`).Scan(&v)
	return v, wrap("schema version", err)
}

// lockStatuses locks the statuses of env (of agent only, if not empty) in
// the order of their keys, as recording results does (BeginIngest): a
// statement that updates many of them locks them in the order its plan
// meets them, and two such transactions could each wait on a row the
// other holds. Run before a transaction changes many statuses, and
// before it locks an agent's row (ingest locks statuses, then agents).
func (s *SQL) lockStatuses(ctx context.Context, c Conn, env, agent string) error {
	return s.lockInOrder(ctx, c, `resource_status WHERE env = $1 AND ($2 = '' OR agent = $2) ORDER BY env, resource_id`, env, agent)
}

// lockEnvAgents locks the agents of env in the order of their keys, as
// recording results does (after the statuses): before a transaction
// changes many of them.
func (s *SQL) lockEnvAgents(ctx context.Context, c Conn, env string) error {
	return s.lockInOrder(ctx, c, `agents WHERE env = $1 ORDER BY env, name`, env)
}

// lockInOrder locks the rows of rows (a table, its WHERE and its ORDER
// BY), in that order, until the transaction ends: nothing where the
// dialect does not lock rows.
func (s *SQL) lockInOrder(ctx context.Context, c Conn, rows string, args ...any) error {
	if s.d.ForUpdate == "" {
		return nil
	}
	var n int64
	return c.QueryRow(ctx, `SELECT count(*) FROM (SELECT 1 FROM `+rows+s.d.ForUpdate+`) l`, args...).Scan(&n)
}

// run runs a statement of the dialect, if it has one.
func run(ctx context.Context, c Conn, stmt string) error {
	if stmt == "" {
		return nil
	}
	_, err := c.Exec(ctx, stmt)
	return err
}

// wrap says which operation failed; the error is classified already.
func wrap(op string, err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("%s: %w", op, err)
}

// queryAll returns every row of a query, read by scan.
func queryAll[T any](ctx context.Context, c Conn, scan func(Row) (T, error), query string, args ...any) ([]T, error) {
	rows, err := c.Query(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []T
	for rows.Next() {
		v, err := scan(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	return out, rows.Err()
}

// args collects a statement's arguments: add returns the placeholder of
// the one it adds.
type args []any

func (a *args) add(v any) string {
	*a = append(*a, v)
	return "$" + strconv.Itoa(len(*a))
}

// limitOf is a list's length: 100 unless asked otherwise.
func limitOf(n int) int {
	if n <= 0 {
		return 100
	}
	return n
}
