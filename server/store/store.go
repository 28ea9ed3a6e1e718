// Package store declares the server's persistent state: environments,
// immutable versions with resource bodies stored once, agents, the status of
// every resource and its action log, the reports of compiles. Two
// implementations satisfy it and pass the storetest contract suite:
// PostgreSQL for servers, SQLite (package sqlite) for the embedded mode.
//
// Both embed SQL, which holds their queries and the rules that are not
// storage (validation, which result wins over a stored status), written
// once; a store brings only what differs: how statements run and its errors
// read (db.go), its bulk writes, its leases (store.go). The files are by
// topic, with the same names here and in both stores where a topic has code
// of its own there: envs, versions, agents, status (results, statuses, the
// action log, ingest deduplication), alerts, access (tokens, audit,
// secrets), enroll, compiles (the reports of the server's compiles),
// releases (each release's fan-out to agents and how far it got), machines
// (platforms, distributions, hosts and their provisioning, instances).
package store

import (
	"context"
	"errors"
	"time"

	"github.com/tetherhq/tether/model"
	"github.com/tetherhq/tether/server/record"
)

// Store is the server's persistent state. Every method is safe for concurrent
// use and either fully happens or not at all.
type Store interface {
	// Close releases the store.
	Close() error
	// Ping checks the store answers; ErrUnavailable when it does not.
	Ping(ctx context.Context) error
	// People keeps organizations, users and sessions.
	People
	// Notify keeps the event log, webhooks and their deliveries.
	Notify
	// Machines keeps platforms, distributions, hosts and instances.
	Machines

	// CreateEnv creates an environment; ErrExists if the name is taken.
	CreateEnv(ctx context.Context, env record.Environment) error
	// GetEnv returns an environment; ErrNotFound if there is none.
	GetEnv(ctx context.Context, name string) (record.Environment, error)
	// ListEnvs returns every environment, by name.
	ListEnvs(ctx context.Context) ([]record.Environment, error)
	// UpdateEnvSettings changes an environment's settings with fn, in one
	// transaction: concurrent updates never lose each other's changes.
	// Settings fn leaves invalid are refused with ErrInvalid. The events
	// tell returns, given the settings before and after, are appended to
	// the event log in that transaction.
	UpdateEnvSettings(ctx context.Context, name string, fn func(*record.EnvSettings) error, tell ...func(was, now record.EnvSettings) ([]record.LoggedEvent, error)) (record.Environment, error)
	// DeleteEnv deletes an environment with its versions, agents, statuses,
	// action log, alerts, tokens, compile reports, releases, source, webhooks (with their deliveries), events of the event log, platforms, distributions, hosts and instances. The audit log keeps its entries.
	DeleteEnv(ctx context.Context, name string) error

	// PutVersion stores a resource set as the environment's next version
	// (a candidate) and returns it without its resources. Bodies already
	// stored are not stored again.
	PutVersion(ctx context.Context, env string, meta model.VersionMeta, resources []model.Resource) (model.Version, error)
	// PutSet is PutVersion of a set built one resource at a time (a
	// version upload), checked first (Set.Check).
	PutSet(ctx context.Context, env string, meta model.VersionMeta, set *Set) (model.Version, error)
	// GetVersion returns version n, with its resources if asked.
	GetVersion(ctx context.Context, env string, n int64, withResources bool) (model.Version, error)
	// LatestVersion returns the newest version in any state; ErrNotFound if none.
	LatestVersion(ctx context.Context, env string) (model.Version, error)
	// ReleasedVersion returns the active version; ErrNotFound if none.
	ReleasedVersion(ctx context.Context, env string) (model.Version, error)
	// ListVersions returns every version, newest first, without resources.
	ListVersions(ctx context.Context, env string) ([]model.Version, error)
	// Release makes version n the active one: the previous active version
	// is retired, resources that are new or changed become available,
	// resources that left the model become orphaned.
	Release(ctx context.Context, env string, n int64) (model.Version, error)
	// AgentSlice returns agent's resources of version n, sorted by ID.
	AgentSlice(ctx context.Context, env string, n int64, agent string) (model.Slice, error)
	// AgentSlices returns the slices of version n of the agents named
	// (at most MaxSlicesAtOnce), in the order given, each sorted by ID;
	// an agent with no resource in n has an empty slice.
	AgentSlices(ctx context.Context, env string, n int64, agents []string) ([]model.Slice, error)
	// SliceHashes returns the ID and intent hash of every resource of
	// version n of the agents named (at most MaxSlicesAtOnce), in the
	// order given, each sorted by ID, without reading their bodies.
	SliceHashes(ctx context.Context, env string, n int64, agents []string) ([][]record.ResourceHash, error)
	// ResourcesByID returns the resources of version n named (at most
	// MaxSlicesAtOnce; IDs not in n are left out), sorted by ID.
	ResourcesByID(ctx context.Context, env string, n int64, ids []model.ID) ([]model.Resource, error)
	// VersionWaits returns who waits for what in version n: for each
	// resource another agent's resources require, those agents. known is
	// false for a version stored before the store kept them: read them
	// from its resources.
	VersionWaits(ctx context.Context, env string, n int64) (waits map[model.ID][]string, known bool, err error)
	// VersionAgents returns a page of the agents that have resources in
	// version n: at most limit (0: 100) of those named after after, by
	// name.
	VersionAgents(ctx context.Context, env string, n int64, after string, limit int) ([]string, error)
	// ResourceHashes returns the ID and intent hash of every resource of
	// version n, sorted by ID, without reading their bodies.
	ResourceHashes(ctx context.Context, env string, n int64) ([]record.ResourceHash, error)
	// Resource returns one resource of version n.
	Resource(ctx context.Context, env string, n int64, id model.ID) (model.Resource, error)
	// ResourceHistory returns the versions that hold resource id, with its
	// hash in each, newest first.
	ResourceHistory(ctx context.Context, env string, id model.ID) ([]record.ResourceHash, error)
	// PruneVersions deletes the oldest versions beyond the newest keep,
	// never the released one nor one an agent is pinned to (PinAgents),
	// and the bodies no version uses any more. It
	// returns how many versions it deleted.
	PruneVersions(ctx context.Context, env string, keep int) (int, error)

	// UpsertAgent records an agent: first sight, or what it says of itself.
	// Its LastSeq only grows (the greater of the stored and the given).
	// What an agent says of itself is written only as far as the event
	// that said it is later than the one that said what is stored: its
	// labels, facts and kinds by FactsSeq; whether it is connected, its
	// version and when it was seen by LastSeq; its server keys by
	// ServerKeysSeq. An agent's keys are written on first sight only, then
	// by SetAgentKey: a write of other fields from a copy read before a
	// key changed never puts the old key back.
	UpsertAgent(ctx context.Context, a record.Agent) error
	// UpsertAgentIf is UpsertAgent over a stored record only while its
	// state and pause are still was's (a record read before: an agent
	// not found, the zero record), and reports whether it wrote: a
	// decision taken from a copy read before an operator's rejection or
	// pause through another replica never undoes it.
	UpsertAgentIf(ctx context.Context, a record.Agent, was record.Agent) (bool, error)
	// AddPendingAgent records a, a pending agent the store does not hold
	// yet, unless max agents of its environment are pending already
	// (ErrMaxPending), or its name was recorded meanwhile
	// (model.ErrConflict): then it records nothing. It returns how many
	// are pending, a included once recorded (max when full). Checking
	// the bound and recording are one step: hellos handled at once, by
	// several servers too, never take one place twice.
	AddPendingAgent(ctx context.Context, a record.Agent, max int) (int, error)
	// SetAgentState writes an operator's decision — a's State, Paused and
	// Note — and no other field, if the state and pause are still was's
	// (the record the decision was taken from): what the agent reported
	// meanwhile stays, and a decision taken meanwhile through another
	// replica is not undone (ErrConflict). ErrNotFound if the agent is
	// unknown. The events that tell of the decision are appended to the
	// event log in its transaction: with it, or not at all.
	SetAgentState(ctx context.Context, a, was record.Agent, events ...record.LoggedEvent) error
	// SetAgentKey writes a's keys (PublicKey, PreviousKey, PreviousUntil)
	// if the agent's key is still from, and reports whether it was.
	SetAgentKey(ctx context.Context, a record.Agent, from []byte) (bool, error)
	// SetAgentReport records what an agent says of itself, as far as the
	// event that says it is later than the one that said what is stored
	// (a report delivered late, or a captured one replayed, moves nothing
	// back): its labels and facts if FactsSeq is; whether it is connected,
	// its version and protocol, and that it was seen (LastSeen) if LastSeq
	// is (LastSeq only grows); the server keys it took if ServerKeysSeq
	// is. No other field is written: a state, a pause or a key written
	// meanwhile (an operator's rejection through another replica) stays.
	// It reports whether the agent is known.
	SetAgentReport(ctx context.Context, a record.Agent) (bool, error)
	// SetAgentGeneration records the generation an agent reports it holds
	// in one statement: no read of the record, no other field written
	// (the results that report it say the agent was seen). It reports
	// whether the generation changed (false also for an unknown agent).
	SetAgentGeneration(ctx context.Context, env, name string, generation int64) (bool, error)
	// MarkAgentsSeen records that agents were heard from (a heartbeat),
	// many in one transaction. Only an event numbered past every one
	// recorded of its agent says it lives: its last-seen time then moves
	// (it only grows), and it is marked online when the time is later than
	// the one stored too (a goodbye recorded since stays, also against an
	// event sent before it and handled after it); an older one (delivered
	// late, or a captured one replayed) moves nothing. LastSeq only grows.
	// Nothing else of the record is read or written; unknown agents are
	// skipped.
	MarkAgentsSeen(ctx context.Context, seen []AgentSeen) error
	// ResetSequence starts an agent's sequence over, for a new key: its
	// LastSeq, the sequence numbers its resources' states were set at,
	// and its deduplication marks go, so nothing the old key said holds
	// the new one back.
	ResetSequence(ctx context.Context, env, agent string) error
	// DeleteAgent forgets an agent: its record, what it reported of its
	// resources (they are available again, compliance unknown, as the
	// released version wants them; orphaned ones go) and its
	// deduplication marks (its actions and alerts stay, as history);
	// ErrNotFound if unknown. Said hello again, it is new. The events
	// that tell of it are appended to the event log in its transaction.
	DeleteAgent(ctx context.Context, env, name string, events ...record.LoggedEvent) error
	// GetAgent returns one agent; ErrNotFound if unknown.
	GetAgent(ctx context.Context, env, name string) (record.Agent, error)
	// ListAgents returns the environment's agents, by name.
	ListAgents(ctx context.Context, env string) ([]record.Agent, error)

	// FindAgents returns the environment's agents f keeps, by name (a
	// page of them, f.Offset and f.Limit), and how many it keeps in all.
	// A negative limit or offset is ErrInvalid.
	FindAgents(ctx context.Context, env string, f record.AgentFilter) ([]record.Agent, int, error)
	// CountAgentsByState counts the environment's agents by state, the
	// accepted ones online if connected and seen after onlineSince.
	CountAgentsByState(ctx context.Context, env string, onlineSince time.Time) (record.AgentCounts, error)

	// ListAgentsAfter returns a page of the environment's agents: at most
	// limit (0: 100) of those named after after, by name.
	ListAgentsAfter(ctx context.Context, env, after string, limit int) ([]record.Agent, error)
	// CountAgents counts the environment's agents in state.
	CountAgents(ctx context.Context, env string, state record.AgentState) (int, error)
	// ExpirePendingAgents forgets at most limit of the environment's
	// pending agents last heard from before before, and returns their
	// names. An agent accepted or heard from meanwhile stays.
	ExpirePendingAgents(ctx context.Context, env string, before time.Time, limit int) ([]string, error)
	// CountStatuses counts the environment's resource statuses f
	// matches, of version (0: of any version).
	CountStatuses(ctx context.Context, env string, f record.StatusFilter, version int64) (int, error)
	// StatusCounts counts the environment's resource statuses by state
	// and compliance (pairs with none are left out).
	StatusCounts(ctx context.Context, env string) ([]record.StatusCount, error)

	// RecordResults records batches of agents' results in one transaction:
	// the status of each resource, and an action-log entry for each result
	// that changed, failed or skipped something. A result applies to a
	// status of its version or older, and never over one applied from a
	// later message of the agent (higher seq). Dry-run results set only the
	// compliance of deployed resources of their version (changes found:
	// non_compliant). A batch's alerts are stored, and drift alerts set the
	// compliance they report the same way; a healed one (Alert.Healed) is
	// also an action-log entry of kind heal. A batch whose (env, agent, seq)
	// was recorded before changes nothing: fresh[i] says whether batch i
	// was recorded now. The events of the fresh batches are appended to the
	// event log as AppendEvents does, in the same transaction (their
	// followers of other processes are told; those of this one are the
	// caller's to wake). An invalid batch fails them all with ErrInvalid.
	RecordResults(ctx context.Context, batches []ResultBatch) (fresh []bool, err error)
	// ForgetIngested drops the deduplication marks of batches recorded
	// before t; redeliveries older than that are not expected.
	ForgetIngested(ctx context.Context, before time.Time) error
	// PruneActions deletes up to limit entries of the action log, of
	// every environment, recorded before t, oldest first, and returns how
	// many it deleted.
	PruneActions(ctx context.Context, before time.Time, limit int) (int, error)
	// Statuses returns resource statuses matching the filter, by ID.
	Statuses(ctx context.Context, env string, f record.StatusFilter) ([]record.ResourceStatus, error)
	// Actions returns the newest entries of a resource's action log, newest first.
	Actions(ctx context.Context, env string, id model.ID, limit int) ([]record.Action, error)
	// DeployActions returns the action-log entries of one deploy, repair or
	// dry run, in the order they were recorded.
	DeployActions(ctx context.Context, env, deployID string, limit int) ([]record.Action, error)

	// RecordAlerts stores compliance and security alerts, and appends the
	// events that tell of them to the event log in the same transaction.
	RecordAlerts(ctx context.Context, alerts []record.Alert, events ...record.LoggedEvent) error
	// Alerts returns the newest alerts matching the filter, newest first.
	Alerts(ctx context.Context, f record.AlertFilter) ([]record.Alert, error)

	// StartCompile records a compile of c.Env starting: running, with its
	// triggers (and its revision, if known). An empty ID gets a new UUID,
	// a zero StartedAt the time now. ErrNotFound if the environment does
	// not exist, ErrInvalid for triggers that are missing, of unknown kinds
	// or of a kind twice.
	StartCompile(ctx context.Context, c record.Compile) (record.Compile, error)
	// FinishCompile records how the running compile c.ID of c.Env ended:
	// its Outcome, Revision (when not empty), FinishedAt (zero: now) and
	// result, bounded (CompileResult.Bound). ErrNotFound if there is no
	// such compile, ErrConflict if it ended already, ErrInvalid for an
	// outcome that is not an end or that disagrees with its version.
	FinishCompile(ctx context.Context, c record.Compile) (record.Compile, error)
	// GetCompile returns one compile report; ErrNotFound if env has none
	// with that ID.
	GetCompile(ctx context.Context, env, id string) (record.Compile, error)
	// ListCompiles returns env's newest compile reports, newest first, at
	// most limit (0: 100).
	ListCompiles(ctx context.Context, env string, limit int) ([]record.Compile, error)
	// PruneCompiles deletes env's compile reports beyond the newest keep,
	// never a running one (keep 0 keeps all). It returns how many it
	// deleted.
	PruneCompiles(ctx context.Context, env string, keep int) (int, error)

	// StartRelease records a release of version r.Version of r.Env
	// starting: running, no agent reached yet. An empty ID gets a new
	// UUID, a zero StartedAt the time now. ErrNotFound if the environment
	// does not exist, ErrInvalid for a version that is not a number.
	StartRelease(ctx context.Context, r record.Release) (record.Release, error)
	// UpdateRelease records how far the running release r.ID of r.Env
	// got: its state, counts, pending agents (bounded) and note; a state
	// other than running ends it (FinishedAt: now when nil). ErrNotFound
	// if there is no such release, ErrConflict if it ended already,
	// ErrInvalid for an unknown state or negative counts.
	UpdateRelease(ctx context.Context, r record.Release) (record.Release, error)
	// GetRelease returns one release; ErrNotFound if env has none with
	// that ID.
	GetRelease(ctx context.Context, env, id string) (record.Release, error)
	// ListReleases returns env's newest releases, newest first, at most
	// limit (0: 100).
	ListReleases(ctx context.Context, env string, limit int) ([]record.Release, error)
	// RunningReleases returns env's releases still running, newest first.
	RunningReleases(ctx context.Context, env string) ([]record.Release, error)
	// RecordDeploy records deploy d (once: recording it again changes
	// nothing of it) and adds agents to those it was sent to.
	RecordDeploy(ctx context.Context, d record.Deploy, agents []string) error
	// EndDeployAgents records that deploy id of env did not reach
	// agents, and why: they answer it no more.
	EndDeployAgents(ctx context.Context, env, id string, agents []string, why string) error
	// ListDeploys returns env's newest deploys, newest first, with their
	// counts (no agents).
	ListDeploys(ctx context.Context, env string, f record.DeployFilter) ([]record.Deploy, error)
	// GetDeploy returns one deploy with its agents; ErrNotFound if env
	// has none with that id.
	GetDeploy(ctx context.Context, env, id string) (record.Deploy, error)
	// PruneDeploys deletes up to limit deploys started before before,
	// oldest first, and reports how many it deleted.
	PruneDeploys(ctx context.Context, before time.Time, limit int) (int, error)
	// PruneReleases deletes env's releases beyond the newest keep, never
	// a running one (keep 0 keeps all). It returns how many it deleted.
	PruneReleases(ctx context.Context, env string, keep int) (int, error)
	// ContinueRelease counts an operator's continue of the running staged
	// rollout id (its driver acts on it). AbortRelease ends it as aborted
	// with note. Both: ErrNotFound for no such release, ErrConflict for a
	// release that is not staged (record.ErrNotStaged) or has ended.
	ContinueRelease(ctx context.Context, env, id string) (record.Release, error)
	AbortRelease(ctx context.Context, env, id, note string) (record.Release, error)
	// PinAgents keeps agents on version (0: none) while a staged rollout
	// has not reached them (an agent pinned already keeps its pin); UnpinAgents lets them take the released
	// version again (agents nil: every agent of env). AgentPins and
	// AgentPin read them.
	PinAgents(ctx context.Context, env string, version int64, agents []string) error
	UnpinAgents(ctx context.Context, env string, agents []string) error
	AgentPins(ctx context.Context, env string) (map[string]int64, error)
	AgentPin(ctx context.Context, env, agent string) (int64, bool, error)

	// PutSource sets env's model source, replacing the one it had.
	// ErrNotFound if the environment does not exist, ErrInvalid for a
	// source Validate refuses.
	PutSource(ctx context.Context, src record.Source) (record.Source, error)
	// GetSource returns env's source, with its archive when withArchive;
	// ErrNotFound if it has none.
	GetSource(ctx context.Context, env string, withArchive bool) (record.Source, error)
	// ListSources returns every environment's source, without archives,
	// by environment.
	ListSources(ctx context.Context) ([]record.Source, error)
	// DeleteSource removes env's source; ErrNotFound if it has none.
	DeleteSource(ctx context.Context, env string) error

	// CreateToken stores an API token; ErrExists if its ID or hash is taken.
	CreateToken(ctx context.Context, t record.Token) error
	// TokenByHash returns the token whose secret hashes to hash.
	TokenByHash(ctx context.Context, hash []byte) (record.Token, error)
	// ListTokens returns every token, oldest first.
	ListTokens(ctx context.Context) ([]record.Token, error)
	// DeleteToken revokes a token; ErrNotFound if there is none.
	DeleteToken(ctx context.Context, id string) error
	// CreateEnrollToken stores an enrollment token; ErrExists if its ID or
	// hash is taken, ErrNotFound if its environment does not exist.
	CreateEnrollToken(ctx context.Context, t record.EnrollmentToken) error
	// ListEnrollTokens returns an environment's enrollment tokens, oldest first.
	ListEnrollTokens(ctx context.Context, env string) ([]record.EnrollmentToken, error)
	// DeleteEnrollToken revokes an enrollment token; ErrNotFound if there is none.
	DeleteEnrollToken(ctx context.Context, env, id string) error
	// EnrollToken returns the environment's enrollment token whose secret
	// hashes to hash, without spending it; ErrNotFound when there is none.
	EnrollToken(ctx context.Context, env string, hash []byte) (record.EnrollmentToken, error)
	// UseEnrollToken spends one use of the environment's enrollment token
	// whose secret hashes to hash, atomically: ErrNotFound when there is
	// none (or it was revoked), ErrConflict when it expired at now, is
	// used up, or is bound to another agent than agent (a host's, or the
	// server's own agent's).
	UseEnrollToken(ctx context.Context, env string, hash []byte, agent string, now time.Time) (record.EnrollmentToken, error)

	// RecordAudit appends to the audit log.
	RecordAudit(ctx context.Context, e record.AuditEntry) error
	// Audit returns the newest audit entries matching the filter, newest first.
	Audit(ctx context.Context, f record.AuditFilter) ([]record.AuditEntry, error)

	// Secret returns the installation-wide secret called name, creating it
	// with create when there is none; concurrent callers all get the one
	// that was stored first (the server's signing key). Secrets are bytes
	// to the store: the server seals them before they reach it.
	Secret(ctx context.Context, name string, create func() ([]byte, error)) ([]byte, error)
	// Secrets returns every installation-wide secret by name.
	Secrets(ctx context.Context) (map[string][]byte, error)
	// ReplaceSecret sets the secret called name to value if it still
	// holds old: ErrConflict when it holds something else, ErrNotFound
	// when there is none.
	ReplaceSecret(ctx context.Context, name string, old, value []byte) error
	// SigningKeys returns the server's signing keys: the current one (the
	// secret record.SigningKeySecret) and the rollover under way, if any;
	// ErrNotFound before a server made its key.
	SigningKeys(ctx context.Context) (record.SigningKeys, error)
	// UpdateSigningKeys changes the signing keys with fn, in one
	// transaction: concurrent changes run one after the other, each seeing
	// the last. fn's error is returned as it is, and nothing changes.
	UpdateSigningKeys(ctx context.Context, fn func(*record.SigningKeys) error) (record.SigningKeys, error)

	// Lead makes this process the leader of name (one environment's
	// scheduler) unless another process leads it: then ok is false. The
	// lease lasts until released or lost (the database connection that
	// holds it broke).
	Lead(ctx context.Context, name string) (lease Lease, ok bool, err error)
}

