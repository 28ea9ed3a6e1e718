package server

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/tetherhq/tether/model"
	"github.com/tetherhq/tether/server/record"
	"github.com/tetherhq/tether/server/scheduler"
)

// Releases are asynchronous: Release stores the version as released and
// records a Release (running) at once, and the fan-out to agents runs in
// the background, owned by Run: started by it, and stopped with it. A
// fan-out holds a lease named after its release while it runs; the
// leader of an environment resumes a running release nobody holds (its
// server stopped mid fan-out) within LeadEvery. Either way nothing is
// lost: the version is released, and each agent gets it when it next says
// hello.

// Progress of a fan-out is recorded and published at most this often
// (and when it ends).
const progressEvery = time.Second

// releasesToKeep bounds the releases kept per environment.
const releasesToKeep = 100

// releaseQueue holds the releases whose fan-out this process is to run,
// and those it runs.
type releaseQueue struct {
	mu      sync.Mutex
	waiting []record.Release
	// known are the releases queued or running here: the leader does not
	// take them for abandoned.
	known map[string]bool
	wake  chan struct{}
}

func newReleaseQueue() *releaseQueue {
	return &releaseQueue{known: map[string]bool{}, wake: make(chan struct{}, 1)}
}

// add queues r unless it is queued or running here already.
func (q *releaseQueue) add(r record.Release) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.known[r.ID] {
		return false
	}
	q.known[r.ID] = true
	q.waiting = append(q.waiting, r)
	select {
	case q.wake <- struct{}{}:
	default:
	}
	return true
}

func (q *releaseQueue) take() []record.Release {
	q.mu.Lock()
	defer q.mu.Unlock()
	out := q.waiting
	q.waiting = nil
	return out
}

func (q *releaseQueue) forget(id string) {
	q.mu.Lock()
	delete(q.known, id)
	q.mu.Unlock()
}

func (q *releaseQueue) isKnown(id string) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.known[id]
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
func (s *Server) Release(ctx context.Context, env string, n int64) (record.Released, error) {
	n, err := s.rollbackCopy(ctx, env, n)
	if err != nil {
		return record.Released{}, err
	}
	e, err := s.store.GetEnv(ctx, env)
	if err != nil {
		return record.Released{}, err
	}
	var ro *record.Rollout
	var agents int
	if e.Settings.Release.Staged() {
		var prev int64
		switch cur, err := s.store.ReleasedVersion(ctx, env); {
		case err == nil:
			prev = cur.Number
		case !errors.Is(err, model.ErrNotFound):
			return record.Released{}, err
		}
		if ro, agents, err = s.planRollout(ctx, env, n, prev, e.Settings.Release); err != nil {
			return record.Released{}, err
		}
	}
	v, err := s.store.Release(ctx, env, n)
	if err != nil {
		return record.Released{Version: v}, err
	}
	out := record.Released{Version: v}
	var rel record.Release
	if ro != nil {
		rel, err = s.startRollout(ctx, env, n, ro, agents)
	} else {
		// Released to every agent: none keeps an older version.
		if err := s.store.UnpinAgents(ctx, env, nil); err != nil {
			s.log.Error().Err(err).Str("env", env).Msg("cannot let agents left on an older version by a staged rollout take the new one; they keep it until the next release")
		}
		rel, err = s.startRelease(ctx, env, n)
	}
	if err != nil {
		s.log.Error().Err(err).Str("env", env).Int64("version", n).Msg("version released but its fan-out could not be recorded; agents get it on their next hello")
		return out, nil
	}
	out.ReleaseID, out.Release = rel.ID, &rel
	return out, nil
}

