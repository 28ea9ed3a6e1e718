package cli

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tetherhq/tether/model"
	"github.com/tetherhq/tether/server"
	"github.com/tetherhq/tether/server/record"
)

// waitFor polls f until it holds or the deadline passes.
func waitFor(t *testing.T, what string, d time.Duration, f func() bool, dump func() string) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !f() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v\n%s", what, d, dump())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestDeployWatchShowsDriftAndHealing runs `tether deploy --watch
// --drift-policy heal -o json` as a user would, edits a deployed file by
// hand and reads the drift and the healing off its output, then stops it
// as Ctrl-C does.
func TestDeployWatchShowsDriftAndHealing(t *testing.T) {
	dir, root := quickstart(t)
	about := filepath.Join(root, "tmp", "tether-quickstart", "about.html")

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var out, errb syncBuffer
	code := make(chan int, 1)
	go func() {
		code <- run(ctx, []string{"tether", "deploy", dir, "--root", root, "--watch", "--drift-policy", "heal", "-o", "json"}, strings.NewReader(""), &out, &errb)
	}()
	dump := func() string { return "stdout:\n" + out.String() + "\nstderr:\n" + errb.String() }
	waitFor(t, "watching", time.Minute, func() bool {
		return strings.Contains(errb.String(), "watching 7 resources on 1 agent for drift (drift policy heal)")
	}, dump)

	want, err := os.ReadFile(about)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(about, []byte("defaced"), 0o644); err != nil {
		t.Fatal(err)
	}
	var drift, healed *record.Alert
	waitFor(t, "drift and healing shown", 30*time.Second, func() bool {
		drift, healed = nil, nil
		for _, e := range watchEvents(t, out.String()) {
			if e.Kind != server.EventDrift || e.Alert == nil || e.Alert.ID == nil || !strings.HasSuffix(e.Alert.ID.Value, "about.html") {
				continue
			}
			switch e.Alert.Compliance {
			case model.NonCompliant:
				drift = e.Alert
			case model.Compliant:
				healed = e.Alert
			}
		}
		return drift != nil && healed != nil
	}, dump)
	if got := drift.Changes["content"].Current; got != "defaced" {
		t.Fatalf("drift alert's current content %v, want \"defaced\"", got)
	}
	if !strings.HasPrefix(healed.Message, "healed") {
		t.Fatalf("restore alert %q, want it to say healed", healed.Message)
	}
	if b, err := os.ReadFile(about); err != nil || !bytes.Equal(b, want) {
		t.Fatalf("about.html after healing: %q, %v; want the model's content back", b, err)
	}

	cancel()
	select {
	case c := <-code:
		if c != 0 {
			t.Fatalf("exit %d after Ctrl-C, want 0\n%s", c, dump())
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("deploy --watch did not stop after Ctrl-C\n%s", dump())
	}
	if !strings.Contains(errb.String(), "stopped watching") {
		t.Fatalf("no goodbye on stderr:\n%s", errb.String())
	}

	// What the watch healed is the model's: a plain deploy afterwards finds
	// nothing to change.
	r := deployJSON(t, 0, dir, "--root", root)
	if r.Summary.Unchanged != 7 {
		t.Fatalf("deploy after watching: %+v, want 7 unchanged", r.Summary)
	}
}

// watchEvents parses what deploy --watch -o json printed: the report on the
// first line, then one event per line.
func watchEvents(t *testing.T, s string) []server.Event {
	t.Helper()
	sc := bufio.NewScanner(strings.NewReader(s))
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	var events []server.Event
	first := true
	for sc.Scan() {
		line := sc.Bytes()
		if first {
			var r deployReport
			if err := json.Unmarshal(line, &r); err != nil || r.Summary.Created != 7 {
				t.Fatalf("first line is not the deploy report (%v): %s", err, line)
			}
			first = false
			continue
		}
		var e server.Event
		if err := json.Unmarshal(line, &e); err != nil {
			// The last line may be half written.
			break
		}
		events = append(events, e)
	}
	return events
}

func TestDeployWatchRefusesDryRun(t *testing.T) {
	dir, root := quickstart(t)
	code, _, errs := invoke(t, "deploy", dir, "--root", root, "--watch", "--dry-run")
	if code != exitUsage || !strings.Contains(errs, "drop --dry-run or --watch") {
		t.Fatalf("exit %d, stderr %q; want a usage error", code, errs)
	}
	code, _, errs = invoke(t, "deploy", dir, "--root", root, "--drift-policy", "ignore")
	if code != exitUsage || !strings.Contains(errs, "want alert or heal") {
		t.Fatalf("exit %d, stderr %q; want a usage error", code, errs)
	}
}

func TestEventLines(t *testing.T) {
	term := &terminal{stdout: io.Discard, stderr: io.Discard}
	id := model.ID{Agent: "web-1", Type: "file", Key: "path", Value: "/etc/motd"}
	at := time.Date(2026, 11, 22, 15, 4, 5, 0, time.UTC)
	for _, c := range []struct {
		alert record.Alert
		want  []string
	}{
		{record.Alert{ID: &id, Compliance: model.NonCompliant, Message: "drifted from its intent",
			Changes: model.Changes{"content": {Current: "hi", Desired: "hello"}, "mode": {Current: "0600", Desired: "0644"}}},
			[]string{"drift", id.String(), `content "hi" (want "hello"), mode "0600" (want "0644")`}},
		{record.Alert{ID: &id, Compliance: model.NonCompliant, Message: "drifted from its intent",
			Changes: model.Changes{"content": {Current: "x", Desired: `<html lang="en">` + strings.Repeat("é", 40)}}},
			[]string{`content "x" (want "<html lang=\"en\">éééééééééééééééé"...)`}},
		{record.Alert{ID: &id, Compliance: model.NonCompliant, Message: "drifted from its intent",
			Changes: model.Changes{model.AttrPresent: {Current: false, Desired: true}}},
			[]string{"drift", "missing"}},
		{record.Alert{ID: &id, Compliance: model.NonCompliant, Message: "drifted from its intent: flapping: drifted 5 times within 1m0s",
			Changes: model.Changes{"content": {Current: "x", Desired: "y"}}},
			[]string{"drift", "flapping: drifted 5 times within 1m0s; content"}},
		{record.Alert{ID: &id, Compliance: model.Compliant, Message: "healed: re-applied by drift policy",
			Changes: model.Changes{"content": {Current: "x", Desired: "y"}}},
			[]string{"healed", "re-applied: content"}},
		{record.Alert{ID: &id, Compliance: model.Compliant, Message: "healed: re-applied by drift policy",
			Changes: model.Changes{model.AttrPresent: {Current: false, Desired: true}, "mode": {Current: nil, Desired: "0644"}}},
			[]string{"healed", "re-applied: created"}},
		{record.Alert{ID: &id, Compliance: model.Compliant, Message: "back to its intent: changed back by hand"},
			[]string{"restored", "changed back by hand"}},
	} {
		line := eventLine(term, server.Event{Kind: server.EventDrift, At: at, Env: "prod", Agent: "web-1", Alert: &c.alert})
		for _, w := range c.want {
			if !strings.Contains(line, w) {
				t.Errorf("event line %q lacks %q", line, w)
			}
		}
	}
}

func TestReleaseEventLines(t *testing.T) {
	term := &terminal{stdout: io.Discard, stderr: io.Discard}
	for _, c := range []struct {
		kind server.EventKind
		rel  record.Release
		want []string
	}{
		{server.EventReleaseProgress, record.Release{Version: 7, State: record.ReleaseRunning, Agents: 5000, Sent: 1200, UpToDate: 30, Fanout: record.Fanout{PendingCount: 4}},
			[]string{"release", "version 7", "running: 1234/5000 agents: 1200 sent, 30 up to date, 4 pending"}},
		{server.EventReleaseDone, record.Release{Version: 7, State: record.ReleaseDone, Agents: 2, Sent: 2},
			[]string{"release", "done: 2/2 agents"}},
		{server.EventReleaseDone, record.Release{Version: 7, State: record.ReleaseFailed, Fanout: record.Fanout{Note: "the fan-out stopped: store unavailable"}},
			[]string{"failed", "store unavailable"}},
	} {
		line := eventLine(term, server.Event{Kind: c.kind, Env: "prod", Generation: c.rel.Version, Release: &c.rel})
		for _, w := range c.want {
			if !strings.Contains(line, w) {
				t.Errorf("event line %q lacks %q", line, w)
			}
		}
	}
}
