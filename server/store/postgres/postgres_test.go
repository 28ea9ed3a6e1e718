package postgres_test

import (
	"context"
	"crypto/md5"
	"encoding/hex"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tetherhq/tether/model"
	"github.com/tetherhq/tether/schema"
	"github.com/tetherhq/tether/server/record"
	"github.com/tetherhq/tether/server/store"
	"github.com/tetherhq/tether/server/store/postgres"
	"github.com/tetherhq/tether/server/store/postgres/pgtest"
	"github.com/tetherhq/tether/server/store/storetest"
)

func TestContract(t *testing.T) {
	storetest.Run(t, func(t *testing.T) store.Store { return pgtest.Open(t) })
}

// Servers starting at once on an empty database migrate it exactly once.
func TestConcurrentMigrations(t *testing.T) {
	u := pgtest.Fresh(t)
	ctx := context.Background()
	var wg sync.WaitGroup
	stores := make([]*postgres.Store, 4)
	errs := make([]error, 4)
	for i := range stores {
		wg.Add(1)
		go func() {
			defer wg.Done()
			stores[i], errs[i] = postgres.Open(ctx, postgres.Config{URL: u})
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("server %d: %v", i, err)
		}
		defer stores[i].Close()
	}
	want, _ := schema.Postgres()
	for i, s := range stores {
		v, err := s.SchemaVersion(ctx)
		if last := want[len(want)-1].Version; err != nil || v != last {
			t.Fatalf("server %d sees schema version %d (%v), want %d", i, v, err, last)
		}
	}
	// Reopening applies nothing and keeps data.
	if err := stores[0].CreateEnv(ctx, record.Environment{Name: "prod", Settings: record.DefaultEnvSettings()}); err != nil {
		t.Fatal(err)
	}
	again := openOn(t, u)
	if _, err := again.GetEnv(ctx, "prod"); err != nil {
		t.Fatalf("environment lost across reopen: %v", err)
	}
}

// A second store on the same schema cannot lead what the first leads.
func TestLeaseAcrossProcesses(t *testing.T) {
	u := pgtest.Fresh(t)
	ctx := context.Background()
	a := openOn(t, u)
	b := openOn(t, u)
	la, ok, err := a.Lead(ctx, "scheduler/prod")
	if err != nil || !ok {
		t.Fatalf("a leads: %v %v", ok, err)
	}
	if _, ok, err := b.Lead(ctx, "scheduler/prod"); err != nil || ok {
		t.Fatalf("b leads while a does: ok %v, err %v", ok, err)
	}
	la.Release()
	lb, ok, err := b.Lead(ctx, "scheduler/prod")
	if err != nil || !ok {
		t.Fatalf("b after a released: %v %v", ok, err)
	}
	lb.Release()
}

