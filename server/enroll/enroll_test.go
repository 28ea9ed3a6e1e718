package enroll_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/tetherhq/tether/server/enroll"
	"github.com/tetherhq/tether/server/record"
)

var (
	accepted = record.AgentAccepted
	pending  = record.AgentPending
	rejected = record.AgentRejected
	open     = record.EnrollOpen
	token    = record.EnrollToken
	manual   = record.EnrollManual
)

// Every state × key × policy × token a hello can meet, and what it does.
func TestHelloTable(t *testing.T) {
	type c struct {
		state  record.AgentState
		key    enroll.Key
		policy record.Enrollment
		token  bool
		want   enroll.Step
		why    enroll.Refusal
	}
	cases := []c{
		// A name the server does not know is discovered, whatever else.
		{"", enroll.KeyNone, manual, false, enroll.Discover, 0},
		{"", enroll.KeyNone, open, true, enroll.Discover, 0},
		// Its own key: the record takes the news.
		{accepted, enroll.KeySame, manual, false, enroll.Continue, 0},
		{pending, enroll.KeySame, token, true, enroll.Continue, 0},
		{rejected, enroll.KeySame, manual, false, enroll.Continue, 0},
		// The key an accepted agent rolled over from, before it switched.
		{accepted, enroll.KeyPrevious, manual, false, enroll.NotSwitched, 0},
		{accepted, enroll.KeyPrevious, open, false, enroll.NotSwitched, 0},
		// Another key on an accepted name: refused but where anyone may
		// enroll.
		{accepted, enroll.KeyOther, manual, false, enroll.Refuse, enroll.AcceptedKey},
		{accepted, enroll.KeyOther, token, true, enroll.Refuse, enroll.AcceptedKey},
		{accepted, enroll.KeyOther, open, false, enroll.Rekey, 0},
		// Another key-agreement key on an accepted agent: the same.
		{accepted, enroll.KeyOtherAgreement, manual, false, enroll.Refuse, enroll.AgreementKey},
		{accepted, enroll.KeyOtherAgreement, token, true, enroll.Refuse, enroll.AgreementKey},
		{accepted, enroll.KeyOtherAgreement, open, false, enroll.Continue, 0},
		{pending, enroll.KeyOtherAgreement, manual, false, enroll.Continue, 0},
		// Another key on a rejected name: no second chance, token or not.
		{rejected, enroll.KeyOther, manual, false, enroll.Refuse, enroll.OtherKey},
		{rejected, enroll.KeyOther, token, true, enroll.Refuse, enroll.OtherKey},
		{rejected, enroll.KeyOther, open, false, enroll.Rekey, 0},
		// Another key on a pending name: only with a token (which the
		// admission then checks), or where anyone may enroll.
		{pending, enroll.KeyOther, manual, true, enroll.Refuse, enroll.OtherKey},
		{pending, enroll.KeyOther, token, false, enroll.Refuse, enroll.OtherKey},
		{pending, enroll.KeyOther, token, true, enroll.Rekey, 0},
		{pending, enroll.KeyOther, open, false, enroll.Rekey, 0},
		// A state the table does not know is refused.
		{"frozen", enroll.KeyOther, manual, false, enroll.Refuse, enroll.OtherKey},
		{"frozen", enroll.KeyPrevious, manual, false, enroll.Refuse, enroll.UnknownState},
	}
	for _, tc := range cases {
		name := fmt.Sprintf("%s/%s/%s/token=%v", tc.state, tc.key, tc.policy, tc.token)
		got := enroll.Hello(tc.state, tc.key, tc.policy, tc.token)
		if got.Step != tc.want || got.Why != tc.why {
			t.Errorf("%s: got %s (%d), want %s (%d)", name, got.Step, got.Why, tc.want, tc.why)
		}
	}
}

// Whether an agent is enrolled once its record took its hello.
func TestAdmitTable(t *testing.T) {
	cases := []struct {
		state  record.AgentState
		policy record.Enrollment
		token  bool
		want   enroll.Admission
	}{
		{accepted, manual, false, enroll.Enrolled},
		{accepted, open, true, enroll.Enrolled},
		{pending, open, false, enroll.Accept},
		{rejected, open, false, enroll.Accept},
		{rejected, manual, false, enroll.Rejected},
		{rejected, token, true, enroll.Rejected},
		{pending, token, true, enroll.UseToken},
		{pending, token, false, enroll.Wait},
		{pending, manual, true, enroll.UseOwnToken},
		{rejected, manual, true, enroll.Rejected},
		{accepted, manual, true, enroll.Enrolled},
	}
	for _, tc := range cases {
		if got := enroll.Admit(tc.state, tc.policy, tc.token); got != tc.want {
			t.Errorf("%s/%s/token=%v: got %s, want %s", tc.state, tc.policy, tc.token, got, tc.want)
		}
	}
}

// What a hello's keys are, against the record's.
func TestPresented(t *testing.T) {
	now := time.Now()
	later := now.Add(time.Hour)
	key, prev, other := []byte("key-1"), []byte("key-0"), []byte("key-9")
	ka, otherKA := []byte("ka-1"), []byte("ka-9")
	rolled := record.Agent{State: accepted, PublicKey: key, KeyAgreementKey: ka, PreviousKey: prev, PreviousUntil: &later}
	cases := []struct {
		name    string
		a       record.Agent
		found   bool
		pub, ka []byte
		want    enroll.Key
	}{
		{"no record", record.Agent{}, false, key, ka, enroll.KeyNone},
		{"same keys", rolled, true, key, ka, enroll.KeySame},
		{"previous key", rolled, true, prev, ka, enroll.KeyPrevious},
		{"previous key, other agreement key", rolled, true, prev, otherKA, enroll.KeyOther},
		{"previous key of a pending agent", record.Agent{State: pending, PublicKey: key, PreviousKey: prev, PreviousUntil: &later}, true, prev, nil, enroll.KeyOther},
		{"other key", rolled, true, other, ka, enroll.KeyOther},
		{"other agreement key", rolled, true, key, otherKA, enroll.KeyOtherAgreement},
		{"agreement key where the record holds none", record.Agent{State: accepted, PublicKey: key}, true, key, ka, enroll.KeySame},
	}
	for _, tc := range cases {
		if got := enroll.Presented(tc.a, tc.found, tc.pub, tc.ka, now); got != tc.want {
			t.Errorf("%s: got %s, want %s", tc.name, got, tc.want)
		}
	}
}

func TestNote(t *testing.T) {
	cases := []struct {
		state   record.AgentState
		policy  record.Enrollment
		token   bool
		refusal string
		want    string
	}{
		{accepted, manual, false, "", ""},
		{rejected, token, true, "", "rejected by an operator"},
		{pending, token, true, "expired", "enrollment token refused (expired): waiting for an operator to accept it"},
		{pending, token, false, "", "no enrollment token: waiting for an operator to accept it"},
		{pending, manual, false, "", "waiting for an operator to accept it"},
	}
	for _, tc := range cases {
		if got := enroll.Note(tc.state, tc.policy, tc.token, tc.refusal); got != tc.want {
			t.Errorf("%s/%s/%v/%q: got %q, want %q", tc.state, tc.policy, tc.token, tc.refusal, got, tc.want)
		}
	}
}
