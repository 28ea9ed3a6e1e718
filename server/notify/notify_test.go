package notify_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/tetherhq/tether/server/notify"
	"github.com/tetherhq/tether/server/record"
	"github.com/tetherhq/tether/server/store"
	"github.com/tetherhq/tether/server/store/postgres"
	"github.com/tetherhq/tether/server/store/postgres/pgtest"
	"github.com/tetherhq/tether/server/store/sqlite"
)

// stores are the stores the tests run on: SQLite, and PostgreSQL where
// it runs.
func stores(t *testing.T, fn func(t *testing.T, open func(t *testing.T) store.Store)) {
	t.Run("sqlite", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "tether.db")
		fn(t, func(t *testing.T) store.Store {
			s, err := sqlite.Open(context.Background(), path, sqlite.Config{})
			if err != nil {
				t.Fatal(err)
			}
			return s
		})
	})
	t.Run("postgres", func(t *testing.T) {
		url := pgtest.Fresh(t)
		fn(t, func(t *testing.T) store.Store {
			s, err := postgres.Open(context.Background(), postgres.Config{URL: url})
			if err != nil {
				t.Fatal(err)
			}
			return s
		})
	})
}

func mustEnv(t *testing.T, s store.Store, name string) {
	t.Helper()
	if err := s.CreateEnv(context.Background(), record.Environment{Name: name, Settings: record.DefaultEnvSettings()}); err != nil {
		t.Fatal(err)
	}
}

// run runs fn until the test ends, or until the returned stop is called
// (which waits for it).
func run(t *testing.T, fn func(ctx context.Context) error) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = fn(ctx) }()
	var once sync.Once
	stop = func() { once.Do(func() { cancel(); <-done }) }
	t.Cleanup(stop)
	return stop
}

type got struct {
	id, kind string
	data     []byte
}

// follow follows s from after and returns what it was told and a channel
// of the events.
func follow(t *testing.T, s *notify.Stream, env, after string) (resumed bool, events <-chan got) {
	t.Helper()
	ch := make(chan got, 1000)
	opened := make(chan bool, 1)
	run(t, func(ctx context.Context) error {
		return s.Follow(ctx, env, after, func(_ string, r bool) error { opened <- r; return nil }, func(id, kind string, data []byte) error {
			ch <- got{id, kind, data}
			return nil
		})
	})
	select {
	case r := <-opened:
		return r, ch
	case <-time.After(30 * time.Second):
		t.Fatal("the stream did not open")
	}
	return false, nil
}

func next(t *testing.T, ch <-chan got) got {
	t.Helper()
	select {
	case g := <-ch:
		return g
	case <-time.After(30 * time.Second):
		t.Fatal("no event came")
	}
	return got{}
}

func event(env string, n int) record.LoggedEvent {
	return record.LoggedEvent{Env: env, Kind: "compliance.drift", Data: fmt.Appendf(nil, `{"kind":"compliance.drift","env":%q,"n":%d}`, env, n)}
}

