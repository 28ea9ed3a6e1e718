package api

import (
	"fmt"
	"net/http"
	"strconv"

	"github.com/tetherhq/tether/model"
	"github.com/tetherhq/tether/server/record"
)

// ExportRequest uploads a compiled resource set.
type ExportRequest struct {
	Resources []model.Resource  `json:"resources"`
	Meta      model.VersionMeta `json:"meta,omitzero"`
}

// ExportResponse says what became of an upload.
type ExportResponse struct {
	Version model.Version `json:"version"`
	// Reused: the newest version already held exactly this resource set.
	Reused   bool `json:"reused"`
	Released bool `json:"released"`
	// ReleaseID names the release when this upload released the version
	// (202): its fan-out to agents runs in the background; Release is
	// how it stood when answered.
	ReleaseID string          `json:"release_id,omitempty"`
	Release   *record.Release `json:"release,omitempty"`
}

// versionRoutes are the routes of versions: their upload (upload.go),
// reading, comparing (diff.go) and releasing.
func (a *API) versionRoutes() []route {
	return []route{
		{method: "GET", path: "/envs/:env/versions", role: record.RoleViewer, summary: "List versions, newest first", out: of[[]model.Version](), serve: a.listVersions},
		{method: "POST", path: "/envs/:env/versions", role: record.RoleOperator, action: "version.export", summary: "Upload a compiled resource set as a new version (200 when the newest version held it already; release=true releases it too: 202 with the release's id, its fan-out in the background)",
			query: []param{{name: "release", typ: of[bool](), desc: "release the version too"}}, in: of[ExportRequest](), out: of[ExportResponse](), ok: []int{http.StatusOK, http.StatusCreated, http.StatusAccepted}, upload: true, serve: a.putVersion},
		{method: "GET", path: "/envs/:env/versions/:n", role: record.RoleViewer, summary: "Show a version (with its resources, sensitive values redacted, if resources=true)", query: []param{{name: "resources", typ: of[bool](), desc: "list its resources too"}}, out: of[model.Version](), serve: a.getVersion},
		{method: "GET", path: "/envs/:env/versions/:n/diff", role: record.RoleViewer, summary: "What changed from version `from` (default: the released one, or n-1) to n", query: []param{{name: "from", typ: of[int64](), desc: "the version to compare with (0: the empty set)"}}, out: of[Diff](), serve: a.diffVersions},
		{method: "POST", path: "/envs/:env/versions/:n/release", role: record.RoleOperator, action: "version.release", summary: "Release a version: answers at once (202) with the release's id; its fan-out to agents runs in the background (GET /envs/{env}/releases/{id}). The released version answers 200 with already_released", out: of[record.Released](), ok: []int{http.StatusOK, http.StatusAccepted}, serve: a.release},
	}
}

func (a *API) listVersions(r *request) (int, any, error) {
	return envListing(r, a.svc.Versions, Versions.ListVersions)
}

func (a *API) putVersion(r *request) (int, any, error) {
	in := r.input()
	env, release := in.env(), in.boolean("release")
	if in.err != nil {
		return 0, nil, in.err
	}
	done, err := a.uploadSlot(r)
	if err != nil {
		return 0, nil, err
	}
	defer done()
	a.uploadDeadlines(r)
	var held int64
	defer a.uploadMemory.give(&held)
	up := a.svc.Exporter.Upload(env)
	meta, sawResources, err := a.decodeExport(r, up, &held)
	if err != nil {
		return 0, nil, err
	}
	if !sawResources {
		return 0, nil, newError("invalid", "compile the model with tether compile -o json", "no \"resources\" in the upload")
	}
	meta.ExportedBy = r.token.Name
	meta.RollbackOf = 0 // the server's own to set
	if err := meta.Validate(); err != nil {
		return 0, nil, err
	}
	v, reused, err := up.Store(r.ctx(), meta)
	if err != nil {
		return 0, nil, err
	}
	a.uploadMemory.give(&held) // what follows does not hold the resources
	out := ExportResponse{Version: v, Reused: reused}
	r.naming("env", env, "n", strconv.FormatInt(v.Number, 10))
	status := http.StatusCreated
	if reused {
		status = http.StatusOK
	}
	if release && v.State != model.VersionReleased {
		rel, err := a.svc.Exporter.Release(r.ctx(), env, v.Number)
		if err != nil {
			return 0, nil, a.releaseError(r, env, v.Number, err)
		}
		out.Version, out.ReleaseID, out.Release = rel.Version, rel.ReleaseID, rel.Release
		status = http.StatusAccepted
	}
	out.Released = out.Version.State == model.VersionReleased
	r.detail = fmt.Sprintf("%d resources, reused %v, released %v", v.Count, reused, out.Released)
	if out.ReleaseID != "" {
		r.detail += ", release " + out.ReleaseID
	}
	return status, out, nil
}

