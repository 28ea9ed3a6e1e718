package scheduler

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"

	"github.com/google/uuid"

	"github.com/tetherhq/tether/bus"
	"github.com/tetherhq/tether/model"
	"github.com/tetherhq/tether/server/record"
)

// FanoutConfig tunes a release's fan-out.
type FanoutConfig struct {
	// PageSize is how many agents are read, diffed and sent together
	// (default 250, at most 1000): their slices are read in one query per
	// version, and their commands sent in one batch, confirms outstanding
	// together.
	PageSize int
	// Workers is how many pages are in hand at once (default 4): one
	// computes diffs while others wait for the broker's confirms.
	Workers int
}

// DefaultFanout returns the fan-out configuration zero fields take.
func DefaultFanout() FanoutConfig { return FanoutConfig{PageSize: 250, Workers: 4} }

func (c FanoutConfig) withDefaults() FanoutConfig {
	def := DefaultFanout()
	if c.PageSize <= 0 {
		c.PageSize = def.PageSize
	}
	c.PageSize = min(c.PageSize, 1000)
	if c.Workers <= 0 {
		c.Workers = def.Workers
	}
	return c
}

// SupersededError ends a fan-out whose version is no longer the released
// one: a newer release reaches the agents instead.
type SupersededError struct{ By int64 }

func (e *SupersededError) Error() string {
	return fmt.Sprintf("superseded by version %d", e.By)
}

// Released fans version r.Version of r.Env out to every accepted agent:
// each is sent the desired state it misses, and a deploy when the
// environment deploys automatically. Agents are read a page at a time
// (FanoutConfig), several pages in hand at once; no page waits for
// another's confirms.
//
// It counts in r what it did (Agents, Sent, UpToDate, pending agents with
// what brings them the version later) and calls progress, one call at a
// time, after each page. It returns r when every accepted agent was dealt
// with; when ctx ends (r says how far it got; the error is ctx's); when
// the store could not be read (the fan-out cannot go on); or, with a
// *SupersededError, when a newer version was released meanwhile. The
// release stands whatever the fan-out meets: an agent not reached gets it
// when it next says hello.
func (s *Scheduler) Released(ctx context.Context, r record.Release, progress func(record.Release)) (record.Release, error) {
	return s.ReleasedTo(ctx, r, nil, progress)
}

