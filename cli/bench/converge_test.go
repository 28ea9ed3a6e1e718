package bench

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tetherhq/tether/bus/amqp/amqptest"
	"github.com/tetherhq/tether/server/store/postgres/pgtest"
)

// The converge scenario at a tiny size, with token enrollment: every agent
// enrolled with the token and converged, and the run measured the schema
// and kept one lock for all the journals. (--restart-broker restarts the
// machine's broker, so it is not run here.)
func TestConvergeScenarioToken(t *testing.T) {
	pg := pgtest.URL(t)
	amqptest.Open(t, amqptest.Config(t)).Close() // skips, loudly, without a broker
	tether := filepath.Join(t.TempDir(), "tether")
	build := exec.Command("go", "build", "-o", tether, "github.com/tetherhq/tether")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build tether: %v: %s", err, out)
	}
	dir := filepath.Join(t.TempDir(), "agents")
	res, err := RunConverge(context.Background(), ConvergeOptions{Tether: tether, Postgres: pg, AMQP: amqptest.URL(), Dir: dir,
		Agents: 6, Resources: 3, PerConnection: 4, Token: true, Timeout: 2 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if res.Enrollment != "token" || !strings.Contains(res.Command, " --token") {
		t.Errorf("enrollment %q, command %q: want token and --token", res.Enrollment, res.Command)
	}
	if res.Agents != 6 || res.ConvergeSeconds <= 0 || res.ResultsPerSecond <= 0 {
		t.Errorf("got %+v: want 6 agents converged", res)
	}
	if res.RequestSeconds <= 0 || res.RequestSeconds > res.ConvergeSeconds || res.RecordedPerSecond < 0 {
		t.Errorf("release request %.3f s, recorded %.1f/s, converge %.3f s: want the request within the converge, a rate not negative",
			res.RequestSeconds, res.RecordedPerSecond, res.ConvergeSeconds)
	}
	if res.PostgresMiB <= 0 {
		t.Errorf("PostgreSQL schema size %.3f MiB: want more than 0", res.PostgresMiB)
	}
	if res.OpenFiles <= 0 {
		t.Errorf("open files %d: want the count", res.OpenFiles)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("the agents' directory after the run: %v, want removed", err)
	}
}
