// Package storetest is the contract every store.Store passes: the SQLite store
// of the embedded mode and the PostgreSQL store of servers run the same suite.
package storetest

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tetherhq/tether/model"
	"github.com/tetherhq/tether/server/record"
	"github.com/tetherhq/tether/server/store"
)

// Run runs the contract against fresh, empty stores made by open.
func Run(t *testing.T, open func(t *testing.T) store.Store) {
	tests := []struct {
		name string
		fn   func(t *testing.T, s store.Store)
	}{
		{"Environments", testEnvironments},
		{"Versions", testVersions},
		{"ReleaseStates", testReleaseStates},
		{"AgentSlice", testAgentSlice},
		{"Agents", testAgents},
		{"AgentGeneration", testAgentGeneration},
		{"AgentReport", testAgentReport},
		{"AgentUpsertIf", testAgentUpsertIf},
		{"AgentState", testAgentState},
		{"ExpirePendingAgents", testExpirePendingAgents},
		{"AddPendingAgent", testAddPendingAgent},
		{"ResultsSeeAgent", testResultsSeeAgent},
		{"AgentsSeen", testAgentsSeen},
		{"RecordResults", testRecordResults},
		{"RecordResultsAllOrNothing", testAllOrNothing},
		{"StaleResults", testStaleResults},
		{"StatusFilters", testStatusFilters},
		{"ConcurrentIngest", testConcurrentIngest},
		{"IngestBesideSeenMarks", testIngestBesideSeenMarks},
		{"IngestBesideReleases", testIngestBesideReleases},
		{"DeleteEnvBesideIngest", testDeleteEnvBesideIngest},
		{"DuplicateBatches", testDuplicateBatches},
		{"OutOfOrderBatches", testOutOfOrderBatches},
		{"ResetSequence", testResetSequence},
		{"DeleteAgent", testDeleteAgent},
		{"FarAheadYields", testFarAheadYields},
		{"Compliance", testCompliance},
		{"UpdateSettings", testUpdateSettings},
		{"DeleteEnv", testDeleteEnv},
		{"HashesAndHistory", testHashesAndHistory},
		{"PruneVersions", testPruneVersions},
		{"PruneWhilePutting", testPruneWhilePutting},
		{"Alerts", testAlerts},
		{"Tokens", testTokens},
		{"EnrollmentTokens", testEnrollmentTokens},
		{"AgentConnected", testAgentConnected},
		{"Audit", testAudit},
		{"Lead", testLead},
		{"Secret", testSecret},
		{"SigningKeys", testSigningKeys},
		{"Compiles", testCompiles},
		{"PruneCompiles", testPruneCompiles},
		{"Releases", testReleases},
		{"Deploys", testDeploys},
		{"AgentPages", testAgentPages},
		{"FindAgents", testFindAgents},
		{"Rollouts", testRollouts},
		{"Sources", testSources},
		{"Orgs", testOrgs},
		{"Users", testUsers},
		{"EventLog", testEventLog},
		{"Webhooks", testWebhooks},
		{"ResultEvents", testResultEvents},
		{"ResultEventsRolledBack", testResultEventsRolledBack},
		{"EventOrder", testEventOrder},
		{"ChangeEvents", testChangeEvents},
		{"FleetCounts", testFleetCounts},
		{"Platforms", testPlatforms},
		{"Distributions", testDistributions},
		{"Hosts", testHosts},
		{"HostMoves", testHostMoves},
		{"ConcurrentHostMoves", testConcurrentHostMoves},
		{"Instances", testInstances},
		{"MachinesGoWithEnv", testMachinesGoWithEnv},
		{"MachinesDeclaredInModel", testMachinesDeclaredInModel},
		{"UpdateHost", testUpdateHost},
		{"Applications", testApplications},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) { tt.fn(t, open(t)) })
	}
}

var ctx = context.Background()

func file(agent, path, content string) model.Resource {
	return model.Resource{
		ID:         model.ID{Type: "file", Agent: agent, Key: "path", Value: path},
		Attributes: model.Attributes{"path": path, "content": content},
	}
}

func dir(agent, path string) model.Resource {
	return model.Resource{
		ID:         model.ID{Type: "directory", Agent: agent, Key: "path", Value: path},
		Attributes: model.Attributes{"path": path},
	}
}

func mustEnv(t *testing.T, s store.Store, name string) {
	t.Helper()
	if err := s.CreateEnv(ctx, record.Environment{Name: name, Settings: record.DefaultEnvSettings()}); err != nil {
		t.Fatal(err)
	}
}

func mustPut(t *testing.T, s store.Store, env string, rs ...model.Resource) model.Version {
	t.Helper()
	v, err := s.PutVersion(ctx, env, model.VersionMeta{Compiler: "test", Source: t.Name()}, rs)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// mustAgent records a and returns its record as stored.
func mustAgent(t *testing.T, s store.Store, a record.Agent) record.Agent {
	t.Helper()
	if err := s.UpsertAgent(ctx, a); err != nil {
		t.Fatal(err)
	}
	got, err := s.GetAgent(ctx, a.Env, a.Name)
	if err != nil {
		t.Fatal(err)
	}
	return got
}

func mustRelease(t *testing.T, s store.Store, env string, n int64) {
	t.Helper()
	if _, err := s.Release(ctx, env, n); err != nil {
		t.Fatal(err)
	}
}

func statusOf(t *testing.T, s store.Store, env string) map[string]record.ResourceStatus {
	t.Helper()
	sts, err := s.Statuses(ctx, env, record.StatusFilter{})
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]record.ResourceStatus{}
	for _, st := range sts {
		out[st.ID.Value] = st
	}
	return out
}

// meanwhile runs step(0), step(1), … in a goroutine until the stop it
// returns is called (stop waits for it), or until a step fails (t.Error).
func meanwhile(t *testing.T, step func(i int) error) (stop func()) {
	t.Helper()
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; ; i++ {
			select {
			case <-done:
				return
			default:
			}
			if err := step(i); err != nil {
				t.Error(err)
				return
			}
		}
	}()
	return func() {
		close(done)
		wg.Wait()
	}
}

// recordBatch records one batch without a sequence number.
func recordBatch(s store.Store, env, agent string, version int64, deployID string, results []model.Result) error {
	_, err := s.RecordResults(ctx, []store.ResultBatch{{Env: env, Agent: agent, Version: version, DeployID: deployID, Results: results}})
	return err
}

func result(r model.Resource, state model.ResourceState, changes model.Changes) model.Result {
	return model.Result{ID: r.ID, State: state, Changes: changes, Duration: time.Millisecond}
}

func testEnvironments(t *testing.T, s store.Store) {
	settings := record.DefaultEnvSettings()
	settings.AutoDeploy = false
	if err := s.CreateEnv(ctx, record.Environment{Name: "prod", Settings: settings}); err != nil {
		t.Fatal(err)
	}
	mustEnv(t, s, "dev")
	if err := s.CreateEnv(ctx, record.Environment{Name: "prod"}); !errors.Is(err, model.ErrExists) {
		t.Fatalf("duplicate: got %v, want ErrExists", err)
	}
	if err := s.CreateEnv(ctx, record.Environment{Name: "Bad Name"}); !errors.Is(err, model.ErrInvalid) {
		t.Fatalf("bad name: got %v, want ErrInvalid", err)
	}
	got, err := s.GetEnv(ctx, "prod")
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got.Settings, settings) || got.CreatedAt.IsZero() {
		t.Fatalf("got %+v, want settings %+v and a creation time", got, settings)
	}
	if _, err := s.GetEnv(ctx, "nope"); !errors.Is(err, model.ErrNotFound) {
		t.Fatalf("missing: got %v, want ErrNotFound", err)
	}
	list, err := s.ListEnvs(ctx)
	if err != nil || len(list) != 2 || list[0].Name != "dev" || list[1].Name != "prod" {
		t.Fatalf("ListEnvs = %v, %v", list, err)
	}
}

