// Package enroll is the agents' enrollment as a state machine: what a
// hello does to the record of the agent that says it (state × what the
// hello presents × the environment's enrollment policy → a step), and
// whether the agent is then enrolled (state × policy × token → an
// admission). It decides; it does nothing: no store, no broker, no clock
// of its own. The server reads the record, asks, and carries the step out
// (server/ingest/enrollment.go), so that every way in and out of enrollment is in
// the two tables below, each row tested.
package enroll

import (
	"bytes"
	"time"

	"github.com/tetherhq/tether/server/record"
)

// Key is what a hello's keys are, against those of the agent's record.
type Key int

const (
	// KeyNone: there is no record; the name is new to the server.
	KeyNone Key = iota
	// KeySame: the record's signing key (and no other key-agreement key
	// than the record's, if it holds one).
	KeySame
	// KeyPrevious: the key an accepted agent rolled over from, which
	// holds until it switches (its acknowledgement has not reached it),
	// with the record's key-agreement key.
	KeyPrevious
	// KeyOther: another signing key than the record's.
	KeyOther
	// KeyOtherAgreement: the record's signing key with another
	// key-agreement key than the one the record holds.
	KeyOtherAgreement
)

var keyNames = [...]string{"none", "same", "previous", "other", "other-agreement"}

func (k Key) String() string { return keyNames[k] }

// Presented classifies the keys a hello presents (its signing key pub and
// key-agreement key ka) against the record a (found: there is one), at
// now.
func Presented(a record.Agent, found bool, pub, ka []byte, now time.Time) Key {
	otherAgreement := len(a.KeyAgreementKey) > 0 && !bytes.Equal(a.KeyAgreementKey, ka)
	switch {
	case !found:
		return KeyNone
	case a.State == record.AgentAccepted && a.PreviousHolds(pub, now) && !otherAgreement:
		return KeyPrevious
	case !bytes.Equal(a.PublicKey, pub):
		return KeyOther
	case otherAgreement:
		return KeyOtherAgreement
	}
	return KeySame
}

// Step is what a hello does to the agent's record.
type Step int

const (
	// Discover: the record is made, pending (accepted at once where the
	// admission says so).
	Discover Step = iota
	// Continue: the record takes what the hello tells, once its sequence
	// number holds.
	Continue
	// NotSwitched: as Continue, but the record keeps its new key: the
	// agent's rollover, which follows the hello, is acknowledged again.
	NotSwitched
	// Rekey: the name takes the hello's key; its sequence starts over,
	// and whoever held the old key is cut off.
	Rekey
	// Refuse: the hello is dead-lettered and a security alert raised
	// (Decision.Why).
	Refuse
)

var stepNames = [...]string{"discover", "continue", "not-switched", "rekey", "refuse"}

func (s Step) String() string { return stepNames[s] }

// Policy matches an environment's enrollment policy in a rule.
type policy int

const (
	anyPolicy policy = iota
	openOnly
	notOpen
	manualOnly
	tokenOnly
)

func (p policy) matches(e record.Enrollment) bool {
	switch p {
	case openOnly:
		return e == record.EnrollOpen
	case notOpen:
		return e != record.EnrollOpen
	case manualOnly:
		return e != record.EnrollOpen && e != record.EnrollToken
	case tokenOnly:
		return e == record.EnrollToken
	}
	return true
}

// token matches whether a hello brings an enrollment token.
type token int

const (
	anyToken token = iota
	withToken
	withoutToken
)

func (t token) matches(has bool) bool {
	return t == anyToken || (t == withToken) == has
}

// rule is one row of the hello table: the first that matches decides.
type rule struct {
	state  record.AgentState // "": any
	key    Key
	policy policy
	token  token
	step   Step
	why    Refusal // for Refuse
}

// helloRules decide what a hello does, by the record's state, the keys
// the hello presents, the environment's enrollment policy and whether
// the hello brings a token. Only a valid enrollment token (checked by the
// admission) may put another key on a pending name, and only an open
// environment on any name: else anyone could swap the key an operator is
// about to accept, give a rejected name a second chance, or read the
// sensitive values sealed to an accepted agent's key-agreement key.
var helloRules = []rule{
	{key: KeyNone, step: Discover},
	{state: record.AgentAccepted, key: KeyPrevious, step: NotSwitched},
	{state: record.AgentAccepted, key: KeyOther, policy: notOpen, step: Refuse,
		why: AcceptedKey},
	{state: record.AgentAccepted, key: KeyOtherAgreement, policy: notOpen, step: Refuse,
		why: AgreementKey},
	{state: record.AgentRejected, key: KeyOther, policy: notOpen, step: Refuse,
		why: OtherKey},
	// Pending (the states above aside):
	{key: KeyOther, policy: manualOnly, step: Refuse, why: OtherKey},
	{key: KeyOther, policy: tokenOnly, token: withoutToken, step: Refuse, why: OtherKey},
	{key: KeyOther, step: Rekey},
	{key: KeyOtherAgreement, step: Continue},
	{key: KeySame, step: Continue},
}

