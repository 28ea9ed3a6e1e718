package ingest

import (
	"context"
	"encoding/json"
	"path/filepath"
	"testing"
	"time"

	"github.com/tetherhq/tether/server/event"
	"github.com/tetherhq/tether/server/record"
	"github.com/tetherhq/tether/server/store/sqlite"
)

// TestSecurityAlertsLoggedWithThem: a security alert is in the event log,
// with its alert, when it returns (the stream's append is not running);
// one about an environment that does not exist is still streamed.
func TestSecurityAlertsLoggedWithThem(t *testing.T) {
	ctx := context.Background()
	st, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "t.db"), sqlite.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	s := newTestIngester(t, st)
	if _, err := s.EnsureEnv(ctx, "prod", record.DefaultEnvSettings()); err != nil {
		t.Fatal(err)
	}
	sub := s.Subscribe()
	defer sub.Close()
	s.alertSecurity(ctx, "prod", "web", "signed by another key", "an event signed by another key was dropped")
	logged, err := st.EventsAfter(ctx, 0, "prod", 0)
	if err != nil {
		t.Fatal(err)
	}
	var e event.Event
	if len(logged) != 1 || json.Unmarshal(logged[0].Data, &e) != nil || e.Kind != event.Security || e.Agent != "web" {
		t.Fatalf("the event log holds %+v after the alert, want its security.alert", logged)
	}
	if alerts, err := st.Alerts(ctx, record.AlertFilter{Env: "prod", Kinds: []record.AlertKind{record.AlertSecurity}}); err != nil || len(alerts) != 1 {
		t.Fatalf("alerts %+v (%v), want the one stored", alerts, err)
	}
	s.alertSecurity(ctx, "gone", "web", "signed by another key", "an environment that does not exist")
	for _, want := range []string{"prod", "gone"} {
		wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		got, err := sub.Next(wctx)
		cancel()
		if err != nil || got.Kind != event.Security || got.Env != want {
			t.Fatalf("the subscriber got %+v (%v), want the security alert of %s", got, err, want)
		}
	}
}
