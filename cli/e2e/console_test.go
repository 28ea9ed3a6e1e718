package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/cookiejar"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/tetherhq/tether/model"
	"github.com/tetherhq/tether/model/testenv"
	"github.com/tetherhq/tether/server/api"
	"github.com/tetherhq/tether/server/record"
)

// chromium finds Debian's chromium (make setup installs it when missing).
func chromium(t testing.TB) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	testenv.Need(t, false, "no chromium on PATH for the console's browser tests (apt-get install chromium fonts-dejavu-core; make setup installs it)")
	return ""
}

// screenshotDir is where the browser test saves its screenshots:
// TETHER_CONSOLE_SCREENSHOTS, else the test's temporary directory.
func screenshotDir(t testing.TB) string {
	if d := os.Getenv("TETHER_CONSOLE_SCREENSHOTS"); d != "" {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		return d
	}
	return t.TempDir()
}

// tab is a browser tab driven by the test.
type tab struct {
	t    testing.TB
	ctx  context.Context
	base string
	dir  string
}

// newBrowser starts a headless chromium; each user gets a browser
// context of its own (its own cookies).
func newBrowser(t testing.TB, base string) func(user string) *tab {
	t.Helper()
	path := chromium(t)
	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(path), chromedp.NoSandbox, chromedp.WindowSize(1280, 900),
		chromedp.Flag("disable-gpu", true), chromedp.Flag("disable-dev-shm-usage", true), chromedp.Flag("lang", "en-US"))
	actx, cancel := chromedp.NewExecAllocator(context.Background(), opts...)
	t.Cleanup(cancel)
	bctx, bcancel := chromedp.NewContext(actx)
	t.Cleanup(bcancel)
	if err := chromedp.Do(bctx); err != nil {
		t.Fatalf("start chromium %s: %v", path, err)
	}
	dir := screenshotDir(t)
	t.Logf("console screenshots in %s", dir)
	return func(user string) *tab {
		ctx, cancel := chromedp.NewContext(bctx, chromedp.WithNewBrowserContext())
		t.Cleanup(cancel)
		// The first run opens the tab: without a deadline, which would
		// end the tab with it.
		if err := chromedp.Do(ctx); err != nil {
			t.Fatalf("open a tab for %s: %v", user, err)
		}
		return &tab{t: t, ctx: ctx, base: base, dir: dir}
	}
}

// do runs steps, failing the test on an error; each step may take up to
// a minute (a release converging on a loaded machine).
func (b *tab) do(what string, steps ...chromedp.Action[chromedp.Void]) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 90*time.Second)
	defer cancel()
	if err := chromedp.Do(ctx, steps...); err != nil {
		body, _ := chromedp.Run(b.ctx, chromedp.Evaluate[string](`document.body ? document.body.innerText : ""`))
		b.t.Fatalf("%s: %v\nthe page says:\n%s", what, err, body)
	}
}

func (b *tab) open(path string) { b.t.Helper(); b.do("open "+path, chromedp.Navigate(b.base+path)) }

// waitText waits until the page's text holds s.
func (b *tab) waitText(s string) {
	b.t.Helper()
	b.do("wait for "+s, b.poll(fmt.Sprintf(`document.body && document.body.innerText.includes(%q)`, s)))
}

// poll waits until expr is true in the page, across navigations (a
// form's answer replaces the page under the evaluation).
func (b *tab) poll(expr string) chromedp.Action[chromedp.Void] {
	return chromedp.Func(func(ctx context.Context, t *chromedp.Target) error {
		for {
			ok, err := chromedp.Evaluate[bool](expr)(ctx, t)
			if err == nil && ok {
				return nil
			}
			select {
			case <-ctx.Done():
				return fmt.Errorf("%s: not true in time (last error: %v)", expr, err)
			case <-time.After(50 * time.Millisecond):
			}
		}
	})
}

func (b *tab) text() string {
	b.t.Helper()
	s, err := chromedp.Run(b.ctx, chromedp.Evaluate[string](`document.body.innerText`))
	if err != nil {
		b.t.Fatal(err)
	}
	return s
}

func (b *tab) eval(expr string) string {
	b.t.Helper()
	s, err := chromedp.Run(b.ctx, chromedp.Evaluate[string](expr, chromedp.EvalAwaitPromise))
	if err != nil {
		b.t.Fatalf("evaluate %s: %v", expr, err)
	}
	return s
}