// rollbackCopy returns the number of the version to release for a
// release of version n of env: n itself, or, when n is older than the
// released version or retired, a new version holding n's resource set.
func (s *Server) rollbackCopy(ctx context.Context, env string, n int64) (int64, error) {
	v, err := s.store.GetVersion(ctx, env, n, false)
	if err != nil {
		return n, err
	}
	switch v.State {
	case model.VersionReleased:
		return n, nil
	case model.VersionCandidate:
		cur, err := s.store.ReleasedVersion(ctx, env)
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
	old, err := s.store.GetVersion(ctx, env, n, true)
	if err != nil {
		return n, err
	}
	meta := old.Meta
	meta.RollbackOf = n
	cp, err := s.store.PutVersion(ctx, env, meta, old.Resources)
	if err != nil {
		return n, fmt.Errorf("roll back to version %d of %s: %w", n, env, err)
	}
	s.log.Info().Str("env", env).Int64("version", n).Int64("copy", cp.Number).Msg("rolling back: releasing a copy of an older version")
	return cp.Number, nil
}

// startRelease records a release of version n of env and queues its
// fan-out.
func (s *Server) startRelease(ctx context.Context, env string, n int64) (record.Release, error) {
	rel, err := s.store.StartRelease(context.WithoutCancel(ctx), record.Release{Env: env, Version: n})
	if err != nil {
		return rel, err
	}
	// Its deploy is listed from now on, named like it, with who asked;
	// the fan-out adds the agents it sends it to.
	d := record.Deploy{ID: rel.ID, Env: env, Kind: record.OpDeploy, Trigger: record.DeployByRelease, Who: record.WhoOf(ctx), Version: n, StartedAt: rel.StartedAt}
	if err := s.store.RecordDeploy(context.WithoutCancel(ctx), d, nil); err != nil {
		s.log.Warn().Err(err).Str("env", env).Str("release", rel.ID).Msg("cannot list the release's deploy yet; its fan-out lists it")
	}
	s.feed.Publish(Event{Kind: EventReleaseStarted, Env: env, Generation: n, Release: &rel})
	s.releases.add(rel)
	return rel, nil
}

// WaitRelease waits until release id of env is no longer running, and
// returns it as it ended.
func (s *Server) WaitRelease(ctx context.Context, env, id string) (record.Release, error) {
	t := time.NewTicker(20 * time.Millisecond)
	defer t.Stop()
	for {
		r, err := s.store.GetRelease(ctx, env, id)
		if err != nil || r.State != record.ReleaseRunning {
			return r, err
		}
		select {
		case <-t.C:
		case <-ctx.Done():
			return r, ctx.Err()
		}
	}
}

// GetRelease returns one release of env.
func (s *Server) GetRelease(ctx context.Context, env, id string) (record.Release, error) {
	return s.store.GetRelease(ctx, env, id)
}

// ListReleases returns env's newest releases.
func (s *Server) ListReleases(ctx context.Context, env string, limit int) ([]record.Release, error) {
	return s.store.ListReleases(ctx, env, limit)
}

// runReleases runs the fan-outs queued, each in its own goroutine, until
// ctx ends; then it waits for them (they stop with ctx, recording how far
// they got).
func (s *Server) runReleases(ctx context.Context) {
	var wg sync.WaitGroup
	defer wg.Wait()
	for {
		for _, r := range s.releases.take() {
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer s.releases.forget(r.ID)
				s.fanOut(ctx, r)
			}()
		}
		select {
		case <-s.releases.wake:
		case <-ctx.Done():
			return
		}
	}
}

// resumeReleases queues the running releases of env that no server runs:
// their server stopped mid fan-out. The leader of env calls it.
func (s *Server) resumeReleases(ctx context.Context, env string) {
	running, err := s.store.RunningReleases(ctx, env)
	if err != nil {
		return // the next round tries again
	}
	for _, r := range running {
		if s.releases.isKnown(r.ID) {
			continue
		}
		lease, ok, err := s.store.Lead(ctx, releaseLease(r.ID))
		if err != nil || !ok {
			continue // another server runs it
		}
		lease.Release() // the fan-out takes it again
		if s.releases.add(r) {
			s.log.Warn().Str("env", env).Str("release", r.ID).Int64("version", r.Version).Int("done", r.Done()).
				Msg("a release's fan-out was left unfinished by a stopped server; resuming it")
		}
	}
}

