package model

import "testing"

func TestDryRunOutcome(t *testing.T) {
	for _, tc := range []struct {
		state   ResourceState
		changes Changes
		want    string
	}{
		{StateDeployed, nil, Unchanged},
		{StateDeployed, Changes{AttrPresent: {Current: false, Desired: true}, "content": {Desired: "x"}}, WouldCreate},
		{StateDeployed, Changes{AttrPresent: {Current: true, Desired: false}}, WouldRemove},
		{StateDeployed, Changes{"mode": {Current: "0644", Desired: "0600"}}, WouldChange},
		{StateFailed, Changes{"mode": {Current: "0644", Desired: "0600"}}, "failed"},
		{StateSkipped, nil, "skipped"},
	} {
		if got := DryRunOutcome(tc.state, tc.changes); got != tc.want {
			t.Errorf("DryRunOutcome(%s, %v) = %q, want %q", tc.state, tc.changes, got, tc.want)
		}
	}
}
