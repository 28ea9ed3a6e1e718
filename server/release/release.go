// Package release releases versions to agents: it makes a version the
// released one and records the release, runs the release's fan-out in the
// background (and resumes those a stopped server left unfinished), drives
// staged rollouts wave by wave, dry-runs a version on live agents (Plan),
// and says what a release would take away from each agent (Preview).
//
// It decides nothing about what one agent deploys (the scheduler does,
// handed in as Fanout) and sends nothing on the bus itself; it publishes
// through the event.Feed it is given, reads and records through the small
// store interfaces below, and never imports the server root, which wires
// it (Services) and runs its queue (Run).
package release

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/rs/zerolog"

	"github.com/tetherhq/tether/model"
	"github.com/tetherhq/tether/server/event"
	"github.com/tetherhq/tether/server/record"
	"github.com/tetherhq/tether/server/scheduler"
	"github.com/tetherhq/tether/server/store"
)

// Environments reads environments.
type Environments interface {
	GetEnv(ctx context.Context, name string) (record.Environment, error)
}

// Versions reads versions, stores the copy a rollback releases, and
// makes one the released version.
type Versions interface {
	GetVersion(ctx context.Context, env string, n int64, withResources bool) (model.Version, error)
	ReleasedVersion(ctx context.Context, env string) (model.Version, error)
	PutVersion(ctx context.Context, env string, meta model.VersionMeta, resources []model.Resource) (model.Version, error)
	Release(ctx context.Context, env string, n int64) (model.Version, error)
}

// Slices reads what a version holds for each agent.
type Slices interface {
	SliceHashes(ctx context.Context, env string, n int64, agents []string) ([][]record.ResourceHash, error)
	ResourcesByID(ctx context.Context, env string, n int64, ids []model.ID) ([]model.Resource, error)
	VersionWaits(ctx context.Context, env string, n int64) (waits map[model.ID][]string, known bool, err error)
}

// Agents reads agents' records.
type Agents interface {
	GetAgent(ctx context.Context, env, name string) (record.Agent, error)
	ListAgents(ctx context.Context, env string) ([]record.Agent, error)
}

// Pins keeps agents on the version they had while a staged rollout has
// not reached them.
type Pins interface {
	PinAgents(ctx context.Context, env string, version int64, agents []string) error
	UnpinAgents(ctx context.Context, env string, agents []string) error
}

// Releases records releases and how far their fan-outs got.
type Releases interface {
	StartRelease(ctx context.Context, r record.Release) (record.Release, error)
	UpdateRelease(ctx context.Context, r record.Release) (record.Release, error)
	GetRelease(ctx context.Context, env, id string) (record.Release, error)
	RunningReleases(ctx context.Context, env string) ([]record.Release, error)
}

// Rollouts records what operators tell staged rollouts, and bounds the
// releases kept.
type Rollouts interface {
	ContinueRelease(ctx context.Context, env, id string) (record.Release, error)
	AbortRelease(ctx context.Context, env, id, note string) (record.Release, error)
	PruneReleases(ctx context.Context, env string, keep int) (int, error)
}

// Deploys lists a release's deploy, and reads the answers a plan's
// dry run left in the action log.
type Deploys interface {
	RecordDeploy(ctx context.Context, d record.Deploy, agents []string) error
	DeployActions(ctx context.Context, env, deployID string, limit int) ([]record.Action, error)
}

// Statuses reads where resources stand.
type Statuses interface {
	Statuses(ctx context.Context, env string, f record.StatusFilter) ([]record.ResourceStatus, error)
}

// Leases takes the lease a fan-out holds while it runs.
type Leases interface {
	Lead(ctx context.Context, name string) (lease store.Lease, ok bool, err error)
}

// Store is everything a Releaser reads and records.
type Store interface {
	Environments
	Versions
	Slices
	Agents
	Pins
	Releases
	Rollouts
	Deploys
	Statuses
	Leases
}

// Fanout sends versions to agents: the scheduler
// (*scheduler.Scheduler).
type Fanout interface {
	// Released fans release r out to every agent of its environment,
	// calling progress as it goes.
	Released(ctx context.Context, r record.Release, progress func(record.Release)) (record.Release, error)
	// ReleasedTo fans release r out to the agents named only.
	ReleasedTo(ctx context.Context, r record.Release, only []string, progress func(record.Release)) (record.Release, error)
	// SendPlan sends agent a a dry run of version n of env, named id.
	SendPlan(ctx context.Context, env string, a record.Agent, n int64, id string, expire time.Duration) error
}

// Services are what the server hands a Releaser.
type Services struct {
	Store  Store
	Fanout Fanout
	// Feed takes the releases' events, and gives plans the agents'
	// answers.
	Feed *event.Feed
	// Prune deletes the versions of env beyond its versions_to_keep
	// setting, logging what it cannot do; a fan-out that ended calls it.
	Prune func(ctx context.Context, env string)
	// FanoutTook observes how long each fan-out took (nil: nothing).
	FanoutTook func(time.Duration)
	Log        zerolog.Logger
}

// Releaser releases versions and runs their fan-outs (Run).
type Releaser struct {
	store  Store
	fanout Fanout
	feed   *event.Feed
	prune  func(ctx context.Context, env string)
	took   func(time.Duration)
	log    zerolog.Logger
	queue  *queue
}

