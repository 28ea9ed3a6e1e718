package e2e

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tetherhq/tether/model"
	"github.com/tetherhq/tether/server/record"
)

// TestHaltAndPauseAreHandsOff runs a server, PostgreSQL, RabbitMQ and an
// agent under drift_policy=heal: a halted environment and a paused agent
// change nothing on the host (an edit is reported as drift and left as it
// is, a release is not deployed); a resume deploys what was missed and
// heals the edit at once. A change of drift policy reaches the agent
// without a deploy.
func TestHaltAndPauseAreHandsOff(t *testing.T) {
	c := newCluster(t)
	// No deploy-interval retry: after a resume only the resume itself can
	// deploy what the agent missed.
	c.cli("env", "settings", "set", "drift_policy", "heal")
	c.cli("env", "settings", "set", "deploy_interval", "0")
	const n = 2
	// f0 is the same in every version: only a heal puts it back. f1
	// changes with each: only a deploy changes it.
	version := func(v int) func(int) string {
		return func(i int) string {
			if i == 0 {
				return "steady\n"
			}
			return fmt.Sprintf("v%d file %d\n", v, i)
		}
	}
	v1 := c.release(fileModel(t, n, version(1), nil))
	root := t.TempDir()
	agent := c.startAgent("web", agentOpts{stateDir: t.TempDir(), root: root})
	c.converged(v1, n+1, 60*time.Second)

	f0 := filepath.Join(root, "srv", "f0")
	id := fileID("web", "/srv/f0")
	// edited edits f0 and waits until the server recorded the drift; the
	// agent reported it after its verification, which heals in the same
	// step when it heals at all: the file must still hold the edit.
	edited := func(what string, handsOff bool) {
		t.Helper()
		edit := "edited while " + what + "\n"
		// In one step, as an editor saves: no empty file in between.
		if err := os.WriteFile(f0+".new", []byte(edit), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(f0+".new", f0); err != nil {
			t.Fatal(err)
		}
		var alert *record.Alert
		var alerts []record.Alert
		var st record.ResourceStatus
		ok := poll(60*time.Second, func() bool {
			alerts = nil
			c.cliJSON(&alerts, "alert", "list", "--kind", "drift")
			if st = c.statuses()[id]; st.Compliance != model.NonCompliant {
				return false
			}
			for i, a := range alerts {
				if a.ID != nil && a.ID.String() == id && a.Compliance == model.NonCompliant && a.Changes["content"].Current == edit {
					alert = &alerts[i]
					return true
				}
			}
			return false
		})
		if !ok {
			t.Fatalf("while %s: the drift of %s is not recorded: its status %+v, drift alerts %+v", what, id, st, alerts)
		}
		if b, err := os.ReadFile(f0); err != nil || string(b) != edit {
			t.Fatalf("while %s: f0 holds %q (%v), want the edit left alone", what, b, err)
		}
		if handsOff && !strings.Contains(alert.Message, "not healed") {
			t.Fatalf("while %s the drift alert says %q, want that it was not healed", what, alert.Message)
		}
	}
	restored := func(what string) {
		t.Helper()
		waitFor(t, 60*time.Second, "f0 healed after "+what, func() bool {
			b, err := os.ReadFile(f0)
			return err == nil && string(b) == "steady\n"
		})
		waitFor(t, 60*time.Second, "the heal of "+id+" recorded after "+what, func() bool {
			return c.statuses()[id].Compliance == model.Compliant
		})
	}
	pauses := 0
	// told waits until the agent took the pause or resume just sent.
	told := func() {
		t.Helper()
		pauses++
		waitFor(t, 30*time.Second, "the agent to take the pause or resume", func() bool {
			return loggedTimes(agent, "the server paused or resumed this agent") >= pauses
		})
	}

	// Halt: hands off; shown in agent list.
	c.cli("env", "halt")
	told()
	if a := c.agent("web"); !a.Halted || a.Paused {
		t.Fatalf("agent list -o json while halted: halted=%v paused=%v, want halted, not paused by an operator", a.Halted, a.Paused)
	}
	if out := c.cli("agent", "list"); !strings.Contains(out, "halted") {
		t.Fatalf("agent list while halted does not say so:\n%s", out)
	}
	edited("halted", true)
	// A release while halted is not deployed. (Released after the edit
	// was recorded: a drift report of the generation before a release
	// that reaches the agent meanwhile does not set the compliance of the
	// resource's status in the new version.)
	v2 := c.release(fileModel(t, n, version(2), nil))
	stillEdited(t, f0, "halted")
	if b, _ := os.ReadFile(filepath.Join(root, "srv", "f1")); string(b) != version(1)(1) {
		t.Fatalf("while halted f1 holds %q, want version 1's content: a release deployed", b)
	}
	// An operator's resume of the agent does not end the halt.
	c.cli("agent", "resume", "web")
	c.cli("env", "resume")
	told()
	if a := c.agent("web"); a.Halted || a.Paused {
		t.Fatalf("agent list -o json after the resume: halted=%v paused=%v", a.Halted, a.Paused)
	}
	c.converged(v2, n+1, 60*time.Second)
	restored("env resume")
	checkFiles(t, root, n, version(2))

	// Pause the agent: the same.
	c.cli("agent", "pause", "web")
	told()
	if a := c.agent("web"); !a.Paused {
		t.Fatal("agent list -o json: the paused agent is not shown paused")
	}
	edited("paused", true)
	v3 := c.release(fileModel(t, n, version(3), nil))
	stillEdited(t, f0, "paused")
	c.cli("agent", "resume", "web")
	told()
	c.converged(v3, n+1, 60*time.Second)
	restored("agent resume")
	checkFiles(t, root, n, version(3))

	// The drift policy reaches the agent without a deploy.
	policies := 0
	setPolicy := func(p model.DriftPolicy) {
		t.Helper()
		c.cli("env", "settings", "set", "drift_policy", string(p))
		policies++
		waitFor(t, 30*time.Second, "the agent to take drift_policy="+string(p), func() bool {
			return loggedTimes(agent, "the server changed this agent's settings") >= policies
		})
	}
	setPolicy(model.DriftAlert)
	edited("drift_policy=alert", false)
	// Back to heal: the drift already seen is healed, still without a deploy.
	setPolicy(model.DriftHeal)
	restored("drift_policy=heal")
}

// loggedTimes counts the JSON log lines of p whose message holds msg.
func loggedTimes(p *proc, msg string) int {
	sc := bufio.NewScanner(strings.NewReader(p.output()))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	n := 0
	for sc.Scan() {
		var line struct {
			Message string `json:"message"`
		}
		if json.Unmarshal(sc.Bytes(), &line) == nil && strings.Contains(line.Message, msg) {
			n++
		}
	}
	return n
}

// stillEdited asserts that path holds the edit made while what.
func stillEdited(t *testing.T, path, what string) {
	t.Helper()
	if b, err := os.ReadFile(path); err != nil || string(b) != "edited while "+what+"\n" {
		t.Fatalf("while %s: %s holds %q (%v), want the edit left alone", what, path, b, err)
	}
}
