package server

import (
	"context"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/rs/zerolog"

	"github.com/tetherhq/tether/server/record"
	"github.com/tetherhq/tether/server/store"
)

// Leadership: every replica tries, every LeadEvery, to lead the scheduler of
// each environment nobody leads (a lease in the store: a PostgreSQL
// advisory lock, held by a connection, lost when that connection or the
// process dies). The leader runs the environment's periodic triggers:
// deploy interval (retry failed and unfinished) and repair interval (verify
// everything), and forgets pending agents past pending_expiry (server/ingest/pending.go).
// Reactive scheduling (releases, agents coming online,
// operators' deploys) runs on whichever replica receives it: it is
// idempotent.

// lead runs until ctx ends, taking and running leaderships.
func (s *Server) lead(ctx context.Context) {
	type leading struct {
		cancel context.CancelFunc
		done   chan struct{}
	}
	held := map[string]leading{}
	var wg sync.WaitGroup
	defer wg.Wait()
	var failing bool // log a failing store once, not every round
	lastForget := time.Time{}
	t := time.NewTicker(s.cfg.LeadEvery)
	defer t.Stop()
	for {
		for env, l := range held {
			select {
			case <-l.done:
				delete(held, env) // lost: try again below
			default:
			}
		}
		envs, err := s.store.ListEnvs(ctx)
		switch {
		case err != nil && ctx.Err() == nil:
			if !failing {
				s.log.Warn().Err(err).Msg("cannot list environments to lead their schedulers; retrying")
			}
			failing = true
		case err == nil:
			if failing {
				s.log.Info().Msg("store reachable again; leading schedulers")
			}
			failing = false
			exists := map[string]bool{}
			for _, env := range envs {
				exists[env.Name] = true
				if _, ok := held[env.Name]; ok {
					continue
				}
				lease, ok, err := s.store.Lead(ctx, "scheduler/"+env.Name)
				if err != nil || !ok {
					continue // another replica leads it, or the store is away
				}
				lctx, cancel := context.WithCancel(ctx)
				l := leading{cancel: cancel, done: make(chan struct{})}
				held[env.Name] = l
				wg.Add(1)
				go func() {
					defer wg.Done()
					defer close(l.done)
					s.schedule(lctx, env.Name, lease)
				}()
			}
			for env, l := range held {
				if !exists[env] {
					l.cancel() // deleted
				}
			}
			if time.Since(lastForget) > time.Hour {
				lastForget = time.Now()
				if err := s.store.ForgetIngested(ctx, time.Now().Add(-s.cfg.KeepIngested)); err != nil && ctx.Err() == nil {
					s.log.Warn().Err(err).Msg("cannot drop old deduplication marks; retrying in an hour")
				}
				s.pruneActions(ctx)
				// Sessions past their absolute expiry; idle ones are
				// refused when presented, and deleted then.
				if _, err := s.store.DeleteExpiredSessions(ctx, time.Time{}, time.Now()); err != nil && ctx.Err() == nil {
					s.log.Warn().Err(err).Msg("cannot delete expired sessions; retrying in an hour")
				}
			}
		}
		select {
		case <-t.C:
		case <-ctx.Done():
			for _, l := range held {
				l.cancel()
			}
			return
		}
	}
}

