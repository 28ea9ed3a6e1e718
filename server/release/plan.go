package release

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/tetherhq/tether/bus"
	"github.com/tetherhq/tether/model"
	"github.com/tetherhq/tether/server/event"
	"github.com/tetherhq/tether/server/record"
)

// Plan dry-runs version n of env on its live agents (the accepted ones, or
// those req names) and waits up to req.Timeout for their answers: per
// agent and per resource, what a deploy of n would change. Each agent's
// part also says what a release of n would take away from it (Leaving:
// the resources it holds that n does not have), found from the store
// for every agent, offline ones too: an agent answers only about the
// resources n has for it. Each agent is
// sent its slice of n inside a dry-run command (bus.Plan): nothing is
// released, nothing changes on any host, and no agent keeps the slice.
// Agents that are offline are named and not asked; a paused agent (or one
// of a halted environment) answers, since a plan changes nothing. With no
// agent online the answer is an error naming them, and nothing is sent.
//
// The answers are gathered from this replica's live feed. With several
// replicas, an answer another replica ingested is read from the action
// log instead, which holds the resources a deploy would change but not
// the unchanged ones nor the end of the answer: such an agent is shown
// with the changes found and named as not answering in full.
func (r *Releaser) Plan(ctx context.Context, env string, n int64, req record.PlanRequest) (record.Plan, error) {
	if req.Timeout <= 0 {
		req.Timeout = record.DefaultPlanTimeout
	}
	if req.Timeout > record.MaxPlanTimeout {
		return record.Plan{}, fmt.Errorf("%w: plan timeout %s: at most %s", model.ErrInvalid, req.Timeout, record.MaxPlanTimeout)
	}
	e, err := r.store.GetEnv(ctx, env)
	if err != nil {
		return record.Plan{}, err
	}
	if _, err := r.store.GetVersion(ctx, env, n, false); err != nil {
		return record.Plan{}, fmt.Errorf("plan version %d of %s: %w", n, env, err)
	}
	p := record.Plan{ID: uuid.NewString(), Env: env, Version: n, Agents: []record.PlanAgent{}, NotAnswered: []string{}, Timeout: req.Timeout}
	switch rel, err := r.store.ReleasedVersion(ctx, env); {
	case err == nil:
		p.Released = rel.Number
	case !errors.Is(err, model.ErrNotFound):
		return record.Plan{}, err
	}
	targets, err := r.planTargets(ctx, env, req.Agents)
	if err != nil {
		return record.Plan{}, err
	}
	// What a release takes away is the store's to say, for every agent
	// asked, online or not: an agent answers only about its part of n.
	leaving, err := r.leaving(ctx, env, n, p.Released, targets)
	if err != nil {
		return record.Plan{}, err
	}
	p.Note = purgeNote(e.Settings, len(leaving) > 0)
	now := time.Now()
	var online []record.Agent
	var offline []string
	for _, a := range targets {
		pa := record.PlanAgent{Name: a.Name, Paused: a.Paused || e.Settings.Halted, Resources: []record.PlanResource{}}
		if i, ok := slices.BinarySearchFunc(leaving, a.Name, func(l record.Leaving, name string) int { return strings.Compare(l.Agent, name) }); ok {
			pa.Leaving = &leaving[i]
		}
		pa.Online = a.Connected && (req.OfflineAfter <= 0 || now.Sub(a.LastSeen) < req.OfflineAfter)
		if !pa.Online {
			pa.Outcome, pa.Note = record.PlanOffline, "offline: not asked (last seen "+a.LastSeen.UTC().Format(time.RFC3339)+")"
			offline = append(offline, a.Name)
		} else {
			online = append(online, a)
		}
		p.Agents = append(p.Agents, pa)
	}
	if len(online) == 0 {
		return record.Plan{}, fmt.Errorf("plan %s: %w: no agent online to ask (offline: %s): start them (tether agent run)",
			env, record.ErrNoAgents, model.Clip(strings.Join(offline, ", "), 1024))
	}
	sub := r.feed.Subscribe()
	defer sub.Close()
	sent := map[string]bool{}
	for _, a := range online {
		pa := planAgent(&p, a.Name)
		err := r.fanout.SendPlan(ctx, env, a, n, p.ID, req.Timeout)
		switch {
		case err == nil:
			sent[a.Name] = true
			pa.Outcome = record.PlanNoAnswer
		case errors.Is(err, bus.ErrNoInbox), errors.Is(err, bus.ErrInboxFull):
			pa.Outcome, pa.Note = record.PlanUnreached, "cannot be reached now (never connected, or its inbox is full)"
		case errors.Is(err, record.ErrNoKeyAgreement):
			pa.Outcome, pa.Note = record.PlanRefused, err.Error()
		case ctx.Err() != nil:
			return record.Plan{}, ctx.Err()
		default:
			r.log.Warn().Err(err).Str("env", env).Str("agent", a.Name).Str("plan", p.ID).Msg("plan not sent")
			pa.Outcome, pa.Note = record.PlanFailed, "not sent: "+err.Error()
		}
	}
	if err := r.gatherPlan(ctx, sub, &p, sent, req.Timeout); err != nil {
		return record.Plan{}, err
	}
	if len(sent) > 0 {
		r.planFromLog(ctx, &p, sent)
	}
	for i := range p.Agents {
		if o := p.Agents[i].Outcome; o == record.PlanNoAnswer || o == record.PlanOffline || o == record.PlanUnreached {
			p.NotAnswered = append(p.NotAnswered, p.Agents[i].Name)
		}
	}
	return p, nil
}

