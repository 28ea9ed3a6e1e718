package server_test

import (
	"crypto/ed25519"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tetherhq/tether/bus"
	"github.com/tetherhq/tether/server"
	"github.com/tetherhq/tether/server/record"
)

// A known agent's hellos, each written, answered and followed by what
// it misses, pass at most 60 at once, then one a second; beyond, they
// are dropped, counted and alerted. Hellos under its name signed by
// another key do not spend its allowance, and other agents' hellos are
// not held back.
func TestHelloFloodIsBounded(t *testing.T) {
	settings := quietSettings()
	settings.Enrollment = record.EnrollManual
	// The thief's hellos below make alerts of their own: a short window
	// sums up the held-back ones soon.
	r := startRig(t, server.Config{FloodWindow: 500 * time.Millisecond}, map[string]record.EnvSettings{"test": settings})
	noisy := newFakeAgent(t, r.store, "test", "noisy")
	quiet := newFakeAgent(t, r.store, "test", "quiet")
	hello := func(f *fakeAgent) *bus.Envelope {
		return f.seal(t, "test", bus.KindHello, bus.Hello{PublicKey: f.signer.PublicKey()})
	}
	overRate := func() float64 {
		return metricWith(t, r.srv, "tether_ingest_events_total", `{kind="hello",outcome="over_rate"}`)
	}
	publish := func(n int, seal func() *bus.Envelope) {
		t.Helper()
		before := r.srv.IngestStats().Events
		for range n {
			if err := r.bus.Publish(r.ctx, seal()); err != nil {
				t.Fatal(err)
			}
		}
		waitFor(t, "the hellos handled", func() bool { return r.srv.IngestStats().Events >= before+uint64(n) })
	}

	// A thief's hellos under noisy's name are refused, and leave noisy's
	// allowance whole.
	_, thiefKey, _ := bus.GenerateKey()
	thief := bus.NewSigner(thiefKey, 0)
	publish(100, func() *bus.Envelope {
		e, err := thief.Seal(bus.KindHello, "test", "noisy", bus.Hello{PublicKey: thiefKey.Public().(ed25519.PublicKey)})
		if err != nil {
			t.Fatal(err)
		}
		return e
	})
	// From here on, at most the burst of 60 and one a second pass: the
	// clock starts before the burst, so that what refilled while the
	// burst was handled counts as time gone by.
	start := time.Now()
	publish(60, func() *bus.Envelope { return hello(noisy) })
	if n := overRate(); n != 0 {
		t.Fatalf("after noisy's first 60 hellos: %v dropped over its rate, want none", n)
	}

	const flood = 200
	publish(flood, func() *bus.Envelope { return hello(noisy) })
	// At most one a second passed since the burst began.
	if n, least := overRate(), float64(flood-int(time.Since(start).Seconds())-1); n < least {
		t.Fatalf("%d more hellos of noisy: %v dropped over its rate, want at least %v", flood, n, least)
	}
	waitFor(t, "an alert about noisy's hello rate", func() bool {
		as, err := r.store.Alerts(r.ctx, record.AlertFilter{Env: "test", Agent: "noisy", Kind: record.AlertSecurity, Limit: 100})
		if err != nil {
			t.Fatal(err)
		}
		return slices.ContainsFunc(as, func(a record.Alert) bool {
			return strings.Contains(a.Message, "says hello more than 60 times at once, then once a second")
		})
	})

	if err := r.bus.Publish(r.ctx, hello(quiet)); err != nil {
		t.Fatal(err)
	}
	r.waitOnline("quiet")
}