func (b *tab) count(css string) int {
	b.t.Helper()
	n, err := chromedp.Run(b.ctx, chromedp.Evaluate[int](fmt.Sprintf(`document.querySelectorAll(%q).length`, css)))
	if err != nil {
		b.t.Fatal(err)
	}
	return n
}

func (b *tab) click(css string) { b.t.Helper(); b.do("click "+css, chromedp.Click(chromedp.CSS(css))) }

func (b *tab) shot(name string) {
	b.t.Helper()
	png, err := chromedp.Run(b.ctx, chromedp.FullScreenshot(100))
	if err != nil {
		b.t.Fatalf("screenshot %s: %v", name, err)
	}
	if err := os.WriteFile(filepath.Join(b.dir, name+".png"), png, 0o644); err != nil {
		b.t.Fatal(err)
	}
}

func (b *tab) login(org, name, password string) {
	b.t.Helper()
	b.open("/login")
	steps := []chromedp.Action[chromedp.Void]{chromedp.SetValue(chromedp.CSS("#name"), name), chromedp.SetValue(chromedp.CSS("#password"), password)}
	if org != "" { // chromedp cannot set an empty value; the field starts empty
		steps = append(steps, chromedp.SetValue(chromedp.CSS("#org"), org))
	}
	b.do("fill the login form", append(steps, chromedp.Click(chromedp.CSS("form.login button")))...)
	b.waitText("Log out")
}

// apiAs calls the API as a user of org logged in with a password (cookie
// and CSRF token, as a browser would), for the test's own setup.
func (c *cluster) apiAs(org, name, password string) func(method, path string, body any) (int, []byte) {
	c.t.Helper()
	jar, _ := cookiejar.New(nil)
	hc := &http.Client{Jar: jar}
	send := func(method, path, csrf string, body any) (int, []byte) {
		b, _ := json.Marshal(body)
		req, _ := http.NewRequest(method, "http://"+c.listen+"/api/v1"+path, bytes.NewReader(b))
		req.Header.Set("Content-Type", "application/json")
		if csrf != "" {
			req.Header.Set("X-CSRF-Token", csrf)
		}
		resp, err := hc.Do(req)
		if err != nil {
			c.t.Fatal(err)
		}
		defer resp.Body.Close()
		out, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, out
	}
	code, out := send("POST", "/session", "", api.SessionRequest{Org: org, Name: name, Password: password})
	var s api.SessionView
	if code != 200 || json.Unmarshal(out, &s) != nil {
		c.t.Fatalf("log in as %s/%s: %d %s", org, name, code, out)
	}
	return func(method, path string, body any) (int, []byte) { return send(method, path, s.CSRF, body) }
}

