// Package store declares the server's persistent state: environments,
// immutable versions with resource bodies stored once, agents, the status of
// every resource and its action log. Two implementations satisfy it and pass
// the storetest contract suite: PostgreSQL for servers, SQLite (package
// sqlite) for the embedded mode.
package store

import (
	"context"
	"errors"
	"time"

	"github.com/tetherhq/tether/model"
)

// Store is the server's persistent state. Every method is safe for concurrent
// use and either fully happens or not at all.
type Store interface {
	// Close releases the store.
	Close() error
	// Ping checks the store answers; ErrUnavailable when it does not.
	Ping(ctx context.Context) error

	// CreateEnv creates an environment; ErrExists if the name is taken.
	CreateEnv(ctx context.Context, env model.Environment) error
	// GetEnv returns an environment; ErrNotFound if there is none.
	GetEnv(ctx context.Context, name string) (model.Environment, error)
	// ListEnvs returns every environment, by name.
	ListEnvs(ctx context.Context) ([]model.Environment, error)
	// UpdateEnvSettings changes an environment's settings with fn, in one
	// transaction: concurrent updates never lose each other's changes.
	// Settings fn leaves invalid are refused with ErrInvalid.
	UpdateEnvSettings(ctx context.Context, name string, fn func(*model.EnvSettings) error) (model.Environment, error)
	// DeleteEnv deletes an environment with its versions, agents, statuses,
	// action log, alerts and tokens. The audit log keeps its entries.
	DeleteEnv(ctx context.Context, name string) error

	// PutVersion stores a resource set as the environment's next version
	// (a candidate) and returns it without its resources. Bodies already
	// stored are not stored again.
	PutVersion(ctx context.Context, env string, meta model.VersionMeta, resources []model.Resource) (model.Version, error)
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
	// ResourceHashes returns the ID and intent hash of every resource of
	// version n, sorted by ID, without reading their bodies.
	ResourceHashes(ctx context.Context, env string, n int64) ([]ResourceHash, error)
	// Resource returns one resource of version n.
	Resource(ctx context.Context, env string, n int64, id model.ID) (model.Resource, error)
	// ResourceHistory returns the versions that hold resource id, with its
	// hash in each, newest first.
	ResourceHistory(ctx context.Context, env string, id model.ID) ([]ResourceHash, error)
	// PruneVersions deletes the oldest versions beyond the newest keep,
	// never the released one, and the bodies no version uses any more. It
	// returns how many versions it deleted.
	PruneVersions(ctx context.Context, env string, keep int) (int, error)

	// UpsertAgent records an agent: first sight, or what it says of itself.
	UpsertAgent(ctx context.Context, a model.Agent) error
	// GetAgent returns one agent; ErrNotFound if unknown.
	GetAgent(ctx context.Context, env, name string) (model.Agent, error)
	// ListAgents returns the environment's agents, by name.
	ListAgents(ctx context.Context, env string) ([]model.Agent, error)

	// RecordResults records batches of agents' results in one transaction:
	// the status of each resource, and an action-log entry for each result
	// that changed, failed or skipped something. A result applies to a
	// status of its version or older, and never over one applied from a
	// later message of the agent (higher seq). Dry-run results set only the
	// compliance of deployed resources of their version (changes found:
	// non_compliant). A batch's alerts are stored, and drift alerts set the
	// compliance they report the same way. A batch whose (env, agent, seq)
	// was recorded before changes nothing: fresh[i] says whether batch i
	// was recorded now. An invalid batch fails them all with ErrInvalid.
	RecordResults(ctx context.Context, batches []ResultBatch) (fresh []bool, err error)
	// ForgetIngested drops the deduplication marks of batches recorded
	// before t; redeliveries older than that are not expected.
	ForgetIngested(ctx context.Context, before time.Time) error
	// Statuses returns resource statuses matching the filter, by ID.
	Statuses(ctx context.Context, env string, f StatusFilter) ([]model.ResourceStatus, error)
	// Actions returns the newest entries of a resource's action log, newest first.
	Actions(ctx context.Context, env string, id model.ID, limit int) ([]model.Action, error)
	// DeployActions returns the action-log entries of one deploy, repair or
	// dry run, in the order they were recorded.
	DeployActions(ctx context.Context, env, deployID string, limit int) ([]model.Action, error)

	// RecordAlerts stores compliance and security alerts.
	RecordAlerts(ctx context.Context, alerts []model.Alert) error
	// Alerts returns the newest alerts matching the filter, newest first.
	Alerts(ctx context.Context, f AlertFilter) ([]model.Alert, error)

	// CreateToken stores an API token; ErrExists if its ID or hash is taken.
	CreateToken(ctx context.Context, t model.Token) error
	// TokenByHash returns the token whose secret hashes to hash.
	TokenByHash(ctx context.Context, hash []byte) (model.Token, error)
	// ListTokens returns every token, oldest first.
	ListTokens(ctx context.Context) ([]model.Token, error)
	// DeleteToken revokes a token; ErrNotFound if there is none.
	DeleteToken(ctx context.Context, id string) error
	// CreateEnrollToken stores an enrollment token; ErrExists if its ID or
	// hash is taken, ErrNotFound if its environment does not exist.
	CreateEnrollToken(ctx context.Context, t model.EnrollmentToken) error
	// ListEnrollTokens returns an environment's enrollment tokens, oldest first.
	ListEnrollTokens(ctx context.Context, env string) ([]model.EnrollmentToken, error)
	// DeleteEnrollToken revokes an enrollment token; ErrNotFound if there is none.
	DeleteEnrollToken(ctx context.Context, env, id string) error
	// UseEnrollToken spends one use of the environment's enrollment token
	// whose secret hashes to hash, atomically: ErrNotFound when there is
	// none (or it was revoked), ErrConflict when it expired at now or is
	// used up.
	UseEnrollToken(ctx context.Context, env string, hash []byte, now time.Time) (model.EnrollmentToken, error)

	// RecordAudit appends to the audit log.
	RecordAudit(ctx context.Context, e model.AuditEntry) error
	// Audit returns the newest audit entries matching the filter, newest first.
	Audit(ctx context.Context, f AuditFilter) ([]model.AuditEntry, error)

	// Secret returns the installation-wide secret called name, creating it
	// with create when there is none; concurrent callers all get the one
	// that was stored first (the server's signing key).
	Secret(ctx context.Context, name string, create func() ([]byte, error)) ([]byte, error)

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
	// Alerts are the batch's drift alerts (a compliance message).
	Alerts []model.Alert
}

// Query types, shared with the API and the scheduler through model.
type (
	ResourceHash = model.ResourceHash
	AlertFilter  = model.AlertFilter
	AuditFilter  = model.AuditFilter
	StatusFilter = model.StatusFilter
)

// Lease is a held leadership.
type Lease interface {
	// Lost is closed when the lease is lost or released.
	Lost() <-chan struct{}
	// Release gives the leadership up.
	Release()
}

// Errors every implementation returns (wrapped, with context).
var (
	ErrNotFound = model.ErrNotFound
	ErrExists   = model.ErrExists
	ErrConflict = model.ErrConflict
	ErrInvalid  = model.ErrInvalid
	// ErrUnavailable: the database cannot be reached; retry later.
	ErrUnavailable = model.ErrUnavailable
	// ErrLocked: another process holds the store.
	ErrLocked = errors.New("store is locked by another process")
	// ErrCorrupt: the store's files are damaged.
	ErrCorrupt = errors.New("store is corrupted")
)
