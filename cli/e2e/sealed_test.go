package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tetherhq/tether/bus"
	"github.com/tetherhq/tether/model/secret/secrettest"
)

// sealedModel writes a model of host web: a file whose content is
// sensitive (token), one whose content is not (plain), under /srv.
func sealedModel(t *testing.T, token, plain string) string {
	t.Helper()
	src := fmt.Sprintf(`host "web" {
  directory "srv" {
    path = "/srv"
  }
  file "secret" {
    path    = "/srv/secret.conf"
    content = sensitive(%q)
    mode    = "0600"
  }
  file "plain" {
    path    = "/srv/plain"
    content = %q
  }
}
`, "token = "+token+"\n", plain)
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "main.hcl"), []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

// dumpDatabase returns every row of every table of the cluster's schema,
// as PostgreSQL prints it as text (bytea in hex).
func (c *cluster) dumpDatabase() []byte {
	c.t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, c.pg)
	if err != nil {
		c.t.Fatal(err)
	}
	defer conn.Close(ctx)
	rows, err := conn.Query(ctx, `SELECT table_name FROM information_schema.tables WHERE table_schema = current_schema() ORDER BY table_name`)
	if err != nil {
		c.t.Fatal(err)
	}
	tables, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil || len(tables) < 10 {
		c.t.Fatalf("tables of the test schema: %v, %v", tables, err)
	}
	var out []byte
	for _, table := range tables {
		rows, err := conn.Query(ctx, fmt.Sprintf(`SELECT t::text FROM %s t`, pgx.Identifier{table}.Sanitize()))
		if err != nil {
			c.t.Fatal(err)
		}
		lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			c.t.Fatal(err)
		}
		for _, l := range lines {
			out = append(append(append(out, table...), ": "...), l...)
			out = append(out, '\n')
		}
	}
	return out
}

// TestPlantedSecretStaysSealed deploys sensitive values with unique
// markers through a real server (PostgreSQL, RabbitMQ) and agent, and
// counts each marker wherever it passed or rests: every table of the
// database as text, every command the broker routed to the agent (taken
// by a queue of the test's own bound to the command exchange), the
// server's and the agent's logs, the agent's journal files, what the API
// and the CLI show. Only the host's file holds it. It also checks that a
// version with the secret unchanged does not apply it again, and that one
// with the secret changed does.
func TestPlantedSecretStaysSealed(t *testing.T) {
	c := newCluster(t)
	tap := newHostile(t, c)
	tap.tap("web")
	one, two := "PLANTED-e2e-one-"+randHex(12), "PLANTED-e2e-two-"+randHex(12)
	markers := []string{one, two}
	root, state := t.TempDir(), t.TempDir()
	secretID, plainID := fileID("web", "/srv/secret.conf"), fileID("web", "/srv/plain")
	hostFile := filepath.Join(root, "srv", "secret.conf")

	v1 := c.release(sealedModel(t, one, "a\n"))
	ag := c.startAgent("web", agentOpts{stateDir: state, root: root})
	c.converged(v1, 3, 60*time.Second)
	waitFor(t, 10*time.Second, "the secret on the host", fileHolds(hostFile, "token = "+one+"\n"))

	// The secret unchanged, another file changed: only that one applied.
	v2 := c.release(sealedModel(t, one, "b\n"))
	c.converged(v2, 3, 60*time.Second)
	if got := changesPer(c.actions(), v2); got[secretID] != 0 || got[plainID] != 1 {
		t.Fatalf("version %d (the secret unchanged) changed %v; want %s alone", v2, got, plainID)
	}
	// The secret changed: applied.
	v3 := c.release(sealedModel(t, two, "b\n"))
	c.converged(v3, 3, 60*time.Second)
	waitFor(t, 10*time.Second, "the changed secret on the host", fileHolds(hostFile, "token = "+two+"\n"))
	if got := changesPer(c.actions(), v3); got[secretID] != 1 || got[plainID] != 0 {
		t.Fatalf("version %d (the secret changed) changed %v; want %s alone", v3, got, secretID)
	}

	// What people and scripts see.
	var shown []string
	for _, args := range [][]string{
		{"resource", "show", secretID, "-o", "json"},
		{"resource", "show", secretID},
		{"resource", "log", secretID, "-o", "json"},
		{"version", "show", fmt.Sprint(v1), "--resources", "-o", "json"},
		{"version", "show", fmt.Sprint(v3), "--resources", "-o", "json"},
		{"version", "diff", fmt.Sprint(v1), fmt.Sprint(v3), "-o", "json"},
		{"resource", "list", "-o", "json"},
		{"alert", "list", "-o", "json"},
		{"compile", sealedModel(t, one, "a\n"), "-o", "json"},
	} {
		shown = append(shown, c.cli(args...))
	}
	if !strings.Contains(shown[0], `"(sensitive)"`) {
		t.Errorf("resource show -o json: %s; want the content shown as (sensitive)", shown[0])
	}
	withClear := c.cli("compile", sealedModel(t, one, "a\n"), "-o", "json", "--show-sensitive")
	if !strings.Contains(withClear, one) {
		t.Errorf("compile -o json --show-sensitive does not show the value: %s", withClear)
	}

	ag.stop()
	c.srv.stop()
	if n := len(tap.taken(bus.KindDesiredFull, bus.KindDesiredDiff)); n < 3 {
		t.Fatalf("the test's queue took %d desired states, want at least 3: the tap saw nothing", n)
	}
	journal, err := os.ReadDir(filepath.Join(state, env, "web"))
	if err != nil || len(journal) < 4 {
		t.Fatalf("state directory: %v, %v; want the agent's journal", journal, err)
	}
	db := c.dumpDatabase()
	for _, m := range markers {
		if found := secrettest.CountFiles(t, state, m); len(found) > 0 {
			t.Errorf("the agent's journal holds %s: %v", m, found)
		}
		if n := secrettest.Count(db, m); n > 0 {
			t.Errorf("the database holds %s %d times", m, n)
		}
		for _, d := range tap.taken() {
			if n := secrettest.Count(d.Body, m); n > 0 {
				e, _ := bus.Decode(d.Body)
				t.Errorf("a command on the broker (%v) holds %s %d times", e, m, n)
			}
		}
		for _, p := range []*proc{c.srv, ag} {
			if n := secrettest.Count([]byte(p.output()), m); n > 0 {
				t.Errorf("the log of %s holds %s %d times", p.name, m, n)
			}
		}
		for i, out := range shown {
			if n := secrettest.Count([]byte(out), m); n > 0 {
				t.Errorf("output %d holds %s %d times: %s", i, m, n, out)
			}
		}
	}
	if b, err := os.ReadFile(hostFile); err != nil || secrettest.Count(b, two) != 1 {
		t.Fatalf("the host's file: %q, %v; want it to hold the secret: the handler got it in clear", b, err)
	}
}