// ReleasedTo is Released for the accepted agents named in only (a wave
// of a staged rollout), or every accepted agent when only is nil.
func (s *Scheduler) ReleasedTo(ctx context.Context, r record.Release, only []string, progress func(record.Release)) (record.Release, error) {
	env, err := s.store.GetEnv(ctx, r.Env)
	if err != nil {
		return r, err
	}
	var in map[string]bool
	if only != nil {
		in = make(map[string]bool, len(only))
		for _, a := range only {
			in[a] = true
		}
		r.Agents = len(only)
	} else if r.Agents, err = s.store.CountAgents(ctx, r.Env, record.AgentAccepted); err != nil {
		return r, err
	}
	s.indexMu.Lock()
	err = s.buildIndex(ctx, r.Env, r.Version)
	s.indexMu.Unlock()
	if err != nil {
		return r, err
	}
	later := laterText(env.Settings)
	// The deploys the fan-out sends carry the release's id: an agent's
	// results, and the resources' action logs, name the release.
	deployID := r.ID
	if deployID == "" {
		deployID = uuid.NewString()
	}

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	pages := make(chan []record.Agent)
	var listErr error
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		defer close(pages)
		listErr = s.pages(ctx, r.Env, func(p []record.Agent) error {
			if in != nil {
				p = slices.DeleteFunc(p, func(a record.Agent) bool { return !in[a.Name] })
				if len(p) == 0 {
					return nil
				}
			}
			select {
			case pages <- p:
				return nil
			case <-ctx.Done():
				return ctx.Err()
			}
		})
	}()
	var mu sync.Mutex // guards r, firstErr, failed
	var firstErr error
	var failed []error
	for range s.cfg.Workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for p := range pages {
				out, err := s.fanPage(ctx, env, r.Version, deployID, later, p)
				mu.Lock()
				if err != nil {
					if firstErr == nil {
						firstErr = err
					}
					mu.Unlock()
					cancel()
					continue // drain: the lister stops with ctx
				}
				r.Sent += out.sent
				r.UpToDate += out.upToDate
				for _, pa := range out.pending {
					r.Add(pa)
				}
				failed = append(failed, out.failed...)
				r.Agents = max(r.Agents, r.Done())
				if progress != nil {
					progress(r)
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if firstErr == nil && listErr != nil {
		firstErr = listErr
	}
	if r.PendingCount > 0 {
		s.log.Warn().Err(errors.Join(failed...)).Str("env", r.Env).Int64("version", r.Version).Int("pending", r.PendingCount).
			Msg("the release did not reach every agent at once; they get it later")
	}
	return r, firstErr
}

// pageOutcome is what a fan-out did for one page of agents.
type pageOutcome struct {
	sent, upToDate int
	pending        []record.PendingAgent
	failed         []error
}

// pend records an agent the page did not reach, by why.
func (o *pageOutcome) pend(s *Scheduler, env string, n int64, agent, later string, err error) {
	switch {
	case errors.Is(err, bus.ErrNoInbox):
		o.pending = append(o.pending, record.PendingAgent{Agent: agent, Reason: record.PendingNotConnected, Later: "when it next says hello"})
	case errors.Is(err, bus.ErrInboxFull):
		o.pending = append(o.pending, record.PendingAgent{Agent: agent, Reason: record.PendingInboxFull, Later: later})
	case errors.Is(err, record.ErrNoKeyAgreement):
		o.pending = append(o.pending, record.PendingAgent{Agent: agent, Reason: record.PendingNoKeyAgreement, Later: "once the agent is upgraded: sensitive values are never sent in clear"})
		s.log.Error().Err(err).Str("env", env).Int64("version", n).Msg("desired state not sent")
	default:
		o.pending = append(o.pending, record.PendingAgent{Agent: agent, Reason: record.PendingSendFailed, Later: later})
		o.failed = append(o.failed, err)
	}
}

// fanPage sends one page of accepted agents what they miss of version n:
// their slices of n and of the versions they hold are read a version at a
// time, diffs computed, and the desired states sent in one batch, then
// the deploys of those that took them in another (a deploy never
// overtakes its desired state). An error is for a page that could not be
// dealt with (the store, ctx, or a newer release).
func (s *Scheduler) fanPage(ctx context.Context, env record.Environment, n int64, deployID, later string, agents []record.Agent) (pageOutcome, error) {
	var out pageOutcome
	cur, err := s.store.ReleasedVersion(ctx, env.Name)
	if err != nil {
		return out, err
	}
	if cur.Number != n {
		return out, &SupersededError{By: cur.Number}
	}
	var behind []target
	for _, a := range agents {
		from := s.sentOr(env.Name, a.Name, a.Generation)
		if from == n {
			out.upToDate++
			continue
		}
		behind = append(behind, target{a, from})
	}
	if len(behind) == 0 {
		return out, nil
	}
	// The deploy that follows the desired state rides with it to agents
	// that speak protocol 1.2 (one message each, not two); older agents
	// are sent it after their desired state was confirmed.
	deploy := env.Settings.AutoDeploy && !env.Settings.Halted
	var dep *bus.Deploy
	carry := make([]bool, len(behind))
	if deploy {
		dep = &bus.Deploy{DeployID: deployID, Mode: bus.DeployIncremental, Generation: n, DriftPolicy: env.Settings.DriftPolicy}
		for i, t := range behind {
			carry[i] = !t.agent.Paused && bus.ProtocolHas(t.agent.Protocol, protocolDeployCarried)
		}
	}
	msgs, owner, err := s.pageDesired(ctx, env.Name, n, later, behindNames(behind), fromOf(behind), carry, dep, &out)
	if err != nil {
		return out, err
	}
	errs := s.send.SendBatch(ctx, msgs)
	if ctx.Err() != nil {
		return out, ctx.Err()
	}
	d := record.Deploy{ID: deployID, Env: env.Name, Kind: record.OpDeploy, Trigger: record.DeployByRelease, Who: record.WhoOf(ctx), Version: n}
	var carried []string
	var deploys []bus.Outgoing
	var deployOwner []int
	for k, err := range errs {
		t := behind[owner[k]]
		if err != nil {
			// Not reached, its deploy with it: the agent gets the
			// released version when it next says hello.
			out.pend(s, env.Name, n, t.agent.Name, later, fmt.Errorf("send %s to %s: %w", msgs[k].Envelope.Kind, t.agent.Name, err))
			continue
		}
		s.setSent(env.Name, t.agent.Name, n)
		if carry[owner[k]] {
			carried = append(carried, t.agent.Name)
		}
		if carry[owner[k]] || !deploy || t.agent.Paused {
			out.sent++
			continue
		}
		e, err := s.signer.Seal(bus.KindDeploy, env.Name, t.agent.Name, *dep)
		if err != nil {
			out.pend(s, env.Name, n, t.agent.Name, later, err)
			continue
		}
		deploys = append(deploys, bus.Outgoing{Envelope: e})
		deployOwner = append(deployOwner, owner[k])
	}
	// The deploys that rode with the desired states are recorded once the
	// broker took them: an answer recorded before them is kept (results
	// are upserted), and an agent not reached is not in the deploy, as
	// when its deploy command is not sent.
	if len(carried) > 0 {
		if err := s.store.RecordDeploy(ctx, d, carried); err != nil {
			return out, err
		}
	}
	var unsent []string
	if len(deploys) > 0 {
		asked := make([]string, len(deploys))
		for k, o := range deployOwner {
			asked[k] = behind[o].agent.Name
		}
		// Recorded before it is sent: an agent may answer at once.
		if err := s.store.RecordDeploy(ctx, d, asked); err != nil {
			return out, err
		}
		errs = s.send.SendBatch(ctx, deploys)
		if ctx.Err() != nil {
			return out, ctx.Err()
		}
		for k, err := range errs {
			if err != nil {
				unsent = append(unsent, asked[k])
				out.pend(s, env.Name, n, asked[k], later, fmt.Errorf("send %s to %s: %w", bus.KindDeploy, asked[k], err))
				continue
			}
			out.sent++
		}
	}
	if len(unsent) > 0 {
		if err := s.store.EndDeployAgents(ctx, env.Name, deployID, unsent, "not reached: it gets the released version when it next says hello"); err != nil {
			out.failed = append(out.failed, err)
		}
	}
	return out, nil
}

// protocolDeployCarried is the minor protocol version from which agents
// take the deploy that follows their desired state in the same message.
const protocolDeployCarried = 2

// target is an agent a page sends to, and the generation it holds.
type target struct {
	agent record.Agent
	from  int64
}

func behindNames(ts []target) []string {
	out := make([]string, len(ts))
	for i, t := range ts {
		out[i] = t.agent.Name
	}
	return out
}

func fromOf(ts []target) []int64 {
	out := make([]int64, len(ts))
	for i, t := range ts {
		out[i] = t.from
	}
	return out
}

// pageDesired returns the signed desired states that bring the agents
// named, holding generations from, to version n, and the index in names
// of each; an agent none could be made for is pended in out. Diffs are
// computed from the resources' hashes (no body read), and only the bodies
// of the resources that changed are read, one query for the page; an
// agent that holds no version a diff can start from is sent its full
// state. The desired state of the agents marked in carry carries dep.
func (s *Scheduler) pageDesired(ctx context.Context, env string, n int64, later string, names []string, from []int64, carry []bool, dep *bus.Deploy, out *pageOutcome) ([]bus.Outgoing, []int, error) {
	next, err := s.store.SliceHashes(ctx, env, n, names)
	if err != nil {
		return nil, nil, err
	}
	prev := make([][]record.ResourceHash, len(names))
	hasPrev := make([]bool, len(names))
	byFrom := map[int64][]int{}
	for i, f := range from {
		if f > 0 {
			byFrom[f] = append(byFrom[f], i)
		}
	}
	for f, idx := range byFrom {
		if _, err := s.store.GetVersion(ctx, env, f, false); err != nil {
			continue // pruned: they are sent their full state
		}
		held := make([]string, len(idx))
		for k, i := range idx {
			held[k] = names[i]
		}
		hs, err := s.store.SliceHashes(ctx, env, f, held)
		if err != nil {
			continue
		}
		for k, i := range idx {
			prev[i], hasPrev[i] = hs[k], true
		}
	}
	type plan struct {
		hash    model.Hash
		diff    model.Diff
		upserts []model.ID
	}
	plans := make([]plan, len(names))
	var changed []model.ID
	var full []string
	var fullAt []int
	for i := range names {
		hashes := make([]model.Hash, len(next[i]))
		for k, h := range next[i] {
			hashes[k] = h.Hash
		}
		p := &plans[i]
		p.hash = model.SetHashOf(hashes)
		if !hasPrev[i] {
			full, fullAt = append(full, names[i]), append(fullAt, i)
			continue
		}
		p.diff = model.Diff{From: from[i], To: n}
		old := make(map[model.ID]model.Hash, len(prev[i]))
		for _, h := range prev[i] {
			old[h.ID] = h.Hash
		}
		for _, h := range next[i] {
			if was, ok := old[h.ID]; !ok || was != h.Hash {
				p.upserts = append(p.upserts, h.ID)
			}
			delete(old, h.ID)
		}
		for id := range old {
			p.diff.Deletes = append(p.diff.Deletes, id)
		}
		slices.SortFunc(p.diff.Deletes, model.ID.Compare)
		changed = append(changed, p.upserts...)
	}
	bodies := make(map[model.ID]model.Resource, len(changed))
	for len(changed) > 0 {
		chunk := changed[:min(len(changed), 1000)]
		changed = changed[len(chunk):]
		rs, err := s.store.ResourcesByID(ctx, env, n, chunk)
		if err != nil {
			return nil, nil, err
		}
		for _, r := range rs {
			bodies[r.ID] = r
		}
	}
	fulls, err := s.store.AgentSlices(ctx, env, n, full)
	if err != nil {
		return nil, nil, err
	}
	fullOf := make(map[int]model.Slice, len(full))
	for k, i := range fullAt {
		fullOf[i] = fulls[k]
	}
	msgs := make([]bus.Outgoing, 0, len(names))
	owner := make([]int, 0, len(names))
	for i, agent := range names {
		var e *bus.Envelope
		var err error
		var withDeploy *bus.Deploy
		if carry[i] {
			withDeploy = dep
		}
		if sl, ok := fullOf[i]; ok {
			e, err = s.envelope(ctx, env, agent, n, plans[i].hash, nil, sl.Resources, withDeploy)
		} else {
			d := plans[i].diff
			for _, id := range plans[i].upserts {
				r, ok := bodies[id]
				if !ok {
					err = fmt.Errorf("resource %s of version %d: %w", id, n, model.ErrNotFound)
					break
				}
				d.Upserts = append(d.Upserts, r)
			}
			if err == nil {
				e, err = s.envelope(ctx, env, agent, n, plans[i].hash, &d, nil, withDeploy)
			}
		}
		if err != nil {
			out.pend(s, env, n, agent, later, err)
			continue
		}
		msgs = append(msgs, bus.Outgoing{Envelope: e})
		owner = append(owner, i)
	}
	return msgs, owner, nil
}

// sentOr returns the generation last sent to agent, or held when none was.
func (s *Scheduler) sentOr(env, agent string, held int64) int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	if from, known := s.sent[agentKey{env, agent}]; known {
		return from
	}
	return held
}

