package bus

import (
	"slices"
	"time"

	"github.com/tetherhq/tether/model"
)

// Kind names what an envelope's body holds.
type Kind string

// Server → agent kinds.
const (
	KindDesiredDiff      Kind = "desired.diff"
	KindDesiredFull      Kind = "desired.full"
	KindDeploy           Kind = "deploy"
	KindRepair           Kind = "repair"
	KindDryRun           Kind = "dryrun"
	KindPause            Kind = "pause"
	KindResume           Kind = "resume"
	KindEnrolled         Kind = "enrolled"
	KindDependencyStatus Kind = "dependency.status"
	KindFactsRefresh     Kind = "facts.refresh"
	// KindRejected tells an agent the server will not enroll it (rejected
	// by an operator, or a bad enrollment token), so it stops saying hello
	// at full speed. It arrives before any server key is pinned, so an
	// agent only slows down on it, never trusts it further.
	KindRejected Kind = "rejected"
	// KindRotateKey asks an agent to replace its key: it answers with
	// key.rollover.
	KindRotateKey Kind = "key.rotate"
	// KindKeyAccepted acknowledges an agent's key.rollover: the server
	// verifies the agent's events with the new key from now on, and the
	// agent switches to it.
	KindKeyAccepted Kind = "key.accepted"
	// KindServerRollover announces the server's next signing key
	// (ServerRollover): the agent takes commands signed by either key
	// until the first one signed by the next, then by the next alone.
	KindServerRollover Kind = "server.rollover"
	// KindSettings carries the environment's settings an agent holds
	// between deploys (Settings), sent when they change: a change takes
	// effect at once, not at the next deploy.
	KindSettings Kind = "settings"
	// KindMachine asks the agent serving a platform to make, control or
	// destroy a machine, or to report its platform (Machine); it answers
	// with machine.report.
	KindMachine Kind = "machine"
)

// Agent → server kinds.
const (
	KindHello          Kind = "hello"
	KindHeartbeat      Kind = "heartbeat"
	KindResourceStatus Kind = "resource.status"
	KindCompliance     Kind = "compliance"
	KindDryRunResult   Kind = "dryrun.result"
	KindFacts          Kind = "facts"
	KindStateRequest   Kind = "state.request"
	KindGoodbye        Kind = "goodbye"
	// KindSecurity reports commands the agent refused: a signature of
	// another key, a replay, a stale command. The server raises a security
	// alert.
	KindSecurity Kind = "security"
	// KindKeyRollover proposes the agent's next key, signed by its
	// current one, with the next key's proof of possession (KeyRollover).
	KindKeyRollover Kind = "key.rollover"
	// KindServerRolloverAck says the agent took a server.rollover and
	// which server keys it takes from now on (ServerRolloverAck).
	KindServerRolloverAck Kind = "server.rollover.ack"
	// KindMachineReport reports the platform an agent serves and its
	// machines, after a machine command or on its own (MachineReport).
	KindMachineReport Kind = "machine.report"
)

var toAgent = map[Kind]bool{
	KindDesiredDiff: true, KindDesiredFull: true, KindDeploy: true, KindRepair: true,
	KindDryRun: true, KindPause: true, KindResume: true, KindEnrolled: true,
	KindDependencyStatus: true, KindFactsRefresh: true, KindRejected: true,
	KindRotateKey: true, KindKeyAccepted: true, KindServerRollover: true, KindSettings: true,
	KindMachine: true,
}

var toServer = map[Kind]bool{
	KindHello: true, KindHeartbeat: true, KindResourceStatus: true, KindCompliance: true,
	KindDryRunResult: true, KindFacts: true, KindStateRequest: true, KindGoodbye: true, KindSecurity: true,
	KindKeyRollover: true, KindServerRolloverAck: true, KindMachineReport: true,
}

// Known reports whether k is a kind of this protocol version.
func (k Kind) Known() bool { return toAgent[k] || toServer[k] }

// Command reports whether k travels server → agent.
func (k Kind) Command() bool { return toAgent[k] }

// Event reports whether k travels agent → server.
func (k Kind) Event() bool { return toServer[k] }

