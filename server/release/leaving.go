package release

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/tetherhq/tether/model"
	"github.com/tetherhq/tether/server/record"
	"github.com/tetherhq/tether/server/store"
)

// Preview says what releasing version n of env would take away
// from its accepted agents, as things stand: for each agent, the
// resources of the version it holds that n does not have, and whether it
// would leave the model. Nothing is released. An agent holds the version
// it last took (its generation), whatever the released version is: after
// a staged rollout stopped half way, or one still under way, agents hold
// different versions, and each is compared with n from its own.
func (r *Releaser) Preview(ctx context.Context, env string, n int64) (record.ReleasePreview, error) {
	e, err := r.store.GetEnv(ctx, env)
	if err != nil {
		return record.ReleasePreview{}, err
	}
	v, err := r.store.GetVersion(ctx, env, n, false)
	if err != nil {
		return record.ReleasePreview{}, fmt.Errorf("preview the release of version %d of %s: %w", n, env, err)
	}
	p := record.ReleasePreview{Env: env, Version: n, Leaving: []record.Leaving{}, Staged: e.Settings.Release.Staged()}
	switch rel, err := r.store.ReleasedVersion(ctx, env); {
	case err == nil:
		p.Released = rel.Number
	case !errors.Is(err, model.ErrNotFound):
		return record.ReleasePreview{}, err
	}
	switch v.State {
	case model.VersionReleased:
		p.AlreadyReleased = true
		return p, nil
	case model.VersionRetired:
		p.Rollback = true
	default:
		p.Rollback = p.Released > n
	}
	all, err := r.store.ListAgents(ctx, env)
	if err != nil {
		return record.ReleasePreview{}, err
	}
	var accepted []record.Agent
	for _, a := range all {
		if a.State == record.AgentAccepted {
			accepted = append(accepted, a)
		}
	}
	if p.Leaving, err = r.leaving(ctx, env, n, p.Released, accepted); err != nil {
		return record.ReleasePreview{}, err
	}
	for _, l := range p.Leaving {
		p.Agents++
		p.Resources += l.Count()
		if l.LeavesModel {
			p.LeaveModel++
		}
	}
	p.Note = purgeNote(e.Settings, len(p.Leaving) > 0)
	return p, nil
}

// purgeNote says, when purge_on_delete is on and something leaves, that
// it is not removed all the same.
func purgeNote(st record.EnvSettings, leaving bool) string {
	if !st.PurgeOnDelete || !leaving {
		return ""
	}
	return "purge_on_delete is on, but agents do not remove from their hosts what leaves the model: what is taken away is left as it is (orphaned)"
}

// leaving returns what a release of version n of env takes away from each
// of agents (released: the version released now, 0 if none), sorted by
// agent name, agents that lose nothing left out: the resources of the
// version the agent holds that n does not have, by ID. At most
// record.MaxLeavingListed resources are listed over all agents.
//
// Hashes are compared, without reading bodies; the bodies of the
// resources that leave are read for their purged flag.
func (r *Releaser) leaving(ctx context.Context, env string, n, released int64, agents []record.Agent) ([]record.Leaving, error) {
	kept := map[int64]bool{n: true}
	holds := func(gen int64) (int64, error) {
		if gen == 0 {
			return 0, nil // it never took a version: it holds nothing
		}
		ok, seen := kept[gen]
		if !seen {
			_, err := r.store.GetVersion(ctx, env, gen, false)
			switch {
			case err == nil:
				ok = true
			case !errors.Is(err, model.ErrNotFound):
				return 0, err
			}
			kept[gen] = ok
		}
		if !ok {
			return released, nil // pruned: the best guess is what it was sent last
		}
		return gen, nil
	}
	byHeld := map[int64][]string{}
	for _, a := range agents {
		h, err := holds(a.Generation)
		if err != nil {
			return nil, err
		}
		if h != 0 && h != n {
			byHeld[h] = append(byHeld[h], a.Name)
		}
	}
	type loss struct {
		from        int64
		ids         []model.ID
		purged      map[model.ID]bool
		leavesModel bool
	}
	losses := map[string]*loss{}
	for h, names := range byHeld {
		var gone []model.ID
		for len(names) > 0 {
			page := names[:min(len(names), store.MaxSlicesAtOnce)]
			names = names[len(page):]
			had, err := r.store.SliceHashes(ctx, env, h, page)
			if err != nil {
				return nil, err
			}
			will, err := r.store.SliceHashes(ctx, env, n, page)
			if err != nil {
				return nil, err
			}
			for i, name := range page {
				stays := make(map[model.ID]bool, len(will[i]))
				for _, res := range will[i] {
					stays[res.ID] = true
				}
				var ids []model.ID
				for _, res := range had[i] {
					if !stays[res.ID] {
						ids = append(ids, res.ID)
					}
				}
				if len(ids) > 0 {
					losses[name] = &loss{from: h, ids: ids, leavesModel: len(will[i]) == 0}
					gone = append(gone, ids...)
				}
			}
		}
		purged := map[model.ID]bool{}
		for len(gone) > 0 {
			chunk := gone[:min(len(gone), store.MaxSlicesAtOnce)]
			gone = gone[len(chunk):]
			rs, err := r.store.ResourcesByID(ctx, env, h, chunk)
			if err != nil {
				return nil, err
			}
			for _, res := range rs {
				if res.Purged {
					purged[res.ID] = true
				}
			}
		}
		for _, l := range losses {
			if l.from == h {
				l.purged = purged
			}
		}
	}
	names := make([]string, 0, len(losses))
	for name := range losses {
		names = append(names, name)
	}
	slices.Sort(names)
	out := make([]record.Leaving, 0, len(names))
	listed := 0
	for _, name := range names {
		l := losses[name]
		slices.SortFunc(l.ids, model.ID.Compare)
		lv := record.Leaving{Agent: name, From: l.from, LeavesModel: l.leavesModel, Resources: []record.LeavingResource{}}
		for _, id := range l.ids {
			fate := record.FateOrphaned
			if l.purged[id] {
				fate = record.FateAbsent
				lv.Absent++
			} else {
				lv.Orphaned++
			}
			if listed < record.MaxLeavingListed {
				lv.Resources = append(lv.Resources, record.LeavingResource{ID: id, Fate: fate})
				listed++
			}
		}
		out = append(out, lv)
	}
	return out, nil
}