func releaseLease(id string) string { return "release/" + id }

// fanOut runs release r's fan-out to agents, recording its progress, then
// prunes old versions and releases. It holds the release's lease while it
// runs; when another server holds it, that one runs it. When ctx ends
// (the server stops) it records how far it got and leaves the release
// running, for the next leader to resume.
func (s *Server) fanOut(ctx context.Context, r record.Release) {
	log := s.log.With().Str("env", r.Env).Str("release", r.ID).Int64("version", r.Version).Logger()
	lease, ok, err := s.store.Lead(ctx, releaseLease(r.ID))
	if err != nil || !ok {
		return
	}
	defer lease.Release()
	// Read again under the lease: another server may have ended it.
	cur, err := s.store.GetRelease(ctx, r.Env, r.ID)
	if err != nil || cur.State != record.ReleaseRunning {
		return
	}
	if cur.Rollout != nil {
		s.driveRollout(ctx, cur, log)
		return
	}
	started := time.Now()
	last := started
	progress := func(p record.Release) {
		if time.Since(last) < progressEvery {
			return
		}
		last = time.Now()
		if _, err := s.store.UpdateRelease(ctx, p); err != nil && ctx.Err() == nil {
			log.Warn().Err(err).Msg("cannot record a release's progress; the fan-out goes on")
		}
		s.feed.Publish(Event{Kind: EventReleaseProgress, Env: p.Env, Generation: p.Version, Release: &p})
	}
	// A resumed release counts again from zero: agents reached already
	// are up to date now.
	r.Agents, r.Sent, r.UpToDate, r.Fanout = 0, 0, 0, record.Fanout{}
	end, err := s.sched.Released(ctx, r, progress)
	s.metrics.fanout(time.Since(started))
	var superseded *scheduler.SupersededError
	switch {
	case ctx.Err() != nil:
		// Stopping: record how far it got, still running.
		end.State = record.ReleaseRunning
		wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		if _, err := s.store.UpdateRelease(wctx, end); err != nil {
			log.Warn().Err(err).Msg("cannot record how far a release's fan-out got")
		}
		log.Warn().Int("done", end.Done()).Int("agents", end.Agents).
			Msg("server stopping mid fan-out: the version stays released; the next leader resumes the fan-out, and each agent gets it when it next says hello")
		return
	case errors.As(err, &superseded):
		end.State = record.ReleaseDone
		end.Note = fmt.Sprintf("superseded by version %d: the agents this release had not reached get that one", superseded.By)
	case err != nil:
		end.State = record.ReleaseFailed
		end.Note = fmt.Sprintf("the fan-out stopped: %v; the version stays released, and each agent gets it when it next says hello", err)
		log.Error().Err(err).Msg("a release's fan-out stopped; agents get the version on their next hello")
	default:
		end.State = record.ReleaseDone
	}
	done, err := s.store.UpdateRelease(ctx, end)
	if err != nil {
		log.Warn().Err(err).Msg("cannot record the end of a release's fan-out")
		done = end
	}
	log.Info().Str("state", string(done.State)).Int("agents", done.Agents).Int("sent", done.Sent).Int("up_to_date", done.UpToDate).
		Int("pending", done.PendingCount).Dur("took", time.Since(started)).Msg("release fanned out")
	s.feed.Publish(Event{Kind: EventReleaseDone, Env: r.Env, Generation: r.Version, Release: &done})
	s.prune(ctx, r.Env)
	if _, err := s.store.PruneReleases(ctx, r.Env, releasesToKeep); err != nil && ctx.Err() == nil {
		log.Warn().Err(err).Msg("cannot prune old releases; the next release tries again")
	}
}
