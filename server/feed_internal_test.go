package server

import (
	"context"
	"strconv"
	"testing"
	"time"
)

// TestFeedResume: a subscriber that names the last event it saw gets the
// kept events after it, then the live ones, each once; one that names an
// event the feed no longer keeps, or another feed's, is told so.
func TestFeedResume(t *testing.T) {
	f := newFeed()
	for i := range replayLen + 5 {
		f.publish(Event{Kind: EventResult, Env: "prod", Agent: strconv.Itoa(i)})
	}
	last := f.recent[len(f.recent)-1].ID
	third := f.recent[len(f.recent)-3].ID
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	tests := []struct {
		name    string
		after   string
		resumed bool
		first   string // agent of the first event got ("" for the live one)
	}{
		{"kept", third, true, strconv.Itoa(replayLen + 3)},
		{"newest", last, true, ""},
		{"no longer kept", f.origin + "-3", false, ""},
		{"another feed's", "0123456789ab-" + strconv.Itoa(replayLen), false, ""},
		{"ahead of the feed", f.origin + "-99999999", false, ""},
		{"garbage", "x", false, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, resumed := f.subscribeAfter(tt.after)
			defer s.Close()
			if resumed != tt.resumed {
				t.Fatalf("resumed %v, want %v", resumed, tt.resumed)
			}
			f.publish(Event{Kind: EventResult, Env: "prod", Agent: "live"})
			e, err := s.Next(ctx)
			if err != nil {
				t.Fatal(err)
			}
			want := tt.first
			if want == "" {
				want = "live"
			}
			if e.Agent != want {
				t.Fatalf("first event is %s's, want %s's", e.Agent, want)
			}
		})
	}
	if len(f.recent) != replayLen {
		t.Fatalf("%d events kept, want at most %d", len(f.recent), replayLen)
	}
}
