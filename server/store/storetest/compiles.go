package storetest

import (
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/tetherhq/tether/model"
	"github.com/tetherhq/tether/server/record"
	"github.com/tetherhq/tether/server/store"
)

func mustStartCompile(t *testing.T, s store.Store, env string, ts ...record.Trigger) record.Compile {
	t.Helper()
	var triggers record.Triggers
	for _, tr := range ts {
		triggers = triggers.Add(tr)
	}
	c, err := s.StartCompile(ctx, record.Compile{Env: env, Triggers: triggers})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func testCompiles(t *testing.T, s store.Store) {
	mustEnv(t, s, "prod")
	mustEnv(t, s, "dev")
	operator := record.Trigger{Kind: record.TriggerOperator, By: "alice", Count: 1}
	refused := []struct {
		name string
		c    record.Compile
		want error
	}{
		{"unknown environment", record.Compile{Env: "nope", Triggers: record.Triggers{operator}}, model.ErrNotFound},
		{"no trigger", record.Compile{Env: "prod"}, model.ErrInvalid},
		{"unknown trigger kind", record.Compile{Env: "prod", Triggers: record.Triggers{{Kind: "cron", Count: 1}}}, model.ErrInvalid},
		{"kind twice", record.Compile{Env: "prod", Triggers: record.Triggers{operator, operator}}, model.ErrInvalid},
		{"count 0", record.Compile{Env: "prod", Triggers: record.Triggers{{Kind: record.TriggerOperator}}}, model.ErrInvalid},
		{"id not a UUID", record.Compile{ID: "x", Env: "prod", Triggers: record.Triggers{operator}}, model.ErrInvalid},
	}
	for _, tt := range refused {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := s.StartCompile(ctx, tt.c); !errors.Is(err, tt.want) {
				t.Fatalf("got %v, want %v", err, tt.want)
			}
		})
	}

	started := time.Date(2026, 3, 1, 12, 0, 0, 123456000, time.UTC)
	c, err := s.StartCompile(ctx, record.Compile{Env: "prod", StartedAt: started,
		Triggers: record.Triggers{}.Add(record.Trigger{Kind: record.TriggerFacts, By: "web1", Count: 199}).Add(operator).Add(record.Trigger{Kind: record.TriggerFacts, By: "web2"})})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := uuid.Parse(c.ID); err != nil {
		t.Fatalf("id %q: want a UUID", c.ID)
	}
	if c.Outcome != record.CompileRunning || c.FinishedAt != nil || !c.StartedAt.Equal(started) {
		t.Fatalf("started: %+v, want running since %v", c, started)
	}
	if _, err := s.StartCompile(ctx, record.Compile{ID: c.ID, Env: "dev", Triggers: record.Triggers{operator}}); !errors.Is(err, model.ErrExists) {
		t.Fatalf("id taken: got %v, want ErrExists", err)
	}
	got, err := s.GetCompile(ctx, "prod", c.ID)
	if err != nil {
		t.Fatal(err)
	}
	if got.Triggers.String() != "facts ×200 (web1), operator (alice)" || got.Outcome != record.CompileRunning || got.FinishedAt != nil || !got.StartedAt.Equal(started) {
		t.Fatalf("read back running: %+v (triggers %q)", got, got.Triggers)
	}
	if _, err := s.GetCompile(ctx, "dev", c.ID); !errors.Is(err, model.ErrNotFound) {
		t.Fatalf("another environment's compile: got %v, want ErrNotFound", err)
	}

	for _, tt := range []struct {
		name    string
		outcome record.CompileOutcome
		version int64
	}{
		{"still running", record.CompileRunning, 0},
		{"unknown outcome", "done", 0},
		{"released without a version", record.CompileReleased, 0},
		{"candidate without a version", record.CompileCandidate, 0},
		{"failed with a version", record.CompileFailed, 3},
		{"skipped with a version", record.CompileSkipped, 3},
		{"skipped without the compile it is the same as", record.CompileSkipped, 0},
	} {
		t.Run("finish "+tt.name, func(t *testing.T) {
			bad := c
			bad.Outcome, bad.Version = tt.outcome, tt.version
			if tt.version != 0 {
				bad.SameAs = c.ID
			}
			if _, err := s.FinishCompile(ctx, bad); !errors.Is(err, model.ErrInvalid) {
				t.Fatalf("got %v, want ErrInvalid", err)
			}
		})
	}

	finished := started.Add(1500 * time.Millisecond)
	done := c
	done.Outcome, done.Revision, done.FinishedAt = record.CompileCandidate, "0123abcd", &finished
	done.Version = 3
	for i := range 150 {
		done.Diagnostics = append(done.Diagnostics, record.CompileDiagnostic{File: "main.tether", Line: i + 1, Col: 2, Severity: "warning", Message: fmt.Sprintf("warning %d", i)})
	}
	done.Diagnostics[0].Message = strings.Repeat("é", record.MaxCompileMessage)
	done.ResourcesPerAgent = map[string]int{"web1": 12, "db1": 3}
	done.Undefined = []record.UndefinedBlock{{Name: `file[web3]["/etc/motd"]`, Facts: []string{"os.family", "net.ip"}}}
	fin, err := s.FinishCompile(ctx, done)
	if err != nil {
		t.Fatal(err)
	}
	if len(fin.Diagnostics) != record.MaxCompileDiagnostics || fin.DiagnosticsTotal != 150 {
		t.Fatalf("diagnostics: %d stored of %d, want %d of 150", len(fin.Diagnostics), fin.DiagnosticsTotal, record.MaxCompileDiagnostics)
	}
	if m := fin.Diagnostics[0].Message; len(m) > record.MaxCompileMessage+len("…") || !strings.HasSuffix(m, "…") {
		t.Fatalf("a long message is %d bytes (ends %q), want at most %d, clipped", len(m), m[len(m)-8:], record.MaxCompileMessage)
	}
	got, err = s.GetCompile(ctx, "prod", c.ID)
	if err != nil {
		t.Fatal(err)
	}
	if got.Outcome != record.CompileCandidate || got.Revision != "0123abcd" || got.FinishedAt == nil || !got.FinishedAt.Equal(finished) || got.Duration() != 1500*time.Millisecond {
		t.Fatalf("read back finished: %+v, want candidate 0123abcd, finished after 1.5s", got)
	}
	if !reflect.DeepEqual(got.CompileResult, fin.CompileResult) || got.Version != 3 {
		t.Fatalf("result read back:\n got %+v\nwant %+v", got.CompileResult, fin.CompileResult)
	}
	if _, err := s.FinishCompile(ctx, done); !errors.Is(err, model.ErrConflict) {
		t.Fatalf("finishing twice: got %v, want ErrConflict", err)
	}
	missing := done
	missing.ID = uuid.NewString()
	if _, err := s.FinishCompile(ctx, missing); !errors.Is(err, model.ErrNotFound) {
		t.Fatalf("finishing an unknown compile: got %v, want ErrNotFound", err)
	}

	// A failed compile without a result, and a revision known from the start.
	f := mustStartCompile(t, s, "prod", record.Trigger{Kind: record.TriggerWebhook, By: "git@example.com:ops/model"})
	f.Outcome = record.CompileFailed
	if f, err = s.FinishCompile(ctx, f); err != nil || f.FinishedAt == nil || f.Duration() < 0 {
		t.Fatalf("finish failed: %+v, %v", f, err)
	}
	if got, err := s.GetCompile(ctx, "prod", f.ID); err != nil || got.Outcome != record.CompileFailed || got.Diagnostics != nil || got.ResourcesPerAgent != nil || got.Version != 0 {
		t.Fatalf("failed compile read back: %+v, %v", got, err)
	}

	// A skipped compile: the inputs it found, the compile it is the same
	// as, what that one found.
	sk := mustStartCompile(t, s, "prod", record.Trigger{Kind: record.TriggerFacts, By: "web1"})
	sk.Outcome, sk.Revision, sk.Inputs, sk.SameAs = record.CompileSkipped, "0123abcd", strings.Repeat("ab", 32), c.ID
	sk.ResourcesPerAgent = map[string]int{"web1": 12}
	if _, err := s.FinishCompile(ctx, sk); err != nil {
		t.Fatalf("finish skipped: %v", err)
	}
	if got, err := s.GetCompile(ctx, "prod", sk.ID); err != nil || got.Outcome != record.CompileSkipped || got.Inputs != sk.Inputs || got.SameAs != c.ID ||
		got.Revision != "0123abcd" || got.Version != 0 || got.ResourcesPerAgent["web1"] != 12 {
		t.Fatalf("skipped compile read back: %+v, %v; want skipped, same as %s, with its inputs", got, err, c.ID)
	}

	// Newest first, per environment.
	last := mustStartCompile(t, s, "prod", record.Trigger{Kind: record.TriggerPoll})
	mustStartCompile(t, s, "dev", record.Trigger{Kind: record.TriggerAgent, By: "web9"})
	list, err := s.ListCompiles(ctx, "prod", 0)
	if err != nil {
		t.Fatal(err)
	}
	if ids := compileIDs(list); fmt.Sprint(ids) != fmt.Sprint([]string{last.ID, sk.ID, f.ID, c.ID}) {
		t.Fatalf("compiles of prod: %v, want %v (newest first)", ids, []string{last.ID, sk.ID, f.ID, c.ID})
	}
	if list[3].DiagnosticsTotal != 150 || list[3].Triggers.Count() != 201 {
		t.Fatalf("a listed compile: %+v, want its whole report", list[3])
	}
	if list, err := s.ListCompiles(ctx, "prod", 2); err != nil || len(list) != 2 || list[0].ID != last.ID {
		t.Fatalf("compiles of prod, limit 2: %v, %v", compileIDs(list), err)
	}
	if list, err := s.ListCompiles(ctx, "dev", 0); err != nil || len(list) != 1 || list[0].Triggers.String() != "agent (web9)" {
		t.Fatalf("compiles of dev: %+v, %v", list, err)
	}
}