func testVersions(t *testing.T, s store.Store) {
	mustEnv(t, s, "prod")
	if _, err := s.LatestVersion(ctx, "prod"); !errors.Is(err, model.ErrNotFound) {
		t.Fatalf("no versions yet: got %v, want ErrNotFound", err)
	}
	rs := []model.Resource{file("a", "/x", "1"), dir("a", "/d"), file("b", "/x", "1")}
	rs[0].Sensitive = []string{"content"}
	rs[0].Requires = []model.ID{rs[1].ID}
	v1 := mustPut(t, s, "prod", rs...)
	v2 := mustPut(t, s, "prod", rs[1:]...)
	if v1.Number != 1 || v2.Number != 2 || v1.State != model.VersionCandidate || v1.Count != 3 {
		t.Fatalf("versions %+v %+v", v1, v2)
	}
	want, _ := model.SetHash(rs)
	if v1.SetHash != want {
		t.Fatalf("set hash %s, want %s", v1.SetHash, want)
	}
	got, err := s.GetVersion(ctx, "prod", 1, true)
	if err != nil {
		t.Fatal(err)
	}
	if len(got.Resources) != 3 || got.Meta.Compiler != "test" {
		t.Fatalf("version 1: %+v", got)
	}
	back, _ := model.SetHash(got.Resources)
	if back != want {
		t.Fatal("resources changed on the way through the store")
	}
	for _, r := range got.Resources {
		if r.ID == rs[0].ID && (!r.IsSensitive("content") || len(r.Requires) != 1) {
			t.Fatalf("sensitive marker or requires lost: %+v", r)
		}
	}
	latest, err := s.LatestVersion(ctx, "prod")
	if err != nil || latest.Number != 2 {
		t.Fatalf("latest = %d, %v", latest.Number, err)
	}
	list, err := s.ListVersions(ctx, "prod")
	if err != nil || len(list) != 2 || list[0].Number != 2 {
		t.Fatalf("ListVersions = %v, %v", list, err)
	}
	if _, err := s.GetVersion(ctx, "prod", 9, false); !errors.Is(err, model.ErrNotFound) {
		t.Fatalf("missing version: got %v, want ErrNotFound", err)
	}
	if _, err := s.PutVersion(ctx, "nope", model.VersionMeta{}, rs); !errors.Is(err, model.ErrNotFound) {
		t.Fatalf("unknown env: got %v, want ErrNotFound", err)
	}
	bad := file("a", "/y", "1")
	bad.Attributes["path"] = "/other"
	if _, err := s.PutVersion(ctx, "prod", model.VersionMeta{}, []model.Resource{bad}); !errors.Is(err, model.ErrInvalid) {
		t.Fatalf("invalid resource: got %v, want ErrInvalid", err)
	}
	if _, err := s.PutVersion(ctx, "prod", model.VersionMeta{}, []model.Resource{rs[1], rs[1]}); !errors.Is(err, model.ErrInvalid) {
		t.Fatalf("duplicate id: got %v, want ErrInvalid", err)
	}
	if latest, _ := s.LatestVersion(ctx, "prod"); latest.Number != 2 {
		t.Fatalf("a rejected upload created version %d", latest.Number)
	}
}

func testReleaseStates(t *testing.T, s store.Store) {
	mustEnv(t, s, "prod")
	same, changed, removed := file("a", "/same", "s"), file("a", "/changed", "1"), file("a", "/removed", "r")
	mustPut(t, s, "prod", same, changed, removed)
	mustRelease(t, s, "prod", 1)
	for name, st := range statusOf(t, s, "prod") {
		if st.State != model.StateAvailable || st.Compliance != model.ComplianceUnknown || st.Version != 1 {
			t.Fatalf("%s after first release: %+v", name, st)
		}
	}
	err := recordBatch(s, "prod", "a", 1, "d1", []model.Result{
		result(same, model.StateDeployed, nil), result(changed, model.StateDeployed, nil), result(removed, model.StateDeployed, nil),
	})
	if err != nil {
		t.Fatal(err)
	}
	changed2 := file("a", "/changed", "2")
	added := file("a", "/added", "n")
	mustPut(t, s, "prod", same, changed2, added)
	mustRelease(t, s, "prod", 2)
	st := statusOf(t, s, "prod")
	want := map[string]model.ResourceState{
		"/same": model.StateDeployed, "/changed": model.StateAvailable,
		"/removed": model.StateOrphaned, "/added": model.StateAvailable,
	}
	for name, state := range want {
		if st[name].State != state {
			t.Errorf("%s: %s, want %s", name, st[name].State, state)
		}
	}
	if st["/same"].Compliance != model.Compliant || st["/same"].Version != 2 {
		t.Errorf("unchanged resource lost its compliance or version: %+v", st["/same"])
	}
	if st["/changed"].Compliance != model.ComplianceUnknown {
		t.Errorf("changed resource kept compliance %s", st["/changed"].Compliance)
	}
	v1, _ := s.GetVersion(ctx, "prod", 1, false)
	v2, _ := s.ReleasedVersion(ctx, "prod")
	if v1.State != model.VersionRetired || v2.Number != 2 || v2.ReleasedAt == nil {
		t.Fatalf("v1 %s, released %d", v1.State, v2.Number)
	}
	if _, err := s.Release(ctx, "prod", 1); !errors.Is(err, model.ErrConflict) {
		t.Fatalf("releasing a retired version: got %v, want ErrConflict", err)
	}
	if _, err := s.Release(ctx, "prod", 2); err != nil {
		t.Fatalf("releasing the released version again: %v", err)
	}
	if _, err := s.Release(ctx, "prod", 7); !errors.Is(err, model.ErrNotFound) {
		t.Fatalf("releasing a missing version: got %v, want ErrNotFound", err)
	}
	// A resource that comes back after being orphaned is new intent again.
	mustPut(t, s, "prod", same, changed2, added, removed)
	mustRelease(t, s, "prod", 3)
	if st := statusOf(t, s, "prod"); st["/removed"].State != model.StateAvailable {
		t.Fatalf("returning resource: %s, want available", st["/removed"].State)
	}
}

func testAgentSlice(t *testing.T, s store.Store) {
	mustEnv(t, s, "prod")
	mustPut(t, s, "prod", file("b", "/1", "x"), file("a", "/2", "x"), dir("a", "/1"), file("a", "/1", "x"))
	sl, err := s.AgentSlice(ctx, "prod", 1, "a")
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, r := range sl.Resources {
		ids = append(ids, r.ID.String())
	}
	if sl.Generation != 1 || sl.Agent != "a" || fmt.Sprint(ids) != "[directory[a,path=/1] file[a,path=/1] file[a,path=/2]]" {
		t.Fatalf("slice %+v: %v", sl, ids)
	}
	empty, err := s.AgentSlice(ctx, "prod", 1, "nobody")
	if err != nil || len(empty.Resources) != 0 {
		t.Fatalf("slice of an agent without resources: %v, %v", empty, err)
	}
}