// EventKinds lists the agent → server kinds, sorted.
func EventKinds() []Kind {
	out := make([]Kind, 0, len(toServer))
	for k := range toServer {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// DeployMode says which resources a deploy covers.
type DeployMode string

// Deploy modes.
const (
	// DeployIncremental deploys what changed since the agent's last
	// successful deploy, and what has not succeeded yet.
	DeployIncremental DeployMode = "incremental"
	// DeployFull deploys (verifies) every resource of the slice.
	DeployFull DeployMode = "full"
)

// DesiredDiff moves an agent's slice from one generation to the next.
type DesiredDiff struct {
	model.Diff
	// SliceHash is the set hash of the slice after applying the diff; the
	// agent compares it with its own to detect divergence.
	SliceHash model.Hash `json:"slice_hash"`
	// Deploy, when set, is the deploy that follows: the agent journals it
	// with the desired state, as if a deploy command had come next. Sent
	// so to agents of protocol 1.2 and later only.
	Deploy *Deploy `json:"deploy,omitempty"`
}

// DesiredFull replaces an agent's slice.
type DesiredFull struct {
	Generation int64            `json:"generation"`
	Resources  []model.Resource `json:"resources"`
	SliceHash  model.Hash       `json:"slice_hash"`
	// Deploy is as in DesiredDiff.
	Deploy *Deploy `json:"deploy,omitempty"`
}

// Deploy asks the agent to deploy its slice at Generation.
type Deploy struct {
	DeployID   string     `json:"deploy_id"`
	Mode       DeployMode `json:"mode"`
	Generation int64      `json:"generation"`
	// DriftPolicy is the environment's: what the agent does about drift it
	// sees after this deploy (empty: alert).
	DriftPolicy model.DriftPolicy `json:"drift_policy,omitempty"`
}

// Settings are the environment's settings an agent holds between deploys.
// Of several, the one issued last is in force.
type Settings struct {
	// DriftPolicy is what the agent does about drift it sees (empty:
	// alert).
	DriftPolicy model.DriftPolicy `json:"drift_policy,omitempty"`
}

// DryRun asks the agent to report what a deploy would change.
type DryRun struct {
	DeployID   string `json:"deploy_id"`
	Generation int64  `json:"generation"`
	// Plan, when set, asks for a dry run of another desired state than
	// the one the agent holds: a candidate version not released. The
	// agent evaluates it in memory and never keeps it; its results carry
	// Plan.Generation. An agent older than plans ignores the field and
	// dry-runs the slice it holds at Generation (which the server sets to
	// the generation the agent holds), answering with that generation:
	// the server tells the two apart by it, and no agent ever deploys a
	// plan.
	Plan *Plan `json:"plan,omitempty"`
}

// Plan is a candidate's desired state for one agent, to dry-run only.
type Plan struct {
	Generation int64            `json:"generation"`
	Resources  []model.Resource `json:"resources"`
	SliceHash  model.Hash       `json:"slice_hash"`
}

// Enrolled tells an agent it was accepted and how to verify the server.
// The agent pins ServerKey only if it is the key it was told to expect
// (by its enrollment token or its operator).
type Enrolled struct {
	ServerKey []byte `json:"server_key"`
	// Hello is the id of the hello this answers ("" when an operator's
	// acceptance sent it): the agent measures the server's clock by it.
	Hello string `json:"hello,omitempty"`
	// LastSeq is the highest sequence number the server accepted from the
	// agent: an agent whose journal went back in time (a restored backup)
	// continues past it.
	LastSeq uint64 `json:"last_seq,omitempty"`
	// Env names the environment's incarnation and Generation is its
	// released version. An agent refuses desired state older than the
	// newest it held in that incarnation; when this answers its own hello
	// (fresh, not a replay) and names another incarnation (the environment
	// was deleted and created again), the agent starts over from
	// Generation there.
	Env        string `json:"env_incarnation,omitempty"`
	Generation int64  `json:"generation,omitempty"`
	// Paused says whether the agent is paused (by an operator, or by its
	// environment's halt) and DriftPolicy is the environment's: the
	// answer to a hello brings them, so an agent that missed a change
	// (away longer than a command lives) holds them again. Nil and empty
	// from older servers: not said.
	Paused      *bool             `json:"paused,omitempty"`
	DriftPolicy model.DriftPolicy `json:"drift_policy,omitempty"`
	// EventsAlive says that the server takes every event of the agent
	// as a sign of life: an agent that sent anything since its last
	// heartbeat skips the next. False from older servers, whose agents
	// beat regardless.
	EventsAlive bool `json:"events_alive,omitempty"`
}

// Security reports commands an agent refused, at most one report a minute:
// how many since the last report, and what the first few were.
type Security struct {
	Refused []string `json:"refused"`
	Count   int      `json:"count"`
}

// MaxRefusalsTold is how many refusals a Security report describes.
const MaxRefusalsTold = 8

// Rejected says why the server does not enroll an agent.
type Rejected struct {
	Reason string `json:"reason"`
	// Protocol is set when the server refuses the agent's protocol
	// version: the server's own (bus.Protocol).
	Protocol string `json:"protocol,omitempty"`
}

// Facts is an agent's report of its facts and labels when they change.
type Facts struct {
	Facts  map[string]any    `json:"facts,omitempty"`
	Labels map[string]string `json:"labels,omitempty"`
}

// Heartbeat says an agent is alive and what it holds.
type Heartbeat struct {
	Generation int64 `json:"generation"`
	// Outbox counts events waiting for the broker.
	Outbox int `json:"outbox,omitempty"`
	// Version is the version of the agent's build and Protocol the
	// protocol it speaks (as in Hello): an agent upgraded in place says
	// so without restarting its conversation. Empty from older agents.
	Version  string `json:"version,omitempty"`
	Protocol string `json:"protocol,omitempty"`
}

// DependencyStatus tells an agent where a resource of another agent stands.
type DependencyStatus struct {
	ID    model.ID            `json:"id"`
	State model.ResourceState `json:"state"`
}

// Hello is an agent's introduction, on every start: discovery and
// enrollment, and what it holds.
type Hello struct {
	PublicKey []byte `json:"public_key"`
	// KeyAgreementKey is the agent's X25519 public key, to which the
	// server seals sensitive values (model/secret). Signed with the rest
	// of the hello; empty from agents older than sealed values, which are
	// sent none.
	KeyAgreementKey []byte            `json:"key_agreement_key,omitempty"`
	Labels          map[string]string `json:"labels,omitempty"`
	Facts           map[string]any    `json:"facts,omitempty"`
	Kinds           []string          `json:"kinds"`
	Generation      int64             `json:"generation"`
	SliceHash       model.Hash        `json:"slice_hash"`
	Token           string            `json:"token,omitempty"`
	// ServerKeys are the fingerprints of the server keys the agent takes
	// commands signed by: the one it pinned, and the next one a
	// server.rollover announced; before enrollment, the one it expects.
	// Empty from agents older than server key rollovers.
	ServerKeys []string `json:"server_keys,omitempty"`
	// Version is the version of the agent's build ("dev" for a build
	// without one) and Protocol the protocol version it speaks
	// (bus.Protocol): the server refuses an agent of a protocol it does
	// not support. Empty from agents older than versions (protocol 1.0).
	Version  string `json:"version,omitempty"`
	Protocol string `json:"protocol,omitempty"`
	// Repeats is set on a hello said again while no answer came to an
	// earlier one: the sequence number of the first hello of the series.
	// A server that answered a hello of the series since, its answer
	// still waiting in the agent's inbox, only nudges the agent (the
	// agent may not have looked yet). Zero on a first hello, and from
	// agents older than it.
	Repeats uint64 `json:"repeats,omitempty"`
}

// ResourceStatus carries a batch of results of one deploy (kind
// resource.status) or dry run (kind dryrun.result). The last batch of a run
// has Done set and the run's summary.
type ResourceStatus struct {
	DeployID   string         `json:"deploy_id"`
	Generation int64          `json:"generation"`
	Results    []model.Result `json:"results,omitempty"`
	Done       bool           `json:"done,omitempty"`
	// Error is set on the last batch when the run could not complete.
	Error string `json:"error,omitempty"`
}

// StateRequest asks the server for the full desired state: the agent found
// a gap (a diff from a generation it does not hold).
type StateRequest struct {
	Generation int64 `json:"generation"`
}

// Empty is the body of kinds that carry nothing but themselves.
type Empty struct{}

// Compliance reports resources an agent found away from their intent
// (drift), or back to it (restored by a heal or by hand), between deploys.
type Compliance struct {
	// Generation is the desired state the agent compared against.
	Generation int64         `json:"generation"`
	Reports    []DriftReport `json:"reports"`
}

// DriftReport is one resource's compliance as an agent saw it.
type DriftReport struct {
	ID model.ID `json:"id"`
	// Compliance is non_compliant (drifted) or compliant (restored).
	Compliance model.Compliance `json:"compliance"`
	// Changes are the drifted attributes, {current, desired}, sensitive
	// values redacted.
	Changes model.Changes `json:"changes,omitempty"`
	// Healed is set on a report of a resource the agent re-applied by
	// drift policy.
	Healed bool `json:"healed,omitempty"`
	// HealFailed is set on a report of a resource the agent tried to
	// re-apply by drift policy and could not (Message says why).
	HealFailed bool   `json:"heal_failed,omitempty"`
	Message    string `json:"message,omitempty"`
	// Seen is when the agent saw the resource in this state.
	Seen time.Time `json:"seen,omitzero"`
	// Flapping is set while the resource drifts again and again: further
	// reports are held back until it is stable.
	Flapping bool `json:"flapping,omitempty"`
	// Hash is the hash of the desired state the agent compared against
	// (omitted by older agents): a report of the generation the agent
	// holds also tells the compliance of a newer version's resource of the
	// same intent, which the agent has not been sent yet.
	Hash model.Hash `json:"hash,omitzero"`
}