// TestStreamResume: a follower gets live events with the log's IDs; one
// resuming after an ID gets every event after it, across a restart of
// the process (a new stream over a reopened store); one naming an ID the
// log does not hold is told so and gets the live ones.
func TestStreamResume(t *testing.T) {
	stores(t, func(t *testing.T, open func(t *testing.T) store.Store) {
		st := open(t)
		mustEnv(t, st, "prod")
		mustEnv(t, st, "dev")
		s := notify.NewStream(st, notify.StreamConfig{}, nil, zerolog.Nop())
		stop := run(t, s.Run)
		resumed, live := follow(t, s, "", "")
		_, prod := follow(t, s, "prod", "")
		if !resumed {
			t.Fatal("a new follower: resumed false, want true")
		}
		for i := range 4 {
			s.Append(event([]string{"prod", "dev"}[i%2], i))
		}
		var ids []string
		for i := range 4 {
			g := next(t, live)
			var e struct{ N int }
			if err := json.Unmarshal(g.data, &e); err != nil || e.N != i || g.kind != "compliance.drift" {
				t.Fatalf("event %d: %s %s (%v), want n=%d", i, g.kind, g.data, err, i)
			}
			ids = append(ids, g.id)
		}
		for _, want := range []string{ids[0], ids[2]} {
			if g := next(t, prod); g.id != want {
				t.Fatalf("prod follower got %s, want %s", g.id, want)
			}
		}
		// A restart: the events appended while stopping are kept.
		s.Append(event("prod", 4))
		stop()
		st.Close()
		st = open(t)
		defer st.Close()
		s = notify.NewStream(st, notify.StreamConfig{}, nil, zerolog.Nop())
		run(t, s.Run)
		resumed, again := follow(t, s, "", ids[1])
		if !resumed {
			t.Fatal("resumed after a kept ID: false, want true")
		}
		for _, want := range []int{2, 3, 4} {
			var e struct{ N int }
			if g := next(t, again); json.Unmarshal(g.data, &e) != nil || e.N != want {
				t.Fatalf("after the restart got %s, want n=%d", g.data, want)
			}
		}
		for _, after := range []string{"garbage", "abc-12", "999999999"} {
			resumed, ch := follow(t, s, "", after)
			if resumed {
				t.Fatalf("after %q: resumed, want told some may be missed", after)
			}
			s.Append(event("dev", 100))
			var e struct{ N int }
			if g := next(t, ch); json.Unmarshal(g.data, &e) != nil || e.N != 100 {
				t.Fatalf("after %q got %s, want the live event", after, g.data)
			}
		}
	})
}

// TestStreamPosition: a follower is told where in the log it starts, so
// that one that saw no event resumes there and gets what was appended
// meanwhile, once. Where the log was pruned, even of every event, a
// follower resuming after an ID from before is told some may be missed,
// and one after the newest ID given resumes.
func TestStreamPosition(t *testing.T) {
	stores(t, func(t *testing.T, open func(t *testing.T) store.Store) {
		st := open(t)
		mustEnv(t, st, "prod")
		s := notify.NewStream(st, notify.StreamConfig{}, nil, zerolog.Nop())
		run(t, s.Run)
		_, first := follow(t, s, "", "") // to know when the events were appended
		at := make(chan string, 1)
		fctx, cancel := context.WithCancel(context.Background())
		go func() {
			_ = s.Follow(fctx, "", "", func(id string, _ bool) error { at <- id; return nil }, func(string, string, []byte) error { return nil })
		}()
		start := <-at
		cancel() // gone before any event came
		for i := 1; i <= 3; i++ {
			s.Append(event("prod", i))
		}
		for i := 1; i <= 3; i++ {
			next(t, first)
		}
		resumed, again := follow(t, s, "", start)
		if !resumed {
			t.Fatalf("resumed after where a stream started (%s): false, want true", start)
		}
		for i := 1; i <= 3; i++ {
			var e struct{ N int }
			if g := next(t, again); json.Unmarshal(g.data, &e) != nil || e.N != i {
				t.Fatalf("resumed after %s: got %s, want n=%d", start, g.data, i)
			}
		}
		select {
		case g := <-again:
			t.Fatalf("resumed after %s: got %s more", start, g.data)
		case <-time.After(200 * time.Millisecond):
		}
		b, err := st.EventLogBounds(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if _, err := st.PruneEvents(context.Background(), time.Now().Add(time.Hour)); err != nil {
			t.Fatal(err)
		}
		if resumed, _ := follow(t, s, "", start); resumed {
			t.Fatalf("after %s, every later event pruned: resumed, want told some may be missed", start)
		}
		if resumed, _ := follow(t, s, "", strconv.FormatInt(b.Last, 10)); !resumed {
			t.Fatalf("after the newest ID given (%d), the log pruned: not resumed, want resumed", b.Last)
		}
	})
}

// TestStreamAcrossReplicas: two servers over one PostgreSQL database each
// stream the events the other appends (LISTEN/NOTIFY wakes them).
func TestStreamAcrossReplicas(t *testing.T) {
	url := pgtest.Fresh(t)
	var streams []*notify.Stream
	for range 2 {
		st, err := postgres.Open(context.Background(), postgres.Config{URL: url})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { st.Close() })
		if len(streams) == 0 {
			mustEnv(t, st, "prod")
		}
		s := notify.NewStream(st, notify.StreamConfig{}, nil, zerolog.Nop())
		run(t, s.Run)
		streams = append(streams, s)
	}
	_, onA := follow(t, streams[0], "", "")
	_, onB := follow(t, streams[1], "", "")
	streams[0].Append(event("prod", 1))
	streams[1].Append(event("prod", 2))
	for name, ch := range map[string]<-chan got{"A": onA, "B": onB} {
		seen := map[int]bool{}
		for range 2 {
			var e struct{ N int }
			if g := next(t, ch); json.Unmarshal(g.data, &e) == nil {
				seen[e.N] = true
			}
		}
		if !seen[1] || !seen[2] {
			t.Fatalf("replica %s got %v, want the events of both", name, seen)
		}
	}
}

