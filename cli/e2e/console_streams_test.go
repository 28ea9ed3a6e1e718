package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"

	"github.com/tetherhq/tether/server/api"
	"github.com/tetherhq/tether/server/record"
)

// livePages are twelve live pages of prod, the 11th the overview.
var livePages = []string{"/envs/prod", "/envs/prod/agents", "/envs/prod/resources", "/envs/prod/versions", "/envs/prod/deploys",
	"/envs/prod/compiles", "/envs/prod/alerts", "/envs/prod/agents", "/envs/prod/versions", "/envs/prod/resources",
	"/envs/prod", "/envs/prod/deploys"}

// addUser adds a user of the default organization, who logs in with
// password.
func (c *cluster) addUser(name, password string, role record.Role) {
	c.t.Helper()
	body, _ := json.Marshal(api.UserRequest{Name: name, Password: password, Role: role})
	req, _ := http.NewRequest("POST", "http://"+c.listen+"/api/v1/users", bytes.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+c.admin)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		c.t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusCreated {
		c.t.Fatalf("add user %s: %d", name, resp.StatusCode)
	}
}

// eventStreams reads the server's count of open event streams
// (tether_event_streams on /metrics).
func (c *cluster) eventStreams() (int, error) {
	resp, err := http.Get("http://" + c.listen + "/metrics")
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "tether_event_streams "); ok {
			return strconv.Atoi(strings.TrimSpace(v))
		}
	}
	return 0, fmt.Errorf("no tether_event_streams on /metrics (%v)", sc.Err())
}

// wantStreams waits until the server holds want event streams. A stream
// the browser closes ends on the server at once (it reads the
// connection's end); one a page left keeps holding its connection while
// the back-forward cache keeps the page (about a minute in Chromium).
func (c *cluster) wantStreams(want int, when string) {
	c.t.Helper()
	var got int
	var err error
	if !poll(20*time.Second, func() bool { got, err = c.eventStreams(); return err == nil && got == want }) {
		c.t.Fatalf("%s: the server holds %d event streams (%v), want %d", when, got, err, want)
	}
}

// openLive opens a live page and waits until it follows the stream.
func (b *tab) openLive(path string) {
	b.t.Helper()
	b.open(path)
	b.waitLive(path)
}

func (b *tab) waitLive(what string) {
	b.t.Helper()
	b.do("wait for the live stream of "+what, b.poll(`document.body.getAttribute("data-live") === "open"`))
}

// back goes back to the page at path, and waits until it follows the
// stream. (chromedp.NavigateBack waits for a load event, which a page
// shown again from the back-forward cache does not fire.)
func (b *tab) back(path string) {
	b.t.Helper()
	b.eval(`history.back(), ""`)
	b.do("go back to "+path, b.poll(fmt.Sprintf(`location.pathname === %q && document.body.getAttribute("data-live") === "open"`, path)))
	b.t.Logf("back to %s: shown again from the back-forward cache: %s", path, b.eval(`String(window.shownBefore === "yes")`))
}

// heard is how many events the page's stream brought it.
func (b *tab) heard() int {
	b.t.Helper()
	n, _ := strconv.Atoi(b.eval(`String(document.body.getAttribute("data-live-events") || 0)`))
	return n
}

// TestConsoleLiveStreams checks that the console's live pages hold no
// more event streams than the pages shown need: a browser holds six
// HTTP/1.1 connections per host, and each open stream one of them.
// Twelve pages one after the other in one tab leave one stream open; so
// does Back (from the back-forward cache or not), with updates arriving
// again; eight tabs share one stream; and a browser without
// SharedWorker opens one per page shown, never one per page left.
func TestConsoleLiveStreams(t *testing.T) {
	chromium(t)
	c := newCluster(t)
	// The server's first start names the console, and how to log in.
	if want := fmt.Sprintf("tether server: console on http://%s/: log in as admin (organization: empty) with the password printed above", c.listen); !strings.Contains(c.srv.output(), want) {
		t.Fatalf("the server's first start does not say %q:\n%s", want, c.srv.output())
	}
	const pw = "correct horse ada"
	c.addUser("ada", pw, record.RoleAdmin)
	browser := newBrowser(t, "http://"+c.listen)
	pages := livePages
	// event makes the server stream an event of prod that live pages
	// follow (env.halted), and leaves prod as it was.
	event := func() {
		c.cli("env", "halt")
		c.cli("env", "resume")
	}
	waitHeard := func(b *tab, after int, what string) {
		t.Helper()
		b.do(what, b.poll(fmt.Sprintf(`Number(document.body.getAttribute("data-live-events") || 0) > %d`, after)))
	}

	// One tab, twelve pages: the tab shares its stream through the
	// SharedWorker, and the pages left let go of it.
	a := browser("ada")
	a.login("", "ada", pw)
	for i, p := range pages {
		a.openLive(p)
		a.eval(`window.shownBefore = "yes"`)
		c.wantStreams(1, fmt.Sprintf("page %d (%s) of one tab shown", i+1, p))
	}
	if got := a.eval(`String(document.body.getAttribute("data-live-stream"))`); got != "shared" {
		t.Fatalf("the pages follow the stream as %q, want shared (the SharedWorker)", got)
	}
	// Back: the page comes back (from the back-forward cache, or loaded
	// again) following the stream, and events reach it.
	a.back(pages[len(pages)-2])
	c.wantStreams(1, "back to the 11th page")
	n := a.heard()
	event()
	waitHeard(a, n, "an event to reach the page gone back to")
	a.shot("live-after-back")
	if txt := a.text(); !strings.Contains(txt, "Live: this page updates") {
		t.Fatalf("the page gone back to does not say Live:\n%s", txt)
	}

	// Eight tabs of one browser: one stream, and every tab hears events.
	tabs := []*tab{a}
	for i := range 7 {
		ctx, cancel := chromedp.NewContext(a.ctx) // a tab beside a: the same cookies, the same connections
		defer cancel()
		// The first run opens the tab: without a deadline, which would
		// end the tab with it.
		if err := chromedp.Do(ctx); err != nil {
			t.Fatalf("open tab %d: %v", i+2, err)
		}
		tb := &tab{t: t, ctx: ctx, base: a.base, dir: a.dir}
		tb.openLive(pages[i])
		tabs = append(tabs, tb)
		c.wantStreams(1, fmt.Sprintf("%d tabs open", i+2))
	}
	heard := make([]int, len(tabs))
	for i, tb := range tabs {
		heard[i] = tb.heard()
	}
	event()
	for i, tb := range tabs {
		waitHeard(tb, heard[i], fmt.Sprintf("an event to reach tab %d", i+1))
	}
	tabs[len(tabs)-1].shot("live-eighth-tab")

	// Without SharedWorker (another browser context, so another
	// connection pool): one stream per page shown, let go on leaving.
	f := browser("ada without SharedWorker")
	if _, err := chromedp.Call(f.ctx, page.AddScriptToEvaluateOnNewDocument, page.AddScriptToEvaluateOnNewDocumentParams{Source: "delete window.SharedWorker;"}); err != nil {
		t.Fatal(err)
	}
	f.login("", "ada", pw)
	for i, p := range pages {
		f.openLive(p)
		f.eval(`window.shownBefore = "yes"`)
		if got := f.eval(`String(document.body.getAttribute("data-live-stream"))`); got != "page" {
			t.Fatalf("without SharedWorker, page %d (%s) follows the stream as %q, want page", i+1, p, got)
		}
		c.wantStreams(2, fmt.Sprintf("without SharedWorker, page %d (%s) shown (and one shared stream of the other browser)", i+1, p))
	}
	f.back(pages[len(pages)-2])
	c.wantStreams(2, "without SharedWorker, back to the 11th page (and one shared stream of the other browser)")
	n = f.heard()
	event()
	waitHeard(f, n, "an event to reach the page gone back to, without SharedWorker")
	f.shot("live-without-sharedworker")
}

