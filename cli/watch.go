package cli

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	ucli "github.com/urfave/cli/v2"

	"github.com/tetherhq/tether/server"
	"github.com/tetherhq/tether/server/api"
)

// Reconnection of `tether watch`: the first pause after a lost stream,
// doubling up to the longest.
var (
	watchRetry    = time.Second
	watchRetryMax = 30 * time.Second
)

func watchCommand(term *terminal) *ucli.Command {
	cmd := remoteCommand(term, "watch", "follow live events: results, deploys, agents, alerts (Ctrl-C stops); reconnects when the server restarts", "", nil,
		func(c *ucli.Context, cl *client, asJSON bool) error {
			w := &watcher{term: term, cl: cl, asJSON: asJSON}
			return w.run(c.Context)
		})
	cmd.Description = "Events come as the server publishes them, from the moment watch starts. When the\n" +
		"connection is lost (the server restarts, the network drops, a load balancer sends watch to\n" +
		"another replica) watch says so on stderr and reconnects with back-off (1s, doubling up to\n" +
		"30s), resuming where it was in the server's event log (Last-Event-ID): after the last event\n" +
		"it showed, or where its stream started if none came yet. The server sends first what was\n" +
		"recorded meanwhile (agents' reports ingested while watch was away included), each event\n" +
		"once, from its event log (kept --keep-events, 7 days by default, and shared by every\n" +
		"replica); if it no longer keeps them, watch says that events may have been missed.\n\n" +
		"   tether watch --env prod\n" +
		"   tether watch --env prod -o json | jq 'select(.kind == \"resource.result\")'"
	return cmd
}

// watcher follows the event stream across reconnections.
type watcher struct {
	term   *terminal
	cl     *client
	asJSON bool
	// last is the ID of the last event shown.
	last string
}

// errWatchRefused: the server answered, and will answer again the same
// (a bad token, an unknown environment): reconnecting is no use.
var errWatchRefused = errors.New("refused")

func (w *watcher) run(ctx context.Context) error {
	pause := watchRetry
	connected := false // once: the first connection's failure is an error
	for {
		got, err := w.follow(ctx, connected)
		if ctx.Err() != nil {
			return nil
		}
		if !connected && !got || errors.Is(err, errWatchRefused) {
			return err
		}
		connected = true
		if got {
			pause = watchRetry
		}
		why := "the server closed the stream"
		if err != nil {
			why = err.Error()
		}
		fmt.Fprintf(w.term.stderr, "tether: lost the event stream (%s); reconnecting in %s\n", why, pause)
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(pause):
		}
		pause = min(2*pause, watchRetryMax)
	}
}

// follow connects once and shows events until the stream ends; got says
// the server took the connection (the stream opened).
func (w *watcher) follow(ctx context.Context, again bool) (got bool, err error) {
	q := ""
	if w.cl.env != "" {
		q = "?env=" + url.QueryEscape(w.cl.env)
	}
	req, err := http.NewRequestWithContext(ctx, "GET", w.cl.base+"/api/v1/events"+q, nil)
	if err != nil {
		return false, usageError("server URL %q: %v", w.cl.base, err)
	}
	req.Header.Set("Authorization", "Bearer "+w.cl.token)
	if w.last != "" {
		req.Header.Set("Last-Event-ID", w.last)
	}
	resp, err := (&http.Client{}).Do(req)
	if err != nil {
		return false, fmt.Errorf("cannot reach the server at %s: %v", w.cl.base, err)
	}
	defer resp.Body.Close()
	switch {
	case resp.StatusCode == http.StatusOK:
	case resp.StatusCode >= 500 || resp.StatusCode == http.StatusTooManyRequests:
		return false, fmt.Errorf("server answered %s", resp.Status)
	default:
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		return false, fmt.Errorf("%w: server answered %s: check the token and --env: %s", errWatchRefused, resp.Status, strings.TrimSpace(string(body)))
	}
	if again {
		if w.last != "" {
			fmt.Fprintf(w.term.stderr, "tether: reconnected; resuming after event %s\n", w.last)
		} else {
			fmt.Fprintln(w.term.stderr, "tether: reconnected")
		}
	}
	// Server-sent events: an event is its lines up to a blank one. The
	// "id:" of a block without data is where the stream is in the
	// server's event log (the first block says where it starts): kept
	// as the last ID all the same, so that a watch that has shown
	// nothing yet resumes there and misses nothing. A block cut off by a
	// lost connection is not an event: neither shown nor resumed after.
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	var kind, id string
	var data []string
	hasID := false
	for sc.Scan() {
		line := sc.Text()
		if line == "" {
			if len(data) > 0 {
				w.show(kind, strings.Join(data, "\n"))
			}
			if hasID {
				w.last = id
			}
			kind, id, data, hasID = "", "", data[:0], false
			continue
		}
		field, value, _ := strings.Cut(line, ":")
		value = strings.TrimPrefix(value, " ")
		switch field {
		case "id":
			if !strings.ContainsRune(value, 0) {
				id, hasID = value, true
			}
		case "event":
			kind = value
		case "data":
			data = append(data, value)
		}
	}
	return true, sc.Err()
}

// show prints one event: its JSON as it came (-o json), or a line.
func (w *watcher) show(kind, data string) {
	if kind == api.EventsMissed {
		var m struct {
			Message string `json:"message"`
		}
		if json.Unmarshal([]byte(data), &m) == nil && m.Message != "" {
			fmt.Fprintf(w.term.stderr, "tether: %s\n", m.Message)
		}
		if !w.asJSON {
			return
		}
	}
	if w.asJSON {
		fmt.Fprintln(w.term.stdout, data)
		return
	}
	var e server.Event
	if err := json.Unmarshal([]byte(data), &e); err != nil {
		// A newer server's event: show it as it came.
		fmt.Fprintf(w.term.stdout, "%s  %s  %s\n", time.Now().Format("15:04:05.000"), kind, data)
		return
	}
	fmt.Fprintln(w.term.stdout, eventLine(w.term, e))
}