// TestVerify: what Sign signs verifies with its secret, and not with
// another, nor once tampered with or too old.
func TestVerify(t *testing.T) {
	secret, err := notify.NewSecret()
	if err != nil {
		t.Fatal(err)
	}
	other, _ := notify.NewSecret()
	now := time.Now()
	body := []byte(`{"id":"7","type":"compliance.drift"}`)
	headers := func(secret string, at time.Time, body []byte) http.Header {
		h := http.Header{}
		h.Set(notify.HeaderID, "7")
		h.Set(notify.HeaderTimestamp, strconv.FormatInt(at.Unix(), 10))
		h.Set(notify.HeaderSignature, notify.Sign(secret, "7", at, body))
		return h
	}
	for _, tt := range []struct {
		name   string
		h      http.Header
		body   []byte
		secret string
		ok     bool
	}{
		{"right secret", headers(secret, now, body), body, secret, true},
		{"plain secret", headers("a-plain-secret-of-24-chars", now, body), body, "a-plain-secret-of-24-chars", true},
		{"wrong secret", headers(secret, now, body), body, other, false},
		{"body changed", headers(secret, now, body), []byte(`{"id":"7","type":"security.alert"}`), secret, false},
		{"too old", headers(secret, now.Add(-10*time.Minute), body), body, secret, false},
		{"no headers", http.Header{}, body, secret, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			id, err := notify.Verify(tt.h, tt.body, tt.secret, now, 5*time.Minute)
			if (err == nil) != tt.ok || (tt.ok && id != "7") {
				t.Fatalf("Verify: %q %v, want ok=%v", id, err, tt.ok)
			}
		})
	}
}

// receiver is a webhook receiver that verifies and counts deliveries.
type receiver struct {
	*httptest.Server
	secret string
	mu     sync.Mutex
	ids    map[string]int
	bad    int
	got    chan string
	// hold, when set, is waited on before answering.
	hold chan struct{}
	code int
}

func newReceiver(t *testing.T, secret string, code int) *receiver {
	r := &receiver{secret: secret, ids: map[string]int{}, got: make(chan string, 1000), code: code}
	r.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		body, _ := io.ReadAll(req.Body)
		// Counted on receipt: a delivery sent again after its sender
		// gave up on the answer counts twice.
		id, err := notify.Verify(req.Header, body, r.secret, time.Now(), 5*time.Minute)
		r.mu.Lock()
		if err != nil {
			r.bad++
		} else {
			r.ids[id]++
		}
		r.mu.Unlock()
		if r.hold != nil {
			select {
			case <-r.hold:
			case <-req.Context().Done():
				return
			}
		}
		w.WriteHeader(r.code)
		if err == nil {
			r.got <- id
		}
	}))
	t.Cleanup(r.Close)
	return r
}

func hook(t *testing.T, st store.Store, env, name, url, secret string) record.Webhook {
	t.Helper()
	w, err := st.CreateWebhook(context.Background(), record.Webhook{Env: env, Name: name, URL: url, Secret: secret, Kinds: []string{"*"}, Enabled: true})
	if err != nil {
		t.Fatal(err)
	}
	return w
}

// loopback lets senders reach the tests' receivers, which listen on
// 127.0.0.1 (denied by default).
var loopback = notify.Policy{Allow: []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}}

