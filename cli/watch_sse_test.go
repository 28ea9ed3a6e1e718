package cli

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestWatchReadsServerSentEvents: `tether watch` reads the stream as
// server-sent events. The "id:" of a block without data (the one that
// opens a stream says where in the event log it starts) is kept as the
// last event ID, so that a watch that has shown nothing yet resumes there
// when the stream is lost; an event cut off by a lost connection is
// neither shown nor resumed after, and comes whole on the next stream.
func TestWatchReadsServerSentEvents(t *testing.T) {
	was, wasMax := watchRetry, watchRetryMax
	watchRetry, watchRetryMax = 20*time.Millisecond, 100*time.Millisecond
	t.Cleanup(func() { watchRetry, watchRetryMax = was, wasMax })

	event := func(id string) string {
		return fmt.Sprintf("id: %s\nevent: agent.changed\ndata: {\"id\":%q,\"kind\":\"agent.changed\",\"env\":\"prod\",\"agent\":\"a%s\"}\n\n", id, id, id)
	}
	var mu sync.Mutex
	var asked []string // each connection's Last-Event-ID
	hold := make(chan struct{})
	t.Cleanup(func() { close(hold) })
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		asked = append(asked, r.Header.Get("Last-Event-ID"))
		n := len(asked)
		mu.Unlock()
		w.Header().Set("Content-Type", "text/event-stream")
		flush := func(s string) {
			_, _ = w.Write([]byte(s))
			w.(http.Flusher).Flush()
		}
		switch n {
		case 1: // opens at 41 and ends before any event
			flush(": following environment prod\nid: 41\n\n")
		case 2: // one event, then one cut off in its data line
			flush(": following environment prod\nid: 41\n\n" + event("42"))
			cut := event("43")
			flush(cut[:len(cut)-20])
		default:
			flush(": following environment prod\nid: 42\n\n" + event("43"))
			select {
			case <-hold:
			case <-r.Context().Done():
			}
		}
	}))
	t.Cleanup(ts.Close)

	ctx, cancel := context.WithCancel(context.Background())
	var out, errb syncBuffer
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, []string{"tether", "watch", "-o", "json", "--server", ts.URL, "--token", "t", "--env", "prod"}, strings.NewReader(""), &out, &errb)
	}()
	dump := func() string { return "stdout:\n" + out.String() + "stderr:\n" + errb.String() }
	waitFor(t, "event 43 on the third stream", 20*time.Second, func() bool { return strings.Contains(out.String(), `"id":"43"`) }, dump)
	cancel()
	if code := <-done; code != 0 {
		t.Fatalf("watch exited %d after Ctrl-C, want 0\n%s", code, dump())
	}
	mu.Lock()
	defer mu.Unlock()
	if len(asked) < 3 || asked[0] != "" || asked[1] != "41" || asked[2] != "42" {
		t.Fatalf("Last-Event-ID of each connection: %q, want \"\", then 41 (where the first stream opened, no event shown), then 42 (the last whole event)\n%s", asked, dump())
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 2 || !strings.Contains(lines[0], `"id":"42"`) || !strings.Contains(lines[1], `"id":"43"`) {
		t.Fatalf("shown:\n%s\nwant events 42 and 43, once each, whole\n%s", out.String(), dump())
	}
}