func (a *API) getVersion(r *request) (int, any, error) {
	in := r.input()
	env, n, with := in.env(), in.version(), in.boolean("resources")
	return answer(in, func() (model.Version, error) {
		v, err := a.svc.Versions.GetVersion(r.ctx(), env, n, with)
		for i := range v.Resources {
			v.Resources[i] = redacted(v.Resources[i])
		}
		return v, err
	})
}

// redacted returns a copy of res with its sensitive values, in clear or
// sealed, replaced by the redaction marker: the API never returns a
// sensitive value, nor its ciphertext.
func redacted(res model.Resource) model.Resource { return res.Redact() }

// release releases version n: a version older than the released one is
// released again as a copy numbered after the newest (a rollback; the
// copy's meta.rollback_of names n). Releasing the released version changes
// nothing: 200 with already_released, no release started.
func (a *API) release(r *request) (int, any, error) {
	in := r.input()
	env, n := in.existingEnv(), in.version()
	if in.err != nil {
		return 0, nil, in.err
	}
	v, err := a.svc.Versions.GetVersion(r.ctx(), env, n, false)
	switch {
	case isNotFound(err):
		return 0, nil, a.missingVersion(r, env, n)
	case err != nil:
		return 0, nil, err
	case v.State == model.VersionReleased:
		r.detail = "already released"
		return http.StatusOK, record.Released{Version: v, AlreadyReleased: true}, nil
	}
	rel, err := a.svc.Exporter.Release(r.ctx(), env, n)
	if err != nil {
		return 0, nil, a.releaseError(r, env, n, err)
	}
	if rel.ReleaseID != "" {
		r.detail = "release " + rel.ReleaseID
	}
	return http.StatusAccepted, rel, nil
}

// releaseError explains a release that was refused.
func (a *API) releaseError(r *request, env string, n int64, err error) error {
	if isNotFound(err) {
		return a.missingVersion(r, env, n)
	}
	return err
}

// versionThere checks that version n of env is there, explaining one
// that is not (missingVersion).
func (a *API) versionThere(r *request, env string, n int64) error {
	_, err := a.svc.Versions.GetVersion(r.ctx(), env, n, false)
	return a.releaseError(r, env, n, err)
}

// missingVersion explains a version that is not there: pruned (older than
// the newest kept), or never made.
func (a *API) missingVersion(r *request, env string, n int64) error {
	vs, err := a.svc.Versions.ListVersions(r.ctx(), env)
	if err != nil {
		return err
	}
	if len(vs) == 0 || n > vs[0].Number {
		return newError("not_found", "tether version list shows the versions there are", "no version %d in %s", n, env)
	}
	keep := "every version"
	if e, err := a.svc.Envs.GetEnv(r.ctx(), env); err == nil && e.Settings.VersionsToKeep > 0 {
		keep = fmt.Sprintf("its newest %d versions", e.Settings.VersionsToKeep)
	}
	return newError("not_found", "tether version list shows the versions kept; to go back further, export that model again; "+
		"tether env settings set versions_to_keep N keeps more from now on",
		"version %d of %s was pruned: the environment keeps %s (versions_to_keep), and the oldest kept is %d", n, env, keep, vs[len(vs)-1].Number)
}
