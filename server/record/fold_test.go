package record_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/tetherhq/tether/server/record"
)

func TestUnfold(t *testing.T) {
	for _, tc := range []struct {
		name, kind, data string
		want             []string // kind data, per event
		err              bool
	}{
		{"not folded", "compliance.drift", `{"kind":"compliance.drift"}`, []string{`compliance.drift {"kind":"compliance.drift"}`}, false},
		{"folded, in the row's order", record.EventResults, `{"kind":"resource.results","env":"prod","results":[{"a":1},{"b":[2]}],"error":"x"}`,
			[]string{`resource.result {"kind":"resource.result","env":"prod","result":{"a":1},"error":"x"}`,
				`resource.result {"kind":"resource.result","env":"prod","result":{"b":[2]},"error":"x"}`}, false},
		{"results first", record.EventResults, ` { "results" : [ {"a":1} ] , "kind":"resource.results"}`,
			[]string{`resource.result {"result":{"a":1},"kind":"resource.result"}`}, false},
		{"no results", record.EventResults, `{"kind":"resource.results","results":[]}`, nil, false},
		{"not an object", record.EventResults, `[1]`, nil, true},
		{"without results", record.EventResults, `{"kind":"resource.results"}`, nil, true},
		{"results not a list", record.EventResults, `{"results":{}}`, nil, true},
		{"cut short", record.EventResults, `{"kind":"resource.results","results":[{"a":1}`, nil, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			kinds, events, err := record.Unfold(tc.kind, []byte(tc.data))
			if (err != nil) != tc.err {
				t.Fatalf("err %v, want error %v", err, tc.err)
			}
			var got []string
			for i := range events {
				if !json.Valid(events[i]) {
					t.Fatalf("event %d is not JSON: %s", i, events[i])
				}
				got = append(got, kinds[i]+" "+string(events[i]))
			}
			if fmt.Sprintf("%q", got) != fmt.Sprintf("%q", tc.want) {
				t.Fatalf("got %q, want %q", got, tc.want)
			}
		})
	}
}

func TestEventID(t *testing.T) {
	if got := record.EventID(12, 3, true); got != "12.3" {
		t.Fatalf("element 3 of 12: %q, want 12.3", got)
	}
	if got := record.EventID(12, 0, false); got != "12" {
		t.Fatalf("row 12: %q, want 12", got)
	}
	for _, tc := range []struct {
		id        string
		row       int64
		elem      int
		wantError bool
	}{
		{"12", 12, -1, false}, {"12.0", 12, 0, false}, {"12.7", 12, 7, false},
		{"", 0, 0, true}, {"x", 0, 0, true}, {"-1", 0, 0, true}, {"12.", 0, 0, true}, {"12.-1", 0, 0, true}, {"12.1.2", 0, 0, true}, {".1", 0, 0, true},
	} {
		row, elem, err := record.ParseEventID(tc.id)
		if (err != nil) != tc.wantError || err == nil && (row != tc.row || elem != tc.elem) {
			t.Errorf("ParseEventID(%q) = %d, %d, %v; want %d, %d, error %v", tc.id, row, elem, err, tc.row, tc.elem, tc.wantError)
		}
	}
}

// TestWebhookOfFoldedKind: a webhook asks for resource.result (one
// delivery per result); the stored row's kind is refused, saying so.
func TestWebhookOfFoldedKind(t *testing.T) {
	w := record.Webhook{Name: "r", URL: "https://hooks.example/r", Secret: "0123456789abcdef", Kinds: []string{record.EventResult}}
	if err := record.ValidateWebhook(w); err != nil {
		t.Fatalf("a webhook of %s: %v, want it valid", record.EventResult, err)
	}
	w.Kinds = []string{"compliance.drift", record.EventResults}
	err := record.ValidateWebhook(w)
	if !errors.Is(err, record.ErrInvalidHook) || !strings.Contains(err.Error(), "ask for "+record.EventResult) {
		t.Fatalf("a webhook of %s: %v, want ErrInvalidHook naming %s", record.EventResults, err, record.EventResult)
	}
}
