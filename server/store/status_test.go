package store

import (
	"fmt"
	"strings"
	"testing"

	"github.com/tetherhq/tether/model"
	"github.com/tetherhq/tether/server/record"
)

func TestSeq(t *testing.T) {
	const w = ReorderWindow
	tests := []struct {
		stored, m int64
		holds     bool
		after     int64
	}{
		{0, 5, false, 5},
		{5, 5, false, 5},
		{6, 5, true, 6},
		{5 + w, 5, true, 5 + w},
		{6 + w, 5, false, 5}, // beyond the window: yields, and starts over at m
		{7, 0, true, 7},      // unnumbered: holds nothing back (callers check m == 0), keeps the number
		{4, 9, false, 9},
	}
	for _, tt := range tests {
		if got := seqHolds(tt.stored, tt.m); got != tt.holds {
			t.Errorf("seqHolds(%d, %d) = %v, want %v", tt.stored, tt.m, got, tt.holds)
		}
		if got := seqAfter(tt.stored, tt.m); got != tt.after {
			t.Errorf("seqAfter(%d, %d) = %d, want %d", tt.stored, tt.m, got, tt.after)
		}
	}
}

func TestApplyResult(t *testing.T) {
	id := model.ID{Type: "file", Agent: "a", Key: "path", Value: "/x"}
	hash := model.Hash{1}
	base := Status{Version: 2, Hash: hash[:], State: model.StateAvailable, Compliance: model.ComplianceUnknown, Seq: 10, ComplianceSeq: 10}
	tests := []struct {
		name    string
		r       model.Result
		version int64
		seq     int64
		applied bool
		want    Status // State, Compliance, Seq, ComplianceSeq, Verified
	}{
		{"deployed", model.Result{State: model.StateDeployed}, 2, 11, true,
			Status{State: model.StateDeployed, Compliance: model.Compliant, Seq: 11, ComplianceSeq: 11, Verified: true}},
		{"failed", model.Result{State: model.StateFailed}, 2, 11, true,
			Status{State: model.StateFailed, Compliance: model.NonCompliant, Seq: 11, ComplianceSeq: 11}},
		{"skipped keeps the compliance", model.Result{State: model.StateSkipped}, 2, 11, true,
			Status{State: model.StateSkipped, Compliance: model.ComplianceUnknown, Seq: 11, ComplianceSeq: 10}},
		{"an older version's result", model.Result{State: model.StateDeployed}, 1, 11, false, base},
		{"an older version's result of the same intent", model.Result{State: model.StateDeployed, Hash: hash}, 1, 11, true,
			Status{State: model.StateDeployed, Compliance: model.Compliant, Seq: 11, ComplianceSeq: 11, Verified: true}},
		{"an older message", model.Result{State: model.StateFailed}, 2, 9, false, base},
		{"an unnumbered message", model.Result{State: model.StateFailed}, 2, 0, true,
			Status{State: model.StateFailed, Compliance: model.NonCompliant, Seq: 10, ComplianceSeq: 10}},
		{"a message far behind", model.Result{State: model.StateFailed}, 2, 10 - ReorderWindow - 1, true,
			Status{State: model.StateFailed, Compliance: model.NonCompliant, Seq: 10 - ReorderWindow - 1, ComplianceSeq: 10 - ReorderWindow - 1}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			st := base
			tt.r.ID = id
			if got := st.applyResult(&tt.r, tt.version, tt.seq); got != tt.applied {
				t.Fatalf("applied %v, want %v", got, tt.applied)
			}
			got := fmt.Sprint(st.State, st.Compliance, st.Seq, st.ComplianceSeq, st.Verified, st.Updated)
			want := fmt.Sprint(tt.want.State, tt.want.Compliance, tt.want.Seq, tt.want.ComplianceSeq, tt.want.Verified, tt.applied)
			if tt.want.State == "" {
				want = fmt.Sprint(base.State, base.Compliance, base.Seq, base.ComplianceSeq, false, false)
			}
			if got != want {
				t.Fatalf("got %s, want %s", got, want)
			}
		})
	}

	// A drift report (newer) set the compliance; the older deploy result
	// sets the state only.
	st := base
	st.ComplianceSeq = 20
	if !st.applyResult(&model.Result{ID: id, State: model.StateDeployed}, 2, 19) || st.State != model.StateDeployed ||
		st.Compliance != model.ComplianceUnknown || st.Verified || st.ComplianceSeq != 20 {
		t.Fatalf("result older than the compliance: %+v, want deployed and the compliance kept", st)
	}
}