// ResultBatch is one message's worth of an agent's results.
type ResultBatch struct {
	Env, Agent string
	// Seq is the sender's message counter; 0 is never deduplicated.
	Seq      uint64
	Version  int64
	DeployID string
	Results  []model.Result
	// Done marks the last batch of the agent's run of the deploy, and
	// Error says why the run could not complete.
	Done  bool
	Error string
	// Alerts are the batch's drift alerts (a compliance message).
	Alerts []record.Alert
	// Events are the events the batch causes, of its environment: they
	// are appended to the event log (and their webhook deliveries queued)
	// in the transaction that records the batch, so that they are logged
	// once, if and only if it is recorded (not for a batch seen before).
	Events []record.LoggedEvent
}

// Lease is a held leadership.
type Lease interface {
	// Lost is closed when the lease is lost or released.
	Lost() <-chan struct{}
	// Release gives the leadership up.
	Release()
}

// Errors of the store's own. Implementations also return model's
// ErrNotFound, ErrExists, ErrConflict, ErrInvalid and ErrUnavailable
// (wrapped, with context).
var (
	// ErrLocked: another process holds the store.
	ErrLocked = errors.New("store is locked by another process")
	// ErrCorrupt: the store's files are damaged.
	ErrCorrupt = errors.New("store is corrupted")
	// ErrMaxPending: an environment's max_pending agents wait for
	// acceptance already.
	ErrMaxPending = errors.New("max_pending agents wait for acceptance already")
)