// TestConsoleInABrowser drives the console in a real headless chromium
// against a real server, PostgreSQL, RabbitMQ and agents: log in; accept
// a pending agent; release a version and watch it converge; an edit on a
// host shows as drift on the open page without a reload; roll back with
// a confirmation; a viewer sees no change buttons and the API refuses
// the change it sends anyway; a user of another organization gets
// nothing of this one; bad input gets a clear message and changes
// nothing. It saves screenshots of the main pages.
func TestConsoleInABrowser(t *testing.T) {
	chromium(t)
	// The webhook the console adds posts to 127.0.0.1, denied by default.
	c := newClusterWith(t, clusterOpts{serverArgs: []string{"--webhook-allow", "127.0.0.1/32"}})
	browser := newBrowser(t, "http://"+c.listen)
	const adaPW, veraPW, wilePW = "correct horse ada", "correct horse vera", "correct horse wile"
	admin := func(method, path string, body any, want int) {
		t.Helper()
		b, _ := json.Marshal(body)
		req, _ := http.NewRequest(method, "http://"+c.listen+"/api/v1"+path, bytes.NewReader(b))
		req.Header.Set("Authorization", "Bearer "+c.admin)
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		out, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Fatalf("%s %s: %d %s, want %d", method, path, resp.StatusCode, out, want)
		}
	}
	admin("POST", "/users", api.UserRequest{Name: "ada", Password: adaPW, Role: record.RoleAdmin}, 201)
	admin("POST", "/users", api.UserRequest{Name: "vera", Password: veraPW, Role: record.RoleViewer}, 201)
	admin("POST", "/orgs", api.OrgRequest{Name: "acme"}, 201)
	admin("POST", "/users?org=acme", api.UserRequest{Name: "wile", Password: wilePW, Role: record.RoleAdmin}, 201)
	if code, out := c.apiAs("acme", "wile", wilePW)("POST", "/envs", api.EnvRequest{Name: "acme-prod"}); code != 201 {
		t.Fatalf("acme creates its environment: %d %s", code, out)
	}

	const n = 3
	one := func(i int) string { return fmt.Sprintf("one %d\n", i) }
	two := func(i int) string { return fmt.Sprintf("two %d\n", i) }
	dbFile := "  file \"motd\" {\n    path    = \"/srv/motd\"\n    content = \"db\\n\"\n  }\n"
	root, dbRoot := t.TempDir(), t.TempDir()
	v1 := c.release(fileModel(t, n, one, map[string]string{"db": dbFile}))
	c.startAgent("web", agentOpts{stateDir: t.TempDir(), root: root, labels: []string{"role=web"}})
	// web holds its directory and n files; db its directory and motd.
	waitFor(t, 60*time.Second, "web to hold version 1", func() bool { return c.deployed() == n+1 })
	// db comes while enrollment is manual: it waits for an operator.
	c.cli("env", "settings", "set", "enrollment", "manual")
	c.startAgent("db", agentOpts{stateDir: t.TempDir(), root: dbRoot, labels: []string{"role=db"}})
	waitFor(t, 60*time.Second, "db to be pending", func() bool {
		ag, err := c.store.GetAgent(context.Background(), env, "db")
		return err == nil && ag.State == record.AgentPending
	})

	b := browser("ada")
	b.open("/envs/prod")
	b.waitText("Log in") // not logged in: the login page
	b.login("", "ada", adaPW)
	b.waitText("Overview of prod")
	b.shot("overview")

	// Accept the pending agent: check it, press Accept.
	b.open("/envs/prod/agents")
	b.waitText("db")
	b.shot("agents")
	b.click("#ag-db")
	b.click(`button[value="accept"]`)
	b.waitText("accepted 1 agent(s): db")
	if ag, err := c.store.GetAgent(context.Background(), env, "db"); err != nil || ag.State != record.AgentAccepted {
		t.Fatalf("db after accepting it in the console: %+v %v, want accepted", ag, err)
	}
	c.converged(v1, n+3, 60*time.Second)

	// Release version 2 from the console, confirming it, and watch it
	// converge on the versions page.
	var exp api.ExportResponse
	c.cliJSON(&exp, "export", fileModel(t, n, two, map[string]string{"db": dbFile}))
	v2 := exp.Version.Number
	b.open(fmt.Sprintf("/envs/prod/versions/%d", v2))
	b.waitText("two 0")
	b.shot("version-diff")
	b.click(`a.button[href$="/release"]`)
	b.waitText(fmt.Sprintf("Yes, release version %d", v2))
	b.shot("release-confirm")
	b.click(`form.confirm button`)
	b.waitText(fmt.Sprintf("version %d released", v2))
	c.converged(v2, n+3, 90*time.Second)
	checkFiles(t, root, n, two)
	b.open(fmt.Sprintf("/envs/prod/resources?state=deployed&q=%%2Fsrv%%2Ff"))
	b.waitText(fmt.Sprintf("1–%d of %d", n, n))
	b.shot("resources")

	// An edit on the host: the open resource page shows the drift,
	// current → desired, without a reload.
	id := fileID("web", "/srv/f1")
	b.open("/envs/prod/resources/" + strings.NewReplacer("/", "%2F", "[", "%5B", "]", "%5D", ",", "%2C").Replace(id))
	b.waitText("No drift known")
	b.do("wait for the live stream", b.poll(`document.body.getAttribute("data-live") === "open"`))
	b.eval(`window.notReloaded = "yes"`)
	start := time.Now()
	if err := os.WriteFile(filepath.Join(root, "srv", "f1"), []byte("edited by hand\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	b.waitText("edited by hand")
	t.Logf("the drift showed on the open page %s after the edit", time.Since(start).Round(time.Millisecond))
	if got := b.eval(`String(window.notReloaded)`); got != "yes" {
		t.Fatalf("the page was reloaded to show the drift (marker %q)", got)
	}
	if !strings.Contains(b.text(), "non compliant") {
		t.Fatalf("the resource page after drift does not say non compliant:\n%s", b.text())
	}
	b.shot("resource-drift")
	b.open("/envs/prod")
	b.waitText("Open drift (1)")
	b.shot("overview-drift")

	// Roll back to version 1, confirming it.
	b.open("/envs/prod/versions")
	b.shot("versions")
	b.click(fmt.Sprintf(`a[href="/envs/prod/versions/%d/release"]`, v1))
	b.waitText(fmt.Sprintf("Roll back to version %d?", v1))
	b.shot("rollback-confirm")
	b.click(`form.confirm button`)
	v3 := v2 + 1
	b.waitText(fmt.Sprintf("version %d released again as version %d (rollback)", v1, v3))
	c.converged(v3, n+3, 90*time.Second)
	checkFiles(t, root, n, one)
	b.open("/envs/prod/alerts")
	b.waitText("edited by hand")
	b.shot("alerts")
	b.open("/audit")
	b.waitText("version.release")
	b.shot("audit")
	b.open("/envs/prod/deploys")
	b.waitText("release")
	b.shot("deploys")
	b.open("/envs/prod/webhooks")
	b.waitText("New webhook")
	b.do("fill the new webhook form", chromedp.SetValue(chromedp.CSS("#name"), "ops"), chromedp.SetValue(chromedp.CSS("#url"), "http://127.0.0.1:9/hook"))
	b.click(`button[value="create"]`)
	b.waitText("Webhook secret")
	b.click(`button[value="test"]`)
	b.waitText("webhook.test")
	b.shot("webhooks")

	// Bad input on a form: a clear message, nothing changed.
	b.open("/admin/users")
	b.do("fill the new user form", chromedp.SetValue(chromedp.CSS("#name"), "bob"), chromedp.SetValue(chromedp.CSS("#password"), "short"),
		chromedp.Click(chromedp.CSS(`button[value="create"]`)))
	b.waitText("choose a longer password")
	b.shot("bad-input")
	if _, err := c.store.GetUser(context.Background(), "default", "bob"); err == nil {
		t.Fatal("user bob was made with a password the API refuses")
	}

	// A viewer: no change buttons; the API refuses a change sent anyway.
	v := browser("vera")
	v.login("", "vera", veraPW)
	v.open("/envs/prod/agents")
	v.waitText("web")
	if got := v.count(`button[value="pause"], button[value="accept"], input[type="checkbox"]`); got != 0 {
		t.Fatalf("a viewer's agents page has %d change controls, want none", got)
	}
	v.open("/envs/prod/versions")
	v.waitText("Versions of prod")
	if got := v.count(`a[href$="/release"]`); got != 0 {
		t.Fatalf("a viewer's versions page has %d release links, want none", got)
	}
	v.shot("viewer-agents")
	status := v.eval(`fetch("/api/v1/envs/prod/agents/web/pause", {method: "POST", headers: {"X-CSRF-Token": document.querySelector("input[name=csrf]").value}}).then(r => String(r.status))`)
	if status != "403" {
		t.Fatalf("a viewer's pause sent to the API: %s, want 403", status)
	}
	if ag, _ := c.store.GetAgent(context.Background(), env, "web"); ag.Paused {
		t.Fatal("web was paused by a viewer")
	}

	// A user of another organization gets nothing of this one.
	w := browser("wile")
	w.login("acme", "wile", wilePW)
	w.waitText("Overview of acme-prod")
	if got := w.count(`a[href="/envs/prod"]`); got != 0 {
		t.Fatalf("acme's user is shown %d links to the default organization's environment prod", got)
	}
	w.open("/envs/prod/agents")
	w.do("wait for the refusal", w.poll(`document.querySelector(".error") !== null`))
	if txt := w.text(); strings.Contains(txt, "web") && strings.Contains(txt, "role=web") {
		t.Fatalf("acme's user sees prod's agents:\n%s", txt)
	}
	w.shot("other-org")
	for _, path := range []string{"/api/v1/envs/prod/agents", "/api/v1/envs/prod/resources", "/api/v1/envs/prod/versions"} {
		if got := w.eval(fmt.Sprintf(`fetch(%q).then(r => String(r.status))`, path)); got != "404" && got != "403" {
			t.Fatalf("acme's user GET %s: %s, want 403 or 404", path, got)
		}
	}
	if vs, err := c.store.ListVersions(context.Background(), env); err != nil || len(vs) != 3 || vs[0].State != model.VersionReleased {
		t.Fatalf("versions of prod at the end: %+v %v", vs, err)
	}
}
