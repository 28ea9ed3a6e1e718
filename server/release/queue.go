package release

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/tetherhq/tether/server/event"
	"github.com/tetherhq/tether/server/record"
	"github.com/tetherhq/tether/server/scheduler"
)

// Releases are asynchronous: Release stores the version as released and
// records a Release (running) at once, and the fan-out to agents runs in
// the background, owned by Run: started by it, and stopped with it. A
// fan-out holds a lease named after its release while it runs; the
// leader of an environment resumes a running release nobody holds (its
// server stopped mid fan-out) by calling Resume. Either way nothing is
// lost: the version is released, and each agent gets it when it next says
// hello.

// Progress of a fan-out is recorded and published at most this often
// (and when it ends).
const progressEvery = time.Second

// releasesToKeep bounds the releases kept per environment.
const releasesToKeep = 100

// queue holds the releases whose fan-out this process is to run, and
// those it runs.
type queue struct {
	mu      sync.Mutex
	waiting []record.Release
	// known are the releases queued or running here: the leader does not
	// take them for abandoned.
	known map[string]bool
	wake  chan struct{}
}

func newQueue() *queue {
	return &queue{known: map[string]bool{}, wake: make(chan struct{}, 1)}
}

// add queues r unless it is queued or running here already.
func (q *queue) add(r record.Release) bool {
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

func (q *queue) take() []record.Release {
	q.mu.Lock()
	defer q.mu.Unlock()
	out := q.waiting
	q.waiting = nil
	return out
}

func (q *queue) forget(id string) {
	q.mu.Lock()
	delete(q.known, id)
	q.mu.Unlock()
}

func (q *queue) isKnown(id string) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.known[id]
}

// Run runs the fan-outs queued, each in its own goroutine, until ctx
// ends; then it waits for them (they stop with ctx, recording how far
// they got).
func (r *Releaser) Run(ctx context.Context) {
	var wg sync.WaitGroup
	defer wg.Wait()
	for {
		for _, rel := range r.queue.take() {
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer r.queue.forget(rel.ID)
				r.fanOut(ctx, rel)
			}()
		}
		select {
		case <-r.queue.wake:
		case <-ctx.Done():
			return
		}
	}
}

// Resume queues the running releases of env that no server runs: their
// server stopped mid fan-out. The leader of env calls it.
func (r *Releaser) Resume(ctx context.Context, env string) {
	running, err := r.store.RunningReleases(ctx, env)
	if err != nil {
		return // the next round tries again
	}
	for _, rel := range running {
		if r.queue.isKnown(rel.ID) {
			continue
		}
		lease, ok, err := r.store.Lead(ctx, releaseLease(rel.ID))
		if err != nil || !ok {
			continue // another server runs it
		}
		lease.Release() // the fan-out takes it again
		if r.queue.add(rel) {
			r.log.Warn().Str("env", env).Str("release", rel.ID).Int64("version", rel.Version).Int("done", rel.Done()).
				Msg("a release's fan-out was left unfinished by a stopped server; resuming it")
		}
	}
}

func releaseLease(id string) string { return "release/" + id }

// fanOut runs release rel's fan-out to agents, recording its progress,
// then prunes old versions and releases. It holds the release's lease
// while it runs; when another server holds it, that one runs it. When ctx
// ends (the server stops) it records how far it got and leaves the
// release running, for the next leader to resume.
func (r *Releaser) fanOut(ctx context.Context, rel record.Release) {
	log := r.log.With().Str("env", rel.Env).Str("release", rel.ID).Int64("version", rel.Version).Logger()
	lease, ok, err := r.store.Lead(ctx, releaseLease(rel.ID))
	if err != nil || !ok {
		return
	}
	defer lease.Release()
	// Read again under the lease: another server may have ended it.
	cur, err := r.store.GetRelease(ctx, rel.Env, rel.ID)
	if err != nil || cur.State != record.ReleaseRunning {
		return
	}
	if cur.Rollout != nil {
		r.driveRollout(ctx, cur, log)
		return
	}
	started := time.Now()
	last := started
	progress := func(p record.Release) {
		if time.Since(last) < progressEvery {
			return
		}
		last = time.Now()
		if _, err := r.store.UpdateRelease(ctx, p); err != nil && ctx.Err() == nil {
			log.Warn().Err(err).Msg("cannot record a release's progress; the fan-out goes on")
		}
		r.feed.Publish(event.Event{Kind: event.ReleaseProgress, Env: p.Env, Generation: p.Version, Release: &p})
	}
	// A resumed release counts again from zero: agents reached already
	// are up to date now.
	rel.Agents, rel.Sent, rel.UpToDate, rel.Fanout = 0, 0, 0, record.Fanout{}
	end, err := r.fanout.Released(ctx, rel, progress)
	r.took(time.Since(started))
	var superseded *scheduler.SupersededError
	switch {
	case ctx.Err() != nil:
		// Stopping: record how far it got, still running.
		end.State = record.ReleaseRunning
		wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		if _, err := r.store.UpdateRelease(wctx, end); err != nil {
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
	done, err := r.store.UpdateRelease(ctx, end)
	if err != nil {
		log.Warn().Err(err).Msg("cannot record the end of a release's fan-out")
		done = end
	}
	log.Info().Str("state", string(done.State)).Int("agents", done.Agents).Int("sent", done.Sent).Int("up_to_date", done.UpToDate).
		Int("pending", done.PendingCount).Dur("took", time.Since(started)).Msg("release fanned out")
	r.feed.Publish(event.Event{Kind: event.ReleaseDone, Env: rel.Env, Generation: rel.Version, Release: &done})
	r.prune(ctx, rel.Env)
	if _, err := r.store.PruneReleases(ctx, rel.Env, releasesToKeep); err != nil && ctx.Err() == nil {
		log.Warn().Err(err).Msg("cannot prune old releases; the next release tries again")
	}
}