func testPruneCompiles(t *testing.T, s store.Store) {
	mustEnv(t, s, "prod")
	mustEnv(t, s, "dev")
	var ids []string
	for i := range 5 {
		c := mustStartCompile(t, s, "prod", record.Trigger{Kind: record.TriggerPoll})
		ids = append(ids, c.ID)
		if i == 0 {
			continue // the oldest never ends: a running compile is kept however old
		}
		c.Outcome = record.CompileUnchanged
		if _, err := s.FinishCompile(ctx, c); err != nil {
			t.Fatal(err)
		}
	}
	other := mustStartCompile(t, s, "dev", record.Trigger{Kind: record.TriggerPoll})
	other.Outcome = record.CompileFailed
	if _, err := s.FinishCompile(ctx, other); err != nil {
		t.Fatal(err)
	}
	if n, err := s.PruneCompiles(ctx, "prod", 0); err != nil || n != 0 {
		t.Fatalf("keep 0 keeps all: %d, %v", n, err)
	}
	n, err := s.PruneCompiles(ctx, "prod", 2)
	if err != nil || n != 2 {
		t.Fatalf("prune: %d, %v; want 2 deleted", n, err)
	}
	list, err := s.ListCompiles(ctx, "prod", 0)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := fmt.Sprint(compileIDs(list)), fmt.Sprint([]string{ids[4], ids[3], ids[0]}); got != want {
		t.Fatalf("compiles after prune: %v, want %v", got, want)
	}
	if list, err := s.ListCompiles(ctx, "dev", 0); err != nil || len(list) != 1 {
		t.Fatalf("another environment's compiles after prune: %d, %v; want 1", len(list), err)
	}
}

func compileIDs(cs []record.Compile) []string {
	ids := make([]string, 0, len(cs))
	for _, c := range cs {
		ids = append(ids, c.ID)
	}
	return ids
}
