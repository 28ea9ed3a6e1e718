package record

import (
	"errors"
	"reflect"
	"strings"
	"testing"
)

func TestReleaseSettings(t *testing.T) {
	s := DefaultEnvSettings()
	if got, _ := s.Get("release_strategy"); got != "all" {
		t.Fatalf("default release_strategy %q, want all", got)
	}
	for _, kv := range [][2]string{{"release_strategy", "waves"}, {"release_canary", "role=canary"}, {"release_waves", "25%,100%"},
		{"release_max_failed", "10%"}, {"release_advance", "manual"}} {
		if err := s.Set(kv[0], kv[1]); err != nil {
			t.Fatalf("set %s = %s: %v", kv[0], kv[1], err)
		}
		if got, _ := s.Get(kv[0]); got != kv[1] {
			t.Fatalf("%s = %q, want %q", kv[0], got, kv[1])
		}
	}
	for _, kv := range [][2]string{{"release_strategy", "some"}, {"release_canary", "-1"}, {"release_canary", "role"},
		{"release_waves", "50%,25%"}, {"release_waves", "25%"}, {"release_waves", "25,100%"}, {"release_max_failed", "x"},
		{"release_max_failed", "101%"}, {"release_advance", "later"}} {
		before := s
		if err := s.Set(kv[0], kv[1]); !errors.Is(err, ErrInvalidSetting) {
			t.Fatalf("set %s = %s: %v, want ErrInvalidSetting", kv[0], kv[1], err)
		}
		if !reflect.DeepEqual(s, before) {
			t.Fatalf("a refused %s changed the settings", kv[0])
		}
	}
}

func TestPlanWaves(t *testing.T) {
	agents := func(names ...string) []Agent {
		out := make([]Agent, len(names))
		for i, n := range names {
			out[i] = Agent{Name: n}
		}
		return out
	}
	eight := agents("h", "g", "f", "e", "d", "c", "b", "a")
	labelled := agents("a", "b", "c")
	labelled[2].Labels = map[string]string{"role": "canary"}
	for _, tt := range []struct {
		name      string
		st        ReleaseStrategy
		agents    []Agent
		waits     map[string][]string
		want      [][]string
		wantMoved []string
	}{
		{"count then percentages", ReleaseStrategy{Canary: "1", Waves: "25%,100%"}, eight, nil,
			[][]string{{"a"}, {"b", "c"}, {"d", "e", "f", "g", "h"}}, nil},
		{"label selector", ReleaseStrategy{Canary: "role=canary", Waves: "100%"}, labelled, nil,
			[][]string{{"c"}, {"a", "b"}}, nil},
		{"no canary", ReleaseStrategy{Canary: "0", Waves: "50%,100%"}, agents("a", "b"), nil,
			[][]string{{"a"}, {"b"}}, nil},
		// a requires d: the canary that needs a later wave's agent goes
		// in that wave (the canary, empty, is left out).
		{"requires move a waiter later", ReleaseStrategy{Canary: "1", Waves: "50%,100%"}, agents("a", "b", "c", "d"),
			map[string][]string{"a": {"d"}}, [][]string{{"b", "c"}, {"a", "d"}}, []string{"a"}},
		{"requires an earlier wave: nothing moves", ReleaseStrategy{Canary: "1", Waves: "100%"}, agents("a", "b"),
			map[string][]string{"b": {"a"}}, [][]string{{"a"}, {"b"}}, nil},
	} {
		t.Run(tt.name, func(t *testing.T) {
			waves, moved, err := tt.st.PlanWaves(tt.agents, tt.waits)
			if err != nil {
				t.Fatal(err)
			}
			var got [][]string
			for _, w := range waves {
				got = append(got, w.Agents)
			}
			if !reflect.DeepEqual(got, tt.want) || !reflect.DeepEqual(moved, tt.wantMoved) {
				t.Fatalf("got %v moved %v, want %v moved %v", got, moved, tt.want, tt.wantMoved)
			}
		})
	}
}

func TestPlanWavesRefusesACanarySelectorMatchingNobody(t *testing.T) {
	st := ReleaseStrategy{Canary: "role=canary", Waves: "100%"}
	if _, _, err := st.PlanWaves([]Agent{{Name: "a"}}, nil); err == nil || !strings.Contains(err.Error(), "matches none of the 1 accepted agents") {
		t.Fatalf("got %v, want a refusal naming the selector", err)
	}
	if waves, _, err := st.PlanWaves(nil, nil); err != nil || len(waves) != 0 {
		t.Fatalf("no agents: %v, %v; want no wave, no error", waves, err)
	}
}

func TestExceeded(t *testing.T) {
	for _, tt := range []struct {
		max             string
		failed, reached int
		want            bool
	}{
		{"0", 0, 5, false}, {"0", 1, 5, true}, {"2", 2, 5, false}, {"2", 3, 5, true},
		{"10%", 1, 10, false}, {"10%", 2, 10, true}, {"0%", 1, 100, true},
	} {
		if got := (ReleaseStrategy{MaxFailed: tt.max}).Exceeded(tt.failed, tt.reached); got != tt.want {
			t.Errorf("max %s, %d of %d failed: got %v, want %v", tt.max, tt.failed, tt.reached, got, tt.want)
		}
	}
}
