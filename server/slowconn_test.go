package server_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/tetherhq/tether/bus"
	"github.com/tetherhq/tether/server"
	"github.com/tetherhq/tether/server/api"
	"github.com/tetherhq/tether/server/record"
	"github.com/tetherhq/tether/server/store/sqlite"
)

// httpRig is a server's HTTP front on loopback: the API listener, the
// operations listener and an admin token.
type httpRig struct {
	api, ops string
	admin    string
}

// startHTTP serves a server over SQLite with cfg until the test ends.
func startHTTP(tb testing.TB, cfg server.HTTPConfig) httpRig {
	tb.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	st, err := sqlite.Open(ctx, filepath.Join(tb.TempDir(), "tether.db"), sqlite.Config{})
	if err != nil {
		tb.Fatal(err)
	}
	b := bus.NewLocal(zerolog.Nop())
	srv, err := server.New(server.Config{}, st, b, zerolog.Nop())
	if err != nil {
		tb.Fatal(err)
	}
	tok, secret, err := api.IssueToken("root", record.RoleAdmin, "", "test", time.Now())
	if err != nil {
		tb.Fatal(err)
	}
	if err := st.CreateToken(ctx, tok); err != nil {
		tb.Fatal(err)
	}
	if err := cfg.Validate(); err != nil {
		tb.Fatal(err)
	}
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	ops, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { // owned by the test: the cleanup cancels and waits
		defer wg.Done()
		if err := server.NewHTTP(cfg, srv, zerolog.Nop()).Serve(ctx, ln, ops); err != nil && !errors.Is(err, context.Canceled) {
			tb.Errorf("serve: %v", err)
		}
	}()
	tb.Cleanup(func() {
		cancel()
		wg.Wait()
		b.Close()
		st.Close()
	})
	return httpRig{api: ln.Addr().String(), ops: ops.Addr().String(), admin: secret}
}

// slowAttack keeps connections open to an address from many loopback
// addresses, each sending its request a byte at a time: half dribble
// their headers, half a login's body after complete headers. A
// connection the server closes is opened again at once, so the pressure
// stays.
type slowAttack struct {
	cancel context.CancelFunc
	wg     sync.WaitGroup
	dials  atomic.Int64
}

// startSlowAttack opens perSource connections from each of sources
// loopback addresses (127.0.0.10 onwards) to addr; it ends with the test.
func startSlowAttack(tb testing.TB, addr string, sources, perSource int) *slowAttack {
	ctx, cancel := context.WithCancel(context.Background())
	a := &slowAttack{cancel: cancel}
	for s := range sources {
		src := &net.TCPAddr{IP: net.IPv4(127, 0, 0, byte(10+s))}
		for i := range perSource {
			a.wg.Add(1)
			go func() { // owned by a: stop cancels and waits
				defer a.wg.Done()
				a.hold(ctx, addr, src, i%2 == 0)
			}()
		}
	}
	tb.Cleanup(a.stop)
	return a
}

func (a *slowAttack) stop() {
	a.cancel()
	a.wg.Wait()
}

// hold keeps one slow connection open until ctx ends.
func (a *slowAttack) hold(ctx context.Context, addr string, src *net.TCPAddr, headers bool) {
	start := "POST /api/v1/session HTTP/1.1\r\nHost: tether\r\nContent-Type: application/json\r\nContent-Length: 100000\r\n\r\n{\"name\": \""
	if headers {
		start = "GET /api/v1/envs HTTP/1.1\r\nHost: tether\r\nX-Slow: "
	}
	d := net.Dialer{LocalAddr: src, Timeout: 10 * time.Second}
	for ctx.Err() == nil {
		c, err := d.DialContext(ctx, "tcp4", addr)
		if err != nil {
			pause(ctx, 50*time.Millisecond)
			continue
		}
		a.dials.Add(1)
		closed := make(chan struct{})
		go func() { // owned by hold: ends when c is closed, waited for below
			defer close(closed)
			_, _ = io.Copy(io.Discard, c)
		}()
		_, err = io.WriteString(c, start)
		for err == nil {
			select {
			case <-ctx.Done():
				err = ctx.Err()
			case <-closed:
				err = io.EOF
			case <-time.After(time.Second):
				_, err = io.WriteString(c, "a")
			}
		}
		c.Close()
		<-closed
		pause(ctx, 10*time.Millisecond)
	}
}

func pause(ctx context.Context, d time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}

// authGet sends an authenticated GET on a connection of its own, as a
// CLI does, and returns its status.
func authGet(url, token string, timeout time.Duration) (int, error) {
	tr := &http.Transport{DisableKeepAlives: true}
	defer tr.CloseIdleConnections()
	cl := &http.Client{Transport: tr, Timeout: timeout}
	req, _ := http.NewRequest("GET", url, nil)
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := cl.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	return resp.StatusCode, nil
}

