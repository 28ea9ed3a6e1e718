package storetest

import (
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/tetherhq/tether/model"
	"github.com/tetherhq/tether/server/record"
	"github.com/tetherhq/tether/server/store"
)

// testFindAgents: the store finds agents by state, online, label and
// search text, pages them by name and counts them all; it counts an
// environment's agents by state; bad input is refused.
func testFindAgents(t *testing.T, s store.Store) {
	mustEnv(t, s, "prod")
	mustEnv(t, s, "dev")
	now := time.Now()
	since := now.Add(-time.Minute)
	// web-0..web-9 accepted (even ones connected, web-8 connected but not
	// heard from for long, web-9 paused); db-0..db-2 pending; db-3
	// rejected; one agent of dev.
	var ags []record.Agent
	for i := range 10 {
		ags = append(ags, record.Agent{Env: "prod", Name: fmt.Sprintf("web-%d", i), State: record.AgentAccepted, Connected: i%2 == 0, LastSeen: now,
			Labels: map[string]string{"role": "web", "env.tier": fmt.Sprintf("t%d", i%3)}, Paused: i == 9})
	}
	ags[8].LastSeen = now.Add(-time.Hour)
	for i := range 4 {
		ags = append(ags, record.Agent{Env: "prod", Name: fmt.Sprintf("db-%d", i), State: record.AgentPending, Connected: true, LastSeen: now,
			Labels: map[string]string{"role": "db", "100%_sure": "Yes"}})
	}
	ags[13].State = record.AgentRejected
	ags = append(ags, record.Agent{Env: "dev", Name: "web-0", State: record.AgentAccepted, Connected: true, LastSeen: now})
	for _, a := range ags {
		if err := s.UpsertAgent(ctx, a); err != nil {
			t.Fatal(err)
		}
	}
	yes, no := true, false
	web, empty := "web", ""
	for _, tt := range []struct {
		name  string
		f     record.AgentFilter
		want  []string
		total int
	}{
		{"all, by name", record.AgentFilter{}, []string{"db-0", "db-1", "db-2", "db-3", "web-0", "web-1", "web-2", "web-3", "web-4", "web-5", "web-6", "web-7", "web-8", "web-9"}, 14},
		{"state", record.AgentFilter{State: record.AgentPending}, []string{"db-0", "db-1", "db-2"}, 3},
		{"online", record.AgentFilter{Online: &yes, OnlineSince: since}, []string{"web-0", "web-2", "web-4", "web-6"}, 4},
		{"offline: not connected or not heard from", record.AgentFilter{Online: &no, OnlineSince: since}, []string{"web-1", "web-3", "web-5", "web-7", "web-8", "web-9"}, 6},
		{"label key=value", record.AgentFilter{LabelKey: "role", LabelValue: &web}, []string{"web-0", "web-1", "web-2", "web-3", "web-4", "web-5", "web-6", "web-7", "web-8", "web-9"}, 10},
		{"label key with a dot", record.AgentFilter{LabelKey: "env.tier", LabelValue: new("t1")}, []string{"web-1", "web-4", "web-7"}, 3},
		{"label key, any value", record.AgentFilter{LabelKey: "env.tier"}, nil, 10},
		{"label value empty", record.AgentFilter{LabelKey: "role", LabelValue: &empty}, []string{}, 0},
		{"label unknown", record.AgentFilter{LabelKey: "zone"}, []string{}, 0},
		{"search the name, any case", record.AgentFilter{Search: "DB-"}, []string{"db-0", "db-1", "db-2", "db-3"}, 4},
		{"search a label as key=value", record.AgentFilter{Search: "tier=t2"}, []string{"web-2", "web-5", "web-8"}, 3},
		{"search a label's value", record.AgentFilter{Search: "yes"}, []string{"db-0", "db-1", "db-2", "db-3"}, 4},
		{"LIKE's wildcards are text", record.AgentFilter{Search: "%_s"}, []string{"db-0", "db-1", "db-2", "db-3"}, 4},
		{"wildcard alone", record.AgentFilter{Search: "_"}, []string{"db-0", "db-1", "db-2", "db-3"}, 4},
		{"nothing found", record.AgentFilter{Search: "nope"}, []string{}, 0},
		{"filters together", record.AgentFilter{State: record.AgentAccepted, Online: &no, OnlineSince: since, LabelKey: "env.tier", LabelValue: new("t0"), Search: "web"},
			[]string{"web-3", "web-9"}, 2},
		{"first page", record.AgentFilter{Limit: 5}, []string{"db-0", "db-1", "db-2", "db-3", "web-0"}, 14},
		{"middle page", record.AgentFilter{Limit: 5, Offset: 5}, []string{"web-1", "web-2", "web-3", "web-4", "web-5"}, 14},
		{"last page, short", record.AgentFilter{Limit: 5, Offset: 10}, []string{"web-6", "web-7", "web-8", "web-9"}, 14},
		{"past the end", record.AgentFilter{Limit: 5, Offset: 14}, []string{}, 14},
		{"far past the end", record.AgentFilter{Limit: 5, Offset: 1 << 40}, []string{}, 14},
		{"a page of a filter", record.AgentFilter{State: record.AgentAccepted, Limit: 3, Offset: 3}, []string{"web-3", "web-4", "web-5"}, 10},
		{"short first page", record.AgentFilter{State: record.AgentPending, Limit: 50}, []string{"db-0", "db-1", "db-2"}, 3},
		{"page exactly full", record.AgentFilter{State: record.AgentPending, Limit: 3}, []string{"db-0", "db-1", "db-2"}, 3},
		{"offset without limit", record.AgentFilter{State: record.AgentPending, Offset: 2}, []string{"db-2"}, 3},
		{"offset without limit, past the end", record.AgentFilter{Offset: 99}, []string{}, 14},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got, total, err := s.FindAgents(ctx, "prod", tt.f)
			if err != nil {
				t.Fatal(err)
			}
			names := []string{}
			for _, a := range got {
				if a.Env != "prod" {
					t.Errorf("agent %s of %s found in prod", a.Name, a.Env)
				}
				names = append(names, a.Name)
			}
			if tt.want != nil && !slices.Equal(names, tt.want) {
				t.Errorf("got %v, want %v", names, tt.want)
			}
			if tt.want == nil && len(names) != tt.total {
				t.Errorf("got %d agents, want %d", len(names), tt.total)
			}
			if total != tt.total {
				t.Errorf("got total %d, want %d", total, tt.total)
			}
		})
	}
	// An agent found is read whole.
	got, _, err := s.FindAgents(ctx, "prod", record.AgentFilter{Search: "web-9"})
	if err != nil || len(got) != 1 || !got[0].Paused || got[0].Labels["env.tier"] != "t0" || got[0].LastSeen.Sub(now).Abs() > time.Millisecond {
		t.Errorf("web-9 found as %+v, %v; want it paused, labelled tier t0, seen now", got, err)
	}

	for _, tt := range []struct {
		name string
		f    record.AgentFilter
	}{
		{"negative limit", record.AgentFilter{Limit: -1}},
		{"negative offset", record.AgentFilter{Limit: 5, Offset: -1}},
		{"label key with a quote", record.AgentFilter{LabelKey: `role"]`}},
		{"label key with a space", record.AgentFilter{LabelKey: "my role"}},
	} {
		if got, _, err := s.FindAgents(ctx, "prod", tt.f); !errors.Is(err, model.ErrInvalid) {
			t.Errorf("%s: got %v, %v; want ErrInvalid", tt.name, got, err)
		}
	}
	if got, total, err := s.FindAgents(ctx, "nowhere", record.AgentFilter{Limit: 5}); err != nil || len(got) != 0 || total != 0 {
		t.Errorf("agents of an unknown environment: %v, %d, %v; want none", got, total, err)
	}

	c, err := s.CountAgentsByState(ctx, "prod", since)
	if err != nil {
		t.Fatal(err)
	}
	if want := (record.AgentCounts{Online: 4, Offline: 6, Pending: 3, Rejected: 1, Paused: 1}); c != want {
		t.Errorf("CountAgentsByState: %+v, want %+v", c, want)
	}
	// Later, every agent was last heard from too long ago.
	if c, err = s.CountAgentsByState(ctx, "prod", now.Add(time.Minute)); err != nil || c != (record.AgentCounts{Offline: 10, Pending: 3, Rejected: 1, Paused: 1}) {
		t.Errorf("CountAgentsByState a minute later: %+v, %v; want every accepted agent offline", c, err)
	}
	if c, err = s.CountAgentsByState(ctx, "nowhere", since); err != nil || c != (record.AgentCounts{}) {
		t.Errorf("CountAgentsByState of an unknown environment: %+v, %v; want zero", c, err)
	}
}
