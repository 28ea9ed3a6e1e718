package e2e

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net"
	"net/http"
	"net/http/cgi"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tetherhq/tether/model"
	"github.com/tetherhq/tether/model/gitfetch/gittest"
	"github.com/tetherhq/tether/model/testenv"
	"github.com/tetherhq/tether/server/record"
)

// gitRepo is a repository the test commits to, reached as file:// or,
// through git's own http-backend, over HTTP.
type gitRepo struct{ *gittest.Repo }

func newGitRepo(t *testing.T) *gitRepo { return &gitRepo{gittest.New(t)} }

// commit writes main.hcl and commits it; it returns the commit id.
func (g *gitRepo) commit(model string) string { return g.Commit(map[string]string{"main.hcl": model}) }

// serveHTTP serves the repository over HTTP with git http-backend (git's
// own smart HTTP server, run as CGI) and returns its clone URL.
func (g *gitRepo) serveHTTP() string {
	g.T().Helper()
	gitBin, err := exec.LookPath("git")
	testenv.Need(g.T(), err == nil, "git is not installed: the HTTP git server is git http-backend (.ci/run installs it)")
	h := &cgi.Handler{Path: gitBin, Args: []string{"http-backend"},
		Env: []string{"GIT_PROJECT_ROOT=" + filepath.Dir(g.Dir), "GIT_HTTP_EXPORT_ALL=1"}}
	ts := httptest.NewServer(h)
	g.T().Cleanup(ts.Close)
	return ts.URL + "/" + filepath.Base(g.Dir)
}

// fleetModel is examples/fleet, its page saying page instead of "served
// by": every role=web agent serves the page; the load balancer lists the
// web agents with the port each reports as a custom fact (app.port), and
// waits for it.
func fleetModel(t *testing.T, page string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "examples", "fleet", "main.hcl"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), `"served by `) {
		t.Fatal("examples/fleet/main.hcl no longer says \"served by\"")
	}
	return strings.Replace(string(b), `"served by `, `"`+page+` `, 1)
}

// brokenModel does not compile: an unknown reference on line 4.
const brokenModel = `hostgroup "web" {
  match = host.labels.role == "web"
  file "/srv/index.html" {
    content = nope.nothing
  }
}
`

func fileHolds(path, want string) func() bool {
	return func() bool {
		b, err := os.ReadFile(path)
		return err == nil && string(b) == want
	}
}

// compiles are the environment's compile reports, newest first.
func (c *cluster) compiles() []record.Compile {
	c.t.Helper()
	var cs []record.Compile
	c.cliJSON(&cs, "compiles", "list", "--limit", "100")
	return cs
}

// compiled waits for a compile of revision rev that ended, and returns it.
func (c *cluster) compiled(rev string, within time.Duration) record.Compile {
	c.t.Helper()
	var got record.Compile
	waitFor(c.t, within, "a compile of "+rev, func() bool {
		for _, x := range c.compiles() {
			if x.Revision == rev && x.Outcome != record.CompileRunning {
				got = x
				return true
			}
		}
		return false
	})
	return got
}

