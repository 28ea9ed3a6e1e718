package api

import (
	"context"
	"errors"

	"github.com/tetherhq/tether/server/record"
)

// releaseRoutes are the routes of releases: how far each fan-out to
// agents got, and the verbs of a staged rollout.
func (a *API) releaseRoutes() []route {
	return []route{
		{method: "GET", path: "/envs/:env/releases", role: record.RoleViewer, summary: "The environment's releases, newest first, with how far each fan-out to agents got", query: []param{pLimit}, out: of[[]record.Release](), serve: a.listReleases},
		{method: "GET", path: "/envs/:env/releases/:id", role: record.RoleViewer, summary: "One release: its version, state (running, done, failed), agents to reach, sent, up to date, and those pending with why and what brings them the version", out: of[record.Release](), serve: a.getRelease},
		{method: "POST", path: "/envs/:env/releases/:id/continue", role: record.RoleOperator, action: "release.continue", summary: "Continue a staged rollout: send its next wave now (whatever the current wave's agents reported), or go on past a halt (the failures so far are accepted)", out: of[record.Release](), serve: a.rolloutVerb("continue")},
		{method: "POST", path: "/envs/:env/releases/:id/abort", role: record.RoleOperator, action: "release.abort", summary: "Abort a staged rollout: no further wave is sent; agents not reached keep the version they had until the next release", out: of[record.Release](), serve: a.rolloutVerb("abort")},
	}
}

func (a *API) listReleases(r *request) (int, any, error) {
	return limitedListing(r, a.svc.Releases, Releases.ListReleases)
}

func (a *API) getRelease(r *request) (int, any, error) {
	return envItem(r, "release", a.svc.Releases, Releases.GetRelease)
}

// rolloutVerb continues or aborts a running staged rollout. A release that
// is not staged, or has ended, is refused (409 not_staged,
// release_finished) and nothing changes.
func (a *API) rolloutVerb(verb string) func(r *request) (int, any, error) {
	act := Releases.ContinueRelease
	if verb == "abort" {
		act = Releases.AbortRelease
	}
	return func(r *request) (int, any, error) {
		return envItem(r, "release", a.svc.Releases, func(rs Releases, ctx context.Context, env, id string) (record.Release, error) {
			rel, err := act(rs, ctx, env, id)
			switch {
			case isNotFound(err):
				return rel, newError("not_found", "list the releases: tether version releases", "no release %q in %s", clip(id), env)
			case errors.Is(err, record.ErrNotStaged):
				return rel, newError("not_staged", "only a release made in waves (release_strategy = waves) can be continued or aborted",
					"release %s of %s went to every agent at once: nothing to %s, nothing changed", clip(id), env, verb)
			case errors.Is(err, record.ErrReleaseFinished):
				stage := "done"
				if cur, gerr := rs.GetRelease(ctx, env, id); gerr == nil && cur.Rollout != nil {
					stage = string(cur.Rollout.Stage)
				}
				return rel, newError("release_finished", "tether release status shows how it ended; release a version again to change what agents hold",
					"release %s of %s has ended (%s): nothing to %s, nothing changed", clip(id), env, stage, verb)
			case err != nil:
				return rel, err
			}
			r.detail = verb + " release " + rel.ID
			return rel, nil
		})
	}
}