// testAgentReport: what an agent says of itself is written from a copy
// read before an operator rejected and paused it; the rejection, the pause
// and the key stay. A report older than the one stored (delivered late, or
// replayed) moves nothing back.
func testAgentReport(t *testing.T, s store.Store) {
	mustEnv(t, s, "prod")
	seen := time.Now().Add(-time.Hour).Truncate(time.Microsecond)
	read := mustAgent(t, s, record.Agent{Env: "prod", Name: "web-1", State: record.AgentAccepted, PublicKey: []byte{1, 2, 3},
		Labels: map[string]string{"role": "web"}, LastSeq: 40, FirstSeen: seen, LastSeen: seen})
	rejected := read
	rejected.State, rejected.Paused, rejected.Note = record.AgentRejected, true, "rejected by an operator"
	if err := s.UpsertAgent(ctx, rejected); err != nil {
		t.Fatal(err)
	}
	read.Labels, read.Facts = map[string]string{"role": "db"}, map[string]any{"os": "debian"}
	read.Connected, read.AgentVersion, read.Protocol = true, "1.4.0", "1.2"
	read.LastSeen, read.LastSeq, read.FactsSeq = seen.Add(time.Minute), 41, 41
	read.ServerKeys, read.ServerKeysSeq = []string{"SHA256:next"}, 7
	if ok, err := s.SetAgentReport(ctx, read); err != nil || !ok {
		t.Fatalf("record a report: %v, %v; want true, nil", ok, err)
	}
	got, err := s.GetAgent(ctx, "prod", "web-1")
	if err != nil {
		t.Fatal(err)
	}
	if got.State != record.AgentRejected || !got.Paused || got.Note != "rejected by an operator" || string(got.PublicKey) != string([]byte{1, 2, 3}) {
		t.Fatalf("after a report from an older copy: state %s, paused %v, note %q, key %x; want the rejection, the pause and the key kept",
			got.State, got.Paused, got.Note, got.PublicKey)
	}
	// want checks what the agent said of itself, as the report of that
	// number said it.
	want := func(what string, role, os string, connected bool, version string, lastSeen time.Time, seq, factsSeq int64) {
		t.Helper()
		got, err := s.GetAgent(ctx, "prod", "web-1")
		if err != nil {
			t.Fatal(err)
		}
		if got.Labels["role"] != role || got.Facts["os"] != os || got.Connected != connected || got.AgentVersion != version ||
			!got.LastSeen.Equal(lastSeen) || got.LastSeq != seq || got.FactsSeq != factsSeq {
			t.Fatalf("%s: role %s, os %v, connected %v, version %s, last seen %v, seq %d, facts of %d; want %s, %s, %v, %s, %v, %d, %d", what,
				got.Labels["role"], got.Facts["os"], got.Connected, got.AgentVersion, got.LastSeen, got.LastSeq, got.FactsSeq,
				role, os, connected, version, lastSeen, seq, factsSeq)
		}
		if got.State != record.AgentRejected || !got.Paused {
			t.Fatalf("%s: state %s, paused %v; want the rejection and the pause kept", what, got.State, got.Paused)
		}
	}
	want("after a report", "db", "debian", true, "1.4.0", seen.Add(time.Minute), 41, 41)
	if got.Protocol != "1.2" || len(got.ServerKeys) != 1 || got.ServerKeysSeq != 7 {
		t.Fatalf("after a report: protocol %s, server keys %v of %d; want 1.2, [SHA256:next] of 7", got.Protocol, got.ServerKeys, got.ServerKeysSeq)
	}
	// Older news — a report numbered below the last event recorded
	// (delivered late, or a captured one replayed): nothing it says
	// moves back, and the agent is not seen by it.
	old := read
	old.Labels, old.Facts = map[string]string{"role": "web"}, map[string]any{"os": "wheezy"}
	old.Connected, old.AgentVersion = false, "1.0.0"
	old.LastSeen, old.LastSeq, old.FactsSeq = seen.Add(2*time.Minute), 35, 35
	if ok, err := s.SetAgentReport(ctx, old); err != nil || !ok {
		t.Fatalf("record an older report: %v, %v; want true, nil", ok, err)
	}
	want("after an older report", "db", "debian", true, "1.4.0", seen.Add(time.Minute), 41, 41)
	// The latest event, with no word on facts (a goodbye): it
	// disconnects, and the facts of the report numbered 41 stay.
	old.LastSeq = 45
	if _, err := s.SetAgentReport(ctx, old); err != nil {
		t.Fatal(err)
	}
	want("after a goodbye", "db", "debian", false, "1.0.0", seen.Add(2*time.Minute), 45, 41)
	// Server keys of an older report do not replace newer ones.
	read.ServerKeys, read.ServerKeysSeq = []string{"SHA256:old"}, 5
	if _, err := s.SetAgentReport(ctx, read); err != nil {
		t.Fatal(err)
	}
	if got, err := s.GetAgent(ctx, "prod", "web-1"); err != nil || len(got.ServerKeys) != 1 || got.ServerKeys[0] != "SHA256:next" || got.ServerKeysSeq != 7 {
		t.Fatalf("after an older report of server keys: %+v, %v; want SHA256:next of 7 kept", got.ServerKeys, err)
	}
	if ok, err := s.SetAgentReport(ctx, record.Agent{Env: "prod", Name: "ghost"}); err != nil || ok {
		t.Fatalf("report of an unknown agent: %v, %v; want false, nil", ok, err)
	}
}

// testAgentState: an operator's decision is written alone, from a copy
// read before the agent reported; what it reported meanwhile stays. A
// decision taken from a copy read before another decision is refused.
// testExpirePendingAgents: pending agents last heard from before the
// cut-off are forgotten, a page at a time; accepted and rejected ones, and
// pending ones heard from since, stay.
func testExpirePendingAgents(t *testing.T, s store.Store) {
	mustEnv(t, s, "prod")
	mustEnv(t, s, "dev")
	now := time.Now().Truncate(time.Microsecond)
	old, fresh := now.Add(-48*time.Hour), now.Add(-time.Minute)
	for _, a := range []record.Agent{
		{Env: "prod", Name: "ghost-1", State: record.AgentPending, LastSeen: old},
		{Env: "prod", Name: "ghost-2", State: record.AgentPending, LastSeen: old},
		{Env: "prod", Name: "ghost-3", State: record.AgentPending, LastSeen: old},
		{Env: "prod", Name: "waits", State: record.AgentPending, LastSeen: fresh},
		{Env: "prod", Name: "web", State: record.AgentAccepted, LastSeen: old},
		{Env: "prod", Name: "bad", State: record.AgentRejected, LastSeen: old},
		{Env: "dev", Name: "ghost-1", State: record.AgentPending, LastSeen: old},
	} {
		a.PublicKey, a.FirstSeen = []byte{1}, a.LastSeen
		mustAgent(t, s, a)
	}
	cut := now.Add(-24 * time.Hour)
	got, err := s.ExpirePendingAgents(ctx, "prod", cut, 2)
	if err != nil || !slices.Equal(got, []string{"ghost-1", "ghost-2"}) {
		t.Fatalf("first page: %v, %v; want ghost-1 and ghost-2", got, err)
	}
	got, err = s.ExpirePendingAgents(ctx, "prod", cut, 2)
	if err != nil || !slices.Equal(got, []string{"ghost-3"}) {
		t.Fatalf("second page: %v, %v; want ghost-3", got, err)
	}
	if got, err := s.ExpirePendingAgents(ctx, "prod", cut, 2); err != nil || len(got) != 0 {
		t.Fatalf("third page: %v, %v; want none", got, err)
	}
	agents, err := s.ListAgents(ctx, "prod")
	if err != nil {
		t.Fatal(err)
	}
	var left []string
	for _, a := range agents {
		left = append(left, a.Name)
	}
	if !slices.Equal(left, []string{"bad", "waits", "web"}) {
		t.Fatalf("agents of prod left: %v; want bad, waits and web", left)
	}
	if _, err := s.GetAgent(ctx, "dev", "ghost-1"); err != nil {
		t.Fatalf("another environment's pending agent: %v; want it kept", err)
	}
}

