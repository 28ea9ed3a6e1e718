package storetest

import (
	"context"
	"fmt"
	"reflect"
	"testing"

	"github.com/tetherhq/tether/model"
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
			if env, err := s.GetEnv(ctx, "old"); err != nil || !reflect.DeepEqual(env.Settings, settings) || env.Org != record.DefaultOrg {
				t.Fatalf("environment from step %d: %+v, %v; want its settings kept, in the default organization", n, env, err)
			}
			if _, err := s.PutPlatform(ctx, libvirtPlatform("old", "p1")); err != nil {
				t.Fatalf("a platform in the environment from step %d: %v", n, err)
			}
		})
	}
	t.Run("compile recoveries", func(t *testing.T) { upgradeCompileRecoveries(t, ms, fresh(t)) })
}

// upgradeCompileRecoveries: step 25 makes the compile.failed alerts that
// said a compile succeeded again compile.recovered alerts, and gives the
// webhooks that asked for compile.alert events compile.recovered ones
// too; a compile reported before it reads back.
func upgradeCompileRecoveries(t *testing.T, ms []schema.Migration, open func(Migrations) (Migrated, error)) {
	before := -1
	for i, m := range ms {
		if m.Version == 25 {
			before = i
		}
	}
	if before < 0 {
		t.Fatal("no step 25")
	}
	old, err := open(func() ([]schema.Migration, error) { return ms[:before], nil })
	if err != nil {
		t.Fatal(err)
	}
	err = old.CreateEnv(ctx, record.Environment{Name: "prod", Settings: record.DefaultEnvSettings()})
	if err == nil {
		err = old.RecordAlerts(ctx, []record.Alert{
			{Env: "prod", Kind: record.AlertCompileFailed, Compliance: model.NonCompliant, Message: "compile 1 failed"},
			{Env: "prod", Kind: record.AlertCompileFailed, Compliance: model.Compliant, Message: "compile 2 succeeded"},
		})
	}
	var hooks []record.Webhook
	for i, kinds := range [][]string{{"compile.alert"}, {"compliance.drift", "compile.alert", "security.alert"}, {"compliance.drift"}, {"*"}} {
		if err != nil {
			break
		}
		var w record.Webhook
		w, err = old.CreateWebhook(ctx, record.Webhook{Env: "prod", Name: fmt.Sprint("hook-", i), URL: "https://example.com/hook", Secret: "0123456789abcdef", Kinds: kinds, Enabled: true})
		hooks = append(hooks, w)
	}
	var c record.Compile
	if err == nil {
		c, err = old.StartCompile(ctx, record.Compile{Env: "prod", Triggers: record.Triggers{{Kind: record.TriggerOperator, Count: 1}}})
	}
	old.Close()
	if err != nil {
		t.Fatal(err)
	}
	s, err := open(func() ([]schema.Migration, error) { return ms, nil })
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	al, err := s.Alerts(ctx, record.AlertFilter{Env: "prod"})
	if err != nil || len(al) != 2 || al[0].Kind != record.AlertCompileRecovered || al[1].Kind != record.AlertCompileFailed {
		t.Fatalf("compile alerts after the upgrade: %+v (%v), want the recovery compile.recovered, the failure compile.failed", al, err)
	}
	want := [][]string{{"compile.alert", "compile.recovered"}, {"compliance.drift", "compile.alert", "security.alert", "compile.recovered"}, {"compliance.drift"}, {"*"}}
	for i, w := range hooks {
		got, err := s.GetWebhook(ctx, "prod", w.ID)
		if err != nil || fmt.Sprint(got.Kinds) != fmt.Sprint(want[i]) {
			t.Errorf("webhook %s after the upgrade: kinds %v (%v), want %v", w.Name, got.Kinds, err, want[i])
		}
	}
	if got, err := s.GetCompile(ctx, "prod", c.ID); err != nil || got.Outcome != record.CompileRunning || got.Inputs != "" || got.SameAs != "" {
		t.Fatalf("a compile reported before the upgrade: %+v (%v)", got, err)
	}
}
