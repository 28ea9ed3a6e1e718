package e2e

import (
	"fmt"
	"net/url"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/tetherhq/tether/model/testenv"
)

// TestBackupAndRestore follows docs/install.md: the server's database is
// dumped with pg_dump while an enrolled agent runs, the server stopped,
// its schema dropped and restored with pg_restore, the server started
// again with the same key file; the agent, never restarted nor enrolled
// again, deploys the next release, under the same key.
func TestBackupAndRestore(t *testing.T) {
	for _, tool := range []string{"pg_dump", "pg_restore", "psql"} {
		_, err := exec.LookPath(tool)
		testenv.Need(t, err == nil, tool+" not found: the backup test runs PostgreSQL's own tools")
	}
	c := newCluster(t)
	u, err := url.Parse(c.pg)
	if err != nil {
		t.Fatal(err)
	}
	schema := u.Query().Get("search_path")
	if schema == "" {
		t.Fatalf("the cluster's database URL %s names no schema", c.pg)
	}
	// libpq takes no search_path in a URL: the database alone.
	base := *u
	base.RawQuery = "sslmode=disable"
	db := base.String()

	ag := c.startAgent("web", agentOpts{stateDir: t.TempDir(), root: t.TempDir()})
	defer ag.stop()
	v1 := c.release(fileModel(t, 3, func(i int) string { return fmt.Sprintf("one %d\n", i) }, nil))
	c.converged(v1, 4, 60*time.Second)
	before := c.agent("web")

	dump := filepath.Join(t.TempDir(), "tether.dump")
	run := func(name string, args ...string) {
		t.Helper()
		if out, err := exec.Command(name, args...).CombinedOutput(); err != nil {
			t.Fatalf("%s %v: %v\n%s", name, args, err, out)
		}
	}
	run("pg_dump", "-Fc", "-n", schema, "-d", db, "-f", dump)
	c.srv.stop()
	run("psql", "-d", db, "-v", "ON_ERROR_STOP=1", "-c", fmt.Sprintf("DROP SCHEMA %q CASCADE", schema))
	if out, err := exec.Command("psql", "-d", db, "-Atc", fmt.Sprintf("SELECT count(*) FROM %q.agents", schema)).CombinedOutput(); err == nil {
		t.Fatalf("the agents table still answers after DROP SCHEMA: %s", out)
	}
	run("pg_restore", "-d", db, "--no-owner", dump)
	c.startServer()

	v2 := c.release(fileModel(t, 3, func(i int) string { return fmt.Sprintf("two %d\n", i) }, nil))
	c.converged(v2, 4, 60*time.Second)
	after := c.agent("web")
	if after.Key != before.Key || after.State != before.State {
		t.Fatalf("after the restore: key %s, %s; want key %s, %s (no new enrollment)", after.Key, after.State, before.Key, before.State)
	}
	if ag.exited() {
		t.Fatalf("the agent exited: %s", ag.output())
	}
}