// testAddPendingAgent races more hellos than there are places left under
// an environment's max_pending: exactly the places left are taken, the
// others are refused with ErrMaxPending and record nothing; accepted
// agents and other environments' pending ones do not count; a name
// recorded already is refused with ErrConflict and left as it is.
func testAddPendingAgent(t *testing.T, s store.Store) {
	mustEnv(t, s, "prod")
	mustEnv(t, s, "dev")
	now := time.Now().Truncate(time.Microsecond)
	for _, a := range []record.Agent{
		{Env: "prod", Name: "waits-1", State: record.AgentPending},
		{Env: "prod", Name: "waits-2", State: record.AgentPending},
		{Env: "prod", Name: "web", State: record.AgentAccepted},
		{Env: "dev", Name: "elsewhere", State: record.AgentPending},
	} {
		a.PublicKey, a.FirstSeen, a.LastSeen = []byte{1}, now, now
		mustAgent(t, s, a)
	}
	const limit, hellos = 10, 40
	var (
		wg            sync.WaitGroup
		mu            sync.Mutex
		added, full   int
		unexpected    []error
		sawFull, sawN int
	)
	for i := range hellos {
		wg.Add(1)
		go func() {
			defer wg.Done()
			a := record.Agent{Env: "prod", Name: fmt.Sprintf("ghost-%02d", i), State: record.AgentPending, PublicKey: []byte{byte(i)}, FirstSeen: now, LastSeen: now}
			n, err := s.AddPendingAgent(ctx, a, limit)
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				added++
				sawN = max(sawN, n)
			case errors.Is(err, store.ErrMaxPending):
				full++
				sawFull = n
			default:
				unexpected = append(unexpected, err)
			}
		}()
	}
	wg.Wait()
	if len(unexpected) > 0 {
		t.Fatalf("adding pending agents at once: %v", unexpected)
	}
	if added != limit-2 || full != hellos-added || sawN != limit || sawFull != limit {
		t.Fatalf("%d added (the last counting %d), %d refused (counting %d); want %d added, the rest refused, both counting %d",
			added, sawN, full, sawFull, limit-2, limit)
	}
	if n, err := s.CountAgents(ctx, "prod", record.AgentPending); err != nil || n != limit {
		t.Fatalf("pending agents of prod: %d, %v; want %d (max_pending)", n, err, limit)
	}

	// A name recorded already is not recorded over.
	_, err := s.AddPendingAgent(ctx, record.Agent{Env: "dev", Name: "elsewhere", State: record.AgentPending, PublicKey: []byte{9}, FirstSeen: now, LastSeen: now}, limit)
	if !errors.Is(err, model.ErrConflict) {
		t.Fatalf("adding a pending agent recorded already: %v; want ErrConflict", err)
	}
	if a, err := s.GetAgent(ctx, "dev", "elsewhere"); err != nil || !slices.Equal(a.PublicKey, []byte{1}) {
		t.Fatalf("the agent recorded already: key %v, %v; want its own kept", a.PublicKey, err)
	}
	// Only a pending agent is added so.
	if _, err := s.AddPendingAgent(ctx, record.Agent{Env: "dev", Name: "other", State: record.AgentAccepted, PublicKey: []byte{2}}, limit); !errors.Is(err, model.ErrInvalid) {
		t.Fatalf("adding an accepted agent as pending: %v; want ErrInvalid", err)
	}
}

func testAgentState(t *testing.T, s store.Store) {
	mustEnv(t, s, "prod")
	seen := time.Now().Add(-time.Hour).Truncate(time.Microsecond)
	read := mustAgent(t, s, record.Agent{Env: "prod", Name: "web-1", State: record.AgentPending, PublicKey: []byte{1, 2, 3},
		Labels: map[string]string{"role": "web"}, Note: "no enrollment token: waiting for an operator to accept it",
		LastSeq: 40, FactsSeq: 40, FirstSeen: seen, LastSeen: seen})
	report := read
	report.Labels, report.Connected, report.LastSeen, report.LastSeq, report.FactsSeq = map[string]string{"role": "db"}, true, seen.Add(time.Minute), 41, 41
	if _, err := s.SetAgentReport(ctx, report); err != nil {
		t.Fatal(err)
	}
	was := read
	read.State, read.Paused, read.Note = record.AgentAccepted, true, ""
	if err := s.SetAgentState(ctx, read, was); err != nil {
		t.Fatal(err)
	}
	got, err := s.GetAgent(ctx, "prod", "web-1")
	if err != nil {
		t.Fatal(err)
	}
	if got.State != record.AgentAccepted || !got.Paused || got.Note != "" {
		t.Fatalf("after an operator's decision: state %s, paused %v, note %q; want accepted, paused, no note", got.State, got.Paused, got.Note)
	}
	if got.Labels["role"] != "db" || !got.Connected || !got.LastSeen.Equal(seen.Add(time.Minute)) || got.LastSeq != 41 {
		t.Fatalf("after an operator's decision from an older copy: %+v; want the report's labels, connection, last seen and number kept", got)
	}
	// A whole record written from that older copy (a hello's) puts back
	// none of what the later report said either.
	read.LastSeq, read.FactsSeq = 40, 40
	if err := s.UpsertAgent(ctx, read); err != nil {
		t.Fatal(err)
	}
	if got, err := s.GetAgent(ctx, "prod", "web-1"); err != nil || got.Labels["role"] != "db" || !got.Connected ||
		!got.LastSeen.Equal(seen.Add(time.Minute)) || got.LastSeq != 41 || got.FactsSeq != 41 {
		t.Fatalf("after a record written from an older copy: %+v, %v; want the report's labels, connection, last seen and numbers kept", got, err)
	}
	// Another operator rejects the agent from the copy read before the
	// pause: refused, the pause stands.
	rejected := was
	rejected.State, rejected.Note = record.AgentRejected, "rejected by an operator"
	if err := s.SetAgentState(ctx, rejected, was); !errors.Is(err, model.ErrConflict) {
		t.Fatalf("decision from a copy read before another: %v; want ErrConflict", err)
	}
	if got, err := s.GetAgent(ctx, "prod", "web-1"); err != nil || got.State != record.AgentAccepted || !got.Paused {
		t.Fatalf("after a refused decision: %+v, %v; want accepted and paused", got, err)
	}
	if err := s.SetAgentState(ctx, record.Agent{Env: "prod", Name: "ghost", State: record.AgentAccepted}, record.Agent{}); !errors.Is(err, model.ErrNotFound) {
		t.Fatalf("decision on an unknown agent: %v; want ErrNotFound", err)
	}
}

// testAgentUpsertIf: a record written from a copy read before an operator
// rejected or paused the agent is not written; one read after is; an agent
// not found when read is written only if nobody wrote it meanwhile.
func testAgentUpsertIf(t *testing.T, s store.Store) {
	mustEnv(t, s, "prod")
	seen := time.Now().Add(-time.Hour).Truncate(time.Microsecond)
	a := record.Agent{Env: "prod", Name: "web-1", State: record.AgentAccepted, PublicKey: []byte{1, 2, 3}, FirstSeen: seen, LastSeen: seen}
	if ok, err := s.UpsertAgentIf(ctx, a, record.Agent{}); err != nil || !ok {
		t.Fatalf("first write of an agent not found: %v, %v; want true, nil", ok, err)
	}
	if ok, err := s.UpsertAgentIf(ctx, a, record.Agent{}); err != nil || ok {
		t.Fatalf("write of an agent not found when read, written since: %v, %v; want false, nil", ok, err)
	}
	read, err := s.GetAgent(ctx, "prod", "web-1")
	if err != nil {
		t.Fatal(err)
	}
	for _, operator := range []func(*record.Agent){
		func(r *record.Agent) { r.State = record.AgentRejected },
		func(r *record.Agent) { r.Paused = true },
	} {
		changed := read
		operator(&changed)
		if err := s.UpsertAgent(ctx, changed); err != nil {
			t.Fatal(err)
		}
		hello := read
		hello.Labels = map[string]string{"role": "web"}
		if ok, err := s.UpsertAgentIf(ctx, hello, read); err != nil || ok {
			t.Fatalf("write from a copy read before the operator's change: %v, %v; want false, nil", ok, err)
		}
		got, err := s.GetAgent(ctx, "prod", "web-1")
		if err != nil {
			t.Fatal(err)
		}
		if got.State != changed.State || got.Paused != changed.Paused || got.Labels["role"] != "" {
			t.Fatalf("after a refused write: %+v; want the operator's change alone", got)
		}
		hello = got
		hello.Labels = map[string]string{"role": "web"}
		if ok, err := s.UpsertAgentIf(ctx, hello, got); err != nil || !ok {
			t.Fatalf("write from a copy read after: %v, %v; want true, nil", ok, err)
		}
		if err := s.UpsertAgent(ctx, read); err != nil { // back as read, for the next case
			t.Fatal(err)
		}
	}
}

