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

// Migration is one schema change. Versions are unique and start at 1; a
// number may be missing, held by a change not merged yet: the stores apply
// every step a database has not applied, whenever it arrives, so a step
// numbered below one already applied still runs. Steps that may land in
// either order must not depend on each other.
type Migration struct {
	Version int
	Name    string
	SQL     string
}

// SQLite returns the migrations of the embedded (SQLite) store, in order.
func SQLite() ([]Migration, error) { return load("sqlite") }

// Postgres returns the migrations of the server (PostgreSQL) store, in order.
func Postgres() ([]Migration, error) { return load("postgres") }

// load reads dir/NNNN_name.sql files and checks their numbers are unique
// and positive.
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
		switch {
		case m.Version < 1:
			return nil, fmt.Errorf("schema %s: migration %04d_%s: numbers start at 1", dir, m.Version, m.Name)
		case i > 0 && out[i-1].Version == m.Version:
			return nil, fmt.Errorf("schema %s: migrations %s and %s have one number: renumber the newer one", dir, out[i-1].Name, m.Name)
		}
	}
	return out, nil
}
