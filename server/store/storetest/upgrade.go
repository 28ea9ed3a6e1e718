package storetest

import (
	"context"
	"fmt"
	"testing"

	"github.com/tetherhq/tether/schema"
	"github.com/tetherhq/tether/server/record"
	"github.com/tetherhq/tether/server/store"
)

// Migrated is a store that says which migration it reached.
type Migrated interface {
	store.Store
	SchemaVersion(ctx context.Context) (int, error)
}

// Migrations are a store's migrations, as schema gives them.
type Migrations = func() ([]schema.Migration, error)

// Upgrade checks that a database an earlier tether left at any of a
// store's steps (all returns them) opens, reaches the newest step and keeps
// its data. fresh makes a new, empty database and returns how to open it
// with some of the migrations.
func Upgrade(t *testing.T, all Migrations, fresh func(t *testing.T) (open func(Migrations) (Migrated, error))) {
	ms, err := all()
	if err != nil {
		t.Fatal(err)
	}
	steps := len(ms)
	openAt := func(open func(Migrations) (Migrated, error), n int) (Migrated, error) {
		return open(func() ([]schema.Migration, error) { return ms[:n], nil })
	}
	for n := 1; n <= steps; n++ {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			open := fresh(t)
			old, err := openAt(open, n)
			if err != nil {
				t.Fatalf("migrate to step %d: %v", n, err)
			}
			settings := record.DefaultEnvSettings()
			settings.VersionsToKeep = 3
			err = old.CreateEnv(ctx, record.Environment{Name: "old", Settings: settings})
			old.Close()
			if err != nil {
				t.Fatal(err)
			}
			s, err := openAt(open, steps)
			if err != nil {
				t.Fatalf("open a database at step %d: %v", n, err)
			}
			defer s.Close()
			if v, err := s.SchemaVersion(ctx); err != nil || v != ms[steps-1].Version {
				t.Fatalf("schema version %d (%v), want %d", v, err, ms[steps-1].Version)
			}
			if env, err := s.GetEnv(ctx, "old"); err != nil || env.Settings != settings || env.Org != record.DefaultOrg {
				t.Fatalf("environment from step %d: %+v, %v; want its settings kept, in the default organization", n, env, err)
			}
		})
	}
}
