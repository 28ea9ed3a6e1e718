package server

import (
	"context"

	"github.com/tetherhq/tether/server/record"
)

// Releasing versions, their fan-outs, staged rollouts, plans and release
// previews live in package release; the server's exported methods, which
// the API, the command line and the embedded mode call, hand them over.

// Release makes version n of env the active one and records a release of
// it, whose fan-out to agents runs in the background (see
// release.Releaser.Release): it answers at once. An older version is
// released again as a rollback, through a copy numbered after the newest.
func (s *Server) Release(ctx context.Context, env string, n int64) (record.Released, error) {
	return s.releases.Release(ctx, env, n)
}

// WaitRelease waits until release id of env is no longer running, and
// returns it as it ended.
func (s *Server) WaitRelease(ctx context.Context, env, id string) (record.Release, error) {
	return s.releases.Wait(ctx, env, id)
}

// GetRelease returns one release of env.
func (s *Server) GetRelease(ctx context.Context, env, id string) (record.Release, error) {
	return s.store.GetRelease(ctx, env, id)
}

// ListReleases returns env's newest releases.
func (s *Server) ListReleases(ctx context.Context, env string, limit int) ([]record.Release, error) {
	return s.store.ListReleases(ctx, env, limit)
}

// ContinueRelease tells the staged rollout id of env to go on: to its
// next wave, or past a halt.
func (s *Server) ContinueRelease(ctx context.Context, env, id string) (record.Release, error) {
	return s.releases.Continue(ctx, env, id)
}

// AbortRelease ends the staged rollout id of env: no further wave is
// sent; the agents not reached keep their version until the next release.
func (s *Server) AbortRelease(ctx context.Context, env, id string) (record.Release, error) {
	return s.releases.Abort(ctx, env, id)
}

// Plan dry-runs version n of env on its live agents and gathers their
// answers (see release.Releaser.Plan): nothing is released.
func (s *Server) Plan(ctx context.Context, env string, n int64, req record.PlanRequest) (record.Plan, error) {
	return s.releases.Plan(ctx, env, n, req)
}

// ReleasePreview says what releasing version n of env would take away
// from its accepted agents (see release.Releaser.Preview). Nothing is
// released.
func (s *Server) ReleasePreview(ctx context.Context, env string, n int64) (record.ReleasePreview, error) {
	return s.releases.Preview(ctx, env, n)
}