func (s *Scheduler) setSent(env, agent string, gen int64) {
	s.mu.Lock()
	k := agentKey{env, agent}
	s.sent[k], s.sentAt[k] = gen, s.now()
	s.mu.Unlock()
}

// desired returns the signed command that brings agent from the slice it
// holds (prev, nil when it holds none a diff can start from) to next:
// a diff, or its full desired state.
func (s *Scheduler) desired(ctx context.Context, env, agent string, to int64, next model.Slice, prev *model.Slice) (*bus.Envelope, error) {
	hash, err := next.Hash()
	if err != nil {
		return nil, err
	}
	if prev == nil {
		return s.envelope(ctx, env, agent, to, hash, nil, next.Resources, nil)
	}
	d, err := model.DiffSlices(*prev, next)
	if err != nil {
		return nil, err
	}
	return s.envelope(ctx, env, agent, to, hash, &d, nil, nil)
}

// envelope signs the command that brings agent to generation to, whose
// slice hashes to hash: the diff d, or (d nil) the full state resources.
// Sensitive values are sealed to the agent before anything enters the
// bus; the hashes, over their digests, do not change. dep, when not nil,
// is the deploy that rides with it.
func (s *Scheduler) envelope(ctx context.Context, env, agent string, to int64, hash model.Hash, d *model.Diff, resources []model.Resource, dep *bus.Deploy) (*bus.Envelope, error) {
	if d != nil {
		upserts, err := s.seal.SealFor(ctx, env, agent, d.Upserts)
		if err != nil {
			return nil, err
		}
		diff := *d
		diff.Upserts = upserts
		return s.signer.Seal(bus.KindDesiredDiff, env, agent, bus.DesiredDiff{Diff: diff, SliceHash: hash, Deploy: dep})
	}
	sealed, err := s.seal.SealFor(ctx, env, agent, resources)
	if err != nil {
		return nil, err
	}
	return s.signer.Seal(bus.KindDesiredFull, env, agent, bus.DesiredFull{Generation: to, Resources: sealed, SliceHash: hash, Deploy: dep})
}