// openOn opens a store on the database and schema of u, closed when the
// test ends.
func openOn(t *testing.T, u string) *postgres.Store {
	t.Helper()
	s, err := postgres.Open(context.Background(), postgres.Config{URL: u})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func TestBadURL(t *testing.T) {
	ctx := context.Background()
	if _, err := postgres.Open(ctx, postgres.Config{}); err == nil {
		t.Fatal("no URL: want an error")
	}
	_, err := postgres.Open(ctx, postgres.Config{URL: "postgres://nobody@127.0.0.1:1/x?connect_timeout=1"})
	if !errors.Is(err, model.ErrUnavailable) {
		t.Fatalf("closed port: got %v, want ErrUnavailable", err)
	}
}

// TestUpgradeFromEveryStep: a database an earlier tether left at any step
// opens, upgrades and keeps its data.
func TestUpgradeFromEveryStep(t *testing.T) {
	storetest.Upgrade(t, schema.Postgres, func(t *testing.T) func(storetest.Migrations) (storetest.Migrated, error) {
		cfg := postgres.Config{URL: pgtest.Fresh(t)}
		return func(ms storetest.Migrations) (storetest.Migrated, error) {
			return postgres.OpenWith(context.Background(), cfg, ms)
		}
	})
}

// A change of an agent's record by any process is told to every store
// listening on the schema; the marks its events leave are not.
func TestListenAgents(t *testing.T) {
	u := pgtest.Fresh(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	writer := openOn(t, u)
	listener := openOn(t, u)
	if err := writer.CreateEnv(ctx, record.Environment{Name: "prod", Settings: record.DefaultEnvSettings()}); err != nil {
		t.Fatal(err)
	}
	now := time.Now().UTC().Truncate(time.Microsecond)
	for _, name := range []string{"quiet", "web"} {
		if err := writer.UpsertAgent(ctx, record.Agent{Env: "prod", Name: name, State: record.AgentAccepted,
			PublicKey: []byte("0123456789abcdef0123456789abcdef"), FirstSeen: now, LastSeen: now}); err != nil {
			t.Fatal(err)
		}
	}
	listening := make(chan bool, 4)
	changed := make(chan string, 16)
	done := make(chan error, 1)
	go func() {
		done <- listener.ListenAgents(ctx, func(on bool) { listening <- on }, func(env, name string) { changed <- env + "/" + name })
	}()
	select {
	case on := <-listening:
		if !on {
			t.Fatal("told it stopped listening before it listened")
		}
	case <-time.After(30 * time.Second):
		t.Fatal("not listening after 30 s")
	}
	next := func(what string) string {
		t.Helper()
		select {
		case who := <-changed:
			return who
		case <-time.After(30 * time.Second):
			t.Fatalf("%s: no change told in 30 s", what)
			return ""
		}
	}
	// Marks of activity first, on "quiet": not told. Then a change of
	// "web": the first told must be it.
	if err := writer.MarkAgentsSeen(ctx, []store.AgentSeen{{Env: "prod", Agent: "quiet", Seq: 9, At: now.Add(time.Second)}}); err != nil {
		t.Fatal(err)
	}
	if _, err := writer.SetAgentGeneration(ctx, "prod", "quiet", 3); err != nil {
		t.Fatal(err)
	}
	web, err := writer.GetAgent(ctx, "prod", "web")
	if err != nil {
		t.Fatal(err)
	}
	web.State = record.AgentRejected
	if err := writer.UpsertAgent(ctx, web); err != nil {
		t.Fatal(err)
	}
	if who := next("reject"); who != "prod/web" {
		t.Fatalf("first change told: %q, want prod/web (marks of activity are not told)", who)
	}
	quiet, err := writer.GetAgent(ctx, "prod", "quiet")
	if err != nil {
		t.Fatal(err)
	}
	quiet.Labels = map[string]string{"role": "db"}
	if err := writer.UpsertAgent(ctx, quiet); err != nil {
		t.Fatal(err)
	}
	if who := next("labels"); who != "prod/quiet" {
		t.Fatalf("told %q, want prod/quiet (its labels changed)", who)
	}
	if err := writer.DeleteAgent(ctx, "prod", "web"); err != nil {
		t.Fatal(err)
	}
	if who := next("delete"); who != "prod/web" {
		t.Fatalf("told %q, want prod/web (deleted)", who)
	}
	// Its connection cut: it says it no longer listens, reconnects, and
	// says it listens again once a notice to itself came back.
	// Its backend is the one whose checks (notices to itself, every
	// postgres.ListenCheck) come on the schema's channel.
	admin, err := pgx.Connect(ctx, u)
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close(context.Background())
	var schema string
	if err := admin.QueryRow(ctx, `SELECT current_schema()`).Scan(&schema); err != nil {
		t.Fatal(err)
	}
	sum := md5.Sum([]byte(schema))
	if _, err := admin.Exec(ctx, `LISTEN `+pgx.Identifier{"tether_agents_" + hex.EncodeToString(sum[:])}.Sanitize()); err != nil {
		t.Fatal(err)
	}
	wctx, stop := context.WithTimeout(ctx, 3*postgres.ListenCheck)
	defer stop()
	var pid uint32
	for pid == 0 {
		n, err := admin.WaitForNotification(wctx)
		if err != nil {
			t.Fatalf("no check of the listener's on the channel: %v", err)
		}
		if strings.HasPrefix(n.Payload, "ping ") {
			pid = n.PID
		}
	}
	if _, err := admin.Exec(ctx, `SELECT pg_terminate_backend($1)`, int64(pid)); err != nil {
		t.Fatal(err)
	}
	for _, want := range []bool{false, true} {
		select {
		case on := <-listening:
			if on != want {
				t.Fatalf("after its connection was cut: listening %v, want %v", on, want)
			}
		case <-time.After(30 * time.Second):
			t.Fatalf("after its connection was cut: not told listening %v in 30 s", want)
		}
	}
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("ListenAgents returned %v, want context.Canceled", err)
	}
}

// The trigger that tells servers of changed agents compares every column
// of the agents table but the marks of activity: a column added later
// must be added to it (a new migration replacing the trigger).
func TestAgentsTriggerCoversEveryColumn(t *testing.T) {
	u := pgtest.Fresh(t)
	ctx := context.Background()
	openOn(t, u) // migrates the schema
	conn, err := pgx.Connect(ctx, u)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var def string
	if err := conn.QueryRow(ctx, `SELECT pg_get_triggerdef(t.oid) FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid
		JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = current_schema() AND t.tgname = 'agents_changed'`).Scan(&def); err != nil {
		t.Fatal(err)
	}
	rows, err := conn.Query(ctx, `SELECT column_name FROM information_schema.columns WHERE table_schema = current_schema() AND table_name = 'agents'`)
	if err != nil {
		t.Fatal(err)
	}
	columns, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	marks := map[string]bool{"env": true, "name": true, "last_seen": true, "online": true, "last_seq": true, "generation": true, "facts_seq": true}
	for _, c := range columns {
		if in := strings.Contains(def, "old."+c+" IS DISTINCT FROM new."+c+")"); in == marks[c] {
			t.Errorf("column %s: compared by the trigger %v, want %v:\n%s", c, in, !marks[c], def)
		}
	}
}
