package compile

import (
	"context"
	"encoding/json"
	"path/filepath"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/tetherhq/tether/server/event"
	"github.com/tetherhq/tether/server/record"
	"github.com/tetherhq/tether/server/store/sqlite"
)

// TestCompileAlertsLoggedWithThem: a compile's failure and its recovery
// are in the event log, with their alerts, when alertCompile returns;
// nothing waits for the stream's asynchronous append, which is not
// running here (a crash after the alert's commit loses no event).
func TestCompileAlertsLoggedWithThem(t *testing.T) {
	ctx := context.Background()
	st, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "t.db"), sqlite.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	s := New(Config{}, Services{Store: st, Feed: event.NewFeed(nil, nil)}, zerolog.Nop())
	if err := st.CreateEnv(ctx, record.Environment{Name: "prod", Settings: record.DefaultEnvSettings(), CreatedAt: time.Now().UTC()}); err != nil {
		t.Fatal(err)
	}
	var last int64
	for _, step := range []struct {
		outcome record.CompileOutcome
		kind    event.Kind
		alert   record.AlertKind
	}{
		{record.CompileFailed, event.CompileAlert, record.AlertCompileFailed},
		{record.CompileReleased, event.CompileRecovered, record.AlertCompileRecovered},
	} {
		s.alertCompile(ctx, record.Compile{ID: "c-" + string(step.outcome), Env: "prod", Outcome: step.outcome, Revision: "abc"})
		logged, err := st.EventsAfter(ctx, last, "prod", 0)
		if err != nil {
			t.Fatal(err)
		}
		var e event.Event
		if len(logged) != 1 || json.Unmarshal(logged[0].Data, &e) != nil || e.Kind != step.kind || e.Alert == nil || e.Alert.Kind != step.alert {
			t.Fatalf("%s: the event log holds %+v after alertCompile returned, want one %s event", step.outcome, logged, step.kind)
		}
		last = logged[0].ID
		alerts, err := st.Alerts(ctx, record.AlertFilter{Env: "prod", Limit: 1})
		if err != nil || len(alerts) != 1 || alerts[0].Kind != step.alert {
			t.Fatalf("%s: alerts %+v (%v), want the %s alert stored", step.outcome, alerts, err, step.alert)
		}
	}
}