// testAgentGeneration: the generation an agent reports is written alone,
// once per change; nothing else of the record changes.
func testAgentGeneration(t *testing.T, s store.Store) {
	mustEnv(t, s, "prod")
	seen := time.Now().Add(-time.Hour).Truncate(time.Microsecond)
	a := record.Agent{Env: "prod", Name: "web-1", State: record.AgentAccepted, PublicKey: []byte{1, 2, 3}, Labels: map[string]string{"role": "web"},
		Generation: 3, LastSeq: 40, FirstSeen: seen, LastSeen: seen}
	if err := s.UpsertAgent(ctx, a); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		generation int64
		want       bool
	}{{4, true}, {4, false}, {2, true}} {
		changed, err := s.SetAgentGeneration(ctx, "prod", "web-1", tt.generation)
		if err != nil || changed != tt.want {
			t.Fatalf("set generation %d: %v, %v; want %v", tt.generation, changed, err, tt.want)
		}
		got, err := s.GetAgent(ctx, "prod", "web-1")
		if err != nil {
			t.Fatal(err)
		}
		if got.Generation != tt.generation || got.State != record.AgentAccepted || got.LastSeq != 40 || got.Labels["role"] != "web" ||
			string(got.PublicKey) != string([]byte{1, 2, 3}) {
			t.Fatalf("after setting generation %d: %+v; want it with the rest unchanged", tt.generation, got)
		}
		if !got.LastSeen.Equal(seen) {
			t.Fatalf("last seen %v after the generation was set; want %v (the results that report it say it was seen)", got.LastSeen, seen)
		}
	}
	if changed, err := s.SetAgentGeneration(ctx, "prod", "ghost", 1); err != nil || changed {
		t.Fatalf("generation of an unknown agent: %v, %v; want false, nil", changed, err)
	}
}

// testResultsSeeAgent: a batch of results numbered past every event
// recorded of its agent says it was seen; an older one (handled late, or
// replayed once its number was forgotten) is recorded, and does not.
func testResultsSeeAgent(t *testing.T, s store.Store) {
	mustEnv(t, s, "prod")
	x := file("a", "/x", "1")
	v := mustPut(t, s, "prod", x)
	mustRelease(t, s, "prod", v.Number)
	t0 := time.Now().Add(-time.Hour).Truncate(time.Microsecond)
	if err := s.UpsertAgent(ctx, record.Agent{Env: "prod", Name: "a", State: record.AgentAccepted, PublicKey: []byte{1},
		LastSeq: 40, FirstSeen: t0, LastSeen: t0}); err != nil {
		t.Fatal(err)
	}
	batch := func(seq uint64) store.ResultBatch {
		return store.ResultBatch{Env: "prod", Agent: "a", Seq: seq, Version: v.Number, DeployID: fmt.Sprint("d", seq),
			Results: []model.Result{result(x, model.StateDeployed, nil)}}
	}
	if fresh, err := s.RecordResults(ctx, []store.ResultBatch{batch(35)}); err != nil || !fresh[0] {
		t.Fatalf("an older batch never recorded: fresh %v, %v; want recorded", fresh, err)
	}
	if got, err := s.GetAgent(ctx, "prod", "a"); err != nil || !got.LastSeen.Equal(t0) || got.LastSeq != 40 {
		t.Fatalf("after an older batch: %+v, %v; want last seen %v, number 40 (not seen by it)", got, err, t0)
	}
	if _, err := s.RecordResults(ctx, []store.ResultBatch{batch(41)}); err != nil {
		t.Fatal(err)
	}
	if got, err := s.GetAgent(ctx, "prod", "a"); err != nil || !got.LastSeen.After(t0) || got.LastSeq != 41 {
		t.Fatalf("after a later batch: %+v, %v; want seen now, number 41", got, err)
	}
}

// testAgentsSeen: heartbeats are written many at once; an agent's
// last-seen time and sequence only grow, it is online when heard from
// later than what is stored (a goodbye recorded since stays), and nothing
// else of its record changes.
func testAgentsSeen(t *testing.T, s store.Store) {
	mustEnv(t, s, "prod")
	t0 := time.Now().Add(-time.Hour).Truncate(time.Microsecond)
	const n = 300
	for i := range n {
		a := record.Agent{Env: "prod", Name: fmt.Sprintf("web-%03d", i), State: record.AgentAccepted, PublicKey: []byte{1, 2, 3},
			Labels: map[string]string{"role": "web"}, Generation: 3, LastSeq: 40, FirstSeen: t0, LastSeen: t0}
		if err := s.UpsertAgent(ctx, a); err != nil {
			t.Fatal(err)
		}
	}
	check := func(name string, seen time.Time, seq int64, online bool) {
		t.Helper()
		got, err := s.GetAgent(ctx, "prod", name)
		if err != nil {
			t.Fatal(err)
		}
		if !got.LastSeen.Equal(seen) || got.LastSeq != seq || got.Connected != online {
			t.Fatalf("%s: last seen %v, seq %d, online %v; want %v, %d, %v", name, got.LastSeen, got.LastSeq, got.Connected, seen, seq, online)
		}
		if got.Generation != 3 || got.Labels["role"] != "web" || got.State != record.AgentAccepted || !got.FirstSeen.Equal(t0) {
			t.Fatalf("%s: %+v; want the rest of the record unchanged", name, got)
		}
	}
	var seen []store.AgentSeen
	for i := range n {
		seen = append(seen, store.AgentSeen{Env: "prod", Agent: fmt.Sprintf("web-%03d", i), Seq: 50 + int64(i), At: t0.Add(time.Minute)})
	}
	seen = append(seen, store.AgentSeen{Env: "prod", Agent: "ghost", Seq: 1, At: t0}, store.AgentSeen{Env: "nowhere", Agent: "web-000", Seq: 1, At: t0})
	if err := s.MarkAgentsSeen(ctx, seen); err != nil {
		t.Fatalf("mark %d agents seen, with unknown ones: %v", len(seen), err)
	}
	check("web-000", t0.Add(time.Minute), 50, true)
	check("web-299", t0.Add(time.Minute), 349, true)
	if _, err := s.GetAgent(ctx, "prod", "ghost"); !errors.Is(err, model.ErrNotFound) {
		t.Fatalf("an unknown agent marked seen: %v, want it still unknown", err)
	}

	// Older than what is stored: nothing moves back.
	if err := s.MarkAgentsSeen(ctx, []store.AgentSeen{{Env: "prod", Agent: "web-000", Seq: 45, At: t0.Add(30 * time.Second)}}); err != nil {
		t.Fatal(err)
	}
	check("web-000", t0.Add(time.Minute), 50, true)

	// goodbye records web-001's goodbye at at, with sequence number seq
	// (0: the one stored).
	goodbye := func(at time.Time, seq int64) {
		t.Helper()
		a, err := s.GetAgent(ctx, "prod", "web-001")
		if err != nil {
			t.Fatal(err)
		}
		a.Connected, a.LastSeen = false, at
		if seq != 0 {
			a.LastSeq = seq
		}
		if err := s.UpsertAgent(ctx, a); err != nil {
			t.Fatal(err)
		}
	}
	// A goodbye recorded after a heartbeat written late: still offline.
	goodbye(t0.Add(2*time.Minute), 0)
	if err := s.MarkAgentsSeen(ctx, []store.AgentSeen{{Env: "prod", Agent: "web-001", Seq: 60, At: t0.Add(90 * time.Second)}}); err != nil {
		t.Fatal(err)
	}
	check("web-001", t0.Add(2*time.Minute), 60, false)
	// Heard from after it: online again.
	if err := s.MarkAgentsSeen(ctx, []store.AgentSeen{{Env: "prod", Agent: "web-001", Seq: 61, At: t0.Add(3 * time.Minute)}}); err != nil {
		t.Fatal(err)
	}
	check("web-001", t0.Add(3*time.Minute), 61, true)
	// An event sent before the goodbye, handled after it (a later
	// time, an earlier sequence), or replayed: the goodbye stands, and
	// the agent was not seen by it.
	goodbye(t0.Add(4*time.Minute), 70)
	if err := s.MarkAgentsSeen(ctx, []store.AgentSeen{{Env: "prod", Agent: "web-001", Seq: 65, At: t0.Add(5 * time.Minute)}}); err != nil {
		t.Fatal(err)
	}
	check("web-001", t0.Add(4*time.Minute), 70, false)
	if err := s.MarkAgentsSeen(ctx, []store.AgentSeen{{Env: "prod", Agent: "web-001", Seq: 71, At: t0.Add(6 * time.Minute)}}); err != nil {
		t.Fatal(err)
	}
	check("web-001", t0.Add(6*time.Minute), 71, true)
	if err := s.MarkAgentsSeen(ctx, nil); err != nil {
		t.Fatalf("mark no agents: %v", err)
	}
}

