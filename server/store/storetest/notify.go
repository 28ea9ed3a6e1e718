package storetest

import (
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/tetherhq/tether/model"
	"github.com/tetherhq/tether/server/record"
	"github.com/tetherhq/tether/server/store"
)

// testEventLog: events are appended in order with growing IDs, read after
// an ID (of one environment or all), bounded, and pruned by age.
func testEventLog(t *testing.T, s store.Store) {
	mustEnv(t, s, "prod")
	mustEnv(t, s, "dev")
	old := time.Now().Add(-time.Hour).UTC()
	var events []record.LoggedEvent
	for i := range 5 {
		env := []string{"prod", "dev"}[i%2]
		events = append(events, record.LoggedEvent{Env: env, Kind: "agent.online", Data: fmt.Appendf(nil, `{"n":%d}`, i), At: old})
	}
	last, err := s.AppendEvents(ctx, events)
	if err != nil {
		t.Fatal(err)
	}
	got, err := s.EventsAfter(ctx, 0, "", 0)
	if err != nil || len(got) != 5 || got[4].ID != last {
		t.Fatalf("events after 0: %d (%v), want 5 ending at %d", len(got), err, last)
	}
	for i, e := range got {
		if string(e.Data) != fmt.Sprintf(`{"n":%d}`, i) || e.Org != "default" || (i > 0 && e.ID <= got[i-1].ID) {
			t.Fatalf("event %d: %+v: want n=%d of org default, IDs growing", i, e, i)
		}
	}
	prod, err := s.EventsAfter(ctx, got[0].ID, "prod", 0)
	if err != nil || len(prod) != 2 || prod[0].ID != got[2].ID || prod[1].ID != got[4].ID {
		t.Fatalf("prod after the first: %+v (%v), want events 2 and 4", prod, err)
	}
	if page, _ := s.EventsAfter(ctx, 0, "", 2); len(page) != 2 {
		t.Fatalf("limit 2: got %d", len(page))
	}
	last2, err := s.AppendEvents(ctx, []record.LoggedEvent{{Env: "prod", Kind: "agent.offline", Data: []byte(`{}`)}})
	if err != nil || last2 <= last {
		t.Fatalf("second append: %d (%v), want after %d", last2, err, last)
	}
	if _, err := s.AppendEvents(ctx, []record.LoggedEvent{{Env: "prod", Data: []byte(`{}`)}}); !errors.Is(err, model.ErrInvalid) {
		t.Fatalf("event without a kind: %v, want ErrInvalid", err)
	}
	n, err := s.PruneEvents(ctx, time.Now().Add(-time.Minute))
	if err != nil || n != 5 {
		t.Fatalf("prune: %d (%v), want the 5 old events", n, err)
	}
	b, err := s.EventLogBounds(ctx)
	if err != nil || b.First != last2 || b.Last != last2 {
		t.Fatalf("bounds: %+v (%v), want %d..%d", b, err, last2, last2)
	}
	// A deleted environment's events go with it.
	last3, err := s.AppendEvents(ctx, []record.LoggedEvent{{Env: "dev", Kind: "agent.online", Data: []byte(`{}`)}})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteEnv(ctx, "dev"); err != nil {
		t.Fatal(err)
	}
	if dev, err := s.EventsAfter(ctx, 0, "dev", 0); err != nil || len(dev) != 0 {
		t.Fatalf("events of a deleted environment: %+v (%v), want none", dev, err)
	}
	// The newest ID given stays the log's last, kept or not: a follower
	// that starts there misses no later event, and one that resumes after
	// it names an ID of this log.
	if b, err := s.EventLogBounds(ctx); err != nil || b.First != last2 || b.Last != last3 {
		t.Fatalf("bounds with the newest event deleted with its environment: %+v (%v), want %d..%d", b, err, last2, last3)
	}
	if _, err := s.PruneEvents(ctx, time.Now().Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	if b, err := s.EventLogBounds(ctx); err != nil || b.First != 0 || b.Last != last3 {
		t.Fatalf("bounds of a log pruned empty: %+v (%v), want none kept and %d the last given", b, err, last3)
	}
	next, err := s.AppendEvents(ctx, []record.LoggedEvent{{Env: "prod", Kind: "agent.online", Data: []byte(`{}`)}})
	if err != nil || next <= last3 {
		t.Fatalf("an append after the log was pruned empty: %d (%v), want after %d", next, err, last3)
	}
}

// testEventOrder: a follower reading the log after the last ID it read,
// while transactions of several writers append to it at once (results
// with their events, and appends alone, with webhook deliveries), gets
// every event, in order. IDs are given in commit order: were they given
// as the appends ran (a sequence), a transaction could commit a lower ID
// after a higher one was read, and the follower, past it, skip it.
func testEventOrder(t *testing.T, s store.Store) {
	mustEnv(t, s, "prod")
	const writers, rounds = 4, 40
	var rs []model.Resource
	for w := range writers {
		for i := range 4 {
			rs = append(rs, file(fmt.Sprintf("agent-%d", w), fmt.Sprintf("/f%d", i), "x"))
		}
	}
	v := mustPut(t, s, "prod", rs...)
	mustRelease(t, s, "prod", v.Number)
	// A webhook of every kind: its deliveries are written in the
	// transactions of the events.
	if _, err := s.CreateWebhook(ctx, record.Webhook{Env: "prod", Name: "all", URL: "https://hooks.example/all",
		Secret: "0123456789abcdef-all", Kinds: []string{record.WebhookAllKinds}, Enabled: true}); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	var followed []int64
	var followErr error
	var fwg sync.WaitGroup
	fwg.Add(1)
	go func() {
		defer fwg.Done()
		var cursor int64
		for finished := false; ; {
			select {
			case <-done:
				finished = true // one more read: every append committed
			default:
			}
			events, err := s.EventsAfter(ctx, cursor, "", 1000)
			if err != nil {
				followErr = err
				return
			}
			for _, e := range events {
				followed = append(followed, e.ID)
				cursor = e.ID
			}
			if finished && len(events) < 1000 {
				return
			}
		}
	}()
	var wg sync.WaitGroup
	errs := make(chan error, writers)
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			agent := fmt.Sprintf("agent-%d", w)
			for i := range rounds {
				ev := record.LoggedEvent{Env: "prod", Kind: "deploy.done", Data: fmt.Appendf(nil, `{"kind":"deploy.done","env":"prod","agent":%q,"n":%d}`, agent, i)}
				var err error
				if i%2 == 0 {
					r := rs[w*4+i/2%4]
					_, err = s.RecordResults(ctx, []store.ResultBatch{{Env: "prod", Agent: agent, Seq: uint64(i + 1), Version: v.Number, DeployID: "d",
						Results: []model.Result{result(r, model.StateDeployed, nil)}, Events: []record.LoggedEvent{ev}}})
				} else {
					_, err = s.AppendEvents(ctx, []record.LoggedEvent{ev, ev})
				}
				if err != nil {
					errs <- fmt.Errorf("writer %d, round %d: %w", w, i, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(done)
	fwg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if followErr != nil {
		t.Fatal(followErr)
	}
	var all []int64
	for cursor := int64(0); ; {
		page, err := s.EventsAfter(ctx, cursor, "", 1000)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range page {
			all = append(all, e.ID)
			cursor = e.ID
		}
		if len(page) < 1000 {
			break
		}
	}
	if want := writers * rounds * 3 / 2; len(all) != want {
		t.Fatalf("the log holds %d events, want %d", len(all), want)
	}
	if !slices.Equal(followed, all) {
		seen := map[int64]bool{}
		for _, id := range followed {
			seen[id] = true
		}
		var skipped []int64
		for _, id := range all {
			if !seen[id] {
				skipped = append(skipped, id)
			}
		}
		t.Fatalf("a follower read %d of the %d events appended while it read; skipped: %v", len(followed), len(all), skipped)
	}
}

// testResultEventsRolledBack: the events of a results batch are written
// by the transaction that records it, or not at all: a transaction that
// fails after appending them (here the outbox cannot unfold the row of
// results for a webhook of resource.result) leaves no event, no status,
// no action and no sequence number of the batch; the same batch, once it
// can be written, records its results and its events, once.
func testResultEventsRolledBack(t *testing.T, s store.Store) {
	mustEnv(t, s, "prod")
	x := file("a", "/x", "1")
	v := mustPut(t, s, "prod", x)
	mustRelease(t, s, "prod", v.Number)
	if _, err := s.CreateWebhook(ctx, record.Webhook{Env: "prod", Name: "results", URL: "https://hooks.example/results",
		Secret: "0123456789abcdef-results", Kinds: []string{record.EventResult}, Enabled: true}); err != nil {
		t.Fatal(err)
	}
	before, err := s.EventLogBounds(ctx)
	if err != nil {
		t.Fatal(err)
	}
	done := record.LoggedEvent{Env: "prod", Kind: "deploy.done", Data: []byte(`{"kind":"deploy.done","env":"prod"}`)}
	b := store.ResultBatch{Env: "prod", Agent: "a", Seq: 9, Version: v.Number, DeployID: "d", Done: true,
		Results: []model.Result{result(x, model.StateDeployed, model.Changes{"content": {Desired: "1"}})},
		Events:  []record.LoggedEvent{done, {Env: "prod", Kind: record.EventResults, Data: []byte(`{"kind":"resource.results","results":"not a list"}`)}}}
	if _, err := s.RecordResults(ctx, []store.ResultBatch{b}); err == nil {
		t.Fatal("a batch whose transaction fails after appending its events: recorded, want an error")
	}
	if events, err := s.EventsAfter(ctx, before.Last, "", 0); err != nil || len(events) != 0 {
		t.Fatalf("the log after a failed transaction: %+v (%v), want no event of it", events, err)
	}
	if st := statusOf(t, s, "prod")["/x"]; st.State != model.StateAvailable {
		t.Fatalf("the status after a failed transaction: %s, want %s as before", st.State, model.StateAvailable)
	}
	if actions, err := s.Actions(ctx, "prod", x.ID, 10); err != nil || len(actions) != 0 {
		t.Fatalf("the action log after a failed transaction: %+v (%v), want nothing", actions, err)
	}
	if n, err := s.CountDeliveries(ctx, record.DeliveryPending); err != nil || n != 0 {
		t.Fatalf("deliveries after a failed transaction: %d (%v), want none", n, err)
	}
	b.Events[1].Data = []byte(`{"kind":"resource.results","env":"prod","results":[{"n":1}]}`)
	fresh, err := s.RecordResults(ctx, []store.ResultBatch{b})
	if err != nil || !fresh[0] {
		t.Fatalf("the batch once it can be written: fresh %v (%v), want fresh: the failed one left nothing", fresh, err)
	}
	events, err := s.EventsAfter(ctx, before.Last, "", 0)
	if err != nil || len(events) != 2 || events[0].Kind != "deploy.done" || events[1].Kind != record.EventResults {
		t.Fatalf("the log after the batch: %+v (%v), want its two events", events, err)
	}
	if st := statusOf(t, s, "prod")["/x"]; st.State != model.StateDeployed {
		t.Fatalf("the status after the batch: %s, want %s", st.State, model.StateDeployed)
	}
	if fresh, err := s.RecordResults(ctx, []store.ResultBatch{b}); err != nil || fresh[0] {
		t.Fatalf("the batch again: fresh %v (%v), want not fresh", fresh, err)
	}
	if again, err := s.EventsAfter(ctx, before.Last, "", 0); err != nil || len(again) != 2 {
		t.Fatalf("the log after the batch again: %d events (%v), want its two, once", len(again), err)
	}
}

// testWebhooks: webhooks are stored, listed without secrets, changed and
// deleted; appended events queue a delivery per matching enabled
// webhook; claims take the oldest due of each webhook with none claimed,
// and finishing one records its outcome.
func testWebhooks(t *testing.T, s store.Store) {
	mustEnv(t, s, "prod")
	mustEnv(t, s, "dev")
	hook := func(env, name string, kinds ...string) record.Webhook {
		w, err := s.CreateWebhook(ctx, record.Webhook{Env: env, Name: name, URL: "https://hooks.example/" + name,
			Secret: "0123456789abcdef-" + name, Kinds: kinds, Enabled: true})
		if err != nil {
			t.Fatal(err)
		}
		return w
	}
	drift := hook("prod", "drift", "compliance.drift")
	all := hook("prod", "all", "*")
	other := hook("dev", "dev", "*")
	if _, err := s.CreateWebhook(ctx, record.Webhook{Env: "prod", Name: "drift", URL: "https://x.example", Secret: "0123456789abcdef", Kinds: []string{"*"}}); !errors.Is(err, model.ErrExists) {
		t.Fatalf("same name: %v, want ErrExists", err)
	}
	if _, err := s.CreateWebhook(ctx, record.Webhook{Env: "prod", Name: "bad", URL: "ftp://x", Secret: "0123456789abcdef", Kinds: []string{"*"}}); !errors.Is(err, model.ErrInvalid) {
		t.Fatalf("ftp URL: %v, want ErrInvalid", err)
	}
	if _, err := s.CreateWebhook(ctx, record.Webhook{Env: "nope", Name: "x", URL: "https://x.example", Secret: "0123456789abcdef", Kinds: []string{"*"}}); !errors.Is(err, model.ErrNotFound) {
		t.Fatalf("unknown environment: %v, want ErrNotFound", err)
	}
	list, err := s.ListWebhooks(ctx, "prod")
	if err != nil || len(list) != 2 || list[0].ID != drift.ID || list[0].Secret != "" || list[1].Kinds[0] != "*" {
		t.Fatalf("list: %+v (%v), want drift and all without secrets", list, err)
	}
	if w, err := s.GetWebhook(ctx, "prod", drift.ID); err != nil || w.Secret != drift.Secret {
		t.Fatalf("get: %+v (%v), want its secret", w, err)
	}
	if _, err := s.GetWebhook(ctx, "dev", drift.ID); !errors.Is(err, model.ErrNotFound) {
		t.Fatalf("a webhook of prod through dev: %v, want ErrNotFound", err)
	}
	// Disabled: queues nothing.
	if _, err := s.UpdateWebhook(ctx, "dev", other.ID, func(w *record.Webhook) error { w.Enabled = false; return nil }); err != nil {
		t.Fatal(err)
	}
	if _, err := s.AppendEvents(ctx, []record.LoggedEvent{
		{Env: "prod", Kind: "compliance.drift", Data: []byte(`{"n":1}`)},
		{Env: "prod", Kind: "agent.online", Data: []byte(`{"n":2}`)},
		{Env: "dev", Kind: "compliance.drift", Data: []byte(`{"n":3}`)},
		{Env: "prod", Kind: "compliance.drift", Data: []byte(`{"n":4}`)},
	}); err != nil {
		t.Fatal(err)
	}
	if n, err := s.CountDeliveries(ctx, record.DeliveryPending); err != nil || n != 5 {
		t.Fatalf("pending: %d (%v), want 2 to drift and 3 to all", n, err)
	}
	now := time.Now()
	claims, err := s.ClaimDeliveries(ctx, now, now.Add(time.Minute), 10)
	if err != nil || len(claims) != 2 {
		t.Fatalf("claims: %+v (%v), want the oldest of each webhook", claims, err)
	}
	for _, c := range claims {
		if string(c.Payload) != `{"n":1}` || c.Attempts != 1 || c.URL == "" || c.Secret == "" {
			t.Fatalf("claim %+v: want the first event, attempt 1, with URL and secret", c)
		}
	}
	if again, err := s.ClaimDeliveries(ctx, now, now.Add(time.Minute), 10); err != nil || len(again) != 0 {
		t.Fatalf("claims while both are claimed: %+v (%v), want none", again, err)
	}
	// Delivered, and retried later: the next of each comes.
	if err := s.FinishDelivery(ctx, claims[0].ID, record.DeliveryOutcome{State: record.DeliveryDelivered, StatusCode: 204, Latency: 3 * time.Millisecond}); err != nil {
		t.Fatal(err)
	}
	if err := s.FinishDelivery(ctx, claims[1].ID, record.DeliveryOutcome{State: record.DeliveryPending, StatusCode: 503, Error: "busy", NextAt: now.Add(time.Hour)}); err != nil {
		t.Fatal(err)
	}
	next, err := s.ClaimDeliveries(ctx, now, now.Add(time.Minute), 10)
	if err != nil || len(next) != 2 {
		t.Fatalf("next claims: %+v (%v), want one per webhook", next, err)
	}
	// A claim that expired (its sender died) is claimed again.
	later := now.Add(2 * time.Minute)
	expired, err := s.ClaimDeliveries(ctx, later, later.Add(time.Minute), 10)
	if err != nil || len(expired) != 2 || expired[0].ID != next[0].ID || expired[0].Attempts != 2 {
		t.Fatalf("after the claims expired: %+v (%v), want the same again, attempt 2", expired, err)
	}
	log, err := s.Deliveries(ctx, "prod", claims[1].WebhookID, 0)
	if err != nil || len(log) == 0 {
		t.Fatalf("deliveries: %+v (%v)", log, err)
	}
	var retried *record.Delivery
	for i := range log {
		if log[i].ID == claims[1].ID {
			retried = &log[i]
		}
	}
	if retried == nil || retried.State != record.DeliveryPending || retried.StatusCode != 503 || retried.Error != "busy" {
		t.Fatalf("the retried delivery: %+v, want pending after a 503", retried)
	}
	d, err := s.QueueDelivery(ctx, "prod", drift.ID, "webhook.test", []byte(`{}`))
	if err != nil || d.State != record.DeliveryPending || d.Kind != "webhook.test" {
		t.Fatalf("test delivery: %+v (%v)", d, err)
	}
	if err := s.DeleteWebhook(ctx, "prod", all.ID); err != nil {
		t.Fatal(err)
	}
	// A deleted environment's webhooks and deliveries go with it.
	if err := s.DeleteEnv(ctx, "dev"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.GetWebhook(ctx, "dev", other.ID); !errors.Is(err, model.ErrNotFound) {
		t.Fatalf("a webhook of a deleted environment: %v, want ErrNotFound", err)
	}
	if err := s.DeleteWebhook(ctx, "prod", all.ID); !errors.Is(err, model.ErrNotFound) {
		t.Fatalf("deleted twice: %v, want ErrNotFound", err)
	}
	if log, err := s.Deliveries(ctx, "prod", all.ID, 0); err != nil || len(log) != 0 {
		t.Fatalf("deliveries of a deleted webhook: %+v (%v), want none", log, err)
	}
}

// testFleetCounts: resources are counted by environment, state and
// compliance; agents by status; deliveries by state.
func testFleetCounts(t *testing.T, s store.Store) {
	mustEnv(t, s, "prod")
	mustEnv(t, s, "dev")
	v := mustPut(t, s, "prod", file("web-1", "/a", "a"), file("web-1", "/b", "b"), file("web-2", "/c", "c"))
	if _, err := s.Release(ctx, "prod", v.Number); err != nil {
		t.Fatal(err)
	}
	for _, a := range []record.Agent{
		{Env: "prod", Name: "web-1", State: record.AgentAccepted, Connected: true},
		{Env: "prod", Name: "web-2", State: record.AgentAccepted},
		{Env: "prod", Name: "web-3", State: record.AgentPending},
		{Env: "dev", Name: "dev-1", State: record.AgentRejected},
	} {
		a.PublicKey = []byte{1}
		if err := s.UpsertAgent(ctx, a); err != nil {
			t.Fatal(err)
		}
	}
	c, err := s.FleetCounts(ctx)
	if err != nil {
		t.Fatal(err)
	}
	want := []record.ResourceCount{{Env: "prod", State: "available", Compliance: "unknown", N: 3}}
	if fmt.Sprint(c.Resources) != fmt.Sprint(want) {
		t.Fatalf("resources: %+v, want %+v", c.Resources, want)
	}
	wantAgents := []record.AgentCount{{Env: "dev", Status: "rejected", N: 1}, {Env: "prod", Status: "offline", N: 1},
		{Env: "prod", Status: "online", N: 1}, {Env: "prod", Status: "pending", N: 1}}
	if fmt.Sprint(c.Agents) != fmt.Sprint(wantAgents) {
		t.Fatalf("agents: %+v, want %+v", c.Agents, wantAgents)
	}
	if len(c.Deliveries) != 0 {
		t.Fatalf("deliveries: %v, want none", c.Deliveries)
	}
}

// testResultEvents: the events of a results batch are appended to the log
// in the transaction that records it, with their webhook deliveries (a
// folded row of results is delivered one result at a time to the
// webhooks asking for resource.result); a batch seen before, or refused,
// adds nothing.
func testResultEvents(t *testing.T, s store.Store) {
	mustEnv(t, s, "prod")
	mustEnv(t, s, "dev")
	x, y := file("a", "/x", "1"), file("a", "/y", "1")
	v := mustPut(t, s, "prod", x, y)
	mustRelease(t, s, "prod", v.Number)
	hooks := map[string]record.Webhook{}
	for _, h := range []struct{ env, name, kind string }{
		{"prod", "results", record.EventResult}, {"prod", "drift", "compliance.drift"}, {"prod", "all", "*"}, {"dev", "dev", "*"},
	} {
		w, err := s.CreateWebhook(ctx, record.Webhook{Env: h.env, Name: h.name, URL: "https://hooks.example/" + h.name,
			Secret: "0123456789abcdef-" + h.name, Kinds: []string{h.kind}, Enabled: true})
		if err != nil {
			t.Fatal(err)
		}
		hooks[h.name] = w
	}
	folded := record.LoggedEvent{Env: "prod", Kind: record.EventResults,
		Data: []byte(`{"kind":"resource.results","env":"prod","results":[{"n":1},{"n":2}],"agent":"a"}`)}
	done := record.LoggedEvent{Env: "prod", Kind: "deploy.done", Data: []byte(`{"kind":"deploy.done","env":"prod"}`)}
	drift := record.LoggedEvent{Env: "prod", Kind: "compliance.drift", Data: []byte(`{"kind":"compliance.drift","env":"prod"}`)}
	b := store.ResultBatch{Env: "prod", Agent: "a", Seq: 5, Version: v.Number, DeployID: "d", Done: true,
		Results: []model.Result{result(x, model.StateDeployed, nil), result(y, model.StateDeployed, nil)},
		Events:  []record.LoggedEvent{folded, done, drift}}
	fresh, err := s.RecordResults(ctx, []store.ResultBatch{b, b})
	if err != nil || fmt.Sprint(fresh) != "[true false]" {
		t.Fatalf("record: fresh %v (%v), want [true false]", fresh, err)
	}
	logged, err := s.EventsAfter(ctx, 0, "", 0)
	if err != nil || len(logged) != 3 {
		t.Fatalf("the log: %+v (%v), want the batch's 3 events once", logged, err)
	}
	for i, want := range []record.LoggedEvent{folded, done, drift} {
		if e := logged[i]; e.Kind != want.Kind || string(e.Data) != string(want.Data) || e.Env != "prod" || e.Org != "default" || (i > 0 && e.ID <= logged[i-1].ID) {
			t.Fatalf("logged event %d: %+v, want %s of prod, IDs growing", i, e, want.Data)
		}
	}
	deliveries := func(name string) []record.Delivery {
		t.Helper()
		ds, err := s.Deliveries(ctx, hooks[name].Env, hooks[name].ID, 0)
		if err != nil {
			t.Fatal(err)
		}
		slices.Reverse(ds) // oldest first
		return ds
	}
	results := deliveries("results")
	if len(results) != 2 {
		t.Fatalf("deliveries to the webhook of %s: %+v, want one per result", record.EventResult, results)
	}
	for i, d := range results {
		want := fmt.Sprintf(`{"kind":"resource.result","env":"prod","result":{"n":%d},"agent":"a"}`, i+1)
		if d.Kind != record.EventResult || string(d.Payload) != want || d.EventID != logged[0].ID || d.State != record.DeliveryPending {
			t.Fatalf("delivery %d of the results: %s %s of event %d (%s), want %s of event %d, pending", i, d.Kind, d.Payload, d.EventID, d.State, want, logged[0].ID)
		}
	}
	if ds := deliveries("drift"); len(ds) != 1 || ds[0].EventID != logged[2].ID || string(ds[0].Payload) != string(drift.Data) {
		t.Fatalf("deliveries to the drift webhook: %+v, want the drift", ds)
	}
	var kinds []string
	for _, d := range deliveries("all") {
		kinds = append(kinds, d.Kind)
	}
	if fmt.Sprint(kinds) != "[resource.result resource.result deploy.done compliance.drift]" {
		t.Fatalf("deliveries to the webhook of every kind: %v, want each result, then deploy.done and the drift", kinds)
	}
	if ds := deliveries("dev"); len(ds) != 0 {
		t.Fatalf("deliveries to another environment's webhook: %+v, want none", ds)
	}
	count := func() (events, pending int) {
		t.Helper()
		all, err := s.EventsAfter(ctx, 0, "", 0)
		if err != nil {
			t.Fatal(err)
		}
		n, err := s.CountDeliveries(ctx, record.DeliveryPending)
		if err != nil {
			t.Fatal(err)
		}
		return len(all), n
	}
	// Redelivered: nothing more.
	if fresh, err := s.RecordResults(ctx, []store.ResultBatch{b}); err != nil || fresh[0] {
		t.Fatalf("the batch again: fresh %v (%v), want not fresh", fresh, err)
	}
	if events, pending := count(); events != 3 || pending != 7 {
		t.Fatalf("after a duplicate: %d events, %d deliveries; want 3 and 7", events, pending)
	}
	// Refused (an event of another environment): nothing of the call.
	bad := b
	bad.Seq, bad.Events = 7, []record.LoggedEvent{{Env: "dev", Kind: "deploy.done", Data: []byte(`{}`)}}
	good := b
	good.Seq = 6
	if _, err := s.RecordResults(ctx, []store.ResultBatch{good, bad}); !errors.Is(err, model.ErrInvalid) {
		t.Fatalf("an event of another environment: %v, want ErrInvalid", err)
	}
	if events, pending := count(); events != 3 || pending != 7 {
		t.Fatalf("after a refused call: %d events, %d deliveries; want 3 and 7", events, pending)
	}
	// A batch without events appends nothing; a new one appends its own.
	good.Events = nil
	if _, err := s.RecordResults(ctx, []store.ResultBatch{good}); err != nil {
		t.Fatal(err)
	}
	next := b
	next.Seq, next.Events = 8, []record.LoggedEvent{drift}
	if _, err := s.RecordResults(ctx, []store.ResultBatch{next}); err != nil {
		t.Fatal(err)
	}
	if events, pending := count(); events != 4 || pending != 9 {
		t.Fatalf("after a batch without events and one with a drift: %d events, %d deliveries; want 4 and 9", events, pending)
	}
}

// testChangeEvents: the events that tell of an operator's decision about
// an agent, of an agent's deletion and of alerts are appended to the
// event log by the transaction that records them, with their webhook
// deliveries: there once it is committed, never where it was refused (a
// decision taken from a stale copy, an unknown agent, an alert of an
// unknown environment), and of an environment halted, by the change of
// its settings.
func testChangeEvents(t *testing.T, s store.Store) {
	mustEnv(t, s, "prod")
	if _, err := s.CreateWebhook(ctx, record.Webhook{Env: "prod", Name: "all", URL: "https://hooks.example/all",
		Secret: "0123456789abcdef-all", Kinds: []string{record.WebhookAllKinds}, Enabled: true}); err != nil {
		t.Fatal(err)
	}
	event := func(kind, what string) record.LoggedEvent {
		return record.LoggedEvent{Env: "prod", Kind: kind, Data: fmt.Appendf(nil, `{"kind":%q,"env":"prod","error":%q}`, kind, what)}
	}
	var want []string
	check := func(step string) {
		t.Helper()
		events, err := s.EventsAfter(ctx, 0, "", 0)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, e := range events {
			got = append(got, string(e.Data))
		}
		if !slices.Equal(got, want) {
			t.Fatalf("%s: the log holds %q, want %q", step, got, want)
		}
		if n, err := s.CountDeliveries(ctx, record.DeliveryPending); err != nil || n != len(want) {
			t.Fatalf("%s: %d deliveries (%v), want one per event: %d", step, n, err, len(want))
		}
	}
	pending := mustAgent(t, s, record.Agent{Env: "prod", Name: "web-1", State: record.AgentPending, PublicKey: []byte{1}})
	accepted := pending
	accepted.State = record.AgentAccepted
	accept := event("agent.changed", "accept")
	if err := s.SetAgentState(ctx, accepted, pending, accept); err != nil {
		t.Fatal(err)
	}
	want = append(want, string(accept.Data))
	check("an agent accepted")
	rejected := pending
	rejected.State = record.AgentRejected
	if err := s.SetAgentState(ctx, rejected, pending, event("agent.changed", "reject")); !errors.Is(err, model.ErrConflict) {
		t.Fatalf("a decision from a copy read before another: %v, want ErrConflict", err)
	}
	check("a decision refused")
	if err := s.SetAgentState(ctx, record.Agent{Env: "prod", Name: "ghost", State: record.AgentAccepted}, record.Agent{}, event("agent.changed", "ghost")); !errors.Is(err, model.ErrNotFound) {
		t.Fatalf("a decision about an unknown agent: %v, want ErrNotFound", err)
	}
	check("a decision about an unknown agent")
	alert := event("security.alert", "signed by another key")
	if err := s.RecordAlerts(ctx, []record.Alert{{Env: "prod", Agent: "web-1", Kind: record.AlertSecurity, Message: "signed by another key"}}, alert); err != nil {
		t.Fatal(err)
	}
	want = append(want, string(alert.Data))
	check("an alert recorded")
	if err := s.RecordAlerts(ctx, []record.Alert{{Env: "nope", Kind: record.AlertSecurity, Message: "x"}}, event("security.alert", "nope")); !errors.Is(err, model.ErrNotFound) {
		t.Fatalf("an alert of an unknown environment: %v, want ErrNotFound", err)
	}
	check("an alert refused")
	deleted := event("agent.changed", "deleted")
	if err := s.DeleteAgent(ctx, "prod", "web-1", deleted); err != nil {
		t.Fatal(err)
	}
	want = append(want, string(deleted.Data))
	check("an agent deleted")
	if err := s.DeleteAgent(ctx, "prod", "web-1", event("agent.changed", "deleted again")); !errors.Is(err, model.ErrNotFound) {
		t.Fatalf("an unknown agent deleted: %v, want ErrNotFound", err)
	}
	check("an unknown agent deleted")
	halted := event("env.halted", "halted=true")
	tell := func(was, now record.EnvSettings) ([]record.LoggedEvent, error) {
		if was.Halted == now.Halted {
			return nil, nil
		}
		return []record.LoggedEvent{halted}, nil
	}
	if _, err := s.UpdateEnvSettings(ctx, "prod", func(st *record.EnvSettings) error { st.Halted = true; return nil }, tell); err != nil {
		t.Fatal(err)
	}
	want = append(want, string(halted.Data))
	check("an environment halted")
	if _, err := s.UpdateEnvSettings(ctx, "prod", func(st *record.EnvSettings) error { st.VersionsToKeep = -1; return nil }, tell); !errors.Is(err, model.ErrInvalid) {
		t.Fatalf("settings left invalid: %v, want ErrInvalid", err)
	}
	if _, err := s.UpdateEnvSettings(ctx, "prod", func(st *record.EnvSettings) error { st.Halted = false; return errors.New("refused") }, tell); err == nil {
		t.Fatal("a change its function refused was made")
	}
	check("a settings change refused")
	if _, err := s.UpdateEnvSettings(ctx, "prod", func(st *record.EnvSettings) error { return nil }, tell); err != nil {
		t.Fatal(err)
	}
	check("settings unchanged")
}