// New returns a Releaser over svc; its fan-outs run once Run runs.
func New(svc Services) *Releaser {
	took := svc.FanoutTook
	if took == nil {
		took = func(time.Duration) {}
	}
	prune := svc.Prune
	if prune == nil {
		prune = func(context.Context, string) {}
	}
	return &Releaser{store: svc.Store, fanout: svc.Fanout, feed: svc.Feed, prune: prune, took: took,
		log: svc.Log.With().Str("component", "release").Logger(), queue: newQueue()}
}

// Release makes version n of env the active one and records a release of
// it, whose fan-out to agents runs in the background (see Run): it
// answers at once. Once the store has released the version the release
// stands: what the fan-out meets is recorded in the release (GetRelease),
// never returned as an error.
//
// A version older than the released one (a retired version, or a
// candidate left behind) is released again as a rollback: agents take only
// desired state newer than what they hold, so its resource set is copied
// into a new version, numbered after the newest, whose meta names it
// (RollbackOf), and that one is released. Released.Version is the copy.
func (r *Releaser) Release(ctx context.Context, env string, n int64) (record.Released, error) {
	n, err := r.rollbackCopy(ctx, env, n)
	if err != nil {
		return record.Released{}, err
	}
	e, err := r.store.GetEnv(ctx, env)
	if err != nil {
		return record.Released{}, err
	}
	var ro *record.Rollout
	var agents int
	if e.Settings.Release.Staged() {
		var prev int64
		switch cur, err := r.store.ReleasedVersion(ctx, env); {
		case err == nil:
			prev = cur.Number
		case !errors.Is(err, model.ErrNotFound):
			return record.Released{}, err
		}
		if ro, agents, err = r.planRollout(ctx, env, n, prev, e.Settings.Release); err != nil {
			return record.Released{}, err
		}
	}
	v, err := r.store.Release(ctx, env, n)
	if err != nil {
		return record.Released{Version: v}, err
	}
	out := record.Released{Version: v}
	var rel record.Release
	if ro != nil {
		rel, err = r.startRollout(ctx, env, n, ro, agents)
	} else {
		// Released to every agent: none keeps an older version.
		if err := r.store.UnpinAgents(ctx, env, nil); err != nil {
			r.log.Error().Err(err).Str("env", env).Msg("cannot let agents left on an older version by a staged rollout take the new one; they keep it until the next release")
		}
		rel, err = r.StartRelease(ctx, env, n)
	}
	if err != nil {
		r.log.Error().Err(err).Str("env", env).Int64("version", n).Msg("version released but its fan-out could not be recorded; agents get it on their next hello")
		return out, nil
	}
	out.ReleaseID, out.Release = rel.ID, &rel
	return out, nil
}

// rollbackCopy returns the number of the version to release for a
// release of version n of env: n itself, or, when n is older than the
// released version or retired, a new version holding n's resource set.
func (r *Releaser) rollbackCopy(ctx context.Context, env string, n int64) (int64, error) {
	v, err := r.store.GetVersion(ctx, env, n, false)
	if err != nil {
		return n, err
	}
	switch v.State {
	case model.VersionReleased:
		return n, nil
	case model.VersionCandidate:
		cur, err := r.store.ReleasedVersion(ctx, env)
		switch {
		case errors.Is(err, model.ErrNotFound):
			return n, nil
		case err != nil:
			return n, err
		case cur.Number < n:
			return n, nil
		}
	}
	// The resources are stored as Export left them: checked, marked and
	// sealed; they are copied as they are.
	old, err := r.store.GetVersion(ctx, env, n, true)
	if err != nil {
		return n, err
	}
	meta := old.Meta
	meta.RollbackOf = n
	cp, err := r.store.PutVersion(ctx, env, meta, old.Resources)
	if err != nil {
		return n, fmt.Errorf("roll back to version %d of %s: %w", n, env, err)
	}
	r.log.Info().Str("env", env).Int64("version", n).Int64("copy", cp.Number).Msg("rolling back: releasing a copy of an older version")
	return cp.Number, nil
}

// StartRelease records a release of version n of env, which the store
// has released already, and queues its fan-out.
func (r *Releaser) StartRelease(ctx context.Context, env string, n int64) (record.Release, error) {
	rel, err := r.store.StartRelease(context.WithoutCancel(ctx), record.Release{Env: env, Version: n})
	if err != nil {
		return rel, err
	}
	// Its deploy is listed from now on, named like it, with who asked;
	// the fan-out adds the agents it sends it to.
	d := record.Deploy{ID: rel.ID, Env: env, Kind: record.OpDeploy, Trigger: record.DeployByRelease, Who: record.WhoOf(ctx), Version: n, StartedAt: rel.StartedAt}
	if err := r.store.RecordDeploy(context.WithoutCancel(ctx), d, nil); err != nil {
		r.log.Warn().Err(err).Str("env", env).Str("release", rel.ID).Msg("cannot list the release's deploy yet; its fan-out lists it")
	}
	r.feed.Publish(event.Event{Kind: event.ReleaseStarted, Env: env, Generation: n, Release: &rel})
	r.queue.add(rel)
	return rel, nil
}

// Wait waits until release id of env is no longer running, and returns
// it as it ended.
func (r *Releaser) Wait(ctx context.Context, env, id string) (record.Release, error) {
	t := time.NewTicker(20 * time.Millisecond)
	defer t.Stop()
	for {
		rel, err := r.store.GetRelease(ctx, env, id)
		if err != nil || rel.State != record.ReleaseRunning {
			return rel, err
		}
		select {
		case <-t.C:
		case <-ctx.Done():
			return rel, ctx.Err()
		}
	}
}

// What the server wires in fits.
var (
	_ Store  = store.Store(nil)
	_ Fanout = (*scheduler.Scheduler)(nil)
)