func TestApplyVerification(t *testing.T) {
	deployed := Status{Version: 2, State: model.StateDeployed, Compliance: model.Compliant, ComplianceSeq: 10}
	available := deployed
	available.State = model.StateAvailable
	tests := []struct {
		name         string
		st           Status
		version, seq int64
		deployedOnly bool
		applied      bool
	}{
		{"dry run of a deployed resource", deployed, 2, 11, true, true},
		{"dry run of a resource not deployed", available, 2, 11, true, false},
		{"drift report while the deploy's result is on the way", available, 2, 11, false, true},
		{"another version", deployed, 1, 11, false, false},
		{"an older report", deployed, 2, 9, false, false},
		{"an unnumbered report", deployed, 2, 0, false, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			st := tt.st
			got := st.applyVerification(model.NonCompliant, tt.version, tt.seq, tt.deployedOnly)
			if got != tt.applied || (st.Compliance == model.NonCompliant) != tt.applied || st.Verified != tt.applied {
				t.Fatalf("applied %v, status %+v; want applied %v", got, st, tt.applied)
			}
			if st.State != tt.st.State || st.Updated {
				t.Fatalf("a verification changed the state: %+v", st)
			}
		})
	}
}

// TestApply: one call's batches apply in their order; duplicates and
// dry runs are logged as the contract says.
func TestApply(t *testing.T) {
	x := model.ID{Type: "file", Agent: "a", Key: "path", Value: "/x"}
	key := StatusKey{"prod", x.String()}
	stored := []Status{{StatusKey: key, Version: 1, State: model.StateAvailable, Compliance: model.ComplianceUnknown}}
	batch := func(seq uint64, rs ...model.Result) ResultBatch {
		return ResultBatch{Env: "prod", Agent: "a", Seq: seq, Version: 1, DeployID: "d", Results: rs}
	}
	batches := []ResultBatch{
		batch(21, model.Result{ID: x, State: model.StateFailed, Message: "boom"}),
		batch(20, model.Result{ID: x, State: model.StateDeployed}), // older: held over
		batch(22, model.Result{ID: x, State: model.StateDeployed, DryRun: true, // not deployed: logged only
			Changes: model.Changes{"content": {Desired: "1"}}}),
		batch(23, model.Result{ID: x, State: model.StateDeployed}), // not fresh
	}
	batches[3].Alerts = []record.Alert{{Env: "prod", Agent: "a", Kind: record.AlertSecurity, Message: "m"}}
	in, err := apply(batches, []bool{true, true, true, false}, stored)
	if err != nil {
		t.Fatal(err)
	}
	if len(in.Statuses) != 1 || in.Statuses[0].State != model.StateFailed || in.Statuses[0].Seq != 21 || in.Statuses[0].Message != "boom" {
		t.Fatalf("statuses %+v, want x failed at #21", in.Statuses)
	}
	if len(in.Actions) != 2 || in.Actions[0].State != model.StateFailed || in.Actions[1].Kind != record.ActionDryRun || in.Actions[1].Changes == nil {
		t.Fatalf("actions %+v, want the failure and the dry run's finding", in.Actions)
	}
	if len(in.LastSeqs) != 1 || in.LastSeqs[0].Seq != 22 {
		t.Fatalf("last seqs %+v, want a at 22", in.LastSeqs)
	}
	// The failure of #21 counts against its agent's run of deploy d; the
	// alert of #23, recorded before, is not stored again.
	if len(in.Statements) != 1 || !strings.HasPrefix(in.Statements[0].SQL, "INSERT INTO deploy_agents") || in.Statements[0].Args[0] != 1 {
		t.Fatalf("statements %+v, want only the failure counted against the deploy", in.Statements)
	}
}
