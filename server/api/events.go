package api

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/tetherhq/tether/model"
	"github.com/tetherhq/tether/server/record"
)

// eventRoutes are the routes of the live events.
func (a *API) eventRoutes() []route {
	return []route{
		{method: "GET", path: "/events", role: record.RoleViewer, summary: "Live events as server-sent events", query: []param{{name: "env", typ: of[string](), desc: "the events of this environment only"}}, stream: true, serve: a.events},
	}
}

// events streams live events as server-sent events: "id: <id>", "event:
// <kind>" and "data: <json>" per event, a comment every KeepAlive while
// idle. A token scoped to one environment sees that environment's events
// only. The events come from the stored event log, which every replica
// appends to, so every replica streams every event; the "id:" lines are
// the log's IDs. The stream opens with a comment and the "id:" of where
// in the log it starts, without data. A client that reconnects with
// Last-Event-ID (to any replica, across restarts) gets the events after
// that one first, when the log still keeps them; when it does not (they
// are older than its retention, or the ID is not one of the log), the
// stream starts with an "events.missed" event saying so.
//
// The stream lasts as long as its client: each write gets WriteTimeout
// from now, so a client that stops reading is dropped and one that reads
// is never cut off by the server's WriteTimeout.
func (a *API) events(r *request) (int, any, error) {
	env := r.QueryParam("env")
	if env != "" {
		if err := model.ValidateEnvName(clip(env)); err != nil {
			return 0, nil, newError("bad_request", "", "env=: %v", err)
		}
		if err := a.envVisible(r.ctx(), r.who, env); err != nil {
			return 0, nil, err
		}
		if r.who.Scoped() && !r.token.Covers(env) {
			return 0, nil, newError("forbidden", "", "token %q is scoped to environment %s, not %s", r.token.Name, r.token.Env, env)
		}
		if r.who.RoleIn(env) == "" {
			return 0, nil, newError("forbidden", "ask an admin of your organization for a role there", "%s has no role in environment %s", r.who.Name, env)
		}
	} else if r.who.Scoped() {
		env = r.token.Env
	}
	// Without an environment, the stream holds the events of the
	// environments the caller sees, and nothing of other organizations.
	visible := a.visibleEnvs(r)
	a.openStreams.Add(1)
	defer a.openStreams.Add(-1)
	w := r.Response()
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.Header().Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	ctrl := http.NewResponseController(w.Writer)
	var mu sync.Mutex
	write := func(s string) error {
		mu.Lock()
		defer mu.Unlock()
		// A writer without deadlines (a test recorder) has none to renew.
		_ = ctrl.SetWriteDeadline(a.now().Add(a.cfg.WriteTimeout))
		if _, err := io.WriteString(w, s); err != nil {
			return err
		}
		return ctrl.Flush()
	}
	ctx, cancel := context.WithCancel(r.ctx())
	defer cancel()
	defer context.AfterFunc(a.streams, cancel)()
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { // owned here: waited for below
		defer wg.Done()
		t := time.NewTicker(a.cfg.KeepAlive)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				if write(": keepalive\n\n") != nil {
					cancel()
					return
				}
			}
		}
	}()
	// The first line says the stream follows: every event from then on
	// comes (a client may act once it reads it). Its "id:" is where in
	// the log the stream starts: a client that reconnects before any
	// event came resumes after it (an EventSource, and tether watch,
	// keep it as the last event ID, as SSE says of an event without
	// data), and misses nothing appended while it was away.
	after := clip(r.Request().Header.Get("Last-Event-ID"))
	opened := func(at string, resumed bool) error {
		if err := write(": following " + orAll(env) + "\nid: " + at + "\n\n"); err != nil || resumed {
			return err
		}
		b, err := json.Marshal(missedEvent{Kind: EventsMissed, After: after, Message: fmt.Sprintf(
			"events after %s are not kept in the server's event log (older than its retention, or not an ID of this server's log): some may have been missed; "+
				"tether resource list and tether alert list show the state now", after)})
		if err != nil {
			return err
		}
		return write("event: " + EventsMissed + "\ndata: " + string(b) + "\n\n")
	}
	err := a.svc.Events.Follow(ctx, env, after, opened, func(id, kind string, data []byte) error {
		if !visible(data) {
			return nil
		}
		return write("id: " + id + "\nevent: " + kind + "\ndata: " + withID(id, data) + "\n\n")
	})
	cancel()
	wg.Wait()
	if err != nil && ctx.Err() == nil {
		a.log.Warn().Err(err).Msg("event stream ended")
	}
	return 0, nil, nil
}

// EventsMissed is the kind of the event that starts a stream resumed after
// an event the server does not keep.
const EventsMissed = "events.missed"

// missedEvent is the data of an EventsMissed event.
type missedEvent struct {
	Kind    string `json:"kind"` // EventsMissed, as every event's data says its kind
	After   string `json:"after"`
	Message string `json:"message"`
}

func orAll(env string) string {
	if env == "" {
		return "every environment"
	}
	return "environment " + env
}

// visibleEnvs returns whether an event (its JSON) is of an environment
// the caller sees; what it learns of environments is kept for the stream.
func (a *API) visibleEnvs(r *request) func(data []byte) bool {
	seen := map[string]bool{}
	return func(data []byte) bool {
		var e struct {
			Env string `json:"env"`
		}
		if json.Unmarshal(data, &e) != nil {
			return false
		}
		if e.Env == "" {
			return r.who.ServerAdmin()
		}
		ok, known := seen[e.Env]
		if !known {
			env, err := a.svc.Envs.GetEnv(r.ctx(), e.Env)
			ok = err == nil && sees(r.who, env)
			if err == nil || isNotFound(err) {
				seen[e.Env] = ok
			}
		}
		return ok
	}
}

// withID puts the event's ID first in its JSON object, as "id": a script
// reading the data alone (tether watch -o json) has it too.
func withID(id string, data []byte) string {
	if len(data) < 2 || data[0] != '{' {
		return string(data)
	}
	b, _ := json.Marshal(id) // a string: never fails
	sep := ","
	if strings.TrimSpace(string(data[1:])) == "}" {
		sep = ""
	}
	return `{"id":` + string(b) + sep + string(data[1:])
}
