package storetest

import (
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/tetherhq/tether/model"
	"github.com/tetherhq/tether/server/record"
	"github.com/tetherhq/tether/server/store"
)

func testReleases(t *testing.T, s store.Store) {
	mustEnv(t, s, "prod")
	mustEnv(t, s, "dev")
	for _, tt := range []struct {
		name string
		r    record.Release
		want error
	}{
		{"unknown environment", record.Release{Env: "nope", Version: 1}, model.ErrNotFound},
		{"no version", record.Release{Env: "prod"}, model.ErrInvalid},
		{"id not a UUID", record.Release{ID: "x", Env: "prod", Version: 1}, model.ErrInvalid},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := s.StartRelease(ctx, tt.r); !errors.Is(err, tt.want) {
				t.Fatalf("got %v, want %v", err, tt.want)
			}
		})
	}

	started := time.Date(2026, 3, 1, 12, 0, 0, 123456000, time.UTC)
	// Counts given to StartRelease are not taken: a release starts at zero.
	r, err := s.StartRelease(ctx, record.Release{Env: "prod", Version: 3, StartedAt: started, Sent: 9, State: record.ReleaseDone})
	if err != nil {
		t.Fatal(err)
	}
	if r.ID == "" || r.State != record.ReleaseRunning || r.Sent != 0 || r.FinishedAt != nil {
		t.Fatalf("started %+v, want an ID, running, nothing sent", r)
	}
	got, err := s.GetRelease(ctx, "prod", r.ID)
	if err != nil || !got.StartedAt.Equal(started) || got.State != record.ReleaseRunning || got.Version != 3 {
		t.Fatalf("get %+v, %v; want running version 3 started at %v", got, err, started)
	}
	if _, err := s.GetRelease(ctx, "dev", r.ID); !errors.Is(err, model.ErrNotFound) {
		t.Fatalf("release of prod read in dev: %v, want ErrNotFound", err)
	}

	// Progress, then the end.
	progress := r
	progress.Agents, progress.Sent, progress.UpToDate = 10, 4, 1
	progress.Add(record.PendingAgent{Agent: "db", Reason: record.PendingNotConnected, Later: "when it next says hello"})
	if _, err := s.UpdateRelease(ctx, progress); err != nil {
		t.Fatal(err)
	}
	got, err = s.GetRelease(ctx, "prod", r.ID)
	if err != nil || got.Sent != 4 || got.UpToDate != 1 || got.Agents != 10 || got.PendingCount != 1 ||
		!reflect.DeepEqual(got.Pending, progress.Pending) || got.State != record.ReleaseRunning || got.FinishedAt != nil {
		t.Fatalf("after progress %+v, %v; want %+v", got, err, progress)
	}
	if running, err := s.RunningReleases(ctx, "prod"); err != nil || len(running) != 1 || running[0].ID != r.ID {
		t.Fatalf("running %+v, %v; want the one release", running, err)
	}
	for _, bad := range []record.Release{
		{ID: r.ID, Env: "prod", State: "paused"},
		{ID: r.ID, Env: "prod", State: record.ReleaseDone, Sent: -1},
	} {
		if _, err := s.UpdateRelease(ctx, bad); !errors.Is(err, model.ErrInvalid) {
			t.Fatalf("update %+v: %v, want ErrInvalid", bad, err)
		}
	}
	if _, err := s.UpdateRelease(ctx, record.Release{ID: "3f0a4e43-2ea4-4b7b-9a48-56ad5e1e1d1e", Env: "prod", State: record.ReleaseDone}); !errors.Is(err, model.ErrNotFound) {
		t.Fatalf("update of an unknown release: %v, want ErrNotFound", err)
	}
	done := progress
	done.State, done.Sent = record.ReleaseDone, 8
	done.Note = strings.Repeat("n", 2*record.MaxReleaseNote)
	end, err := s.UpdateRelease(ctx, done)
	if err != nil || end.FinishedAt == nil || end.State != record.ReleaseDone {
		t.Fatalf("finish: %+v, %v; want done with an end time", end, err)
	}
	got, err = s.GetRelease(ctx, "prod", r.ID)
	if err != nil || got.State != record.ReleaseDone || got.Sent != 8 || got.FinishedAt == nil || len(got.Note) > record.MaxReleaseNote+len("…") {
		t.Fatalf("finished %+v, %v; want done, 8 sent, an end time, a bounded note", got, err)
	}
	if _, err := s.UpdateRelease(ctx, done); !errors.Is(err, model.ErrConflict) {
		t.Fatalf("update of an ended release: %v, want ErrConflict", err)
	}
	if running, err := s.RunningReleases(ctx, "prod"); err != nil || len(running) != 0 {
		t.Fatalf("running %+v, %v; want none", running, err)
	}

	// Pending lists are bounded; the count is kept.
	many, err := s.StartRelease(ctx, record.Release{Env: "prod", Version: 4})
	if err != nil {
		t.Fatal(err)
	}
	many.State = record.ReleaseDone
	for i := range record.MaxListedPending + 5 {
		many.Pending = append(many.Pending, record.PendingAgent{Agent: fmt.Sprintf("a%d", i), Reason: record.PendingInboxFull})
	}
	many.PendingCount = len(many.Pending)
	if _, err := s.UpdateRelease(ctx, many); err != nil {
		t.Fatal(err)
	}
	if got, err := s.GetRelease(ctx, "prod", many.ID); err != nil || len(got.Pending) != record.MaxListedPending || got.PendingCount != record.MaxListedPending+5 {
		t.Fatalf("pending %d listed of %d (%v), want %d of %d", len(got.Pending), got.PendingCount, err, record.MaxListedPending, record.MaxListedPending+5)
	}

	list, err := s.ListReleases(ctx, "prod", 0)
	if err != nil || len(list) != 2 || list[0].ID != many.ID || list[1].ID != r.ID {
		t.Fatalf("list %+v, %v; want the two releases, newest first", list, err)
	}
	if list, err := s.ListReleases(ctx, "dev", 0); err != nil || len(list) != 0 {
		t.Fatalf("dev's releases %+v, %v; want none", list, err)
	}

	// Pruning keeps the newest and every running one.
	running, err := s.StartRelease(ctx, record.Release{Env: "prod", Version: 5})
	if err != nil {
		t.Fatal(err)
	}
	for v := int64(6); v < 9; v++ {
		x, err := s.StartRelease(ctx, record.Release{Env: "prod", Version: v})
		if err != nil {
			t.Fatal(err)
		}
		x.State = record.ReleaseDone
		if _, err := s.UpdateRelease(ctx, x); err != nil {
			t.Fatal(err)
		}
	}
	n, err := s.PruneReleases(ctx, "prod", 2)
	if err != nil || n != 3 {
		t.Fatalf("pruned %d (%v), want 3 (the two oldest, and version 6)", n, err)
	}
	list, err = s.ListReleases(ctx, "prod", 0)
	if err != nil || len(list) != 3 || list[2].ID != running.ID {
		t.Fatalf("after pruning %+v, %v; want versions 8, 7 and the running 5", list, err)
	}

	// An environment deleted takes its releases along.
	if err := s.DeleteEnv(ctx, "prod"); err != nil {
		t.Fatal(err)
	}
	mustEnv(t, s, "prod")
	if list, err := s.ListReleases(ctx, "prod", 0); err != nil || len(list) != 0 {
		t.Fatalf("releases of a deleted environment: %+v, %v; want none", list, err)
	}
}