// Refusal says why a hello is refused, for its security alert.
type Refusal int

const (
	NotRefused Refusal = iota
	// AcceptedKey: another signing key on an accepted agent's name.
	AcceptedKey
	// AgreementKey: another key-agreement key on an accepted agent:
	// sensitive values are sealed to the accepted one.
	AgreementKey
	// OtherKey: another signing key on a pending or rejected agent's
	// name, without an enrollment token that may put it there.
	OtherKey
	// UnknownState: a record in a state the tables do not know.
	UnknownState
)

// Decision is what the hello table decided.
type Decision struct {
	Step Step
	// Why says, for Refuse, why.
	Why Refusal
}

// Hello decides what a hello presenting key does to the record in state,
// in an environment with enrollment policy, with or without a token.
func Hello(state record.AgentState, key Key, policy record.Enrollment, hasToken bool) Decision {
	for _, r := range helloRules {
		if (r.state == "" || r.state == state) && r.key == key && r.policy.matches(policy) && r.token.matches(hasToken) {
			return Decision{Step: r.step, Why: r.why}
		}
	}
	// The table covers every key; a state the table does not know is
	// refused rather than guessed at.
	return Decision{Step: Refuse, Why: UnknownState}
}

// Admission is whether an agent is enrolled once its record took the
// hello.
type Admission int

const (
	// Enrolled: the agent was accepted already.
	Enrolled Admission = iota
	// Accept: the environment is open; the agent is accepted now.
	Accept
	// UseToken: the hello's enrollment token decides (the server spends
	// it: accepted if it holds, refused with why not else).
	UseToken
	// Rejected: an operator rejected the agent; it is told so.
	Rejected
	// Wait: the agent waits for an operator to accept it.
	Wait
	// UseOwnToken: the environment's policy has an operator accept
	// agents, but the token the hello brings may be one the server made
	// for an agent it runs itself (tether server --own-agent), which it
	// vouches for: if it is that agent's, the server spends it as for
	// UseToken; any other token leaves the agent waiting, unspent.
	UseOwnToken
)

var admissionNames = [...]string{"enrolled", "accept", "use-token", "rejected", "wait", "use-own-token"}

func (a Admission) String() string { return admissionNames[a] }

// admissionRules decide whether an agent whose record took its hello is
// enrolled, by the record's state, the environment's policy and whether
// the hello brings a token: the first row that matches.
var admissionRules = []struct {
	state  record.AgentState // "": any
	policy policy
	token  token
	then   Admission
}{
	{state: record.AgentAccepted, then: Enrolled},
	{policy: openOnly, then: Accept},
	{state: record.AgentRejected, then: Rejected},
	{policy: tokenOnly, token: withToken, then: UseToken},
	{policy: manualOnly, token: withToken, then: UseOwnToken},
	{then: Wait},
}

// Admit says whether an agent whose record is in state (after its hello)
// is enrolled, in an environment with enrollment policy, its hello with
// or without a token.
func Admit(state record.AgentState, policy record.Enrollment, hasToken bool) Admission {
	for _, r := range admissionRules {
		if (r.state == "" || r.state == state) && r.policy.matches(policy) && r.token.matches(hasToken) {
			return r.then
		}
	}
	return Wait
}

// Note says why an agent is not accepted, for `agent list`: the refusal of
// its token, or what it waits for ("" once accepted).
func Note(state record.AgentState, policy record.Enrollment, hasToken bool, refusal string) string {
	switch {
	case state == record.AgentAccepted:
		return ""
	case state == record.AgentRejected:
		return "rejected by an operator"
	case refusal != "":
		return "enrollment token refused (" + refusal + "): waiting for an operator to accept it"
	case policy == record.EnrollToken && !hasToken:
		return "no enrollment token: waiting for an operator to accept it"
	}
	return "waiting for an operator to accept it"
}