// schedule runs one environment's periodic triggers while this server
// holds its lease. A new leader does not know when the last runs were: it
// places each first run at a random point of its interval, which also
// spreads the environments' runs over time.
func (s *Server) schedule(ctx context.Context, env string, lease store.Lease) {
	defer lease.Release()
	log := s.log.With().Str("env", env).Logger()
	log.Info().Msg("leading this environment's scheduler")
	s.metrics.leading.Inc()
	defer s.metrics.leading.Dec()
	now := time.Now()
	var first record.EnvSettings // zero intervals when unreadable: the loop retries
	if e, err := s.store.GetEnv(ctx, env); err == nil {
		first = e.Settings
	}
	lastRetry := now.Add(-jitter(time.Duration(first.DeployInterval)))
	lastVerify := now.Add(-jitter(time.Duration(first.RepairInterval)))
	wake := time.NewTimer(0)
	defer wake.Stop()
	// Polls of the source run beside the loop, one at a time: a slow
	// repository holds up no retry or repair.
	var lastPoll, lastPendingSweep time.Time
	polling := make(chan bool, 1) // holds the failing flag between polls
	polling <- false
	var pollWG sync.WaitGroup
	defer pollWG.Wait()
	for {
		select {
		case <-ctx.Done():
			return
		case <-lease.Lost():
			log.Warn().Msg("lost the lead of this environment's scheduler (store connection lost); another replica, or this one, takes it over")
			return
		case <-wake.C:
		}
		s.compiles.ResumeAbandoned(ctx, env)
		s.releases.Resume(ctx, env)
		pollEvery, _ := s.compiles.PollInterval(ctx, env)
		if pollEvery > 0 && time.Since(lastPoll) >= pollEvery {
			select {
			case failing := <-polling:
				lastPoll = time.Now()
				pollWG.Add(1)
				go func() {
					defer pollWG.Done()
					polling <- s.compiles.Poll(ctx, env, failing)
				}()
			default: // the last poll still runs
			}
		}
		e, err := s.store.GetEnv(ctx, env)
		if err == nil && time.Since(lastPendingSweep) >= s.cfg.PendingSweep {
			s.ingester.SweepPending(ctx, env, time.Duration(e.Settings.PendingExpiry), lastPendingSweep.IsZero())
			lastPendingSweep = time.Now()
		}
		if err == nil {
			now := time.Now()
			if d := time.Duration(e.Settings.DeployInterval); d > 0 && now.Sub(lastRetry) >= d {
				lastRetry = now
				s.trigger(ctx, log, "deploy interval: retry failed and unfinished resources", s.sched.Retry, env)
			}
			if d := time.Duration(e.Settings.RepairInterval); d > 0 && now.Sub(lastVerify) >= d {
				lastVerify = now
				s.trigger(ctx, log, "repair interval: verify every resource", s.sched.Verify, env)
			}
		}
		// Wake for the next due run, and at least every LeadEvery to
		// see changed settings.
		next := s.cfg.LeadEvery
		if err == nil {
			for _, due := range []time.Duration{
				until(lastRetry, time.Duration(e.Settings.DeployInterval)),
				until(lastVerify, time.Duration(e.Settings.RepairInterval)),
				until(lastPoll, pollEvery),
			} {
				if due > 0 && due < next {
					next = due
				}
			}
		}
		wake.Reset(next)
	}
}

func (s *Server) trigger(ctx context.Context, log zerolog.Logger, what string, run func(context.Context, string) (record.Deployment, error), env string) {
	d, err := run(ctx, env)
	switch {
	case err != nil && ctx.Err() == nil:
		log.Warn().Err(err).Msg(what + ": not every agent was reached; the next run tries again")
	case len(d.Agents) > 0:
		log.Info().Str("deploy_id", d.ID).Str("operation", string(d.Operation)).Int("agents", len(d.Agents)).Msg(what)
		s.feed.Publish(Event{Kind: EventScheduled, Env: env, DeployID: d.ID, Generation: d.Generation, Operation: d.Operation})
	}
}

// jitter is a random duration in [0, d).
func jitter(d time.Duration) time.Duration {
	if d <= 0 {
		return 0
	}
	return rand.N(d)
}

// until is how long from now until last+d (0 when d is 0: never).
func until(last time.Time, d time.Duration) time.Duration {
	if d <= 0 {
		return 0
	}
	return max(time.Until(last.Add(d)), time.Millisecond)
}

// pruneBatch is how many action log entries one statement deletes: short
// transactions, so that ingest is not held up.
const pruneBatch = 5000

// pruneActions deletes the action log's entries, and the deploys, older
// than KeepActions (none when it is 0), a batch at a time.
func (s *Server) pruneActions(ctx context.Context) {
	if s.cfg.KeepActions <= 0 {
		return
	}
	before, total := time.Now().Add(-s.cfg.KeepActions), 0
	for ctx.Err() == nil {
		n, err := s.store.PruneActions(ctx, before, pruneBatch)
		if err != nil {
			if ctx.Err() == nil {
				s.log.Warn().Err(err).Int("deleted", total).Msg("cannot prune the action log; retrying in an hour")
			}
			return
		}
		total += n
		if n < pruneBatch {
			break
		}
	}
	if total > 0 {
		s.log.Info().Int("deleted", total).Dur("keep", s.cfg.KeepActions).Msg("pruned the action log")
	}
	// The deploys list is kept as long as the action log it sums up.
	for ctx.Err() == nil {
		n, err := s.store.PruneDeploys(ctx, before, pruneBatch)
		if err != nil {
			if ctx.Err() == nil {
				s.log.Warn().Err(err).Msg("cannot prune the deploys list; retrying in an hour")
			}
			return
		}
		if n < pruneBatch {
			break
		}
	}
}