// push sends a GitHub push webhook for ref at after, signed with secret,
// and returns the HTTP status.
func (c *cluster) push(secret, ref, after string) int {
	c.t.Helper()
	body := fmt.Appendf(nil, `{"ref": %q, "after": %q, "repository": {"full_name": "acme/fleet", "default_branch": "main"}}`, ref, after)
	m := hmac.New(sha256.New, []byte(secret))
	m.Write(body)
	req, err := http.NewRequest("POST", "http://"+c.listen+"/api/v1/envs/"+env+"/compile/hook", bytes.NewReader(body))
	if err != nil {
		c.t.Fatal(err)
	}
	req.Header.Set("X-GitHub-Event", "push")
	req.Header.Set("X-GitHub-Delivery", randHex(16))
	req.Header.Set("X-Hub-Signature-256", "sha256="+hex.EncodeToString(m.Sum(nil)))
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		c.t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

func (c *cluster) compileAlerts() []record.Alert {
	c.t.Helper()
	var al []record.Alert
	c.cliJSON(&al, "alert", "list")
	var out []record.Alert
	for _, a := range al {
		if a.Kind == record.AlertCompileFailed || a.Kind == record.AlertCompileRecovered {
			out = append(out, a)
		}
	}
	return out
}

// TestFromGitToFleet is the autonomous server end to end, with real
// processes: a model in git, agents that enroll with a token and are
// configured by their labels with no operator command, a fact that arrives
// and defines what waited for it, a push webhook (and a forged one), a
// broken commit that keeps the last good version deployed, and the same
// repository over HTTP.
func TestFromGitToFleet(t *testing.T) {
	c := newCluster(t)
	repo := newGitRepo(t)
	rev1 := repo.commit(fleetModel(t, "v1 served by"))
	var src record.SourceView
	c.cliJSON(&src, "env", "source", "set", repo.URL(), "--ref", "main")
	if src.WebhookSecret == "" || src.HasToken {
		t.Fatalf("source set answered %+v", src)
	}
	if first := c.compiled(rev1, 60*time.Second); first.Outcome != record.CompileReleased {
		t.Fatalf("first compile: %+v", first)
	}

	// Agents start; from here on no operator command until the facts.
	webRoot, lbRoot, facts := t.TempDir(), t.TempDir(), t.TempDir()
	c.startAgent("lb-1", agentOpts{stateDir: t.TempDir(), root: lbRoot, labels: []string{"role=lb"}})
	c.startAgent("web-1", agentOpts{stateDir: t.TempDir(), root: webRoot, labels: []string{"role=web"}, factsDir: facts})
	index := filepath.Join(webRoot, "srv", "index.html")
	backends := filepath.Join(lbRoot, "srv", "backends")
	waitFor(t, 90*time.Second, "web-1 to be configured by its label", fileHolds(index, "v1 served by web-1\n"))
	// The balancer's list waits for web-1's app.port.
	var waiting record.Compile
	waitFor(t, 30*time.Second, "a compile that knows both agents", func() bool {
		waiting = c.compiles()[0]
		return waiting.ResourcesPerAgent["web-1"] > 0 && waiting.ResourcesPerAgent["lb-1"] > 0
	})
	if len(waiting.Undefined) == 0 || !strings.Contains(fmt.Sprint(waiting.Undefined), "app") {
		t.Fatalf("compile %+v: want the balancer's backends waiting for app.port", waiting)
	}
	// Had lb-1 been compiled before web-1 was known, its list was written
	// empty: what must not be is web-1 listed without its port.
	if b, err := os.ReadFile(backends); err == nil && len(b) > 0 {
		t.Fatalf("the backend list was written before its facts were known: %q", b)
	}

	// The awaited fact arrives: defined and deployed by the recompile.
	if err := os.WriteFile(filepath.Join(facts, "app.json"), []byte(`{"app": {"port": 8080}}`), 0o644); err != nil {
		t.Fatal(err)
	}
	// Asked again while waiting: a refresh within a second of the
	// agent's last gathering gets that gathering.
	asked := time.Time{}
	waitFor(t, 60*time.Second, "the balancer to list web-1 once its port is known", func() bool {
		if time.Since(asked) > 2*time.Second {
			c.cli("agent", "facts-refresh", "web-1")
			asked = time.Now()
		}
		return fileHolds(backends, "web-1:8080\n")()
	})

	// A push, announced by a webhook. A forged one first: refused.
	rev2 := repo.commit(fleetModel(t, "v2 served by"))
	before := len(c.compiles())
	if status := c.push("whsec_forged-secret-value", "refs/heads/main", rev2); status != http.StatusUnauthorized {
		t.Fatalf("forged webhook: HTTP %d, want 401", status)
	}
	if n := len(c.compiles()); n != before {
		t.Fatalf("the forged webhook started a compile (%d → %d)", before, n)
	}
	if status := c.push(src.WebhookSecret, "refs/heads/main", rev2); status != http.StatusAccepted {
		t.Fatalf("signed webhook: HTTP %d, want 202", status)
	}
	pushed := c.compiled(rev2, 60*time.Second)
	if pushed.Outcome != record.CompileReleased || pushed.Triggers.String() != "webhook (acme/fleet "+rev2[:12]+")" {
		t.Fatalf("compile of the push: %+v (triggers %s)", pushed, pushed.Triggers)
	}
	waitFor(t, 60*time.Second, "the pushed page to be deployed", fileHolds(index, "v2 served by web-1\n"))

	// A broken commit: failed with file:line, nothing released, one alert
	// for the streak of two.
	rev3 := repo.commit(brokenModel)
	c.push(src.WebhookSecret, "refs/heads/main", rev3)
	broken := c.compiled(rev3, 60*time.Second)
	if broken.Outcome != record.CompileFailed || len(broken.Diagnostics) == 0 || broken.Diagnostics[0].File != "main.hcl" || broken.Diagnostics[0].Line != 4 {
		t.Fatalf("broken commit: %+v, want failed at main.hcl:4", broken)
	}
	rev4 := repo.commit(brokenModel + "\n# still broken\n")
	c.push(src.WebhookSecret, "refs/heads/main", rev4)
	c.compiled(rev4, 60*time.Second)
	var versions []model.Version
	c.cliJSON(&versions, "version", "list")
	if len(versions) == 0 || versions[0].Number != pushed.Version || versions[0].State != model.VersionReleased {
		t.Fatalf("versions after broken commits %+v: want none new, %d (the last good) released", versions, pushed.Version)
	}
	if b, _ := os.ReadFile(index); string(b) != "v2 served by web-1\n" {
		t.Fatalf("the page after broken commits: %q", b)
	}
	if al := c.compileAlerts(); len(al) != 1 || al[0].Compliance != model.NonCompliant || !strings.Contains(al[0].Message, "main.hcl:4") {
		t.Fatalf("compile alerts %+v, want one, naming main.hcl:4", al)
	}
	code, out, errb := c.run("compiles", "show", broken.ID[:8])
	if code != 0 || !strings.Contains(out, "main.hcl:4:") || !strings.Contains(out, "the released version stays deployed") {
		t.Fatalf("compiles show: exit %d: %s%s", code, out, errb)
	}

	// The same repository over HTTP, fixed: the new URL compiles at once;
	// the streak of failures ends.
	httpURL := repo.serveHTTP()
	rev5 := repo.commit(fleetModel(t, "v3 served by"))
	c.cli("env", "source", "set", httpURL, "--ref", "main")
	if fixed := c.compiled(rev5, 60*time.Second); fixed.Outcome != record.CompileReleased {
		t.Fatalf("compile over HTTP: %+v", fixed)
	}
	waitFor(t, 60*time.Second, "the page fetched over HTTP to be deployed", fileHolds(index, "v3 served by web-1\n"))
	// The alert is resolved once the compile's report is written, just
	// after its fan-out: the page may be deployed a moment before.
	waitFor(t, 30*time.Second, "the compile failure's alert resolved", func() bool {
		al := c.compileAlerts()
		return len(al) == 2 && al[0].Kind == record.AlertCompileRecovered && al[0].Compliance == model.Compliant
	})

	// A new commit over HTTP (git http-backend: a shallow fetch into the
	// clone the server kept since) is released; the same push again
	// changes nothing and is skipped.
	rev6 := repo.commit(fleetModel(t, "v4 served by"))
	c.push(src.WebhookSecret, "refs/heads/main", rev6)
	if next := c.compiled(rev6, 60*time.Second); next.Outcome != record.CompileReleased {
		t.Fatalf("compile of a new commit over HTTP: %+v", next)
	}
	waitFor(t, 60*time.Second, "the new commit's page to be deployed", fileHolds(index, "v4 served by web-1\n"))
	c.push(src.WebhookSecret, "refs/heads/main", rev6)
	waitFor(t, 60*time.Second, "the same push again, skipped", func() bool {
		cs := c.compiles()
		return cs[0].Revision == rev6 && cs[0].Outcome == record.CompileSkipped
	})

	// An unreachable repository: the compile fails and says so; the API
	// answers throughout; the fleet keeps the last good version.
	c.cli("env", "source", "set", "http://127.0.0.1:1/fleet.git")
	code, out, errb = c.run("env", "compile", "--wait")
	if code != 1 || !strings.Contains(out, "failed") || !strings.Contains(out, "unreachable") {
		t.Fatalf("compile of an unreachable repository: exit %d: %s%s", code, out, errb)
	}
	c.cli("env", "show")
}

// serveSlowHTTP is serveHTTP whose first fetch (not the listing of refs)
// hangs until its client goes away: a compile that is sure to be running
// when the test kills its server. hanging is closed once it hangs.
func (g *gitRepo) serveSlowHTTP() (url string, hanging <-chan struct{}) {
	g.T().Helper()
	gitBin, err := exec.LookPath("git")
	testenv.Need(g.T(), err == nil, "git is not installed: the HTTP git server is git http-backend (.ci/run installs it)")
	h := &cgi.Handler{Path: gitBin, Args: []string{"http-backend"},
		Env: []string{"GIT_PROJECT_ROOT=" + filepath.Dir(g.Dir), "GIT_HTTP_EXPORT_ALL=1"}}
	var hung atomic.Bool
	stop, started := make(chan struct{}), make(chan struct{})
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == "POST" && strings.HasSuffix(r.URL.Path, "/git-upload-pack") && hung.CompareAndSwap(false, true) {
			close(started)
			select {
			case <-r.Context().Done():
			case <-stop:
			}
			return
		}
		h.ServeHTTP(w, r)
	}))
	g.T().Cleanup(ts.Close)
	g.T().Cleanup(func() { close(stop) }) // before Close, which waits for handlers
	return ts.URL + "/" + filepath.Base(g.Dir), started
}