func testAgents(t *testing.T, s store.Store) {
	mustEnv(t, s, "prod")
	first := time.Now().Add(-time.Hour).Truncate(time.Microsecond)
	a := record.Agent{Env: "prod", Name: "web-1", PublicKey: []byte{1, 2, 3}, Labels: map[string]string{"role": "web"},
		Facts: map[string]any{"os": map[string]any{"family": "debian"}, "cpus": 2}, Kinds: []string{"file"}, FirstSeen: first, LastSeen: first}
	if err := s.UpsertAgent(ctx, a); err != nil {
		t.Fatal(err)
	}
	if got, err := s.GetAgent(ctx, "prod", "web-1"); err != nil || got.KeyAgreementKey != nil {
		t.Fatalf("agent without a key-agreement key: %+v, %v; want none read back", got, err)
	}
	a.State, a.Generation, a.LastSeen, a.FirstSeen, a.Paused = record.AgentAccepted, 4, time.Now(), time.Now(), true
	a.KeyAgreementKey = []byte{4, 5, 6, 7}
	if err := s.UpsertAgent(ctx, a); err != nil {
		t.Fatal(err)
	}
	got, err := s.GetAgent(ctx, "prod", "web-1")
	if err != nil {
		t.Fatal(err)
	}
	if got.State != record.AgentAccepted || got.Generation != 4 || got.Labels["role"] != "web" || len(got.PublicKey) != 3 || !got.Paused ||
		string(got.KeyAgreementKey) != string([]byte{4, 5, 6, 7}) {
		t.Fatalf("agent %+v", got)
	}
	if !got.FirstSeen.Equal(first) {
		t.Fatalf("first seen %v, want %v (kept from the first sight)", got.FirstSeen, first)
	}
	if got.PreviousKey != nil || got.PreviousUntil != nil {
		t.Fatalf("agent that never rolled its key over: previous key %x until %v; want none", got.PreviousKey, got.PreviousUntil)
	}
	// An agent's keys change only by compare-and-set: a write of its
	// other fields from an older copy never puts an old key back.
	a.PublicKey = []byte{6, 6, 6}
	if err := s.UpsertAgent(ctx, a); err != nil {
		t.Fatal(err)
	}
	if r, err := s.GetAgent(ctx, "prod", "web-1"); err != nil || string(r.PublicKey) != string([]byte{1, 2, 3}) {
		t.Fatalf("key after an upsert with another: %x, %v; want 010203 kept", r.PublicKey, err)
	}
	// A key rollover: the previous key holds until the agent switches
	// (no time), then until a time.
	a.PublicKey, a.PreviousKey = []byte{8, 9}, []byte{1, 2, 3}
	if ok, err := s.SetAgentKey(ctx, a, []byte{7}); err != nil || ok {
		t.Fatalf("set the key from one the agent does not have: %v, %v; want false", ok, err)
	}
	from := []byte{1, 2, 3}
	for _, until := range []*time.Time{nil, new(time.Now().Add(time.Hour).Truncate(time.Microsecond))} {
		a.PreviousUntil = until
		if ok, err := s.SetAgentKey(ctx, a, from); err != nil || !ok {
			t.Fatalf("set the key from %x: %v, %v; want true", from, ok, err)
		}
		from = a.PublicKey
		r, err := s.GetAgent(ctx, "prod", "web-1")
		if err != nil {
			t.Fatal(err)
		}
		if string(r.PublicKey) != string([]byte{8, 9}) || string(r.PreviousKey) != string([]byte{1, 2, 3}) ||
			(until == nil) != (r.PreviousUntil == nil) || (until != nil && !r.PreviousUntil.Equal(*until)) {
			t.Fatalf("after a rollover: key %x, previous %x until %v; want 0809, 010203 until %v", r.PublicKey, r.PreviousKey, r.PreviousUntil, until)
		}
	}
	if fam := got.Facts["os"].(map[string]any)["family"]; fam != "debian" {
		t.Fatalf("facts %v", got.Facts)
	}
	if _, err := s.GetAgent(ctx, "prod", "ghost"); !errors.Is(err, model.ErrNotFound) {
		t.Fatalf("unknown agent: got %v, want ErrNotFound", err)
	}
	if err := s.UpsertAgent(ctx, record.Agent{Env: "nope", Name: "x"}); !errors.Is(err, model.ErrNotFound) {
		t.Fatalf("agent of an unknown env: got %v, want ErrNotFound", err)
	}
	if err := s.UpsertAgent(ctx, record.Agent{Env: "prod", Name: "bad name"}); !errors.Is(err, model.ErrInvalid) {
		t.Fatalf("bad agent name: got %v, want ErrInvalid", err)
	}
	list, err := s.ListAgents(ctx, "prod")
	if err != nil || len(list) != 1 {
		t.Fatalf("ListAgents = %v, %v", list, err)
	}
}