// TestWebhooksExactlyOnceAcrossRestart: every event reaches the receiver
// once, although the sender stops with a delivery in flight (it finishes
// it) and another starts over the reopened store.
func TestWebhooksExactlyOnceAcrossRestart(t *testing.T) {
	stores(t, func(t *testing.T, open func(t *testing.T) store.Store) {
		st := open(t)
		mustEnv(t, st, "prod")
		secret, _ := notify.NewSecret()
		rcv := newReceiver(t, secret, http.StatusNoContent)
		rcv.hold = make(chan struct{})
		hook(t, st, "prod", "ops", rcv.URL, secret)
		sender := notify.NewSender(st, notify.SenderConfig{Timeout: time.Minute, Poll: 50 * time.Millisecond, Policy: loopback}, zerolog.Nop())
		stopSender := run(t, sender.Run)
		s := notify.NewStream(st, notify.StreamConfig{}, sender.Wake, zerolog.Nop())
		stopStream := run(t, s.Run)
		for i := range 5 {
			s.Append(event("prod", i))
		}
		// The first delivery is in flight, held by the receiver: stop
		// then, and let it answer while stopping.
		waitCount(t, st, record.DeliveryPending, 5)
		stopped := make(chan struct{})
		go func() { stopSender(); stopStream(); close(stopped) }()
		time.Sleep(50 * time.Millisecond) // let the stop begin with the attempt held; the outcome holds either way
		close(rcv.hold)
		<-stopped
		st.Close()

		st = open(t)
		defer st.Close()
		sender = notify.NewSender(st, notify.SenderConfig{Poll: 50 * time.Millisecond, Policy: loopback}, zerolog.Nop())
		run(t, sender.Run)
		for range 5 {
			select {
			case <-rcv.got:
			case <-time.After(30 * time.Second):
				t.Fatalf("the receiver got %v, want 5 deliveries", rcv.ids)
			}
		}
		// Every delivery recorded as delivered: none is left to send twice.
		waitCount(t, st, record.DeliveryDelivered, 5)
		if n, err := st.CountDeliveries(context.Background(), record.DeliveryPending); err != nil || n != 0 {
			t.Fatalf("pending after all were delivered: %d (%v)", n, err)
		}
		rcv.mu.Lock()
		defer rcv.mu.Unlock()
		if len(rcv.ids) != 5 || rcv.bad != 0 {
			t.Fatalf("receiver: %v (%d not verified), want 5 deliveries once each", rcv.ids, rcv.bad)
		}
		for id, n := range rcv.ids {
			if n != 1 {
				t.Fatalf("delivery %s received %d times, want once", id, n)
			}
		}
	})
}

// TestWebhooksFailingReceivers: a slow receiver, an unreachable one, one
// answering 500 and one verifying with a wrong secret do not hold back a
// healthy one; their deliveries stay pending with the error recorded,
// to be retried.
func TestWebhooksFailingReceivers(t *testing.T) {
	stores(t, func(t *testing.T, open func(t *testing.T) store.Store) {
		st := open(t)
		defer st.Close()
		ctx := context.Background()
		mustEnv(t, st, "prod")
		secret, _ := notify.NewSecret()
		good := newReceiver(t, secret, http.StatusOK)
		slow := newReceiver(t, secret, http.StatusOK)
		slow.hold = make(chan struct{}) // never answers
		failing := newReceiver(t, secret, http.StatusInternalServerError)
		wrongSecret := newReceiver(t, "another-secret-entirely", http.StatusUnauthorized)
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		unreachable := "http://" + l.Addr().String()
		l.Close()
		hooks := map[string]record.Webhook{}
		for name, url := range map[string]string{"slow": slow.URL, "down": unreachable, "failing": failing.URL, "wrong": wrongSecret.URL, "good": good.URL} {
			hooks[name] = hook(t, st, "prod", name, url, secret)
		}
		sender := notify.NewSender(st, notify.SenderConfig{Timeout: 300 * time.Millisecond, Poll: 50 * time.Millisecond, Workers: 2, Policy: loopback}, zerolog.Nop())
		s := notify.NewStream(st, notify.StreamConfig{}, sender.Wake, zerolog.Nop())
		run(t, s.Run)
		run(t, sender.Run)
		for i := range 10 {
			s.Append(event("prod", i))
		}
		for range 10 {
			select {
			case <-good.got:
			case <-time.After(60 * time.Second):
				t.Fatalf("the healthy receiver got %v, want 10", good.ids)
			}
		}
		// Each failing webhook's first delivery is retried later, its
		// error recorded.
		for _, name := range []string{"slow", "down", "failing", "wrong"} {
			deadline := time.After(60 * time.Second)
			for {
				log, err := st.Deliveries(ctx, "prod", hooks[name].ID, 100)
				if err != nil {
					t.Fatal(err)
				}
				first := log[len(log)-1]
				if first.Attempts > 0 && first.State == record.DeliveryPending && first.Error != "" && first.NextAt.After(time.Now()) {
					break
				}
				select {
				case <-deadline:
					t.Fatalf("%s: first delivery %+v, want pending with an error and a retry later", name, first)
				case <-time.After(20 * time.Millisecond):
				}
			}
		}
		wrongSecret.mu.Lock()
		defer wrongSecret.mu.Unlock()
		if wrongSecret.bad == 0 || len(wrongSecret.ids) != 0 {
			t.Fatalf("the receiver with the wrong secret verified %v, refused %d: want every delivery refused", wrongSecret.ids, wrongSecret.bad)
		}
	})
}

