// Package pgtest gives tests a PostgreSQL of their own: the database named
// by TETHER_TEST_POSTGRES (default: the local one), with a fresh schema per
// test, dropped when the test ends.
package pgtest

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/tetherhq/tether/model/testenv"
	"github.com/tetherhq/tether/server/store/postgres"
)

// DefaultURL is the local PostgreSQL of a development machine and CI.
const DefaultURL = "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"

// URL returns the database tests use. When it cannot be reached the test is
// skipped with the reason, or fails where tests must run (testenv.Need).
func URL(t testing.TB) string {
	t.Helper()
	u := os.Getenv("TETHER_TEST_POSTGRES")
	if u == "" {
		u = DefaultURL
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	name := "probe_" + strings.ReplaceAll(uuid.NewString()[:8], "-", "")
	if err := postgres.CreateSchema(ctx, u, name); err != nil {
		testenv.Need(t, false, fmt.Sprintf("PostgreSQL at %s is not usable (%v): start it with `pg_ctlcluster --skip-systemctl-redirect $(ls /etc/postgresql) main start` or set TETHER_TEST_POSTGRES", redact(u), err))
	}
	_ = postgres.DropSchema(ctx, u, name)
	return u
}

// Fresh returns a connection string whose search_path is a new, empty
// schema, dropped when the test ends.
func Fresh(t testing.TB) string {
	t.Helper()
	u := URL(t)
	name := "t_" + strings.ReplaceAll(uuid.NewString(), "-", "")
	ctx := context.Background()
	if err := postgres.CreateSchema(ctx, u, name); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := postgres.DropSchema(context.Background(), u, name); err != nil {
			t.Logf("drop test schema %s: %v", name, err)
		}
	})
	return postgres.WithSchema(u, name)
}

// Open returns a store over a fresh schema, closed when the test ends.
func Open(t testing.TB) *postgres.Store {
	t.Helper()
	s, err := postgres.Open(context.Background(), postgres.Config{URL: Fresh(t)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func redact(u string) string {
	if i := strings.Index(u, "@"); i > 0 {
		if j := strings.Index(u, "://"); j >= 0 && j < i {
			return u[:j+3] + "…" + u[i:]
		}
	}
	return u
}