// TestSlowConnectionsCannotKeepClientsOut: 40 addresses hold 16 slow
// connections each against an API listener of 256 connections (64 of
// them for connections not authenticated yet), dribbling
// their headers or a login's body and opening a new connection for each
// one closed, with timeouts too long to help. An authenticated request on
// a new connection is still answered, an event stream a logged-in client
// opened before keeps streaming (it is long-lived, not slow), and the
// operations listener answers.
func TestSlowConnectionsCannotKeepClientsOut(t *testing.T) {
	cfg := server.DefaultHTTP()
	cfg.MaxConns, cfg.MaxConnsPerClient = 256, 16
	cfg.API.ReadHeaderTimeout, cfg.API.ReadTimeout = 5*time.Minute, 5*time.Minute
	cfg.API.KeepAlive = 200 * time.Millisecond
	r := startHTTP(t, cfg)

	// A logged-in client's event stream, open before the attack.
	req, _ := http.NewRequest("GET", "http://"+r.api+"/api/v1/events", nil)
	req.Header.Set("Authorization", "Bearer "+r.admin)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("event stream: %d, want 200", resp.StatusCode)
	}
	stream := bufio.NewReader(resp.Body)

	attack := startSlowAttack(t, r.api, 40, 16)
	// Wait until the attack has had the listener full and churning.
	for deadline := time.Now().Add(60 * time.Second); attack.dials.Load() < 40*16; {
		if time.Now().After(deadline) {
			t.Fatalf("the attack opened %d connections, want %d", attack.dials.Load(), 40*16)
		}
		time.Sleep(50 * time.Millisecond)
	}
	time.Sleep(2 * time.Second)

	for i := range 3 {
		// The timeout guards against a hang; it asserts no speed.
		status, err := authGet("http://"+r.api+"/api/v1/envs", r.admin, 60*time.Second)
		if err != nil || status != http.StatusOK {
			t.Fatalf("authenticated request %d under the attack: %d %v, want 200", i+1, status, err)
		}
	}
	status, body, err := get("127.0.0.1", "http://"+r.ops+"/readyz")
	if err != nil || status != http.StatusOK {
		t.Fatalf("ops readyz under the attack: %d %q %v, want 200", status, body, err)
	}
	// The stream still gets its keep-alive comments.
	got := make(chan error, 1)
	go func() {
		for range 5 {
			if _, err := stream.ReadString('\n'); err != nil {
				got <- err
				return
			}
		}
		got <- nil
	}()
	select {
	case err := <-got:
		if err != nil {
			t.Fatalf("the event stream of a logged-in client ended under the attack: %v", err)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("the event stream sends nothing under the attack")
	}
}

// BenchmarkAPIUnderSlowConnections measures the time an authenticated
// request takes to be answered while 40 addresses hold 64 slow
// connections each (the listener's default limits: 1,024 connections, 64
// per address) and open a new one for each one closed: on a new
// connection each time (as the CLI sends them), and on a connection kept
// alive from before the attack (as a browser's). It reports the median,
// 90th percentile and slowest answer.
func BenchmarkAPIUnderSlowConnections(b *testing.B) {
	for _, keepAlive := range []bool{false, true} {
		name := "new-connection"
		if keepAlive {
			name = "kept-alive"
		}
		b.Run(name, func(b *testing.B) {
			cfg := server.DefaultHTTP()
			r := startHTTP(b, cfg)
			tr := &http.Transport{DisableKeepAlives: !keepAlive}
			defer tr.CloseIdleConnections()
			cl := &http.Client{Transport: tr, Timeout: 2 * time.Minute}
			send := func() error {
				req, _ := http.NewRequest("GET", "http://"+r.api+"/api/v1/envs", nil)
				req.Header.Set("Authorization", "Bearer "+r.admin)
				resp, err := cl.Do(req)
				if err != nil {
					return err
				}
				defer resp.Body.Close()
				_, _ = io.Copy(io.Discard, resp.Body)
				if resp.StatusCode != http.StatusOK {
					return fmt.Errorf("status %d", resp.StatusCode)
				}
				return nil
			}
			if err := send(); err != nil {
				b.Fatalf("before the attack: %v", err)
			}
			attack := startSlowAttack(b, r.api, 40, 64)
			for attack.dials.Load() < int64(cfg.MaxConns) {
				time.Sleep(50 * time.Millisecond)
			}
			time.Sleep(2 * time.Second)
			var took []time.Duration
			failed := 0
			b.ResetTimer()
			for range b.N {
				start := time.Now()
				if send() != nil {
					failed++
				}
				took = append(took, time.Since(start))
				if keepAlive {
					// A person's pace, so the connection idles as a
					// browser's does between pages.
					time.Sleep(time.Second)
				}
			}
			b.StopTimer()
			slices.Sort(took)
			at := func(q float64) float64 { return took[min(len(took)-1, int(q*float64(len(took))))].Seconds() * 1000 }
			b.ReportMetric(at(0.5), "p50-ms")
			b.ReportMetric(at(0.9), "p90-ms")
			b.ReportMetric(took[len(took)-1].Seconds()*1000, "max-ms")
			b.ReportMetric(float64(failed), "failed")
			b.ReportMetric(float64(attack.dials.Load()), "attack-conns")
			if testing.Verbose() {
				fmt.Println("answers:", strings.Trim(fmt.Sprint(took), "[]"))
			}
		})
	}
}