func testAgentPages(t *testing.T, s store.Store) {
	mustEnv(t, s, "prod")
	for i := range 7 {
		a := record.Agent{Env: "prod", Name: fmt.Sprintf("web%d", i), State: record.AgentAccepted, Generation: int64(i)}
		if i%3 == 0 {
			a.State = record.AgentPending
		}
		if err := s.UpsertAgent(ctx, a); err != nil {
			t.Fatal(err)
		}
	}
	var names []string
	after := ""
	for pages := 0; ; pages++ {
		page, err := s.ListAgentsAfter(ctx, "prod", after, 3)
		if err != nil {
			t.Fatal(err)
		}
		if len(page) == 0 {
			if pages != 3 {
				t.Fatalf("%d pages, want 3", pages)
			}
			break
		}
		for _, a := range page {
			names = append(names, a.Name)
		}
		after = page[len(page)-1].Name
	}
	want := []string{"web0", "web1", "web2", "web3", "web4", "web5", "web6"}
	if !reflect.DeepEqual(names, want) {
		t.Fatalf("pages gave %v, want %v", names, want)
	}
	if n, err := s.CountAgents(ctx, "prod", record.AgentAccepted); err != nil || n != 4 {
		t.Fatalf("accepted %d (%v), want 4", n, err)
	}

	v := mustPut(t, s, "prod", file("web1", "/a", "1"), file("web2", "/b", "1"), file("web1", "/c", "1"))
	sl, err := s.AgentSlices(ctx, "prod", v.Number, []string{"web2", "nobody", "web1"})
	if err != nil {
		t.Fatal(err)
	}
	if len(sl) != 3 || sl[0].Agent != "web2" || len(sl[0].Resources) != 1 || sl[1].Agent != "nobody" || len(sl[1].Resources) != 0 ||
		sl[2].Agent != "web1" || len(sl[2].Resources) != 2 || sl[2].Generation != v.Number {
		t.Fatalf("slices %+v, want web2 (1), nobody (0), web1 (2) of version %d", sl, v.Number)
	}
	one, err := s.AgentSlice(ctx, "prod", v.Number, "web1")
	if err != nil || !reflect.DeepEqual(one.Resources, sl[2].Resources) {
		t.Fatalf("AgentSlices gave web1 %+v, AgentSlice %+v (%v); want the same", sl[2].Resources, one.Resources, err)
	}
	for _, tt := range []struct {
		after string
		limit int
		want  []string
	}{{"", 0, []string{"web1", "web2"}}, {"", 1, []string{"web1"}}, {"web1", 5, []string{"web2"}}, {"web2", 5, nil}} {
		got, err := s.VersionAgents(ctx, "prod", v.Number, tt.after, tt.limit)
		if err != nil || !reflect.DeepEqual(got, tt.want) {
			t.Fatalf("agents of the version after %q (limit %d): %v, %v; want %v", tt.after, tt.limit, got, err, tt.want)
		}
	}
	hs, err := s.SliceHashes(ctx, "prod", v.Number, []string{"web2", "nobody", "web1"})
	if err != nil || len(hs) != 3 || len(hs[0]) != 1 || len(hs[1]) != 0 || len(hs[2]) != 2 || hs[2][0].ID.Value != "/a" || hs[2][1].ID.Value != "/c" {
		t.Fatalf("slice hashes %+v, %v; want web2 (1), nobody (0), web1 (/a, /c)", hs, err)
	}
	for i, h := range hs[2] {
		if want, _ := sl[2].Resources[i].Hash(); h.Hash != want || h.Version != v.Number {
			t.Fatalf("hash of %s: %x in version %d, want %x in %d", h.ID, h.Hash, h.Version, want, v.Number)
		}
	}
	byID, err := s.ResourcesByID(ctx, "prod", v.Number, []model.ID{file("web1", "/c", "").ID, file("web2", "/b", "").ID, file("web9", "/z", "").ID})
	if err != nil || len(byID) != 2 || byID[0].ID != file("web1", "/c", "").ID || byID[1].Attributes["content"] != "1" {
		t.Fatalf("resources by id %+v, %v; want web1's /c and web2's /b", byID, err)
	}
	// Who waits for what across agents, as stored with the version.
	lb := file("lb", "/backends", "x")
	lb.Requires = []model.ID{file("web1", "/a", "").ID, file("web2", "/b", "").ID, file("lb", "/etc", "").ID}
	also := file("lb", "/more", "x")
	also.Requires = []model.ID{file("web1", "/a", "").ID}
	v2 := mustPut(t, s, "prod", file("web1", "/a", "1"), file("web2", "/b", "1"), file("lb", "/etc", "1"), lb, also)
	waits, known, err := s.VersionWaits(ctx, "prod", v2.Number)
	wantWaits := map[model.ID][]string{file("web1", "/a", "").ID: {"lb"}, file("web2", "/b", "").ID: {"lb"}}
	if err != nil || !known || !reflect.DeepEqual(waits, wantWaits) {
		t.Fatalf("waits %v (known %v, %v), want %v", waits, known, err, wantWaits)
	}
	if waits, known, err := s.VersionWaits(ctx, "prod", v.Number); err != nil || !known || len(waits) != 0 {
		t.Fatalf("waits of a version without cross-agent requirements: %v (known %v, %v), want none, known", waits, known, err)
	}
	if _, _, err := s.VersionWaits(ctx, "prod", 99); !errors.Is(err, model.ErrNotFound) {
		t.Fatalf("waits of a missing version: %v, want ErrNotFound", err)
	}
	if _, err := s.AgentSlices(ctx, "prod", v.Number, make([]string, store.MaxSlicesAtOnce+1)); !errors.Is(err, model.ErrInvalid) {
		t.Fatalf("too many at once: %v, want ErrInvalid", err)
	}
}
