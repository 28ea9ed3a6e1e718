// Package schema holds what Tether's data looks like at rest and on the wire:
// the SQL migrations of the stores (embedded, applied in order on open) and,
// as they are written, the JSON Schemas of resource kinds and messages.
package schema

import (
	"embed"
	"fmt"
	"io/fs"
	"path"
	"slices"
	"strconv"
	"strings"
)

//go:embed sqlite/*.sql postgres/*.sql
var files embed.FS

// Migration is one schema change. Versions start at 1 and have no gaps.
type Migration struct {
	Version int
	Name    string
	SQL     string
}

// SQLite returns the migrations of the embedded (SQLite) store, in order.
func SQLite() ([]Migration, error) { return load("sqlite") }

// Postgres returns the migrations of the server (PostgreSQL) store, in order.
func Postgres() ([]Migration, error) { return load("postgres") }

// load reads dir/NNNN_name.sql files and checks they are numbered 1..n.
func load(dir string) ([]Migration, error) {
	entries, err := fs.ReadDir(files, dir)
	if err != nil {
		return nil, fmt.Errorf("schema %s: %w", dir, err)
	}
	var out []Migration
	for _, e := range entries {
		num, name, ok := strings.Cut(strings.TrimSuffix(e.Name(), ".sql"), "_")
		v, err := strconv.Atoi(num)
		if !ok || err != nil {
			return nil, fmt.Errorf("schema %s: migration file %q is not named NNNN_name.sql", dir, e.Name())
		}
		b, err := fs.ReadFile(files, path.Join(dir, e.Name()))
		if err != nil {
			return nil, err
		}
		out = append(out, Migration{Version: v, Name: name, SQL: string(b)})
	}
	slices.SortFunc(out, func(a, b Migration) int { return a.Version - b.Version })
	for i, m := range out {
		if m.Version != i+1 {
			return nil, fmt.Errorf("schema %s: migration %d is missing (found %d)", dir, i+1, m.Version)
		}
	}
	return out, nil
}
