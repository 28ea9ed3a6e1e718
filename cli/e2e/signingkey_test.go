package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tetherhq/tether/model"
	"github.com/tetherhq/tether/server/record"
)

// pinnedServerKeys returns the server keys an agent's identity file
// holds: the one it pinned, the next and the previous.
func pinnedServerKeys(t *testing.T, state, name string) (pinned, next, previous string) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(state, env, name, "identity"))
	if err != nil {
		t.Fatal(err)
	}
	var id struct {
		ServerKey         []byte `json:"server_key"`
		NextServerKey     []byte `json:"next_server_key"`
		PreviousServerKey []byte `json:"previous_server_key"`
	}
	if err := json.Unmarshal(b, &id); err != nil {
		t.Fatal(err)
	}
	fp := func(k []byte) string {
		if len(k) == 0 {
			return ""
		}
		return model.Fingerprint(k)
	}
	return fp(id.ServerKey), fp(id.NextServerKey), fp(id.PreviousServerKey)
}

// TestServerSigningKeyRotation rolls the server's signing key over with
// `tether server signing-key` while agents run: alpha takes the next key
// as it is announced, and alone after the switch (across a restart, its
// enrollment token still naming the old key); beta, stopped before the
// rollover began, catches up when it starts again after the switch, while
// the old key is kept; both keep deploying; the old key is retired.
func TestServerSigningKeyRotation(t *testing.T) {
	c := newCluster(t)
	alphaState, betaState := t.TempDir(), t.TempDir()
	alphaOpts := agentOpts{stateDir: alphaState, root: t.TempDir()}
	betaOpts := agentOpts{stateDir: betaState, root: t.TempDir()}
	alpha := c.startAgent("alpha", alphaOpts)
	beta := c.startAgent("beta", betaOpts)
	model := func(v string) string {
		block := fmt.Sprintf("  file \"a\" {\n    path = \"/srv/a\"\n    content = %q\n  }\n", v)
		return fileModel(t, 0, nil, map[string]string{"alpha": block, "beta": block})
	}
	deployed := func(name string, v int64) func() bool {
		return func() bool {
			st := c.statuses()[fmt.Sprintf("file[%s,path=/srv/a]", name)]
			return st.Version == v && st.State == "deployed"
		}
	}
	v := c.release(model("one"))
	waitFor(t, 90*time.Second, "both agents to deploy version 1", func() bool { return deployed("alpha", v)() && deployed("beta", v)() })
	old := c.serverKey()
	beta.stop() // away through the announcement and the switch

	began := time.Now()
	st := c.signingKeyStatus()
	if st.Phase != record.SigningKeySteady || st.Signing.Fingerprint != old || st.Agents != 2 {
		t.Fatalf("status before the rollover: %+v; want steady, signing with %s, 2 agents", st, old)
	}
	st = record.SigningKeyStatus{}
	c.cliJSON(&st, "server", "signing-key", "new")
	if st.Phase != record.SigningKeyAnnounced || st.Next == nil || st.Signing.Fingerprint != old {
		t.Fatalf("signing-key new: %+v; want the next key announced, the old one signing", st)
	}
	next := st.Next.Fingerprint
	waitFor(t, 60*time.Second, "alpha to take the next key", func() bool {
		st = c.signingKeyStatus()
		return st.Ready == 1 && st.WaitingCount == 1 && st.Waiting[0].Agent == "beta"
	})
	if pinned, n, _ := pinnedServerKeys(t, alphaState, "alpha"); pinned != old || n != next {
		t.Fatalf("alpha's identity pins %s, next %s; want %s and %s", pinned, n, old, next)
	}
	if show := c.cli("agent", "show", "alpha"); !strings.Contains(show, next) {
		t.Errorf("tether agent show alpha does not name the next key it takes:\n%s", show)
	}

	// beta has not taken it: the switch waits for --force.
	code, out, errOut := c.run("server", "signing-key", "switch")
	if code == 0 || !strings.Contains(out+errOut, "prod/beta") || !strings.Contains(out+errOut, "--force") {
		t.Fatalf("signing-key switch with beta away: exit %d, %s%s; want it refused, naming beta and --force", code, out, errOut)
	}
	out = c.cli("server", "signing-key", "switch", "--force")
	if !strings.Contains(out, "every server signs with "+next) {
		t.Fatalf("signing-key switch --force: %q", out)
	}
	if got := c.serverKey(); got != next {
		t.Fatalf("tether server key after the switch: %s, want %s", got, next)
	}
	v = c.release(model("two"))
	waitFor(t, 90*time.Second, "alpha to deploy version 2 after the switch", deployed("alpha", v))
	waitFor(t, 30*time.Second, "alpha to take the new key alone", func() bool {
		pinned, n, prev := pinnedServerKeys(t, alphaState, "alpha")
		return pinned == next && n == "" && prev == old
	})

	// alpha restarted, its token still naming the old key, goes on.
	alpha.stop()
	alpha = c.startAgent("alpha", alphaOpts)
	v = c.release(model("three"))
	waitFor(t, 90*time.Second, "alpha to deploy version 3 after a restart", deployed("alpha", v))
	if !logged(alpha, "the configured server key") {
		t.Errorf("alpha, restarted with a token naming the old key, did not say it trusts its journal's key:\n%s", alpha.output())
	}

	// beta comes back: it gets the rollover, signed by the old key, then
	// the new key alone, and deploys what it missed.
	beta = c.startAgent("beta", betaOpts)
	waitFor(t, 90*time.Second, "beta to catch up with version 3", deployed("beta", v))
	if !logged(beta, "the only server key this agent takes") {
		t.Errorf("beta did not say it takes the new key alone:\n%s", beta.output())
	}
	if pinned, n, prev := pinnedServerKeys(t, betaState, "beta"); pinned != next || n != "" || prev != old {
		t.Fatalf("beta's identity pins %s, next %s, previous %s; want %s alone, %s previous", pinned, n, prev, next, old)
	}
	waitFor(t, 30*time.Second, "every agent to take the new key", func() bool {
		st = c.signingKeyStatus()
		return st.Phase == record.SigningKeySwitched && st.Ready == 2
	})

	out = c.cli("server", "signing-key", "retire")
	if !strings.Contains(out, "old signing key retired") || !strings.Contains(out, "tether agent token create") {
		t.Fatalf("signing-key retire: %q", out)
	}
	st = c.signingKeyStatus()
	if st.Phase != record.SigningKeySteady || st.Signing.Fingerprint != next || st.Previous != nil {
		t.Fatalf("status after retire: %+v; want the new key alone", st)
	}
	v = c.release(model("four"))
	waitFor(t, 90*time.Second, "both agents to deploy version 4 after the retirement", func() bool { return deployed("alpha", v)() && deployed("beta", v)() })
	for _, al := range c.securityAlerts() {
		if al.At.After(began) {
			t.Errorf("security alert during the rollover: %s: %s", al.Agent, al.Message)
		}
	}
	audit, err := c.store.Audit(context.Background(), record.AuditFilter{})
	if err != nil {
		t.Fatal(err)
	}
	var steps []string
	for _, e := range audit {
		if strings.HasPrefix(e.Action, "server.signing-key.") {
			steps = append(steps, e.Action)
		}
	}
	if want := []string{"server.signing-key.retire", "server.signing-key.switch", "server.signing-key.new"}; !slices.Equal(steps, want) {
		t.Errorf("audit log of the rollover %v, want %v", steps, want)
	}
}

// serverKey is the fingerprint `tether server key` prints.
func (c *cluster) serverKey() string {
	c.t.Helper()
	var info struct {
		Fingerprint string `json:"fingerprint"`
	}
	c.cliJSON(&info, "server", "key")
	return info.Fingerprint
}

// signingKeyStatus is what `tether server signing-key status -o json`
// says.
func (c *cluster) signingKeyStatus() record.SigningKeyStatus {
	c.t.Helper()
	var st record.SigningKeyStatus
	c.cliJSON(&st, "server", "signing-key", "status")
	return st
}
