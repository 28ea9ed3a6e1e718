package server_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/tetherhq/tether/bus"
	"github.com/tetherhq/tether/model/testenv"
	"github.com/tetherhq/tether/server"
	"github.com/tetherhq/tether/server/store/sqlite"
)

// slowClientsEnv makes the test binary a crowd of slow clients (see
// TestMain): "ADDRESS COUNT FIRST-SOURCE SOURCES" opens COUNT connections
// to ADDRESS from the loopback addresses 127.0.0.FIRST-SOURCE onwards,
// sends each a request that never ends, says "ready" and holds them until
// its standard input closes. It runs in a process of its own so that the
// test process's open files are the server's alone.
const slowClientsEnv = "TETHER_TEST_SLOW_CLIENTS"

func TestMain(m *testing.M) {
	if spec := os.Getenv(slowClientsEnv); spec != "" {
		if err := slowClients(spec); err != nil {
			fmt.Fprintln(os.Stderr, "slow clients:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

func slowClients(spec string) error {
	var addr string
	var count, first, sources int
	if _, err := fmt.Sscan(spec, &addr, &count, &first, &sources); err != nil {
		return fmt.Errorf("%q: %w", spec, err)
	}
	var conns []net.Conn
	for i := range count {
		src := net.ParseIP(fmt.Sprintf("127.0.0.%d", first+i%sources))
		d := net.Dialer{LocalAddr: &net.TCPAddr{IP: src}, Timeout: 30 * time.Second}
		c, err := d.Dial("tcp", addr)
		if err != nil {
			return err
		}
		// Headers begun, never finished: a slow-loris client.
		_, _ = io.WriteString(c, "GET /api/v1/envs HTTP/1.1\r\nHost: tether\r\nX-Slow: ")
		conns = append(conns, c)
	}
	fmt.Println("ready", len(conns))
	_, _ = io.Copy(io.Discard, os.Stdin)
	return nil
}

// crowd starts a slow-clients process and waits until it holds its
// connections; it ends with the test.
func crowd(t *testing.T, addr string, count, first, sources int) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), fmt.Sprintf("%s=%s %d %d %d", slowClientsEnv, addr, count, first, sources))
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		stdin.Close()
		_ = cmd.Wait()
	})
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil || !strings.HasPrefix(line, "ready") {
		t.Fatalf("slow clients: %q, %v", line, err)
	}
}

// openFiles counts the test process's open file descriptors.
func openFiles(t *testing.T) int {
	t.Helper()
	fds, err := os.ReadDir("/proc/self/fd")
	testenv.Need(t, err == nil, fmt.Sprintf("cannot count open files here (/proc/self/fd: %v)", err))
	return len(fds)
}

// metric reads a metric with the given labels from a /metrics page.
func metric(page, name, labels string) (float64, bool) {
	re := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(name+labels) + ` (\S+)$`)
	m := re.FindStringSubmatch(page)
	if m == nil {
		return 0, false
	}
	v, err := strconv.ParseFloat(m[1], 64)
	return v, err == nil
}

// get fetches url with a client bound to the loopback address from.
func get(from, url string) (int, string, error) {
	tr := &http.Transport{DialContext: (&net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}}).DialContext, DisableKeepAlives: true}
	cl := &http.Client{Transport: tr, Timeout: 20 * time.Second}
	resp, err := cl.Get(url)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body), err
}

// TestSlowClientsCannotExhaustTheServer opens hundreds of connections that
// never finish their request, first from one address, then from many, and
// checks that the server keeps its open files bounded by its connection
// limits and keeps answering health checks, on the API listener to other
// addresses and on the operations listener.
func TestSlowClientsCannotExhaustTheServer(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	st, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "tether.db"), sqlite.Config{})
	if err != nil {
		t.Fatal(err)
	}
	b := bus.NewLocal(zerolog.Nop())
	srv, err := server.New(server.Config{}, st, b, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	cfg := server.DefaultHTTP()
	cfg.MaxConns, cfg.MaxConnsPerClient = 64, 16
	// Slow clients are held for the whole test: the limits, not the
	// timeouts, must bound what they cost.
	cfg.API.ReadHeaderTimeout, cfg.API.ReadTimeout = 5*time.Minute, 5*time.Minute
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ops, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	baseline := openFiles(t)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		if err := server.NewHTTP(cfg, srv, zerolog.Nop()).Serve(ctx, ln, ops); err != nil && !errors.Is(err, context.Canceled) {
			t.Errorf("serve: %v", err)
		}
	}()
	t.Cleanup(func() {
		cancel()
		wg.Wait()
		b.Close()
		st.Close()
	})
	api, opsURL := "http://"+ln.Addr().String(), "http://"+ops.Addr().String()

	// waitMetric polls the operations listener's metrics until cond holds
	// (a guard against hangs, not a speed assertion).
	waitMetric := func(name, labels string, cond func(float64) bool) float64 {
		t.Helper()
		var v float64
		for deadline := time.Now().Add(60 * time.Second); ; {
			_, page, err := get("127.0.0.1", opsURL+"/metrics")
			if err == nil {
				var ok bool
				if v, ok = metric(page, name, labels); ok && cond(v) {
					return v
				}
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s%s is %v, not there within 60s (%v)", name, labels, v, err)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	ready := func(from, url string) {
		t.Helper()
		status, body, err := get(from, url+"/readyz")
		var checks map[string]string
		if err != nil || status != http.StatusOK || json.Unmarshal([]byte(body), &checks) != nil || checks["store"] != "ok" {
			t.Fatalf("readyz on %s from %s: %d %q %v, want 200 with store ok", url, from, status, body, err)
		}
	}
	bounded := func(phase string) {
		t.Helper()
		// The server's own connections: at most MaxConns clients, the
		// one being accepted, the probes' and a little slack.
		if got, limit := openFiles(t), baseline+cfg.MaxConns+1+16; got > limit {
			t.Fatalf("%s: %d open files, want at most %d (%d before, max-conns %d)", phase, got, limit, baseline, cfg.MaxConns)
		}
	}

	// One address opens 300: it gets its 16, the rest are closed at once,
	// and everyone else is still served on the API listener.
	crowd(t, ln.Addr().String(), 300, 2, 1)
	waitMetric("tether_http_connections_refused_total", `{listener="api"}`, func(v float64) bool { return v >= 300-16 })
	if open := waitMetric("tether_http_connections", `{listener="api"}`, func(float64) bool { return true }); open > 16 {
		t.Fatalf("one address holds %v connections, want at most 16", open)
	}
	ready("127.0.0.1", api)
	bounded("one address")

	// Sixty addresses open 10 each: none of them authenticates, so the
	// API listener keeps at most max-anonymous-conns (a quarter of
	// max-conns) of them, closing one for each new connection (the first
	// address's, which holds the most, first); both listeners still
	// answer.
	crowd(t, ln.Addr().String(), 600, 10, 60)
	anonymous := cfg.MaxConns / 4
	waitMetric("tether_http_connections_shed_total", `{listener="api"}`, func(v float64) bool { return v >= 600 })
	if open := waitMetric("tether_http_connections", `{listener="api"}`, func(float64) bool { return true }); open > float64(anonymous) {
		t.Fatalf("the API listener holds %v unauthenticated connections, want at most %d", open, anonymous)
	}
	ready("127.0.0.1", opsURL)
	ready("127.0.0.1", api)
	bounded("sixty addresses")
	var checks map[string]string
	if _, body, _ := get("127.0.0.1", opsURL+"/readyz"); json.Unmarshal([]byte(body), &checks) != nil || len(checks) == 0 {
		t.Fatalf("ops readyz %q", body)
	}
}