// waitCount waits until n deliveries are in state.
func waitCount(t *testing.T, st store.Store, state record.DeliveryState, want int) {
	t.Helper()
	deadline := time.After(30 * time.Second)
	for {
		n, err := st.CountDeliveries(context.Background(), state)
		if err != nil {
			t.Fatal(err)
		}
		if n == want {
			return
		}
		select {
		case <-deadline:
			t.Fatalf("%d deliveries %s, want %d", n, state, want)
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// TestStreamUnfoldsResults: a stored row of results comes as one
// resource.result event per result, IDs "row.element", each as it would
// have been logged alone; a follower resuming after an element gets the
// rest of its row, after the row's ID alone the rows after it.
func TestStreamUnfoldsResults(t *testing.T) {
	stores(t, func(t *testing.T, open func(t *testing.T) store.Store) {
		st := open(t)
		defer st.Close()
		mustEnv(t, st, "prod")
		s := notify.NewStream(st, notify.StreamConfig{}, nil, zerolog.Nop())
		run(t, s.Run)
		_, live := follow(t, s, "prod", "")
		if _, err := st.AppendEvents(context.Background(), []record.LoggedEvent{
			{Env: "prod", Kind: record.EventResults, Data: []byte(`{"kind":"resource.results","env":"prod","results":[{"n":0},{"n":1},{"n":2}]}`)},
			event("prod", 3),
		}); err != nil {
			t.Fatal(err)
		}
		s.Appended() // appended by another transaction of this process
		var all []got
		for range 4 {
			all = append(all, next(t, live))
		}
		row, err := strconv.ParseInt(all[3].id, 10, 64)
		if err != nil {
			t.Fatalf("the event after the row: ID %q, want a number", all[3].id)
		}
		for i, g := range all[:3] {
			want := fmt.Sprintf(`{"kind":"resource.result","env":"prod","result":{"n":%d}}`, i)
			if g.id != fmt.Sprintf("%d.%d", row-1, i) || g.kind != record.EventResult || string(g.data) != want {
				t.Fatalf("element %d: %s %s %s, want %d.%d resource.result %s", i, g.id, g.kind, g.data, row-1, i, want)
			}
		}
		for _, tc := range []struct {
			after string
			want  []string
		}{
			{all[0].id, []string{all[1].id, all[2].id, all[3].id}},
			{all[2].id, []string{all[3].id}},
			{strconv.FormatInt(row-1, 10), []string{all[3].id}},
			{strconv.FormatInt(row-2, 10), []string{all[0].id, all[1].id, all[2].id, all[3].id}},
		} {
			resumed, ch := follow(t, s, "prod", tc.after)
			if !resumed {
				t.Fatalf("after %s: not resumed, want resumed", tc.after)
			}
			for _, want := range tc.want {
				if g := next(t, ch); g.id != want {
					t.Fatalf("after %s: got %s, want %s", tc.after, g.id, want)
				}
			}
		}
		for _, after := range []string{"1.x", "1.-1", ".2", fmt.Sprintf("%d.0", row+5)} {
			if resumed, _ := follow(t, s, "prod", after); resumed {
				t.Fatalf("after %q: resumed, want told some may be missed", after)
			}
		}
	})
}
