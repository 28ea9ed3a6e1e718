// Package store declares the server's persistent state: environments,
// immutable versions with resource bodies stored once, agents, the status of
// every resource and its action log. Two implementations satisfy it and pass
// the storetest contract suite: PostgreSQL for servers, SQLite (package
// sqlite) for the embedded mode.
package store

import (
	"context"
	"errors"

	"github.com/tetherhq/tether/model"
)

// Store is the server's persistent state. Every method is safe for concurrent
// use and either fully happens or not at all.
type Store interface {
	// Close releases the store.
	Close() error

	// CreateEnv creates an environment; ErrExists if the name is taken.
	CreateEnv(ctx context.Context, env model.Environment) error
	// GetEnv returns an environment; ErrNotFound if there is none.
	GetEnv(ctx context.Context, name string) (model.Environment, error)
	// ListEnvs returns every environment, by name.
	ListEnvs(ctx context.Context) ([]model.Environment, error)

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

	// UpsertAgent records an agent: first sight, or what it says of itself.
	UpsertAgent(ctx context.Context, a model.Agent) error
	// GetAgent returns one agent; ErrNotFound if unknown.
	GetAgent(ctx context.Context, env, name string) (model.Agent, error)
	// ListAgents returns the environment's agents, by name.
	ListAgents(ctx context.Context, env string) ([]model.Agent, error)

	// RecordResults records a batch of an agent's results in one
	// transaction: the status of each resource, and an action-log entry
	// for each result that changed, failed or skipped something. Dry-run
	// results go to the action log only.
	RecordResults(ctx context.Context, env, agent string, version int64, deployID string, results []model.Result) error
	// Statuses returns resource statuses matching the filter, by ID.
	Statuses(ctx context.Context, env string, f StatusFilter) ([]model.ResourceStatus, error)
	// Actions returns the newest entries of a resource's action log, newest first.
	Actions(ctx context.Context, env string, id model.ID, limit int) ([]model.Action, error)
}

// StatusFilter narrows Statuses. Zero fields match everything.
type StatusFilter struct {
	Agent      string
	Type       string
	State      model.ResourceState
	Compliance model.Compliance
}

// Errors every implementation returns (wrapped, with context).
var (
	ErrNotFound = model.ErrNotFound
	ErrExists   = errors.New("already exists")
	// ErrConflict: the change contradicts the stored state (releasing a
	// retired version, …).
	ErrConflict = errors.New("conflict")
	// ErrLocked: another process holds the store.
	ErrLocked = errors.New("store is locked by another process")
	// ErrCorrupt: the store's files are damaged.
	ErrCorrupt = errors.New("store is corrupted")
	// ErrInvalid: the input is malformed (a resource that does not
	// validate, an unknown state …).
	ErrInvalid = errors.New("invalid input")
)