func testRecordResults(t *testing.T, s store.Store) {
	mustEnv(t, s, "prod")
	ok, bad, skipped, quiet := file("a", "/ok", "x"), file("a", "/bad", "x"), file("a", "/skipped", "x"), file("a", "/quiet", "x")
	mustPut(t, s, "prod", ok, bad, skipped, quiet)
	mustRelease(t, s, "prod", 1)
	created := model.Changes{model.AttrPresent: {Current: false, Desired: true}, "content": {Current: nil, Desired: "x"}}
	err := recordBatch(s, "prod", "a", 1, "d1", []model.Result{
		result(ok, model.StateDeployed, created),
		{ID: bad.ID, State: model.StateFailed, Message: "apply: permission denied"},
		{ID: skipped.ID, State: model.StateSkipped, Message: "requirement failed"},
		result(quiet, model.StateDeployed, nil),
	})
	if err != nil {
		t.Fatal(err)
	}
	st := statusOf(t, s, "prod")
	if st["/ok"].State != model.StateDeployed || st["/ok"].Compliance != model.Compliant || st["/ok"].LastVerified == nil {
		t.Fatalf("ok: %+v", st["/ok"])
	}
	if st["/bad"].State != model.StateFailed || st["/bad"].Compliance != model.NonCompliant || st["/bad"].Message != "apply: permission denied" {
		t.Fatalf("bad: %+v", st["/bad"])
	}
	if st["/skipped"].State != model.StateSkipped || st["/skipped"].Compliance != model.ComplianceUnknown {
		t.Fatalf("skipped: %+v", st["/skipped"])
	}
	actions, err := s.Actions(ctx, "prod", ok.ID, 10)
	if err != nil || len(actions) != 1 {
		t.Fatalf("actions of ok: %v, %v", actions, err)
	}
	if a := actions[0]; a.Kind != record.ActionDeploy || a.DeployID != "d1" || a.Version != 1 || !a.Changes.Created() || a.Duration != time.Millisecond {
		t.Fatalf("action %+v", a)
	}
	if actions, _ := s.Actions(ctx, "prod", quiet.ID, 10); len(actions) != 0 {
		t.Fatalf("an unchanged, successful resource got %d action-log entries", len(actions))
	}
	if actions, _ := s.Actions(ctx, "prod", bad.ID, 10); len(actions) != 1 || actions[0].State != model.StateFailed {
		t.Fatalf("failed resource actions: %v", actions)
	}

	// A dry run logs what it found and leaves the state alone; what it
	// found is the resource's compliance (testCompliance).
	err = recordBatch(s, "prod", "a", 1, "dry1", []model.Result{
		{ID: ok.ID, State: model.StateDeployed, DryRun: true, Changes: model.Changes{"content": {Current: "y", Desired: "x"}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	if st := statusOf(t, s, "prod")["/ok"]; st.State != model.StateDeployed || st.Compliance != model.NonCompliant {
		t.Fatalf("dry run that found a change: %+v, want deployed and non_compliant", st)
	}
	actions, _ = s.Actions(ctx, "prod", ok.ID, 10)
	if len(actions) != 2 || actions[0].Kind != record.ActionDryRun || actions[0].Seq <= actions[1].Seq {
		t.Fatalf("actions after dry run (newest first): %+v", actions)
	}
	if actions, _ := s.Actions(ctx, "prod", ok.ID, 1); len(actions) != 1 {
		t.Fatalf("limit 1 returned %d", len(actions))
	}
}

func testAllOrNothing(t *testing.T, s store.Store) {
	mustEnv(t, s, "prod")
	x := file("a", "/x", "x")
	mustPut(t, s, "prod", x)
	mustRelease(t, s, "prod", 1)
	for name, batch := range map[string][]model.Result{
		"other agent's resource": {result(x, model.StateDeployed, nil), result(file("b", "/y", ""), model.StateDeployed, nil)},
		"unknown state":          {result(x, model.StateDeployed, nil), {ID: x.ID, State: "exploded"}},
	} {
		err := recordBatch(s, "prod", "a", 1, "d", batch)
		if !errors.Is(err, model.ErrInvalid) {
			t.Fatalf("%s: got %v, want ErrInvalid", name, err)
		}
		if st := statusOf(t, s, "prod")["/x"]; st.State != model.StateAvailable {
			t.Fatalf("%s: a rejected batch was partly recorded: %+v", name, st)
		}
	}
}

func testStaleResults(t *testing.T, s store.Store) {
	mustEnv(t, s, "prod")
	same := file("a", "/same", "s")
	mustPut(t, s, "prod", file("a", "/x", "1"), same)
	mustRelease(t, s, "prod", 1)
	mustPut(t, s, "prod", file("a", "/x", "2"), same)
	mustRelease(t, s, "prod", 2)
	// A late result of the deploy of version 1 must not mark version 2's
	// new content as deployed, even when it says which content it applied;
	// it does stand for a resource whose desired state did not change.
	hashed := func(r model.Resource) model.Result {
		res := result(r, model.StateDeployed, nil)
		h, err := r.Hash()
		if err != nil {
			t.Fatal(err)
		}
		res.Hash = h
		return res
	}
	if err := recordBatch(s, "prod", "a", 1, "old", []model.Result{hashed(file("a", "/x", "1")), hashed(same)}); err != nil {
		t.Fatal(err)
	}
	st := statusOf(t, s, "prod")
	if st["/x"].State != model.StateAvailable {
		t.Fatalf("a stale result overwrote the newer state: %+v", st["/x"])
	}
	if st["/same"].State != model.StateDeployed || st["/same"].Version != 2 {
		t.Fatalf("a result of version 1 for a resource version 2 holds unchanged: %+v, want deployed", st["/same"])
	}
	if err := recordBatch(s, "prod", "a", 2, "new", []model.Result{result(file("a", "/x", "2"), model.StateDeployed, nil)}); err != nil {
		t.Fatal(err)
	}
	if st := statusOf(t, s, "prod")["/x"]; st.State != model.StateDeployed {
		t.Fatalf("the current result was not recorded: %+v", st)
	}
}

func testStatusFilters(t *testing.T, s store.Store) {
	mustEnv(t, s, "prod")
	rs := []model.Resource{file("a", "/1", ""), dir("a", "/d"), file("b", "/1", ""), file("b", "/2", "")}
	mustPut(t, s, "prod", rs...)
	mustRelease(t, s, "prod", 1)
	if err := recordBatch(s, "prod", "b", 1, "d", []model.Result{result(rs[2], model.StateDeployed, nil), {ID: rs[3].ID, State: model.StateFailed}}); err != nil {
		t.Fatal(err)
	}
	count := func(f record.StatusFilter) int {
		sts, err := s.Statuses(ctx, "prod", f)
		if err != nil {
			t.Fatal(err)
		}
		return len(sts)
	}
	tests := []struct {
		f    record.StatusFilter
		want int
	}{
		{record.StatusFilter{}, 4},
		{record.StatusFilter{Agent: "a"}, 2},
		{record.StatusFilter{Type: "file"}, 3},
		{record.StatusFilter{Type: "fil"}, 0},
		{record.StatusFilter{Type: "directory", Agent: "a"}, 1},
		{record.StatusFilter{State: model.StateFailed}, 1},
		{record.StatusFilter{Compliance: model.Compliant}, 1},
		{record.StatusFilter{Agent: "a", State: model.StateDeployed}, 0},
	}
	for _, tt := range tests {
		if got := count(tt.f); got != tt.want {
			t.Errorf("Statuses(%+v): %d, want %d", tt.f, got, tt.want)
		}
		if got, err := s.CountStatuses(ctx, "prod", tt.f, 0); err != nil || got != tt.want {
			t.Errorf("CountStatuses(%+v): %d, %v; want %d", tt.f, got, err, tt.want)
		}
	}
	// Search and pages: a page in the byte order of the IDs, counted
	// whole; LIKE's wildcards are plain text.
	for _, tt := range []struct {
		f     record.StatusFilter
		want  []string
		total int
	}{
		{record.StatusFilter{Search: "/1"}, []string{"file[a,path=/1]", "file[b,path=/1]"}, 2},
		{record.StatusFilter{Search: "FILE[B"}, []string{"file[b,path=/1]", "file[b,path=/2]"}, 2},
		{record.StatusFilter{Search: "%"}, nil, 0},
		{record.StatusFilter{Search: "_"}, nil, 0},
		{record.StatusFilter{Limit: 2}, []string{"directory[a,path=/d]", "file[a,path=/1]"}, 4},
		{record.StatusFilter{Limit: 2, Offset: 2}, []string{"file[b,path=/1]", "file[b,path=/2]"}, 4},
		{record.StatusFilter{Limit: 2, Offset: 9}, nil, 4},
		{record.StatusFilter{Type: "file", Search: "b", Limit: 1, Offset: 1}, []string{"file[b,path=/2]"}, 2},
	} {
		sts, err := s.Statuses(ctx, "prod", tt.f)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, st := range sts {
			got = append(got, st.ID.String())
		}
		if !slices.Equal(got, tt.want) {
			t.Errorf("Statuses(%+v): %v, want %v", tt.f, got, tt.want)
		}
		if n, err := s.CountStatuses(ctx, "prod", tt.f, 0); err != nil || n != tt.total {
			t.Errorf("CountStatuses(%+v): %d, %v; want %d", tt.f, n, err, tt.total)
		}
	}
	counts, err := s.StatusCounts(ctx, "prod")
	if err != nil {
		t.Fatal(err)
	}
	slices.SortFunc(counts, func(a, b record.StatusCount) int { return strings.Compare(string(a.State), string(b.State)) })
	if want := []record.StatusCount{{State: model.StateAvailable, Compliance: model.ComplianceUnknown, N: 2}, {State: model.StateDeployed, Compliance: model.Compliant, N: 1},
		{State: model.StateFailed, Compliance: model.NonCompliant, N: 1}}; !slices.Equal(counts, want) {
		t.Errorf("StatusCounts: %+v, want %+v", counts, want)
	}
	if n, err := s.CountStatuses(ctx, "prod", record.StatusFilter{State: model.StateDeployed}, 1); err != nil || n != 1 {
		t.Errorf("CountStatuses of version 1, deployed: %d, %v; want 1", n, err)
	}
	if n, err := s.CountStatuses(ctx, "prod", record.StatusFilter{}, 2); err != nil || n != 0 {
		t.Errorf("CountStatuses of version 2, not released: %d, %v; want 0", n, err)
	}
	if n, _ := s.CountStatuses(ctx, "other", record.StatusFilter{}, 0); n != 0 {
		t.Fatalf("another environment counts %d statuses", n)
	}
	if sts, _ := s.Statuses(ctx, "other", record.StatusFilter{}); len(sts) != 0 {
		t.Fatalf("another environment sees %d statuses", len(sts))
	}
}

// testIngestBesideSeenMarks: results recorded for many agents and their
// heartbeats' seen-marks, written at once in opposite orders of agents,
// both go through: each locks the agents' rows in one order (a deadlock
// would fail one of them).
func testIngestBesideSeenMarks(t *testing.T, s store.Store) {
	mustEnv(t, s, "prod")
	const agents, rounds = 40, 25
	var rs []model.Resource
	for a := range agents {
		name := fmt.Sprintf("agent-%02d", a)
		if err := s.UpsertAgent(ctx, record.Agent{Env: "prod", Name: name, State: record.AgentAccepted, FirstSeen: time.Now(), LastSeen: time.Now()}); err != nil {
			t.Fatal(err)
		}
		rs = append(rs, file(name, "/f", "x"))
	}
	mustPut(t, s, "prod", rs...)
	mustRelease(t, s, "prod", 1)
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		for i := range rounds {
			var batches []store.ResultBatch
			for a := range agents {
				batches = append(batches, store.ResultBatch{Env: "prod", Agent: rs[a].ID.Agent, Seq: uint64(2*i + 1), Version: 1, DeployID: "d",
					Results: []model.Result{result(rs[a], model.StateDeployed, nil)}})
			}
			if _, err := s.RecordResults(ctx, batches); err != nil {
				t.Errorf("results, round %d: %v", i, err)
				return
			}
		}
	}()
	go func() {
		defer wg.Done()
		for i := range rounds {
			var seen []store.AgentSeen
			for a := agents - 1; a >= 0; a-- {
				seen = append(seen, store.AgentSeen{Env: "prod", Agent: rs[a].ID.Agent, Seq: int64(2*i + 2), At: time.Now()})
			}
			if err := s.MarkAgentsSeen(ctx, seen); err != nil {
				t.Errorf("seen-marks, round %d: %v", i, err)
				return
			}
		}
	}()
	wg.Wait()
	a, err := s.GetAgent(ctx, "prod", rs[0].ID.Agent)
	if err != nil || a.LastSeq != 2*rounds {
		t.Fatalf("agent after both: last seq %d, %v; want %d", a.LastSeq, err, 2*rounds)
	}
}

// testIngestBesideReleases: results recorded while versions are stored
// and released, over and over, both go through: a release locks the
// statuses in the order ingest does, and neither waits on the other's
// lock of the environment (a deadlock would fail one of them).
func testIngestBesideReleases(t *testing.T, s store.Store) {
	mustEnv(t, s, "prod")
	const agents = 30
	version := func(content string) []model.Resource {
		var rs []model.Resource
		for a := range agents {
			rs = append(rs, file(fmt.Sprintf("agent-%02d", a), "/f", content))
		}
		return rs
	}
	rs := version("0")
	mustRelease(t, s, "prod", mustPut(t, s, "prod", rs...).Number)
	stop := meanwhile(t, func(i int) error {
		v, err := s.PutVersion(ctx, "prod", model.VersionMeta{Compiler: "test"}, version(fmt.Sprint(i+1)))
		if err == nil {
			_, err = s.Release(ctx, "prod", v.Number)
		}
		if err != nil {
			return fmt.Errorf("release, round %d: %w", i, err)
		}
		return nil
	})
	for i := range 40 {
		var batches []store.ResultBatch
		for a := range agents {
			// Changes: each result is an entry of the action log too.
			batches = append(batches, store.ResultBatch{Env: "prod", Agent: rs[a].ID.Agent, Seq: uint64(i + 1), Version: 1, DeployID: "d",
				Results: []model.Result{result(rs[a], model.StateDeployed, model.Changes{"content": {Desired: "0"}})}})
		}
		if _, err := s.RecordResults(ctx, batches); err != nil {
			t.Errorf("results, round %d: %v", i, err)
			break
		}
	}
	stop()
}

// testDeleteEnvBesideIngest: an environment deleted while results of its
// agents are recorded: the deletion goes through, and the ingest fails
// only for want of the environment, never on a conflict (a deadlock: the
// deletion's cascade taking statuses and agents in another order than
// ingest does).
func testDeleteEnvBesideIngest(t *testing.T, s store.Store) {
	const agents = 30
	for round := range 15 {
		mustEnv(t, s, "doomed")
		var rs []model.Resource
		for a := range agents {
			name := fmt.Sprintf("agent-%02d", a)
			if err := s.UpsertAgent(ctx, record.Agent{Env: "doomed", Name: name, State: record.AgentAccepted, FirstSeen: time.Now(), LastSeen: time.Now()}); err != nil {
				t.Fatal(err)
			}
			rs = append(rs, file(name, "/f", "x"))
		}
		mustRelease(t, s, "doomed", mustPut(t, s, "doomed", rs...).Number)
		stop := meanwhile(t, func(i int) error {
			var batches []store.ResultBatch
			for a := range agents {
				batches = append(batches, store.ResultBatch{Env: "doomed", Agent: rs[a].ID.Agent, Seq: uint64(i + 1), Version: 1, DeployID: "d",
					Results: []model.Result{result(rs[a], model.StateDeployed, model.Changes{"content": {Desired: "x"}})}})
			}
			if _, err := s.RecordResults(ctx, batches); errors.Is(err, model.ErrConflict) {
				return fmt.Errorf("round %d: results beside the deletion: %w", round, err)
			}
			return nil
		})
		time.Sleep(time.Duration(round) * time.Millisecond) // let ingest run a little, more each round
		err := s.DeleteEnv(ctx, "doomed")
		stop()
		if err != nil {
			t.Fatalf("round %d: delete beside an ingest: %v", round, err)
		}
	}
}

func testConcurrentIngest(t *testing.T, s store.Store) {
	mustEnv(t, s, "prod")
	var rs []model.Resource
	for a := 0; a < 4; a++ {
		for i := 0; i < 50; i++ {
			rs = append(rs, file(fmt.Sprintf("agent-%d", a), fmt.Sprintf("/f%d", i), "x"))
		}
	}
	mustPut(t, s, "prod", rs...)
	mustRelease(t, s, "prod", 1)
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for a := 0; a < 4; a++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var batch []model.Result
			for _, r := range rs[a*50 : (a+1)*50] {
				batch = append(batch, result(r, model.StateDeployed, model.Changes{"content": {Desired: "x"}}))
			}
			errs <- recordBatch(s, "prod", fmt.Sprintf("agent-%d", a), 1, "d", batch)
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	sts, err := s.Statuses(ctx, "prod", record.StatusFilter{State: model.StateDeployed})
	if err != nil || len(sts) != 200 {
		t.Fatalf("%d deployed after concurrent ingest, want 200 (%v)", len(sts), err)
	}
}
