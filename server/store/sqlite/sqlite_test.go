package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tetherhq/tether/model"
	"github.com/tetherhq/tether/schema"
	"github.com/tetherhq/tether/server/record"
	"github.com/tetherhq/tether/server/store"
	"github.com/tetherhq/tether/server/store/storetest"
)

func TestContract(t *testing.T) {
	storetest.Run(t, func(t *testing.T) store.Store {
		s, err := Open(context.Background(), filepath.Join(t.TempDir(), "tether.db"), Config{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	})
}

func TestReopenKeepsDataAndSkipsMigrations(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "tether.db")
	s, err := Open(ctx, path, Config{})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.CreateEnv(ctx, record.Environment{Name: "local"}); err != nil {
		t.Fatal(err)
	}
	s.Close()
	s, err = Open(ctx, path, Config{})
	if err != nil {
		t.Fatalf("reopen: %v", err)
	}
	defer s.Close()
	if _, err := s.GetEnv(ctx, "local"); err != nil {
		t.Fatalf("environment lost across reopen: %v", err)
	}
}

func TestBodiesStoredOnce(t *testing.T) {
	ctx := context.Background()
	s, err := Open(ctx, filepath.Join(t.TempDir(), "tether.db"), Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.CreateEnv(ctx, record.Environment{Name: "prod"}); err != nil {
		t.Fatal(err)
	}
	var rs []model.Resource
	for i := 0; i < 100; i++ {
		p := "/f" + string(rune('a'+i%26)) + string(rune('a'+i/26))
		rs = append(rs, model.Resource{ID: model.ID{Type: "file", Agent: "a", Key: "path", Value: p}, Attributes: model.Attributes{"path": p}})
	}
	for v := 0; v < 10; v++ {
		if _, err := s.PutVersion(ctx, "prod", model.VersionMeta{}, rs); err != nil {
			t.Fatal(err)
		}
	}
	var bodies, refs int
	if err := s.db.QueryRow(`SELECT COUNT(*) FROM resource_bodies`).Scan(&bodies); err != nil {
		t.Fatal(err)
	}
	if err := s.db.QueryRow(`SELECT COUNT(*) FROM version_resources`).Scan(&refs); err != nil {
		t.Fatal(err)
	}
	if bodies != 100 || refs != 1000 {
		t.Fatalf("%d bodies for %d references, want 100 for 1000", bodies, refs)
	}
}

func TestSecondProcessIsLockedOut(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "tether.db")
	s, err := Open(ctx, path, Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	_, err = Open(ctx, path, Config{})
	if !errors.Is(err, store.ErrLocked) {
		t.Fatalf("got %v, want ErrLocked", err)
	}
	for _, want := range []string{path, "another tether process", "pid"} {
		if !strings.Contains(err.Error(), want) {
			t.Fatalf("error %q does not say %q", err, want)
		}
	}
}

// TestLockedByAnotherProgram holds a write lock from a separate connection
// (as an open sqlite3 shell would) and checks the store reports it clearly.
func TestLockedByAnotherProgram(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "tether.db")
	s, err := Open(ctx, path, Config{BusyTimeout: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	other, err := sql.Open("sqlite", "file:"+path)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	conn, err := other.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := conn.ExecContext(ctx, "BEGIN EXCLUSIVE"); err != nil {
		t.Fatal(err)
	}
	defer conn.ExecContext(ctx, "ROLLBACK")
	err = s.CreateEnv(ctx, record.Environment{Name: "x"})
	if !errors.Is(err, store.ErrLocked) || !strings.Contains(err.Error(), "close it and retry") {
		t.Fatalf("got %v, want ErrLocked telling what to do", err)
	}
}

func TestCorruptFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "tether.db")
	if err := os.WriteFile(path, []byte(strings.Repeat("this is not a database\n", 500)), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := Open(context.Background(), path, Config{})
	if !errors.Is(err, store.ErrCorrupt) {
		t.Fatalf("got %v, want ErrCorrupt", err)
	}
	for _, want := range []string{path, "move it aside or delete it"} {
		if !strings.Contains(err.Error(), want) {
			t.Fatalf("error %q does not say %q", err, want)
		}
	}
}

func TestNewerSchemaRefused(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "tether.db")
	s, err := Open(ctx, path, Config{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.db.Exec(`INSERT INTO schema_migrations (version, name, applied_at) VALUES (999, 'future', 0)`); err != nil {
		t.Fatal(err)
	}
	s.Close()
	if _, err := Open(ctx, path, Config{}); err == nil || !strings.Contains(err.Error(), "upgrade tether") {
		t.Fatalf("got %v, want a newer-schema error", err)
	}
}

func TestConfig(t *testing.T) {
	if err := Default().Validate(); err != nil {
		t.Errorf("Default: %v", err)
	}
	_, err := Open(context.Background(), filepath.Join(t.TempDir(), "t.db"), Config{BusyTimeout: -time.Second})
	if !errors.Is(err, ErrConfig) {
		t.Errorf("a negative busy timeout: got %v, want an error wrapping ErrConfig", err)
	}
}

// TestUpgradeFromEveryStep: a store file an earlier tether left at any
// step opens, upgrades and keeps its data.
func TestUpgradeFromEveryStep(t *testing.T) {
	storetest.Upgrade(t, schema.SQLite, func(t *testing.T) func(storetest.Migrations) (storetest.Migrated, error) {
		path := filepath.Join(t.TempDir(), "tether.db")
		return func(ms storetest.Migrations) (storetest.Migrated, error) {
			return open(context.Background(), path, Config{}, ms)
		}
	})
}

// TestSharedSQL: the store reads the shared statements as PostgreSQL
// would: $N is the Nth argument wherever it stands, and now() is the start
// of the transaction.
func TestSharedSQL(t *testing.T) {
	ctx := context.Background()
	s, err := Open(ctx, filepath.Join(t.TempDir(), "tether.db"), Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	db := database{conn{h: s.db, path: s.path}, s.db}
	var got string
	if err := db.QueryRow(ctx, `SELECT $2 || '/' || $1 || '/' || $2`, "a", "b").Scan(&got); err != nil || got != "b/a/b" {
		t.Fatalf("$2/$1/$2 of a, b: %q, %v; want b/a/b", got, err)
	}
	err = db.Tx(ctx, func(tx store.Tx) error {
		var first, second int64
		var arg string
		if err := tx.QueryRow(ctx, `SELECT now()`).Scan(&first); err != nil {
			return err
		}
		if err := tx.QueryRow(ctx, `SELECT $1, now()`, "x").Scan(&arg, &second); err != nil {
			return err
		}
		if start := tx.(conn).now.UnixNano(); first != start || second != start || arg != "x" {
			t.Errorf("now() %d then %d (argument %q), want the transaction's start %d both times", first, second, arg, start)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestStepMergedLate: a step numbered below one a database applied (two
// changes merged in the other order than numbered) is applied when it
// arrives, and a step the database applied that this build does not know
// stops the store from opening.
func TestStepMergedLate(t *testing.T) {
	ctx := context.Background()
	ms, err := schema.SQLite()
	if err != nil {
		t.Fatal(err)
	}
	last := ms[len(ms)-1].Version
	late := schema.Migration{Version: last + 1, Name: "late", SQL: `CREATE TABLE late (x INTEGER)`}
	early := schema.Migration{Version: last + 2, Name: "early", SQL: `CREATE TABLE early (x INTEGER)`}
	path := filepath.Join(t.TempDir(), "tether.db")
	with := func(extra ...schema.Migration) storetest.Migrations {
		return func() ([]schema.Migration, error) { return append(slices.Clone(ms), extra...), nil }
	}
	s, err := open(ctx, path, Config{}, with(early))
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	s, err = open(ctx, path, Config{}, with(late, early))
	if err != nil {
		t.Fatalf("open with a step merged late: %v", err)
	}
	var n int
	if err := s.db.QueryRowContext(ctx, `SELECT COUNT(*) FROM late`).Scan(&n); err != nil {
		t.Fatalf("the step merged late was not applied: %v", err)
	}
	if v, err := s.SchemaVersion(ctx); err != nil || v != early.Version {
		t.Fatalf("schema version %d (%v), want %d", v, err, early.Version)
	}
	s.Close()
	if _, err := open(ctx, path, Config{}, with(late)); err == nil || !strings.Contains(err.Error(), "does not know") {
		t.Fatalf("open a database with a step this build lacks: got %v, want an error saying so", err)
	}
}
