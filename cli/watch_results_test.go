package cli

import (
	"context"
	"fmt"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/tetherhq/tether/bus"
	"github.com/tetherhq/tether/model"
	"github.com/tetherhq/tether/server"
	"github.com/tetherhq/tether/server/api"
	"github.com/tetherhq/tether/server/record"
	"github.com/tetherhq/tether/server/store/sqlite"
)

// TestWatchShowsResults: the results of an agent's report, one row of the
// event log, come to `tether watch` one resource.result each, with IDs
// "row.element"; resumed after such an ID (the API restarted), watch gets
// the results reported meanwhile, none twice, none said missed.
func TestWatchShowsResults(t *testing.T) {
	was, wasMax := watchRetry, watchRetryMax
	watchRetry, watchRetryMax = 20*time.Millisecond, 100*time.Millisecond
	t.Cleanup(func() { watchRetry, watchRetryMax = was, wasMax })

	ctx, cancelRun := context.WithCancel(context.Background())
	st, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "t.db"), sqlite.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	b := bus.NewLocal(zerolog.Nop())
	t.Cleanup(b.Close)
	srv, err := server.New(server.Config{}, st, b, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { defer close(done); _ = srv.Run(ctx) }()
	t.Cleanup(func() { cancelRun(); <-done })
	tok, secret, err := api.IssueToken("admin", record.RoleAdmin, "", "test", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if err := st.CreateToken(ctx, tok); err != nil {
		t.Fatal(err)
	}
	if _, err := srv.EnsureEnv(ctx, "prod", record.DefaultEnvSettings()); err != nil {
		t.Fatal(err)
	}
	pub, key, err := bus.GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	if err := st.UpsertAgent(ctx, record.Agent{Env: "prod", Name: "web", State: record.AgentAccepted, PublicKey: pub, FirstSeen: time.Now(), LastSeen: time.Now()}); err != nil {
		t.Fatal(err)
	}
	signer := bus.NewSigner(key, 0)
	report := func(paths ...string) {
		t.Helper()
		var rs []model.Result
		for _, p := range paths {
			rs = append(rs, model.Result{ID: model.ID{Type: "file", Agent: "web", Key: "path", Value: p}, State: model.StateDeployed})
		}
		e, err := signer.Seal(bus.KindResourceStatus, "prod", "web", bus.ResourceStatus{Generation: 1, DeployID: "d", Results: rs})
		if err != nil {
			t.Fatal(err)
		}
		if err := b.Publish(ctx, e); err != nil {
			t.Fatal(err)
		}
	}

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	stop := apiOn(t, addr, srv)
	wctx, cancel := context.WithCancel(ctx)
	var out, errb syncBuffer
	exit := make(chan int, 1)
	go func() {
		exit <- run(wctx, []string{"tether", "watch", "-o", "json", "--server", "http://" + addr, "--token", secret, "--env", "prod"}, strings.NewReader(""), &out, &errb)
	}()
	t.Cleanup(func() { cancel(); <-exit })
	dump := func() string { return "stdout:\n" + out.String() + "stderr:\n" + errb.String() }
	results := func() (ids, paths []string) {
		for _, e := range streamEvents(out.String()) {
			if e.Kind == server.EventResult && e.Result != nil {
				ids, paths = append(ids, e.ID), append(paths, e.Result.ID.Value)
			}
		}
		return ids, paths
	}
	// The stream is open once a report made now is shown (those made
	// before it opened are not: watch starts with the live events).
	n := 0
	waitFor(t, "a first report's results", 20*time.Second, func() bool {
		n++
		report(fmt.Sprintf("/first%d", n))
		_, paths := results()
		return len(paths) > 0
	}, dump)
	report("/x", "/y", "/z")
	waitFor(t, "a report's three results", 20*time.Second, func() bool {
		_, paths := results()
		return len(paths) >= 3 && strings.Join(paths[len(paths)-3:], " ") == "/x /y /z"
	}, dump)
	ids, paths := results()
	shown := len(paths)
	ids = ids[shown-3:]
	row, _, ok := strings.Cut(ids[0], ".")
	if !ok || ids[0] != row+".0" || ids[1] != row+".1" || ids[2] != row+".2" {
		t.Fatalf("IDs of one report's results: %v, want %s.0 %s.1 %s.2\n%s", ids, row, row, row, dump())
	}

	stop()
	report("/away1", "/away2") // reported while watch is away
	stop = apiOn(t, addr, srv)
	defer stop()
	waitFor(t, "the results reported while away", 20*time.Second, func() bool {
		_, paths := results()
		return len(paths) == shown+2
	}, dump)
	ids, paths = results()
	seen := map[string]bool{}
	for _, id := range ids {
		if seen[id] {
			t.Fatalf("result %s shown twice\n%s", id, dump())
		}
		seen[id] = true
	}
	if got := strings.Join(paths[shown:], " "); got != "/away1 /away2" {
		t.Fatalf("results after the reconnection: %s, want /away1 /away2\n%s", got, dump())
	}
	if !strings.Contains(errb.String(), "resuming after event "+row+".2") || strings.Contains(errb.String(), "may have been missed") {
		t.Fatalf("watch did not resume after the last result it showed (%s.2) without missing any\n%s", row, dump())
	}
}
