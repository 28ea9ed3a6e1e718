package storetest

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tetherhq/tether/model"
	"github.com/tetherhq/tether/server/record"
	"github.com/tetherhq/tether/server/store"
)

func testDuplicateBatches(t *testing.T, s store.Store) {
	mustEnv(t, s, "prod")
	x := file("a", "/x", "1")
	v := mustPut(t, s, "prod", x)
	mustRelease(t, s, "prod", v.Number)
	changed := result(x, model.StateDeployed, model.Changes{"content": {Current: "0", Desired: "1"}})
	b := store.ResultBatch{Env: "prod", Agent: "a", Seq: 7, Version: 1, DeployID: "d", Results: []model.Result{changed}}
	other := b
	other.Agent, other.Results = "b", nil // same seq, another sender: not a duplicate
	fresh, err := s.RecordResults(ctx, []store.ResultBatch{b, b, other})
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(fresh) != "[true false true]" {
		t.Fatalf("fresh = %v, want [true false true] (the second copy in one call is a duplicate)", fresh)
	}
	fresh, err = s.RecordResults(ctx, []store.ResultBatch{b})
	if err != nil || fresh[0] {
		t.Fatalf("redelivered batch: fresh %v, err %v; want not fresh", fresh, err)
	}
	acts, err := s.Actions(ctx, "prod", x.ID, 0)
	if err != nil || len(acts) != 1 {
		t.Fatalf("action log after three deliveries of one batch: %d entries (%v), want 1", len(acts), err)
	}
	dacts, err := s.DeployActions(ctx, "prod", "d", 0)
	if err != nil || len(dacts) != 1 || dacts[0].ID != x.ID || dacts[0].Changes["content"].Desired != "1" {
		t.Fatalf("actions of deploy d: %+v, %v", dacts, err)
	}
	if none, err := s.DeployActions(ctx, "prod", "other", 0); err != nil || len(none) != 0 {
		t.Fatalf("actions of an unknown deploy: %v, %v", none, err)
	}
	// The action log's retention: nothing younger than the bound goes,
	// the older goes up to the limit.
	if n, err := s.PruneActions(ctx, time.Now().Add(-time.Hour), 100); err != nil || n != 0 {
		t.Fatalf("prune actions older than an hour: %d, %v; want none", n, err)
	}
	if n, err := s.PruneActions(ctx, time.Now().Add(time.Minute), 0); err != nil || n != 0 {
		t.Fatalf("prune with limit 0: %d, %v; want none", n, err)
	}
	if n, err := s.PruneActions(ctx, time.Now().Add(time.Minute), 100); err != nil || n != 1 {
		t.Fatalf("prune actions older than a minute from now: %d, %v; want 1", n, err)
	}
	if acts, err := s.Actions(ctx, "prod", x.ID, 0); err != nil || len(acts) != 0 {
		t.Fatalf("action log after pruning: %d entries (%v), want 0", len(acts), err)
	}
	if err := s.ForgetIngested(ctx, time.Now().Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	if fresh, err = s.RecordResults(ctx, []store.ResultBatch{b}); err != nil || !fresh[0] {
		t.Fatalf("after ForgetIngested the batch is new again: fresh %v, err %v", fresh, err)
	}
	bad := b
	bad.Seq, bad.Results = 8, []model.Result{{ID: file("b", "/y", "").ID, State: model.StateDeployed}}
	if _, err := s.RecordResults(ctx, []store.ResultBatch{{Env: "prod", Agent: "a", Seq: 9, Results: []model.Result{changed}}, bad}); !errors.Is(err, model.ErrInvalid) {
		t.Fatalf("batch with another agent's resource: got %v, want ErrInvalid", err)
	}
	if fresh, err = s.RecordResults(ctx, []store.ResultBatch{{Env: "prod", Agent: "a", Seq: 9}}); err != nil || !fresh[0] {
		t.Fatalf("a refused call must record nothing, not even its good batch: fresh %v, err %v", fresh, err)
	}
}

func testUpdateSettings(t *testing.T, s store.Store) {
	mustEnv(t, s, "prod")
	env, err := s.UpdateEnvSettings(ctx, "prod", func(st *record.EnvSettings) error { return st.Set("drift_policy", "heal") })
	if err != nil || env.Settings.DriftPolicy != model.DriftHeal {
		t.Fatalf("update: %+v, %v", env.Settings, err)
	}
	if _, err := s.UpdateEnvSettings(ctx, "prod", func(st *record.EnvSettings) error { st.VersionsToKeep = -1; return nil }); !errors.Is(err, model.ErrInvalid) {
		t.Fatalf("invalid settings: got %v, want ErrInvalid", err)
	}
	if _, err := s.UpdateEnvSettings(ctx, "nope", func(*record.EnvSettings) error { return nil }); !errors.Is(err, model.ErrNotFound) {
		t.Fatalf("unknown env: got %v, want ErrNotFound", err)
	}
	// Concurrent updates of different settings lose nothing.
	var wg sync.WaitGroup
	errs := make(chan error, 20)
	for range 20 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := s.UpdateEnvSettings(ctx, "prod", func(st *record.EnvSettings) error {
				st.VersionsToKeep++
				return nil
			})
			errs <- err
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	got, _ := s.GetEnv(ctx, "prod")
	if want := record.DefaultEnvSettings().VersionsToKeep + 20; got.Settings.VersionsToKeep != want || got.Settings.DriftPolicy != model.DriftHeal {
		t.Fatalf("after 20 concurrent increments: versions_to_keep %d, drift %s; want %d, heal", got.Settings.VersionsToKeep, got.Settings.DriftPolicy, want)
	}
}

func testDeleteEnv(t *testing.T, s store.Store) {
	mustEnv(t, s, "prod")
	mustEnv(t, s, "dev")
	shared := file("a", "/x", "1")
	v := mustPut(t, s, "prod", shared, file("a", "/only-prod", "1"))
	mustPut(t, s, "dev", shared)
	mustRelease(t, s, "prod", v.Number)
	if err := s.UpsertAgent(ctx, record.Agent{Env: "prod", Name: "a"}); err != nil {
		t.Fatal(err)
	}
	if err := s.CreateToken(ctx, record.Token{ID: "t1", Name: "ci", Role: record.RoleViewer, Env: "prod", Hash: []byte("h1")}); err != nil {
		t.Fatal(err)
	}
	compile := mustStartCompile(t, s, "prod", record.Trigger{Kind: record.TriggerOperator})
	if err := s.DeleteEnv(ctx, "prod"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.GetEnv(ctx, "prod"); !errors.Is(err, model.ErrNotFound) {
		t.Fatalf("deleted env: got %v, want ErrNotFound", err)
	}
	if err := s.DeleteEnv(ctx, "prod"); !errors.Is(err, model.ErrNotFound) {
		t.Fatalf("deleting twice: got %v, want ErrNotFound", err)
	}
	if sts, err := s.Statuses(ctx, "prod", record.StatusFilter{}); err != nil || len(sts) != 0 {
		t.Fatalf("statuses of a deleted env: %v, %v", sts, err)
	}
	if _, err := s.TokenByHash(ctx, []byte("h1")); !errors.Is(err, model.ErrNotFound) {
		t.Fatalf("token scoped to a deleted env: got %v, want ErrNotFound", err)
	}
	// The other environment still reads its shared body.
	got, err := s.GetVersion(ctx, "dev", 1, true)
	if err != nil || len(got.Resources) != 1 {
		t.Fatalf("dev after deleting prod: %+v, %v", got, err)
	}
	// The name is free again.
	mustEnv(t, s, "prod")
	if vs, _ := s.ListVersions(ctx, "prod"); len(vs) != 0 {
		t.Fatalf("a re-created env starts empty, has %d versions", len(vs))
	}
	if hist, err := s.ResourceHistory(ctx, "prod", shared.ID); err != nil || len(hist) != 0 {
		t.Fatalf("history of a resource of a deleted env, the env re-created: %+v, %v; want none (the versions' rows went with them)", hist, err)
	}
	if cs, err := s.ListCompiles(ctx, "prod", 0); err != nil || len(cs) != 0 {
		t.Fatalf("a re-created env starts without compiles, has %d (%v)", len(cs), err)
	}
	if _, err := s.GetCompile(ctx, "prod", compile.ID); !errors.Is(err, model.ErrNotFound) {
		t.Fatalf("a deleted env's compile: got %v, want ErrNotFound", err)
	}
}

func testHashesAndHistory(t *testing.T, s store.Store) {
	mustEnv(t, s, "prod")
	x1, y := file("a", "/x", "1"), dir("a", "/d")
	x2 := file("a", "/x", "2")
	mustPut(t, s, "prod", y, x1)
	mustPut(t, s, "prod", x2)
	hs, err := s.ResourceHashes(ctx, "prod", 1)
	if err != nil || len(hs) != 2 {
		t.Fatalf("hashes: %v, %v", hs, err)
	}
	hx1, _ := x1.Hash()
	if hs[0].ID != y.ID || hs[1].ID != x1.ID || hs[1].Hash != hx1 || hs[1].Version != 1 {
		t.Fatalf("hashes %+v: want sorted by ID, with x's hash", hs)
	}
	if _, err := s.ResourceHashes(ctx, "prod", 9); !errors.Is(err, model.ErrNotFound) {
		t.Fatalf("hashes of a missing version: got %v, want ErrNotFound", err)
	}
	r, err := s.Resource(ctx, "prod", 2, x2.ID)
	if err != nil || r.Attributes["content"] != "2" {
		t.Fatalf("resource: %+v, %v", r, err)
	}
	if _, err := s.Resource(ctx, "prod", 2, y.ID); !errors.Is(err, model.ErrNotFound) {
		t.Fatalf("resource not in version: got %v, want ErrNotFound", err)
	}
	hist, err := s.ResourceHistory(ctx, "prod", x1.ID)
	hx2, _ := x2.Hash()
	if err != nil || len(hist) != 2 || hist[0].Version != 2 || hist[0].Hash != hx2 || hist[1].Version != 1 || hist[1].Hash != hx1 {
		t.Fatalf("history %+v, %v: want versions 2 then 1 with their hashes", hist, err)
	}
}

func testPruneVersions(t *testing.T, s store.Store) {
	mustEnv(t, s, "prod")
	for i := range 5 {
		mustPut(t, s, "prod", file("a", "/x", fmt.Sprint(i)), file("a", "/same", "s"))
	}
	mustRelease(t, s, "prod", 1) // the released version is kept however old
	n, err := s.PruneVersions(ctx, "prod", 2)
	if err != nil || n != 2 {
		t.Fatalf("prune: %d, %v; want 2 deleted", n, err)
	}
	vs, _ := s.ListVersions(ctx, "prod")
	var nums []int64
	for _, v := range vs {
		nums = append(nums, v.Number)
	}
	if fmt.Sprint(nums) != "[5 4 1]" {
		t.Fatalf("versions after prune: %v, want [5 4 1]", nums)
	}
	hist, err := s.ResourceHistory(ctx, "prod", file("a", "/x", "").ID)
	var in []int64
	for _, h := range hist {
		in = append(in, h.Version)
	}
	if err != nil || fmt.Sprint(in) != "[5 4 1]" {
		t.Fatalf("history of /x after prune: versions %v, %v; want [5 4 1] (a pruned version's rows go with it)", in, err)
	}
	for _, n := range nums {
		if v, err := s.GetVersion(ctx, "prod", n, true); err != nil || len(v.Resources) != 2 {
			t.Fatalf("version %d after prune: %+v, %v (a shared body must survive)", n, v, err)
		}
	}
	if n, err := s.PruneVersions(ctx, "prod", 0); err != nil || n != 0 {
		t.Fatalf("keep 0 means keep all: %d, %v", n, err)
	}
	// Numbers are never reused after a prune.
	if v := mustPut(t, s, "prod", file("a", "/x", "new")); v.Number != 6 {
		t.Fatalf("next version %d, want 6", v.Number)
	}
}

// testPruneWhilePutting: a body a version being stored refers to is never
// deleted by a clean-up running meanwhile (another environment's prune),
// though no stored version refers to it yet: every version reads whole
// right after it is stored.
func testPruneWhilePutting(t *testing.T, s store.Store) {
	mustEnv(t, s, "dev")
	mustEnv(t, s, "ops")
	shared := file("a", "/shared", "s")
	const rounds = 100
	// ops: the shared body, then a version without it, a prune and a
	// clean-up, over and over.
	stop := meanwhile(t, func(i int) error {
		for _, rs := range [][]model.Resource{{shared, file("o", "/x", fmt.Sprint(i))}, {file("o", "/x", fmt.Sprint(i))}} {
			if _, err := s.PutVersion(ctx, "ops", model.VersionMeta{Compiler: "test"}, rs); err != nil {
				return err
			}
		}
		_, err := s.PruneVersions(ctx, "ops", 1)
		return err
	})
	defer stop()
	for i := range rounds {
		// The shared body is stored by the first version, or found stored
		// (ops's), and referred to by no version once ops's and dev's
		// versions with it are pruned.
		v := mustPut(t, s, "dev", shared, file("a", "/x", fmt.Sprint(i)))
		got, err := s.GetVersion(ctx, "dev", v.Number, true)
		if err != nil || len(got.Resources) != 2 {
			t.Fatalf("round %d: version %d right after it was stored: %d resources, %v; want 2 (a body deleted under it)", i, v.Number, len(got.Resources), err)
		}
		mustPut(t, s, "dev", file("a", "/x", fmt.Sprint(i)))
		if _, err := s.PruneVersions(ctx, "dev", 1); err != nil {
			t.Fatal(err)
		}
	}
}

func testAlerts(t *testing.T, s store.Store) {
	mustEnv(t, s, "prod")
	mustEnv(t, s, "dev")
	id := file("a", "/x", "").ID
	err := s.RecordAlerts(ctx, []record.Alert{
		{Env: "prod", Agent: "a", Kind: record.AlertDrift, ID: &id, Message: "content changed",
			Changes: model.Changes{"content": {Current: "hacked", Desired: "1"}}},
		{Env: "prod", Agent: "b", Kind: record.AlertSecurity, Message: "signed by another key"},
		{Env: "dev", Kind: record.AlertSecurity, Message: "unknown agent"},
	})
	if err != nil {
		t.Fatal(err)
	}
	all, err := s.Alerts(ctx, record.AlertFilter{Env: "prod"})
	if err != nil || len(all) != 2 {
		t.Fatalf("alerts of prod: %v, %v", all, err)
	}
	if all[0].Kind != record.AlertSecurity || all[1].ID == nil || *all[1].ID != id || all[1].Changes["content"].Current != "hacked" || all[1].At.IsZero() {
		t.Fatalf("alerts %+v: want newest first, with the drifted resource and its changes", all)
	}
	drift, _ := s.Alerts(ctx, record.AlertFilter{Kind: record.AlertDrift})
	one, _ := s.Alerts(ctx, record.AlertFilter{Limit: 1})
	if len(drift) != 1 || len(one) != 1 || one[0].Env != "dev" {
		t.Fatalf("filters: drift %d, limit 1 %v", len(drift), one)
	}
	if err := s.RecordAlerts(ctx, []record.Alert{{Env: "nope", Kind: record.AlertDrift, Message: "x"}}); !errors.Is(err, model.ErrNotFound) {
		t.Fatalf("alert of an unknown env: got %v, want ErrNotFound", err)
	}
	// Several kinds at once: the compile alerts.
	if err := s.RecordAlerts(ctx, []record.Alert{
		{Env: "prod", Kind: record.AlertCompileFailed, Compliance: model.NonCompliant, Message: "failed"},
		{Env: "prod", Kind: record.AlertCompileRecovered, Compliance: model.Compliant, Message: "succeeded again"},
	}); err != nil {
		t.Fatal(err)
	}
	compile, err := s.Alerts(ctx, record.AlertFilter{Env: "prod", Kinds: []record.AlertKind{record.AlertCompileFailed, record.AlertCompileRecovered}})
	if err != nil || len(compile) != 2 || compile[0].Kind != record.AlertCompileRecovered || compile[1].Kind != record.AlertCompileFailed {
		t.Fatalf("compile alerts of prod: %+v (%v), want the recovery, then the failure", compile, err)
	}
	if got, err := s.Alerts(ctx, record.AlertFilter{Kinds: []record.AlertKind{record.AlertDrift, record.AlertCompileRecovered}, Limit: 1}); err != nil ||
		len(got) != 1 || got[0].Kind != record.AlertCompileRecovered {
		t.Fatalf("drift or recovered alerts, newest: %+v (%v), want the recovery", got, err)
	}
}

func testTokens(t *testing.T, s store.Store) {
	mustEnv(t, s, "prod")
	exp := time.Now().Add(time.Hour).UTC().Truncate(time.Microsecond)
	admin := record.Token{ID: "t-admin", Name: "bootstrap", Role: record.RoleAdmin, Hash: []byte("hash-a"), CreatedBy: "server"}
	viewer := record.Token{ID: "t-view", Name: "dash", Role: record.RoleViewer, Env: "prod", Hash: []byte("hash-v"), CreatedBy: "bootstrap", ExpiresAt: &exp}
	for _, tok := range []record.Token{admin, viewer} {
		if err := s.CreateToken(ctx, tok); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.CreateToken(ctx, record.Token{ID: "t-other", Name: "x", Role: record.RoleViewer, Hash: []byte("hash-a")}); !errors.Is(err, model.ErrExists) {
		t.Fatalf("same hash twice: got %v, want ErrExists", err)
	}
	if err := s.CreateToken(ctx, record.Token{ID: "t-bad", Name: "x", Role: "root", Hash: []byte("h")}); !errors.Is(err, model.ErrInvalid) {
		t.Fatalf("bad role: got %v, want ErrInvalid", err)
	}
	if err := s.CreateToken(ctx, record.Token{ID: "t-noenv", Name: "x", Role: record.RoleViewer, Env: "nope", Hash: []byte("h2")}); !errors.Is(err, model.ErrNotFound) {
		t.Fatalf("token for an unknown env: got %v, want ErrNotFound", err)
	}
	got, err := s.TokenByHash(ctx, []byte("hash-v"))
	if err != nil || got.ID != "t-view" || got.Env != "prod" || got.Role != record.RoleViewer || got.ExpiresAt == nil || !got.ExpiresAt.Equal(exp) {
		t.Fatalf("token by hash: %+v, %v", got, err)
	}
	if _, err := s.TokenByHash(ctx, []byte("nope")); !errors.Is(err, model.ErrNotFound) {
		t.Fatalf("unknown hash: got %v, want ErrNotFound", err)
	}
	list, err := s.ListTokens(ctx)
	if err != nil || len(list) != 2 {
		t.Fatalf("list: %v, %v", list, err)
	}
	if err := s.DeleteToken(ctx, "t-view"); err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteToken(ctx, "t-view"); !errors.Is(err, model.ErrNotFound) {
		t.Fatalf("revoking twice: got %v, want ErrNotFound", err)
	}
	if _, err := s.TokenByHash(ctx, []byte("hash-v")); !errors.Is(err, model.ErrNotFound) {
		t.Fatalf("revoked token still found: %v", err)
	}
}

func testAudit(t *testing.T, s store.Store) {
	mustEnv(t, s, "prod")
	for i, a := range []string{"env.create", "version.release", "agent.accept"} {
		env := "prod"
		if i == 0 {
			env = ""
		}
		if err := s.RecordAudit(ctx, record.AuditEntry{Actor: "ops", Action: a, Env: env, Target: fmt.Sprint(i)}); err != nil {
			t.Fatal(err)
		}
	}
	all, err := s.Audit(ctx, record.AuditFilter{})
	if err != nil || len(all) != 3 || all[0].Action != "agent.accept" || all[2].Action != "env.create" || all[0].At.IsZero() {
		t.Fatalf("audit %+v, %v: want 3 entries newest first", all, err)
	}
	prod, _ := s.Audit(ctx, record.AuditFilter{Env: "prod", Limit: 1})
	if len(prod) != 1 || prod[0].Action != "agent.accept" {
		t.Fatalf("audit of prod, limit 1: %+v", prod)
	}
	if err := s.DeleteEnv(ctx, "prod"); err != nil {
		t.Fatal(err)
	}
	if kept, _ := s.Audit(ctx, record.AuditFilter{Env: "prod"}); len(kept) != 2 {
		t.Fatalf("audit entries of a deleted env: %d, want 2 kept", len(kept))
	}
}

func testLead(t *testing.T, s store.Store) {
	l, ok, err := s.Lead(ctx, "prod")
	if err != nil || !ok {
		t.Fatalf("first lead: %v, %v", ok, err)
	}
	if _, ok, err := s.Lead(ctx, "prod"); err != nil || ok {
		t.Fatalf("second lead of the same name: ok %v, err %v; want refused", ok, err)
	}
	other, ok, err := s.Lead(ctx, "dev")
	if err != nil || !ok {
		t.Fatalf("another name: %v, %v", ok, err)
	}
	defer other.Release()
	l.Release()
	select {
	case <-l.Lost():
	default:
		t.Fatal("Lost is not closed after Release")
	}
	again, ok, err := s.Lead(ctx, "prod")
	if err != nil || !ok {
		t.Fatalf("lead after release: %v, %v", ok, err)
	}
	again.Release()
	again.Release() // twice is harmless
}

func testSecret(t *testing.T, s store.Store) {
	calls := 0
	mk := func(v string) func() ([]byte, error) {
		return func() ([]byte, error) { calls++; return []byte(v), nil }
	}
	first, err := s.Secret(ctx, "server-key", mk("one"))
	if err != nil || string(first) != "one" {
		t.Fatalf("first: %q, %v", first, err)
	}
	again, err := s.Secret(ctx, "server-key", mk("two"))
	if err != nil || string(again) != "one" || calls != 1 {
		t.Fatalf("second call: %q, %v (create called %d times); want the stored one", again, err, calls)
	}
	if _, err := s.Secret(ctx, "other", func() ([]byte, error) { return nil, errors.New("no entropy") }); err == nil {
		t.Fatal("a failing create must fail the call")
	}
	if _, err := s.Secret(ctx, "binary", mk("\x00\xff")); err != nil {
		t.Fatal(err)
	}
	all, err := s.Secrets(ctx)
	if err != nil || len(all) != 2 || string(all["server-key"]) != "one" || string(all["binary"]) != "\x00\xff" {
		t.Fatalf("Secrets: %q, %v; want server-key and binary", all, err)
	}

	// Replaced only while it holds what the caller read.
	if err := s.ReplaceSecret(ctx, "server-key", []byte("one"), []byte("sealed one")); err != nil {
		t.Fatal(err)
	}
	if err := s.ReplaceSecret(ctx, "server-key", []byte("one"), []byte("sealed again")); !errors.Is(err, model.ErrConflict) {
		t.Fatalf("replace a secret that changed since it was read: %v, want ErrConflict", err)
	}
	if err := s.ReplaceSecret(ctx, "missing", []byte("one"), []byte("two")); !errors.Is(err, model.ErrNotFound) {
		t.Fatalf("replace a missing secret: %v, want ErrNotFound", err)
	}
	if got, err := s.Secret(ctx, "server-key", mk("three")); err != nil || string(got) != "sealed one" {
		t.Fatalf("after replace: %q, %v; want %q", got, err, "sealed one")
	}
	if all, _ := s.Secrets(ctx); string(all["binary"]) != "\x00\xff" {
		t.Fatalf("replacing one secret changed another: %q", all["binary"])
	}
}

// testOutOfOrderBatches: batches of one agent recorded out of order (by
// concurrent ingest consumers) leave each status at the latest message's.
func testOutOfOrderBatches(t *testing.T, s store.Store) {
	mustEnv(t, s, "prod")
	x, y := file("a", "/x", "1"), file("a", "/y", "1")
	v := mustPut(t, s, "prod", x, y)
	mustRelease(t, s, "prod", v.Number)
	batch := func(seq uint64, state model.ResourceState, rs ...model.Resource) store.ResultBatch {
		b := store.ResultBatch{Env: "prod", Agent: "a", Seq: seq, Version: v.Number, DeployID: "d"}
		for _, r := range rs {
			b.Results = append(b.Results, result(r, state, nil))
		}
		return b
	}
	// Message 11 (x failed) is recorded before message 10 (x and y
	// deployed), in another call and within one call.
	for _, calls := range [][][]store.ResultBatch{
		{{batch(11, model.StateFailed, x)}, {batch(10, model.StateDeployed, x, y)}},
		{{batch(21, model.StateFailed, x), batch(20, model.StateDeployed, x, y)}},
	} {
		for _, c := range calls {
			if _, err := s.RecordResults(ctx, c); err != nil {
				t.Fatal(err)
			}
		}
		st := statusOf(t, s, "prod")
		if st["/x"].State != model.StateFailed || st["/y"].State != model.StateDeployed {
			t.Fatalf("x %s, y %s: want x failed (latest message), y deployed", st["/x"].State, st["/y"].State)
		}
	}
	// Messages without a counter (seq 0) always apply.
	if _, err := s.RecordResults(ctx, []store.ResultBatch{batch(0, model.StateDeployed, x)}); err != nil {
		t.Fatal(err)
	}
	if st := statusOf(t, s, "prod")["/x"]; st.State != model.StateDeployed {
		t.Fatalf("x %s after a result without seq, want deployed", st.State)
	}
}

// testResetSequence: an agent's LastSeq is the highest number recorded and
// never goes down through UpsertAgent; ResetSequence starts it over, with
// the numbers its resources' states were set at and its deduplication
// marks, so a low number applies again.
func testResetSequence(t *testing.T, s store.Store) {
	mustEnv(t, s, "prod")
	x := file("a", "/x", "1")
	v := mustPut(t, s, "prod", x)
	mustRelease(t, s, "prod", v.Number)
	if err := s.UpsertAgent(ctx, record.Agent{Env: "prod", Name: "a", LastSeq: 5}); err != nil {
		t.Fatal(err)
	}
	lastSeq := func() int64 {
		a, err := s.GetAgent(ctx, "prod", "a")
		if err != nil {
			t.Fatal(err)
		}
		return a.LastSeq
	}
	batch := func(seq uint64, state model.ResourceState) []store.ResultBatch {
		return []store.ResultBatch{{Env: "prod", Agent: "a", Seq: seq, Version: v.Number, DeployID: "d", Results: []model.Result{result(x, state, nil)}}}
	}
	if _, err := s.RecordResults(ctx, batch(1000, model.StateFailed)); err != nil {
		t.Fatal(err)
	}
	if got := lastSeq(); got != 1000 {
		t.Fatalf("last seq after recording #1000: %d", got)
	}
	if err := s.UpsertAgent(ctx, record.Agent{Env: "prod", Name: "a", LastSeq: 7}); err != nil {
		t.Fatal(err)
	}
	if got := lastSeq(); got != 1000 {
		t.Fatalf("last seq after an upsert with 7: %d, want 1000 kept", got)
	}
	if _, err := s.RecordResults(ctx, batch(10, model.StateDeployed)); err != nil {
		t.Fatal(err)
	}
	if st := statusOf(t, s, "prod")["/x"]; st.State != model.StateFailed {
		t.Fatalf("x %s: a lower number applied over #1000", st.State)
	}
	if err := s.ResetSequence(ctx, "prod", "a"); err != nil {
		t.Fatal(err)
	}
	if got := lastSeq(); got != 0 {
		t.Fatalf("last seq after a reset: %d, want 0", got)
	}
	fresh, err := s.RecordResults(ctx, batch(10, model.StateDeployed))
	if err != nil {
		t.Fatal(err)
	}
	if st := statusOf(t, s, "prod")["/x"]; !fresh[0] || st.State != model.StateDeployed {
		t.Fatalf("after a reset #10 fresh=%v, x %s; want it recorded and applied", fresh[0], st.State)
	}
}

// testDeleteAgent: a deleted agent's record and resource states go, other
// agents' stay; said hello again, its old sequence holds nothing back.
func testDeleteAgent(t *testing.T, s store.Store) {
	mustEnv(t, s, "prod")
	x, y := file("a", "/x", "1"), file("b", "/y", "1")
	v := mustPut(t, s, "prod", x, y)
	mustRelease(t, s, "prod", v.Number)
	for _, n := range []string{"a", "b"} {
		if err := s.UpsertAgent(ctx, record.Agent{Env: "prod", Name: n, State: record.AgentPending, Note: "waiting for " + n,
			AgentVersion: "v1.2.3-" + n, Protocol: "1.1"}); err != nil {
			t.Fatal(err)
		}
		if got, err := s.GetAgent(ctx, "prod", n); err != nil || got.Note != "waiting for "+n || got.AgentVersion != "v1.2.3-"+n || got.Protocol != "1.1" {
			t.Fatalf("agent %s: note %q, version %q, protocol %q (%v), want %q, %q, %q", n, got.Note, got.AgentVersion, got.Protocol, err,
				"waiting for "+n, "v1.2.3-"+n, "1.1")
		}
		if err := s.UpsertAgent(ctx, record.Agent{Env: "prod", Name: n, State: record.AgentAccepted}); err != nil {
			t.Fatal(err)
		}
	}
	if got, _ := s.GetAgent(ctx, "prod", "b"); got.Note != "" {
		t.Fatalf("accepted agent's note %q, want it cleared", got.Note)
	}
	batch := func(agent string, r model.Resource, seq uint64) []store.ResultBatch {
		return []store.ResultBatch{{Env: "prod", Agent: agent, Seq: seq, Version: v.Number, DeployID: "d", Results: []model.Result{result(r, model.StateDeployed, nil)}}}
	}
	for _, b := range [][]store.ResultBatch{batch("a", x, 100), batch("b", y, 100)} {
		if _, err := s.RecordResults(ctx, b); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.DeleteAgent(ctx, "prod", "a"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.GetAgent(ctx, "prod", "a"); !errors.Is(err, model.ErrNotFound) {
		t.Fatalf("get a deleted agent: %v, want ErrNotFound", err)
	}
	sts := statusOf(t, s, "prod")
	if x := sts["/x"]; x.State != model.StateAvailable || x.Compliance != model.ComplianceUnknown {
		t.Fatalf("the deleted agent's resource: %s %s, want available and unknown (what it reported is forgotten)", x.State, x.Compliance)
	}
	if sts["/y"].State != model.StateDeployed {
		t.Fatalf("the other agent's resource: %+v, want deployed", sts["/y"])
	}
	if b, err := s.GetAgent(ctx, "prod", "b"); err != nil || b.State != record.AgentAccepted {
		t.Fatalf("the other agent: %+v %v", b, err)
	}
	if err := s.DeleteAgent(ctx, "prod", "a"); !errors.Is(err, model.ErrNotFound) {
		t.Fatalf("delete it again: %v, want ErrNotFound", err)
	}
	// Back, as new: the batch numbered as before is not taken for a
	// redelivery.
	if err := s.UpsertAgent(ctx, record.Agent{Env: "prod", Name: "a"}); err != nil {
		t.Fatal(err)
	}
	fresh, err := s.RecordResults(ctx, batch("a", x, 100))
	if err != nil {
		t.Fatal(err)
	}
	if !fresh[0] {
		t.Fatal("the returned agent's first batch was dropped as a redelivery")
	}
	if x := statusOf(t, s, "prod")["/x"]; x.State != model.StateDeployed {
		t.Fatalf("the returned agent's result: %s, want deployed", x.State)
	}
}

// testFarAheadYields: a state numbered further ahead of a message than
// store.ReorderWindow (a forged number) does not hold over it; order
// within the window holds again after.
func testFarAheadYields(t *testing.T, s store.Store) {
	mustEnv(t, s, "prod")
	x := file("a", "/x", "1")
	v := mustPut(t, s, "prod", x)
	mustRelease(t, s, "prod", v.Number)
	batch := func(seq uint64, state model.ResourceState) []store.ResultBatch {
		return []store.ResultBatch{{Env: "prod", Agent: "a", Seq: seq, Version: v.Number, DeployID: "d", Results: []model.Result{result(x, state, nil)}}}
	}
	steps := []struct {
		seq  uint64
		st   model.ResourceState
		want model.ResourceState
	}{
		{100, model.StateDeployed, model.StateDeployed},
		{100 + store.ReorderWindow, model.StateFailed, model.StateFailed},     // ahead, within the window
		{101, model.StateDeployed, model.StateFailed},                         // older: held over
		{1 << 40, model.StateFailed, model.StateFailed},                       // forged, far ahead
		{200 + store.ReorderWindow, model.StateDeployed, model.StateDeployed}, // yields
		{150 + store.ReorderWindow, model.StateFailed, model.StateDeployed},   // order holds again
	}
	for _, st := range steps {
		if _, err := s.RecordResults(ctx, batch(st.seq, st.st)); err != nil {
			t.Fatal(err)
		}
		if got := statusOf(t, s, "prod")["/x"]; got.State != st.want {
			t.Fatalf("after #%d (%s): x %s, want %s", st.seq, st.st, got.State, st.want)
		}
	}
}

// testCompliance: dry runs and drift alerts set the compliance of deployed
// resources of their version, and nothing else.
func testCompliance(t *testing.T, s store.Store) {
	mustEnv(t, s, "prod")
	x, y, z := file("a", "/x", "1"), file("a", "/y", "1"), file("a", "/z", "1")
	v := mustPut(t, s, "prod", x, y, z)
	mustRelease(t, s, "prod", v.Number)
	if err := recordBatch(s, "prod", "a", v.Number, "d", []model.Result{result(x, model.StateDeployed, nil), result(y, model.StateDeployed, nil)}); err != nil {
		t.Fatal(err)
	}
	// A dry run finds x drifted, y fine, z (never deployed) would change.
	drifted := model.Changes{"content": {Current: "hacked", Desired: "1"}}
	dry := []model.Result{result(x, model.StateDeployed, drifted), result(y, model.StateDeployed, nil), result(z, model.StateDeployed, drifted)}
	for i := range dry {
		dry[i].DryRun = true
	}
	if _, err := s.RecordResults(ctx, []store.ResultBatch{{Env: "prod", Agent: "a", Seq: 5, Version: v.Number, DeployID: "dry", Results: dry}}); err != nil {
		t.Fatal(err)
	}
	st := statusOf(t, s, "prod")
	if st["/x"].Compliance != model.NonCompliant || st["/x"].State != model.StateDeployed {
		t.Fatalf("x after a dry run found drift: %+v, want deployed and non_compliant", st["/x"])
	}
	if st["/y"].Compliance != model.Compliant || st["/y"].LastVerified == nil {
		t.Fatalf("y after a clean dry run: %+v, want compliant and verified", st["/y"])
	}
	if st["/z"].State != model.StateAvailable || st["/z"].Compliance != model.ComplianceUnknown {
		t.Fatalf("z (never deployed) after a dry run: %+v, want available and unknown", st["/z"])
	}
	// A compliance message: y drifted, x restored; stored as alerts.
	yID, xID := y.ID, x.ID
	msg := store.ResultBatch{Env: "prod", Agent: "a", Seq: 6, Version: v.Number, Alerts: []record.Alert{
		{Env: "prod", Agent: "a", Kind: record.AlertDrift, ID: &yID, Compliance: model.NonCompliant, Version: v.Number, Message: "drift", Changes: drifted},
		{Env: "prod", Agent: "a", Kind: record.AlertDrift, ID: &xID, Compliance: model.Compliant, Version: v.Number, Message: "restored"},
	}}
	for range 2 { // the redelivery stores nothing more
		if _, err := s.RecordResults(ctx, []store.ResultBatch{msg}); err != nil {
			t.Fatal(err)
		}
	}
	st = statusOf(t, s, "prod")
	if st["/y"].Compliance != model.NonCompliant || st["/x"].Compliance != model.Compliant {
		t.Fatalf("after the compliance message: x %s, y %s; want x compliant, y non_compliant", st["/x"].Compliance, st["/y"].Compliance)
	}
	alerts, err := s.Alerts(ctx, record.AlertFilter{Env: "prod", Kind: record.AlertDrift})
	if err != nil || len(alerts) != 2 {
		t.Fatalf("drift alerts: %+v, %v; want 2 (one message, delivered twice)", alerts, err)
	}
	if alerts[1].Compliance != model.NonCompliant || alerts[1].Version != v.Number || alerts[1].Changes["content"].Current != "hacked" {
		t.Fatalf("stored drift alert %+v", alerts[1])
	}
	if acts, err := s.Actions(ctx, "prod", x.ID, 10); err != nil || slices.ContainsFunc(acts, func(a record.Action) bool { return a.Kind == record.ActionHeal }) {
		t.Fatalf("actions of x after a restore by hand: %+v, %v; want no heal", acts, err)
	}
	// A heal (y re-applied by drift policy) is an alert, and an entry of
	// kind heal in the resource's action log, with the drift it undid;
	// once, however often its message is delivered.
	healed := store.ResultBatch{Env: "prod", Agent: "a", Seq: 8, Version: v.Number, Alerts: []record.Alert{
		{Env: "prod", Agent: "a", Kind: record.AlertDrift, ID: &yID, Compliance: model.Compliant, Version: v.Number, Message: "healed", Changes: drifted, Healed: true}}}
	for range 2 {
		if _, err := s.RecordResults(ctx, []store.ResultBatch{healed}); err != nil {
			t.Fatal(err)
		}
	}
	acts, err := s.Actions(ctx, "prod", y.ID, 10)
	if err != nil {
		t.Fatal(err)
	}
	var heals []record.Action
	for _, a := range acts {
		if a.Kind == record.ActionHeal {
			heals = append(heals, a)
		}
	}
	if len(heals) != 1 || heals[0].State != model.StateDeployed || heals[0].Version != v.Number || heals[0].Changes["content"].Current != "hacked" || heals[0].Message != "healed" {
		t.Fatalf("heal entries of y: %+v; want one, deployed, of version %d, with the drift it undid", heals, v.Number)
	}
	if st := statusOf(t, s, "prod")["/y"]; st.Compliance != model.Compliant {
		t.Fatalf("y after its heal: %s, want compliant", st.Compliance)
	}
	// A heal that failed is an entry of kind heal too, failed, with why.
	healFailed := store.ResultBatch{Env: "prod", Agent: "a", Seq: 9, Version: v.Number, Alerts: []record.Alert{
		{Env: "prod", Agent: "a", Kind: record.AlertDrift, ID: &yID, Compliance: model.NonCompliant, Version: v.Number, Message: "heal failed: permission denied", Changes: drifted, HealFailed: true}}}
	if _, err := s.RecordResults(ctx, []store.ResultBatch{healFailed}); err != nil {
		t.Fatal(err)
	}
	if acts, err = s.Actions(ctx, "prod", y.ID, 10); err != nil {
		t.Fatal(err)
	}
	if a := acts[0]; a.Kind != record.ActionHeal || a.State != model.StateFailed || a.Message != "heal failed: permission denied" {
		t.Fatalf("newest action of y after a failed heal: %+v; want a failed heal saying why", a)
	}
	if st := statusOf(t, s, "prod")["/y"]; st.Compliance != model.NonCompliant {
		t.Fatalf("y after a failed heal: %s, want non_compliant", st.Compliance)
	}

	// A drift report that overtakes its deploy's result (they travel on
	// separate queues): the older result sets the state, not the
	// compliance.
	w := file("a", "/w", "1")
	v2 := mustPut(t, s, "prod", x, y, z, w)
	mustRelease(t, s, "prod", v2.Number)
	wID := w.ID
	early := store.ResultBatch{Env: "prod", Agent: "a", Seq: 20, Version: v2.Number, Alerts: []record.Alert{
		{Env: "prod", Agent: "a", Kind: record.AlertDrift, ID: &wID, Compliance: model.NonCompliant, Version: v2.Number, Message: "drift"}}}
	late := store.ResultBatch{Env: "prod", Agent: "a", Seq: 19, Version: v2.Number, DeployID: "d2", Results: []model.Result{result(w, model.StateDeployed, nil)}}
	for _, b := range []store.ResultBatch{early, late} {
		if _, err := s.RecordResults(ctx, []store.ResultBatch{b}); err != nil {
			t.Fatal(err)
		}
	}
	if st := statusOf(t, s, "prod")["/w"]; st.State != model.StateDeployed || st.Compliance != model.NonCompliant {
		t.Fatalf("w after its drift report, then its older deploy result: %s and %s, want deployed and non_compliant", st.State, st.Compliance)
	}

	// A report found against the older version v, sent before the agent
	// was given v2: it tells y's compliance in v2 when it names the
	// intent v2's y holds too (the same hash), and not otherwise.
	if st := statusOf(t, s, "prod")["/y"]; st.Version != v2.Number || st.Compliance != model.NonCompliant {
		t.Fatalf("y after v2's release: version %d, %s; want version %d, non_compliant", st.Version, st.Compliance, v2.Number)
	}
	yHash, _ := y.Hash()
	for i, c := range []struct {
		hash model.Hash
		want model.Compliance
	}{{model.Hash{}, model.NonCompliant}, {model.Hash{1}, model.NonCompliant}, {yHash, model.Compliant}} {
		b := store.ResultBatch{Env: "prod", Agent: "a", Seq: uint64(30 + i), Version: v.Number, Alerts: []record.Alert{
			{Env: "prod", Agent: "a", Kind: record.AlertDrift, ID: &yID, Compliance: model.Compliant, Version: v.Number, Message: "healed", Changes: drifted, Healed: true, Hash: c.hash}}}
		if _, err := s.RecordResults(ctx, []store.ResultBatch{b}); err != nil {
			t.Fatal(err)
		}
		if st := statusOf(t, s, "prod")["/y"]; st.Compliance != c.want {
			t.Fatalf("y after a heal of version %d naming hash %x: %s, want %s", v.Number, c.hash[:4], st.Compliance, c.want)
		}
	}

	// An agent cannot report on another agent's resource.
	other := file("b", "/x", "").ID
	bad := store.ResultBatch{Env: "prod", Agent: "a", Seq: 7, Alerts: []record.Alert{{Env: "prod", Agent: "a", Kind: record.AlertDrift, ID: &other, Message: "x"}}}
	if _, err := s.RecordResults(ctx, []store.ResultBatch{bad}); !errors.Is(err, model.ErrInvalid) {
		t.Fatalf("alert about another agent's resource: got %v, want ErrInvalid", err)
	}
}

func testEnrollmentTokens(t *testing.T, s store.Store) {
	mustEnv(t, s, "prod")
	mustEnv(t, s, "dev")
	now := time.Now().UTC().Truncate(time.Microsecond)
	soon := now.Add(time.Hour)
	twice := record.EnrollmentToken{ID: "e-1", Env: "prod", Name: "rack 4", Hash: []byte("enroll-1"), MaxUses: 2, CreatedBy: "ops", ExpiresAt: &soon}
	forever := record.EnrollmentToken{ID: "e-2", Env: "prod", Name: "fleet", Hash: []byte("enroll-2"), CreatedBy: "ops"}
	for _, tok := range []record.EnrollmentToken{twice, forever} {
		if err := s.CreateEnrollToken(ctx, tok); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.CreateEnrollToken(ctx, record.EnrollmentToken{ID: "e-3", Env: "prod", Name: "x", Hash: []byte("enroll-1"), CreatedBy: "ops"}); !errors.Is(err, model.ErrExists) {
		t.Fatalf("same hash twice: got %v, want ErrExists", err)
	}
	if err := s.CreateEnrollToken(ctx, record.EnrollmentToken{ID: "e-4", Env: "nope", Name: "x", Hash: []byte("h"), CreatedBy: "ops"}); !errors.Is(err, model.ErrNotFound) {
		t.Fatalf("token of an unknown env: got %v, want ErrNotFound", err)
	}
	if err := s.CreateEnrollToken(ctx, record.EnrollmentToken{ID: "e-5", Env: "prod", Name: "x", Hash: []byte("h5"), MaxUses: -1, CreatedBy: "ops"}); !errors.Is(err, model.ErrInvalid) {
		t.Fatalf("negative max uses: got %v, want ErrInvalid", err)
	}
	// Two uses, then it is used up; a token works only in its environment.
	for i := 1; i <= 2; i++ {
		got, err := s.UseEnrollToken(ctx, "prod", []byte("enroll-1"), "web-1", now)
		if err != nil || got.Uses != i || got.ID != "e-1" {
			t.Fatalf("use %d: %+v, %v", i, got, err)
		}
	}
	if _, err := s.UseEnrollToken(ctx, "prod", []byte("enroll-1"), "web-1", now); !errors.Is(err, model.ErrConflict) {
		t.Fatalf("third use of a two-use token: got %v, want ErrConflict", err)
	}
	if _, err := s.UseEnrollToken(ctx, "dev", []byte("enroll-2"), "web-1", now); !errors.Is(err, model.ErrNotFound) {
		t.Fatalf("token of prod used in dev: got %v, want ErrNotFound", err)
	}
	if _, err := s.UseEnrollToken(ctx, "prod", []byte("enroll-2"), "web-1", now); err != nil {
		t.Fatalf("unbounded token: %v", err)
	}
	// Expired.
	past := now.Add(-time.Minute)
	if err := s.CreateEnrollToken(ctx, record.EnrollmentToken{ID: "e-6", Env: "prod", Name: "old", Hash: []byte("enroll-6"), CreatedBy: "ops", ExpiresAt: &past}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.UseEnrollToken(ctx, "prod", []byte("enroll-6"), "web-1", now); !errors.Is(err, model.ErrConflict) {
		t.Fatalf("expired token: got %v, want ErrConflict", err)
	}
	// A token bound to a host enrolls that host's agent only; another
	// agent's try spends nothing.
	if err := s.CreateEnrollToken(ctx, record.EnrollmentToken{ID: "e-7", Env: "prod", Name: "host vm1", Hash: []byte("enroll-7"), MaxUses: 1, CreatedBy: "ops", Host: "vm1"}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.UseEnrollToken(ctx, "prod", []byte("enroll-7"), "intruder", now); !errors.Is(err, model.ErrConflict) || !strings.Contains(err.Error(), "bound to host vm1") {
		t.Fatalf("host token used by another agent: got %v, want ErrConflict naming the host", err)
	}
	if got, err := s.UseEnrollToken(ctx, "prod", []byte("enroll-7"), "vm1", now); err != nil || got.Host != "vm1" || got.Uses != 1 {
		t.Fatalf("host token used by its host: %+v, %v", got, err)
	}
	if _, err := s.UseEnrollToken(ctx, "prod", []byte("enroll-7"), "vm1", now); !errors.Is(err, model.ErrConflict) || !strings.Contains(err.Error(), "used up") {
		t.Fatalf("host token used twice: got %v, want used up", err)
	}
	if err := s.DeleteEnrollToken(ctx, "prod", "e-7"); err != nil {
		t.Fatal(err)
	}
	// So does a token the server made for an agent it runs itself; it is
	// read back as such without being spent.
	if err := s.CreateEnrollToken(ctx, record.EnrollmentToken{ID: "e-8", Env: "prod", Name: "own agent hv1", Hash: []byte("enroll-8"), MaxUses: 1, CreatedBy: "tether server", OwnAgent: "hv1"}); err != nil {
		t.Fatal(err)
	}
	if err := s.CreateEnrollToken(ctx, record.EnrollmentToken{ID: "e-9", Env: "prod", Name: "both", Hash: []byte("enroll-9"), CreatedBy: "ops", Host: "vm1", OwnAgent: "hv1"}); !errors.Is(err, model.ErrInvalid) {
		t.Fatalf("token bound to a host and to an own agent: got %v, want ErrInvalid", err)
	}
	if got, err := s.EnrollToken(ctx, "prod", []byte("enroll-8")); err != nil || got.OwnAgent != "hv1" || got.Uses != 0 || got.ID != "e-8" {
		t.Fatalf("own agent's token read: %+v, %v", got, err)
	}
	if _, err := s.EnrollToken(ctx, "dev", []byte("enroll-8")); !errors.Is(err, model.ErrNotFound) {
		t.Fatalf("token of prod read in dev: got %v, want ErrNotFound", err)
	}
	if _, err := s.UseEnrollToken(ctx, "prod", []byte("enroll-8"), "intruder", now); !errors.Is(err, model.ErrConflict) || !strings.Contains(err.Error(), "bound to the server's own agent hv1") {
		t.Fatalf("own agent's token used by another agent: got %v, want ErrConflict naming the agent", err)
	}
	if got, err := s.UseEnrollToken(ctx, "prod", []byte("enroll-8"), "hv1", now); err != nil || got.OwnAgent != "hv1" || got.Uses != 1 {
		t.Fatalf("own agent's token used by its agent: %+v, %v", got, err)
	}
	if err := s.DeleteEnrollToken(ctx, "prod", "e-8"); err != nil {
		t.Fatal(err)
	}
	list, err := s.ListEnrollTokens(ctx, "prod")
	if err != nil || len(list) != 3 || list[0].ID != "e-1" || list[0].Uses != 2 || list[0].ExpiresAt == nil || !list[0].ExpiresAt.Equal(soon) {
		t.Fatalf("list: %+v, %v", list, err)
	}
	if err := s.DeleteEnrollToken(ctx, "prod", "e-2"); err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteEnrollToken(ctx, "prod", "e-2"); !errors.Is(err, model.ErrNotFound) {
		t.Fatalf("revoking twice: got %v, want ErrNotFound", err)
	}
	if _, err := s.UseEnrollToken(ctx, "prod", []byte("enroll-2"), "web-1", now); !errors.Is(err, model.ErrNotFound) {
		t.Fatalf("revoked token: got %v, want ErrNotFound", err)
	}
	if err := s.DeleteEnv(ctx, "prod"); err != nil {
		t.Fatal(err)
	}
	if list, _ := s.ListEnrollTokens(ctx, "prod"); len(list) != 0 {
		t.Fatalf("tokens of a deleted env: %d", len(list))
	}
}

func testAgentConnected(t *testing.T, s store.Store) {
	mustEnv(t, s, "prod")
	a := record.Agent{Env: "prod", Name: "web-1", State: record.AgentAccepted, Connected: true}
	if err := s.UpsertAgent(ctx, a); err != nil {
		t.Fatal(err)
	}
	got, err := s.GetAgent(ctx, "prod", "web-1")
	if err != nil || !got.Connected {
		t.Fatalf("connected agent: %+v, %v", got, err)
	}
	got.Connected = false
	if err := s.UpsertAgent(ctx, got); err != nil {
		t.Fatal(err)
	}
	if got, _ := s.GetAgent(ctx, "prod", "web-1"); got.Connected {
		t.Fatal("goodbye did not stick")
	}
}
