package schema

import (
	"strings"
	"testing"
)

func TestMigrations(t *testing.T) {
	for name, load := range map[string]func() ([]Migration, error){"sqlite": SQLite, "postgres": Postgres} {
		t.Run(name, func(t *testing.T) {
			ms, err := load()
			if err != nil {
				t.Fatal(err)
			}
			if len(ms) == 0 || ms[0].Version != 1 || !strings.Contains(ms[0].SQL, "CREATE TABLE environments") {
				t.Fatalf("migrations %+v", ms)
			}
			for _, m := range ms {
				if m.Name == "" || strings.TrimSpace(m.SQL) == "" {
					t.Fatalf("migration %d is empty or unnamed", m.Version)
				}
			}
		})
	}
}