// BenchmarkConsolePages measures how long the console's live pages take
// to load (from the navigation to the load event) in headless Chromium:
// one-tab opens the twelve live pages one after the other in one tab (an
// op is a page), tabs opens each in a new tab of the same browser, kept
// open (an op is a tab). load-s/op is the mean load, max-load-s the
// slowest, not-loaded the pages not loaded within two minutes (after one,
// no more are opened); ns/op also counts the wait for each page's live
// stream. Over HTTP/1.1 a
// browser holds six connections per host, so a page or tab that waits
// for one shows here.
//
//	go test ./cli/e2e -run '^$' -bench ConsolePages -benchtime 12x
func BenchmarkConsolePages(b *testing.B) {
	chromium(b)
	c := newCluster(b)
	const pw = "correct horse ada"
	c.addUser("ada", pw, record.RoleAdmin)
	browser := newBrowser(b, "http://"+c.listen)
	a := browser("ada")
	a.login("", "ada", pw)
	// load opens path in tb and waits for its live stream. A page not
	// loaded within notLoaded is counted as such (the benchmark goes on
	// without loading more): a wait for a connection that never frees.
	const notLoaded = 2 * time.Minute
	load := func(b *testing.B, tb *tab, path string) (time.Duration, bool) {
		tb.t = b
		ctx, cancel := context.WithTimeout(tb.ctx, notLoaded)
		defer cancel()
		start := time.Now()
		if err := chromedp.Do(ctx, chromedp.Navigate(tb.base+path)); err != nil {
			b.Logf("%s not loaded after %v: %v", path, time.Since(start).Round(time.Second), err)
			return 0, false
		}
		d := time.Since(start)
		tb.waitLive(path)
		return d.Round(time.Millisecond), true
	}
	report := func(b *testing.B, loads []time.Duration, stuck int) {
		var sum, slowest time.Duration
		for _, d := range loads {
			sum, slowest = sum+d, max(slowest, d)
		}
		if len(loads) > 0 {
			b.ReportMetric(sum.Seconds()/float64(len(loads)), "load-s/op")
		}
		b.ReportMetric(slowest.Seconds(), "max-load-s")
		b.ReportMetric(float64(stuck), "not-loaded")
		b.Logf("loads: %v; not loaded: %d", loads, stuck)
	}
	b.Run("one-tab", func(b *testing.B) {
		var loads []time.Duration
		stuck := 0
		for i := 0; b.Loop(); i++ {
			if stuck > 0 {
				continue
			}
			if d, ok := load(b, a, livePages[i%len(livePages)]); ok {
				loads = append(loads, d)
			} else {
				stuck++
			}
		}
		report(b, loads, stuck)
	})
	b.Run("tabs", func(b *testing.B) {
		var loads []time.Duration
		stuck := 0
		for i := 0; b.Loop(); i++ {
			if stuck > 0 {
				continue
			}
			b.StopTimer()
			ctx, cancel := chromedp.NewContext(a.ctx)
			defer cancel()
			if err := chromedp.Do(ctx); err != nil {
				b.Fatalf("open tab %d: %v", i+1, err)
			}
			b.StartTimer()
			if d, ok := load(b, &tab{ctx: ctx, base: a.base, dir: a.dir}, livePages[i%len(livePages)]); ok {
				loads = append(loads, d)
			} else {
				stuck++
			}
		}
		report(b, loads, stuck)
	})
}