// A replica killed (SIGKILL) in the middle of a compile: the other one
// finds the compile abandoned and compiles again; no version is made twice.
func TestReplicaKilledDuringCompile(t *testing.T) {
	c := newCluster(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	otherAddr := ln.Addr().String()
	ln.Close()
	other := startProc(t, "server-b", environ(), tetherBin, "server",
		"--listen", otherAddr, "--postgres", c.pg, "--amqp", c.amqpURL, "--amqp-namespace", c.ns, "--key-file", c.keyFile,
		"--queue-type", "classic", "--admin-token", c.admin, "--log-format", "json", "--log-level", "info", "--allow-file-sources")
	waitFor(t, 60*time.Second, "the second replica to be ready", func() bool {
		resp, err := http.Get("http://" + otherAddr + "/readyz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})

	repo := newGitRepo(t)
	rev := repo.commit(fleetModel(t, "v1 served by"))
	url, hanging := repo.serveSlowHTTP()
	c.cli("env", "source", "set", url, "--ref", "main")
	select {
	case <-hanging:
	case <-time.After(30 * time.Second):
		t.Fatal("the compile did not fetch within 30 s")
	}
	cs := c.compiles()
	if len(cs) != 1 || cs[0].Outcome != record.CompileRunning {
		t.Fatalf("compiles %+v, want one running", cs)
	}
	running := cs[0]
	c.srv.kill()
	c.listen = otherAddr // the CLI talks to the survivor from here on
	done := c.compiled(rev, 90*time.Second)
	if done.Outcome != record.CompileReleased || done.ID == running.ID || done.Triggers.String() != running.Triggers.String() {
		t.Fatalf("compile after the kill: %+v, want released by the survivor with the triggers %s", done, running.Triggers)
	}
	var abandoned record.Compile
	c.cliJSON(&abandoned, "compiles", "show", running.ID)
	if abandoned.Outcome != record.CompileFailed || !strings.Contains(fmt.Sprint(abandoned.Diagnostics), "stopped before it ended") {
		t.Fatalf("the killed replica's compile: %+v, want failed, saying why", abandoned)
	}
	var versions []model.Version
	c.cliJSON(&versions, "version", "list")
	if len(versions) != 1 || versions[0].Number != done.Version {
		t.Fatalf("versions %+v: want one, %d", versions, done.Version)
	}
	if !logged(other, "a compile was abandoned by a stopped server; compiling again") {
		t.Fatal("the survivor did not say it took the compile over")
	}
}