// planTargets returns the accepted agents of env, or those named (each
// must be accepted).
func (r *Releaser) planTargets(ctx context.Context, env string, names []string) ([]record.Agent, error) {
	var out []record.Agent
	if len(names) == 0 {
		all, err := r.store.ListAgents(ctx, env)
		if err != nil {
			return nil, err
		}
		for _, a := range all {
			if a.State == record.AgentAccepted {
				out = append(out, a)
			}
		}
	}
	for _, name := range names {
		a, err := r.store.GetAgent(ctx, env, name)
		if err != nil {
			return nil, fmt.Errorf("agent %s: %w", name, err)
		}
		if a.State != record.AgentAccepted {
			return nil, fmt.Errorf("plan %s: agent %s is %s, not accepted: %w", env, name, a.State, record.ErrNoAgents)
		}
		if !slices.ContainsFunc(out, func(b record.Agent) bool { return b.Name == a.Name }) {
			out = append(out, a)
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("plan %s: %w: start an agent (tether agent run) and accept it", env, record.ErrNoAgents)
	}
	slices.SortFunc(out, func(a, b record.Agent) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

func planAgent(p *record.Plan, name string) *record.PlanAgent {
	for i := range p.Agents {
		if p.Agents[i].Name == name {
			return &p.Agents[i]
		}
	}
	return nil
}

// gatherPlan reads the live feed until every agent sent the plan finished
// its answer, or timeout passes.
func (r *Releaser) gatherPlan(ctx context.Context, sub *event.Subscription, p *record.Plan, sent map[string]bool, timeout time.Duration) error {
	wctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	results := map[string][]model.Result{}
	waiting := len(sent)
	for waiting > 0 {
		ev, err := sub.Next(wctx)
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			break // timeout: the others are named
		}
		if ev.Env != p.Env || ev.DeployID != p.ID || !sent[ev.Agent] {
			continue
		}
		pa := planAgent(p, ev.Agent)
		switch ev.Kind {
		case event.Result:
			if ev.Result != nil {
				results[ev.Agent] = append(results[ev.Agent], *ev.Result)
			}
		case event.DeployDone:
			if pa.Outcome != record.PlanNoAnswer {
				continue // a redelivered end
			}
			waiting--
			switch {
			case ev.Generation != p.Version:
				pa.Outcome = record.PlanTooOld
				pa.Note = fmt.Sprintf("answered with a dry run of version %d, which it holds, not of version %d: this agent is older than plans; upgrade it", ev.Generation, p.Version)
				continue
			case ev.Error != "":
				pa.Outcome, pa.Note = record.PlanFailed, ev.Error
			default:
				pa.Outcome = record.PlanAnswered
			}
			addPlanResults(pa, results[ev.Agent])
		}
	}
	return nil
}

// addPlanResults adds an agent's results to its part of the plan.
func addPlanResults(pa *record.PlanAgent, results []model.Result) {
	for _, r := range results {
		would := model.DryRunOutcome(r.State, r.Changes)
		if would == model.Unchanged && r.Message == "" {
			pa.Unchanged++
			continue
		}
		pa.Resources = append(pa.Resources, record.PlanResource{ID: r.ID, Would: would, State: r.State, Changes: r.Changes, Message: r.Message})
	}
	slices.SortFunc(pa.Resources, func(a, b record.PlanResource) int { return a.ID.Compare(b.ID) })
}

// planFromLog fills in, from the action log, the agents whose answers
// another replica ingested (see Plan).
func (r *Releaser) planFromLog(ctx context.Context, p *record.Plan, sent map[string]bool) {
	missing := false
	for i := range p.Agents {
		missing = missing || sent[p.Agents[i].Name] && p.Agents[i].Outcome == record.PlanNoAnswer
	}
	if !missing {
		return
	}
	acts, err := r.store.DeployActions(ctx, p.Env, p.ID, 10000)
	if err != nil {
		r.log.Warn().Err(err).Str("env", p.Env).Str("plan", p.ID).Msg("cannot read the plan's answers from the action log")
		return
	}
	byAgent := map[string][]model.Result{}
	for _, a := range acts {
		if a.Version == p.Version {
			byAgent[a.ID.Agent] = append(byAgent[a.ID.Agent], model.Result{ID: a.ID, State: a.State, Changes: a.Changes, Message: a.Message, DryRun: true})
		}
	}
	for i := range p.Agents {
		pa := &p.Agents[i]
		if rs := byAgent[pa.Name]; len(rs) > 0 && pa.Outcome == record.PlanNoAnswer && len(pa.Resources) == 0 {
			addPlanResults(pa, rs)
			pa.Note = "partial: these changes were recorded by another server replica; its answer did not end in time here"
		}
	}
}
