package api

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/tetherhq/tether/model"
	"github.com/tetherhq/tether/server/record"
)

func (r *request) ctx() context.Context { return r.Request().Context() }

// envName returns the :env parameter, checked.
func (r *request) envName() (string, error) {
	env := r.Param("env")
	if err := model.ValidateEnvName(clip(env)); err != nil {
		return "", newError("bad_request", "", "%v", err)
	}
	return env, nil
}

// agentName returns the :name parameter, checked.
func (r *request) agentName() (string, error) {
	name := r.Param("name")
	if err := validAgentName(name); err != nil {
		return "", newError("bad_request", "", "%v", err)
	}
	return name, nil
}

// validAgentName checks an agent name a client sent; the error repeats
// at most the start of a long one.
func validAgentName(name string) error { return model.ValidateAgentName(model.Clip(name, 254)) }

// uuidParam returns the parameter name, which must be a UUID (what
// identifies tokens and deploys).
func (r *request) uuidParam(name, what string) (string, error) {
	id := r.Param(name)
	if _, err := uuid.Parse(id); err != nil {
		return "", newError("bad_request", "", "%s ID %q: want a UUID", what, clip(id))
	}
	return id, nil
}

// filters checks the agent and type filters of a listing.
func (r *request) filters() (agent, typ string, err error) {
	agent, typ = r.QueryParam("agent"), r.QueryParam("type")
	if agent != "" {
		if err := validAgentName(agent); err != nil {
			return "", "", newError("bad_request", "", "agent=: %v", err)
		}
	}
	if typ != "" {
		if err := model.ValidateType(model.Clip(typ, 65)); err != nil {
			return "", "", newError("bad_request", "", "type=: %v", err)
		}
	}
	return agent, typ, nil
}

// existingEnv is envName for listings: an environment that does not exist
// is not_found, not an empty list.
func (a *API) existingEnv(r *request) (string, error) {
	env, err := r.envName()
	if err != nil {
		return "", err
	}
	if _, err := a.svc.Envs.GetEnv(r.ctx(), env); err != nil {
		return "", err
	}
	return env, nil
}

// number parses the :name parameter as a version number.
func (r *request) number(name string) (int64, error) {
	n, err := strconv.ParseInt(r.Param(name), 10, 64)
	if err != nil || n <= 0 {
		return 0, newError("bad_request", "", "version %q: want a positive number", clip(r.Param(name)))
	}
	return n, nil
}

// envResource parses the :env and :id parameters.
func (r *request) envResource() (string, model.ID, error) {
	env, err := r.envName()
	if err != nil {
		return "", model.ID{}, err
	}
	id, err := r.resourceID()
	return env, id, err
}

// resourceID parses the :id parameter, URL-escaped by the client.
func (r *request) resourceID() (model.ID, error) {
	raw, err := url.PathUnescape(r.Param("id"))
	if err != nil {
		return model.ID{}, newError("bad_request", "URL-escape the ID", "resource ID %q: %v", clip(r.Param("id")), err)
	}
	if len(raw) > maxIDLen {
		return model.ID{}, newError("bad_request", "", "resource ID of %d bytes: at most %d", len(raw), maxIDLen)
	}
	id, err := model.ParseID(raw)
	if err != nil {
		return model.ID{}, newError("bad_request", "IDs look like file[web-1,path=/etc/motd], URL-escaped", "resource ID %q: %s", clip(raw), clip(err.Error()))
	}
	return id, nil
}

// maxIDLen bounds a printed resource ID: model's limits on its parts, and
// its punctuation.
const maxIDLen = 64 + 253 + 64 + 4096 + 4

func (r *request) limit() (int, error) {
	s := r.QueryParam("limit")
	if s == "" {
		return 100, nil
	}
	n, err := strconv.Atoi(s)
	if err != nil || n <= 0 || n > 10000 {
		return 0, newError("bad_request", "", "limit %q: want 1 to 10000", clip(s))
	}
	return n, nil
}

// --- environments

// EnvRequest creates an environment.
type EnvRequest struct {
	Name     string            `json:"name"`
	Settings map[string]string `json:"settings,omitempty"`
}

func (a *API) listEnvs(r *request) (int, any, error) {
	envs, err := a.svc.Envs.ListEnvs(r.ctx())
	if err != nil {
		return 0, nil, err
	}
	out := []record.Environment{}
	for _, e := range envs {
		if sees(r.who, e) {
			out = append(out, e)
		}
	}
	return http.StatusOK, out, nil
}

func (a *API) createEnv(r *request) (int, any, error) {
	var req EnvRequest
	if err := a.decode(r, &req); err != nil {
		return 0, nil, err
	}
	if err := model.ValidateEnvName(clip(req.Name)); err != nil {
		return 0, nil, newError("invalid", "", "%v", err)
	}
	env := record.Environment{Name: req.Name, Org: r.who.Org, Settings: record.DefaultEnvSettings(), CreatedAt: a.now().UTC()}
	if err := setAll(&env.Settings, req.Settings); err != nil {
		return 0, nil, err
	}
	// The environment is the target from here on: in the audit log, and
	// in errors (exists: environment prod).
	r.SetParamNames("env")
	r.SetParamValues(req.Name)
	if err := a.svc.Envs.CreateEnv(r.ctx(), env); err != nil {
		if errors.Is(err, model.ErrExists) {
			return 0, nil, newError("env_exists", fmt.Sprintf("choose another name; tether env show %s shows the one there is", clip(req.Name)),
				"environment %s already exists", clip(req.Name))
		}
		return 0, nil, err
	}
	got, err := a.svc.Envs.GetEnv(r.ctx(), req.Name)
	return http.StatusCreated, got, err
}

// setAll applies settings in a stable order; none is applied on error.
func setAll(s *record.EnvSettings, kv map[string]string) error {
	next := *s
	keys := make([]string, 0, len(kv))
	for k, v := range kv {
		if len(k) > model.MaxSettingLen || len(v) > model.MaxSettingLen {
			return newError("invalid", "settings: "+strings.Join(record.SettingKeys(), ", "), "setting %q: keys and values have at most %d bytes", clip(k), model.MaxSettingLen)
		}
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		if err := next.Set(k, kv[k]); err != nil {
			return newError("invalid", "settings: "+strings.Join(record.SettingKeys(), ", "), "%v", err)
		}
	}
	*s = next
	return nil
}

func (a *API) getEnv(r *request) (int, any, error) {
	env, err := r.envName()
	if err != nil {
		return 0, nil, err
	}
	got, err := a.svc.Envs.GetEnv(r.ctx(), env)
	return http.StatusOK, got, err
}

func (a *API) deleteEnv(r *request) (int, any, error) {
	env, err := r.envName()
	if err != nil {
		return 0, nil, err
	}
	return http.StatusNoContent, nil, a.svc.Envs.DeleteEnv(r.ctx(), env)
}

// settingsView is settings as operators write them, key → value.
func settingsView(s record.EnvSettings) map[string]string {
	out := map[string]string{}
	for _, k := range record.SettingKeys() {
		out[k], _ = s.Get(k)
	}
	return out
}

func (a *API) getSettings(r *request) (int, any, error) {
	env, err := r.envName()
	if err != nil {
		return 0, nil, err
	}
	got, err := a.svc.Envs.GetEnv(r.ctx(), env)
	if err != nil {
		return 0, nil, err
	}
	return http.StatusOK, settingsView(got.Settings), nil
}

func (a *API) patchSettings(r *request) (int, any, error) {
	env, err := r.envName()
	if err != nil {
		return 0, nil, err
	}
	var kv map[string]string
	if err := a.decode(r, &kv); err != nil {
		return 0, nil, err
	}
	if len(kv) == 0 {
		return 0, nil, newError("bad_request", "send {\"key\": \"value\"}", "no setting to change")
	}
	got, err := a.svc.Settings.UpdateEnvSettings(r.ctx(), env, func(s *record.EnvSettings) error { return setAll(s, kv) })
	if err != nil {
		return 0, nil, err
	}
	r.detail = fmt.Sprint(kv)
	return http.StatusOK, settingsView(got.Settings), nil
}

func (a *API) halt(halted bool) func(*request) (int, any, error) {
	return func(r *request) (int, any, error) {
		env, err := r.envName()
		if err != nil {
			return 0, nil, err
		}
		got, err := a.svc.Settings.UpdateEnvSettings(r.ctx(), env, func(s *record.EnvSettings) error {
			s.Halted = halted
			return nil
		})
		return http.StatusOK, got, err
	}
}

// --- versions

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

func (a *API) listVersions(r *request) (int, any, error) {
	env, err := a.existingEnv(r)
	if err != nil {
		return 0, nil, err
	}
	vs, err := a.svc.Versions.ListVersions(r.ctx(), env)
	return http.StatusOK, nonNil(vs), err
}

func (a *API) putVersion(r *request) (int, any, error) {
	env, err := r.envName()
	if err != nil {
		return 0, nil, err
	}
	release, err := boolQuery(r, "release")
	if err != nil {
		return 0, nil, err
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
	r.SetParamNames("env", "n")
	r.SetParamValues(env, strconv.FormatInt(v.Number, 10))
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

func boolQuery(r *request, name string) (bool, error) {
	s := r.QueryParam(name)
	if s == "" {
		return false, nil
	}
	b, err := strconv.ParseBool(s)
	if err != nil {
		return false, newError("bad_request", "", "%s=%q: want true or false", name, s)
	}
	return b, nil
}

func (a *API) getVersion(r *request) (int, any, error) {
	env, err := r.envName()
	if err != nil {
		return 0, nil, err
	}
	n, err := r.number("n")
	if err != nil {
		return 0, nil, err
	}
	with, err := boolQuery(r, "resources")
	if err != nil {
		return 0, nil, err
	}
	v, err := a.svc.Versions.GetVersion(r.ctx(), env, n, with)
	if err != nil {
		return 0, nil, err
	}
	for i := range v.Resources {
		v.Resources[i] = redacted(v.Resources[i])
	}
	return http.StatusOK, v, nil
}

// redacted returns a copy of res with its sensitive values, in clear or
// sealed, replaced by the redaction marker: the API never returns a
// sensitive value, nor its ciphertext.
func redacted(res model.Resource) model.Resource { return res.Redact() }

// Diff is what changed between two versions.
type Diff struct {
	From      int64      `json:"from"`
	To        int64      `json:"to"`
	Added     []model.ID `json:"added"`
	Removed   []model.ID `json:"removed"`
	Changed   []model.ID `json:"changed"`
	Unchanged int        `json:"unchanged"`
	// Resources are the added, removed and changed resources with their
	// attribute changes (sensitive values redacted), in ID order; at
	// most MaxDiffDetails of them, Truncated set when there were more.
	Resources []ResourceDiff `json:"resources"`
	Truncated bool           `json:"truncated,omitempty"`
}

func (a *API) diffVersions(r *request) (int, any, error) {
	env, err := r.envName()
	if err != nil {
		return 0, nil, err
	}
	to, err := r.number("n")
	if err != nil {
		return 0, nil, err
	}
	var from int64
	if s := r.QueryParam("from"); s != "" {
		if from, err = strconv.ParseInt(s, 10, 64); err != nil || from < 0 {
			return 0, nil, newError("bad_request", "", "from=%q: want a version number (0: the empty set)", s)
		}
	} else {
		rel, err := a.svc.Versions.ReleasedVersion(r.ctx(), env)
		switch {
		case err == nil && rel.Number != to:
			from = rel.Number
		case err == nil || isNotFound(err):
			from = to - 1
		default:
			return 0, nil, err
		}
	}
	next, err := a.svc.Versions.ResourceHashes(r.ctx(), env, to)
	if err != nil {
		return 0, nil, err
	}
	var prev []record.ResourceHash
	if from > 0 {
		if prev, err = a.svc.Versions.ResourceHashes(r.ctx(), env, from); err != nil {
			return 0, nil, err
		}
	}
	d := diffHashes(from, to, prev, next)
	if err := a.diffDetails(r, env, &d); err != nil {
		return 0, nil, err
	}
	return http.StatusOK, d, nil
}

// diffDetails reads the bodies of the resources d adds, removes or changes
// and says which of their attributes change.
func (a *API) diffDetails(r *request, env string, d *Diff) error {
	d.Resources = []ResourceDiff{}
	type one struct {
		id     model.ID
		change string
	}
	var all []one
	for _, set := range []struct {
		ids    []model.ID
		change string
	}{{d.Added, DiffAdded}, {d.Removed, DiffRemoved}, {d.Changed, DiffChanged}} {
		for _, id := range set.ids {
			all = append(all, one{id, set.change})
		}
	}
	slices.SortFunc(all, func(x, y one) int { return x.id.Compare(y.id) })
	if len(all) > MaxDiffDetails {
		all, d.Truncated = all[:MaxDiffDetails], true
	}
	for _, o := range all {
		var prev, next *model.Resource
		if o.change != DiffAdded {
			res, err := a.svc.Resources.Resource(r.ctx(), env, d.From, o.id)
			if err != nil {
				return err
			}
			prev = &res
		}
		if o.change != DiffRemoved {
			res, err := a.svc.Resources.Resource(r.ctx(), env, d.To, o.id)
			if err != nil {
				return err
			}
			next = &res
		}
		d.Resources = append(d.Resources, ResourceDiff{ID: o.id, Change: o.change, Attributes: attributeChanges(prev, next)})
	}
	return nil
}

// diffHashes compares two ID-sorted hash lists.
func diffHashes(from, to int64, prev, next []record.ResourceHash) Diff {
	d := Diff{From: from, To: to, Added: []model.ID{}, Removed: []model.ID{}, Changed: []model.ID{}}
	i, j := 0, 0
	for i < len(prev) || j < len(next) {
		var c int
		switch {
		case i == len(prev):
			c = 1
		case j == len(next):
			c = -1
		default:
			c = prev[i].ID.Compare(next[j].ID)
		}
		switch {
		case c < 0:
			d.Removed = append(d.Removed, prev[i].ID)
			i++
		case c > 0:
			d.Added = append(d.Added, next[j].ID)
			j++
		default:
			if prev[i].Hash != next[j].Hash {
				d.Changed = append(d.Changed, next[j].ID)
			} else {
				d.Unchanged++
			}
			i++
			j++
		}
	}
	return d
}

// release releases version n: a version older than the released one is
// released again as a copy numbered after the newest (a rollback; the
// copy's meta.rollback_of names n). Releasing the released version changes
// nothing: 200 with already_released, no release started.
func (a *API) release(r *request) (int, any, error) {
	env, err := a.existingEnv(r)
	if err != nil {
		return 0, nil, err
	}
	n, err := r.number("n")
	if err != nil {
		return 0, nil, err
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

func (a *API) listReleases(r *request) (int, any, error) {
	env, err := a.existingEnv(r)
	if err != nil {
		return 0, nil, err
	}
	limit, err := r.limit()
	if err != nil {
		return 0, nil, err
	}
	if a.svc.Releases == nil {
		return http.StatusOK, []record.Release{}, nil
	}
	rs, err := a.svc.Releases.ListReleases(r.ctx(), env, limit)
	return http.StatusOK, nonNil(rs), err
}

func (a *API) getRelease(r *request) (int, any, error) {
	env, err := a.existingEnv(r)
	if err != nil {
		return 0, nil, err
	}
	id := r.Param("id")
	if a.svc.Releases == nil {
		return 0, nil, newError("not_found", "", "no release %q in %s", clip(id), env)
	}
	rel, err := a.svc.Releases.GetRelease(r.ctx(), env, id)
	return http.StatusOK, rel, err
}

// rolloutVerb continues or aborts a running staged rollout. A release that
// is not staged, or has ended, is refused (409 not_staged,
// release_finished) and nothing changes.
func (a *API) rolloutVerb(verb string) func(r *request) (int, any, error) {
	return func(r *request) (int, any, error) {
		env, err := a.existingEnv(r)
		if err != nil {
			return 0, nil, err
		}
		id := r.Param("id")
		if a.svc.Releases == nil {
			return 0, nil, newError("not_found", "", "no release %q in %s", clip(id), env)
		}
		act := a.svc.Releases.ContinueRelease
		if verb == "abort" {
			act = a.svc.Releases.AbortRelease
		}
		rel, err := act(r.ctx(), env, id)
		switch {
		case isNotFound(err):
			return 0, nil, newError("not_found", "list the releases: tether version releases", "no release %q in %s", clip(id), env)
		case errors.Is(err, record.ErrNotStaged):
			return 0, nil, newError("not_staged", "only a release made in waves (release_strategy = waves) can be continued or aborted",
				"release %s of %s went to every agent at once: nothing to %s, nothing changed", clip(id), env, verb)
		case errors.Is(err, record.ErrReleaseFinished):
			stage := "done"
			if cur, gerr := a.svc.Releases.GetRelease(r.ctx(), env, id); gerr == nil && cur.Rollout != nil {
				stage = string(cur.Rollout.Stage)
			}
			return 0, nil, newError("release_finished", "tether release status shows how it ended; release a version again to change what agents hold",
				"release %s of %s has ended (%s): nothing to %s, nothing changed", clip(id), env, stage, verb)
		case err != nil:
			return 0, nil, err
		}
		r.detail = verb + " release " + rel.ID
		return http.StatusOK, rel, nil
	}
}

// releaseError explains a release that was refused.
func (a *API) releaseError(r *request, env string, n int64, err error) error {
	if isNotFound(err) {
		return a.missingVersion(r, env, n)
	}
	return err
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

// --- resources

// ResourceView is a resource as the API shows it: where it stands and, for
// one resource, what it is (sensitive values redacted).
type ResourceView struct {
	record.ResourceStatus
	Resource *model.Resource `json:"resource,omitempty"`
}

func (a *API) listResources(r *request) (int, any, error) {
	env, err := r.envName()
	if err != nil {
		return 0, nil, err
	}
	agent, typ, err := r.filters()
	if err != nil {
		return 0, nil, err
	}
	f := record.StatusFilter{Agent: agent, Type: typ,
		State: model.ResourceState(r.QueryParam("state")), Compliance: model.Compliance(r.QueryParam("compliance"))}
	if f.State != "" && !f.State.Valid() {
		return 0, nil, newError("bad_request", "", "state=%q: not a resource state", clip(string(f.State)))
	}
	if f.Compliance != "" && !f.Compliance.Valid() {
		return 0, nil, newError("bad_request", "", "compliance=%q: want compliant, non_compliant or unknown", clip(string(f.Compliance)))
	}
	p, err := r.page()
	if err != nil {
		return 0, nil, err
	}
	if _, err := a.svc.Envs.GetEnv(r.ctx(), env); err != nil {
		return 0, nil, err
	}
	// The store finds, counts and cuts the page: a listing of 200,000
	// resources is never read whole for a page of it.
	f.Search, f.Limit, f.Offset = p.q, p.limit, p.offset
	sts, err := a.svc.Resources.Statuses(r.ctx(), env, f)
	if err != nil {
		return 0, nil, err
	}
	total := len(sts)
	if p.limit > 0 && (p.offset > 0 || total == p.limit) {
		// A page that is not all there is: count the rest in the store.
		if total, err = a.svc.Resources.CountStatuses(r.ctx(), env, f, 0); err != nil {
			return 0, nil, err
		}
	}
	r.Response().Header().Set(TotalHeader, strconv.Itoa(total))
	return http.StatusOK, nonNil(sts), nil
}

func (a *API) getResource(r *request) (int, any, error) {
	env, id, err := r.envResource()
	if err != nil {
		return 0, nil, err
	}
	sts, err := a.svc.Resources.Statuses(r.ctx(), env, record.StatusFilter{Agent: id.Agent, Type: id.Type})
	if err != nil {
		return 0, nil, err
	}
	i := slices.IndexFunc(sts, func(s record.ResourceStatus) bool { return s.ID == id })
	if i < 0 {
		return 0, nil, newError("not_found", "tether resource list shows what there is", "no resource %s in environment %s", id, env)
	}
	view := ResourceView{ResourceStatus: sts[i]}
	res, err := a.svc.Resources.Resource(r.ctx(), env, sts[i].Version, id)
	if err == nil {
		res = redacted(res)
		view.Resource = &res
	} else if !isNotFound(err) {
		return 0, nil, err
	}
	return http.StatusOK, view, nil
}

func (a *API) resourceLog(r *request) (int, any, error) {
	env, id, err := r.envResource()
	if err != nil {
		return 0, nil, err
	}
	limit, err := r.limit()
	if err != nil {
		return 0, nil, err
	}
	acts, err := a.svc.Resources.Actions(r.ctx(), env, id, limit)
	return http.StatusOK, nonNil(acts), err
}

func (a *API) resourceHistory(r *request) (int, any, error) {
	env, id, err := r.envResource()
	if err != nil {
		return 0, nil, err
	}
	h, err := a.svc.Resources.ResourceHistory(r.ctx(), env, id)
	return http.StatusOK, nonNil(h), err
}

// --- agents

// AgentView is an agent as the API shows it.
type AgentView struct {
	record.Agent
	Online bool `json:"online"`
	// Halted is set while the agent's environment is halted: the agent
	// changes nothing on its host (no deploy, repair or heal), as if
	// paused, until the environment is resumed.
	Halted bool   `json:"halted"`
	Key    string `json:"key_fingerprint,omitempty"`
	// PreviousKey is the fingerprint of the key before the agent's last
	// key rollover, while it still holds.
	PreviousKey string `json:"previous_key_fingerprint,omitempty"`
}

func (a *API) view(r *request, ag record.Agent) AgentView {
	return a.viewIn(ag, a.halted(r, ag.Env))
}

// halted reports whether env is halted (false when it cannot be read: the
// agent is then shown as its own record says).
func (a *API) halted(r *request, env string) bool {
	e, err := a.svc.Envs.GetEnv(r.ctx(), env)
	return err == nil && e.Settings.Halted
}

// online reports whether an agent is online: connected and heard from
// within OfflineAfter.
func (a *API) online(ag record.Agent) bool {
	return ag.Connected && ag.LastSeen.After(a.onlineSince())
}

// onlineSince is when a connected agent was last heard from at the
// earliest to be online now.
func (a *API) onlineSince() time.Time {
	return a.now().Add(-a.cfg.OfflineAfter)
}

func (a *API) viewIn(ag record.Agent, halted bool) AgentView {
	v := AgentView{Agent: ag, Online: a.online(ag), Halted: halted}
	if len(ag.PublicKey) > 0 {
		v.Key = model.Fingerprint(ag.PublicKey)
	}
	if ag.PreviousHolds(ag.PreviousKey, a.now()) {
		v.PreviousKey = model.Fingerprint(ag.PreviousKey)
	}
	return v
}

func (a *API) listAgents(r *request) (int, any, error) {
	p, err := r.page()
	if err != nil {
		return 0, nil, err
	}
	f, err := a.agentFilter(r, p)
	if err != nil {
		return 0, nil, err
	}
	env, err := a.existingEnv(r)
	if err != nil {
		return 0, nil, err
	}
	// The store finds, counts and cuts the page: 10,000 agents are never
	// read whole for a page of them.
	ags, total, err := a.svc.Agents.FindAgents(r.ctx(), env, f)
	if err != nil {
		return 0, nil, err
	}
	r.Response().Header().Set(TotalHeader, strconv.Itoa(total))
	out := make([]AgentView, 0, len(ags))
	halted := a.halted(r, env)
	for _, ag := range ags {
		out = append(out, a.viewIn(ag, halted))
	}
	return http.StatusOK, out, nil
}

// agentParams returns the environment and agent a request names.
func agentParams(r *request) (env, name string, err error) {
	if env, err = r.envName(); err != nil {
		return "", "", err
	}
	name, err = r.agentName()
	return env, name, err
}

// inventory answers the environment's live inventory: every accepted
// agent, by name, with its labels and the facts it reported, as
// model.Inventory (what tether compile --inventory reads), built by
// record.Inventory as the server's own compiles build it.
func (a *API) inventory(r *request) (int, any, error) {
	env, err := a.existingEnv(r)
	if err != nil {
		return 0, nil, err
	}
	ags, err := a.svc.Agents.ListAgents(r.ctx(), env)
	if err != nil {
		return 0, nil, err
	}
	return http.StatusOK, record.Inventory(ags), nil
}

func (a *API) getAgent(r *request) (int, any, error) {
	env, name, err := agentParams(r)
	if err != nil {
		return 0, nil, err
	}
	ag, err := a.svc.Agents.GetAgent(r.ctx(), env, name)
	if err != nil {
		return 0, nil, err
	}
	return http.StatusOK, a.view(r, ag), nil
}

func (a *API) agentAction(action record.AgentAction) func(*request) (int, any, error) {
	return func(r *request) (int, any, error) {
		env, name, err := agentParams(r)
		if err != nil {
			return 0, nil, err
		}
		ag, err := a.svc.Control.AgentAction(r.ctx(), env, name, action)
		if errors.Is(err, model.ErrConflict) {
			if ag, gerr := a.svc.Agents.GetAgent(r.ctx(), env, name); gerr == nil && ag.State != record.AgentAccepted {
				return 0, nil, newError("conflict", fmt.Sprintf("accept it first (tether agent accept %s)", name), "agent %s is %s: only an accepted agent can be paused or resumed", name, ag.State)
			}
		}
		if err != nil {
			return 0, nil, err
		}
		return http.StatusOK, a.view(r, ag), nil
	}
}

// deleteAgent forgets an agent; the answer is the agent as it was.
func (a *API) deleteAgent(r *request) (int, any, error) {
	env, name, err := agentParams(r)
	if err != nil {
		return 0, nil, err
	}
	ag, err := a.svc.Control.DeleteAgent(r.ctx(), env, name)
	if err != nil {
		return 0, nil, err
	}
	return http.StatusOK, a.view(r, ag), nil
}

// factsRefresh asks an agent to report its facts again. The answer, 202,
// is the agent as recorded now: the report comes later, as an agent
// event on the event stream.
func (a *API) factsRefresh(r *request) (int, any, error) {
	env, name, err := agentParams(r)
	if err != nil {
		return 0, nil, err
	}
	ag, err := a.svc.Control.RefreshFacts(r.ctx(), env, name)
	if errors.Is(err, model.ErrConflict) {
		return 0, nil, newError("conflict", fmt.Sprintf("accept it first (tether agent accept %s)", name), "agent %s is %s: only an accepted agent can be asked for its facts", name, ag.State)
	}
	if err != nil {
		return 0, nil, err
	}
	return http.StatusAccepted, a.view(r, ag), nil
}

// rotateKey asks an agent to replace its key. The answer, 202, is the
// agent as recorded now: its key changes when its rollover arrives, as an
// agent event on the event stream.
func (a *API) rotateKey(r *request) (int, any, error) {
	env, name, err := agentParams(r)
	if err != nil {
		return 0, nil, err
	}
	ag, err := a.svc.Control.RotateKey(r.ctx(), env, name)
	if errors.Is(err, model.ErrConflict) {
		return 0, nil, newError("conflict", fmt.Sprintf("accept it first (tether agent accept %s)", name), "agent %s is %s: only an accepted agent can rotate its key", name, ag.State)
	}
	if err != nil {
		return 0, nil, err
	}
	return http.StatusAccepted, a.view(r, ag), nil
}

// --- operations

// OperationRequest asks for a deploy, repair or dry run.
type OperationRequest struct {
	Agents []string `json:"agents,omitempty"`
	Full   bool     `json:"full,omitempty"`
}

func (a *API) operation(op record.Operation) func(*request) (int, any, error) {
	return func(r *request) (int, any, error) {
		env, err := r.envName()
		if err != nil {
			return 0, nil, err
		}
		var req OperationRequest
		if r.Request().ContentLength != 0 {
			if err := a.decode(r, &req); err != nil {
				return 0, nil, err
			}
		}
		if err := validAgentNames(req.Agents); err != nil {
			return 0, nil, err
		}
		d, err := a.svc.Operations.Deploy(r.ctx(), env, record.DeployRequest{Agents: req.Agents, Operation: op, Full: req.Full})
		if err != nil && len(d.Agents) == 0 {
			return 0, nil, err
		}
		if err != nil {
			// Some agents got it: say which, and log who did not.
			a.log.Warn().Err(err).Str("env", env).Str("operation", string(op)).Msg("operation reached only some agents")
		}
		r.detail = fmt.Sprintf("%s %s to %s", op, d.ID, strings.Join(d.Agents, ","))
		return http.StatusAccepted, d, nil
	}
}

// Report is what a deploy, repair or dry run reported.
type Report struct {
	ID string `json:"id"`
	// Deploy is the deploy with each agent's outcome; nil for one that
	// was not listed (sent before deploys were, or pruned).
	Deploy *record.Deploy `json:"deploy,omitempty"`
	// Waiting names the agents it was sent to that have not answered.
	Waiting []string        `json:"waiting"`
	Actions []record.Action `json:"actions"`
}

func (a *API) deployReport(r *request) (int, any, error) {
	env, err := r.envName()
	if err != nil {
		return 0, nil, err
	}
	id, err := r.uuidParam("id", "deploy")
	if err != nil {
		return 0, nil, err
	}
	rep := Report{ID: id, Waiting: []string{}}
	d, err := a.svc.Operations.GetDeploy(r.ctx(), env, id)
	switch {
	case err == nil:
		rep.Deploy = &d
		rep.Waiting = nonNil(d.Waiting())
	case !errors.Is(err, model.ErrNotFound):
		return 0, nil, err
	}
	acts, err := a.svc.Operations.DeployActions(r.ctx(), env, id, 10000)
	if err != nil {
		return 0, nil, err
	}
	if rep.Deploy == nil && len(acts) == 0 {
		return 0, nil, newError("not_found", "list the deploys: tether env deploys", "no deploy %s in %s", id, env)
	}
	rep.Actions = nonNil(acts)
	return http.StatusOK, rep, nil
}

func (a *API) listDeploys(r *request) (int, any, error) {
	env, err := a.existingEnv(r)
	if err != nil {
		return 0, nil, err
	}
	limit, err := r.limit()
	if err != nil {
		return 0, nil, err
	}
	f := record.DeployFilter{Agent: r.QueryParam("agent"), Kind: record.Operation(r.QueryParam("kind")), Limit: limit}
	if f.Agent != "" {
		if err := validAgentName(f.Agent); err != nil {
			return 0, nil, newError("invalid", "", "agent: %v", err)
		}
	}
	if err := f.Validate(); err != nil {
		return 0, nil, newError("invalid", "", "%v", err)
	}
	ds, err := a.svc.Operations.ListDeploys(r.ctx(), env, f)
	return http.StatusOK, nonNil(ds), err
}

// --- compiles

func (a *API) requestCompile(r *request) (int, any, error) {
	env, err := a.existingEnv(r)
	if err != nil {
		return 0, nil, err
	}
	if a.svc.Compiles == nil {
		return 0, nil, newError("conflict", "", "this server compiles no models: export versions instead (tether export)")
	}
	q, err := a.svc.Compiles.RequestCompile(r.ctx(), env, r.token.Name)
	if errors.Is(err, model.ErrConflict) {
		return 0, nil, newError("conflict", "give the environment a source first, or export versions (tether export)", "%s", err)
	}
	if err != nil {
		return 0, nil, err
	}
	return http.StatusAccepted, q, nil
}

func (a *API) listCompiles(r *request) (int, any, error) {
	env, err := a.existingEnv(r)
	if err != nil {
		return 0, nil, err
	}
	limit, err := r.limit()
	if err != nil {
		return 0, nil, err
	}
	if a.svc.Compiles == nil {
		return http.StatusOK, []record.Compile{}, nil
	}
	cs, err := a.svc.Compiles.ListCompiles(r.ctx(), env, limit)
	return http.StatusOK, nonNil(cs), err
}

func (a *API) getCompile(r *request) (int, any, error) {
	env, err := a.existingEnv(r)
	if err != nil {
		return 0, nil, err
	}
	id := r.Param("id")
	if a.svc.Compiles == nil {
		return 0, nil, newError("not_found", "", "no compile %q in %s", clip(id), env)
	}
	c, err := a.svc.Compiles.GetCompile(r.ctx(), env, id)
	return http.StatusOK, c, err
}

// --- sources

// noSources is the answer of a server that compiles no models.
func noSources() *Error {
	return newError("conflict", "start the server with compiles on, or export versions instead (tether export)", "this server compiles no models")
}

func (a *API) getSource(r *request) (int, any, error) {
	env, err := a.existingEnv(r)
	if err != nil {
		return 0, nil, err
	}
	if a.svc.Sources == nil {
		return 0, nil, noSources()
	}
	v, err := a.svc.Sources.GetSource(r.ctx(), env)
	if errors.Is(err, model.ErrNotFound) {
		return 0, nil, newError("not_found", "set one: tether env source set URL, or tether env source upload DIR", "environment %s has no source", env)
	}
	return http.StatusOK, v, err
}

func (a *API) setSource(r *request) (int, any, error) {
	env, err := a.existingEnv(r)
	if err != nil {
		return 0, nil, err
	}
	if a.svc.Sources == nil {
		return 0, nil, noSources()
	}
	var req record.SourceRequest
	if err := a.decode(r, &req); err != nil {
		return 0, nil, err
	}
	v, err := a.svc.Sources.SetSource(r.ctx(), env, req, r.token.Name)
	if err != nil {
		return 0, nil, err
	}
	r.detail = fmt.Sprintf("git %s ref %q", v.URL, v.Ref)
	return http.StatusOK, v, nil
}

func (a *API) uploadSource(r *request) (int, any, error) {
	env, err := a.existingEnv(r)
	if err != nil {
		return 0, nil, err
	}
	if a.svc.Sources == nil {
		return 0, nil, noSources()
	}
	data, err := io.ReadAll(r.Request().Body)
	var tooLarge *http.MaxBytesError
	if errors.As(err, &tooLarge) {
		return 0, nil, r.tooLarge()
	}
	if err != nil {
		return 0, nil, err
	}
	if len(data) == 0 {
		return 0, nil, newError("invalid", "send a tar or tar.gz archive of the model's directory (tether env source upload DIR)", "the archive is empty")
	}
	v, err := a.svc.Sources.UploadSource(r.ctx(), env, data, r.QueryParam("subdir"), r.token.Name)
	if err != nil {
		return 0, nil, err
	}
	r.detail = fmt.Sprintf("archive of %d bytes, sha256 %s", v.ArchiveBytes, v.ArchiveSHA256)
	return http.StatusOK, v, nil
}

func (a *API) deleteSource(r *request) (int, any, error) {
	env, err := a.existingEnv(r)
	if err != nil {
		return 0, nil, err
	}
	if a.svc.Sources == nil {
		return 0, nil, noSources()
	}
	err = a.svc.Sources.DeleteSource(r.ctx(), env)
	if errors.Is(err, model.ErrNotFound) {
		return 0, nil, newError("not_found", "", "environment %s has no source", env)
	}
	return http.StatusNoContent, nil, err
}

// webhookMaxBody bounds a push webhook's payload: hosts cap a push's
// commit list (GitHub at 2048 commits), which fits with room to spare.
const webhookMaxBody = 5 << 20

// webhook answers a git host's push. It has no token: the source's webhook
// secret authenticates it, and every refusal to authenticate looks alike.
func (a *API) webhook(r *request) (int, any, error) {
	env, err := r.envName()
	if err != nil {
		return 0, nil, err
	}
	if a.svc.Sources == nil {
		return 0, nil, noSources()
	}
	body, err := io.ReadAll(r.Request().Body)
	var tooLarge *http.MaxBytesError
	if errors.As(err, &tooLarge) {
		return 0, nil, r.tooLarge()
	}
	if err != nil {
		return 0, nil, err
	}
	res, err := a.svc.Sources.Webhook(r.ctx(), env, r.Request().Header, body)
	switch {
	case errors.Is(err, record.ErrWebhookRefused):
		a.log.Warn().Err(err).Str("env", clip(env)).Str("remote", r.Request().RemoteAddr).Msg("webhook refused")
		return 0, nil, newError("unauthorized", "the webhook's secret in the git host must be the one tether env source set showed (make a new one with --rotate-webhook-secret)", "webhook refused: not authenticated")
	case err != nil:
		return 0, nil, err
	}
	if res.Compile {
		return http.StatusAccepted, res, nil
	}
	return http.StatusOK, res, nil
}

// --- alerts, tokens, audit

func (a *API) listAlerts(r *request) (int, any, error) {
	env, err := r.envName()
	if err != nil {
		return 0, nil, err
	}
	limit, err := r.limit()
	if err != nil {
		return 0, nil, err
	}
	kinds, err := record.ParseAlertKinds(r.QueryParam("kind"))
	if err != nil {
		return 0, nil, newError("bad_request", "", "kind=%q: want %s", clip(r.QueryParam("kind")), record.AlertKindsHelp)
	}
	agent, _, err := r.filters()
	if err != nil {
		return 0, nil, err
	}
	al, err := a.svc.Records.Alerts(r.ctx(), record.AlertFilter{Env: env, Agent: agent, Kinds: kinds, Limit: limit})
	return http.StatusOK, nonNil(al), err
}

// TokenRequest creates an API token.
type TokenRequest struct {
	Name string      `json:"name"`
	Role record.Role `json:"role"`
	Env  string      `json:"env,omitempty"`
	// ExpiresIn: "720h"; empty: never.
	ExpiresIn string `json:"expires_in,omitempty"`
	// User names the user of the organization who owns the token (whose
	// rights bound it); by default the calling user, or the user owning
	// the calling token. OrgOwned makes the organization its owner.
	User     string `json:"user,omitempty"`
	OrgOwned bool   `json:"org_owned,omitempty"`
}

// NewToken is a created token with its secret, shown this once.
type NewToken struct {
	record.Token
	Secret string `json:"secret"`
}

func (a *API) listTokens(r *request) (int, any, error) {
	ts, err := a.svc.Tokens.ListTokens(r.ctx())
	out := []record.Token{}
	for _, t := range ts {
		if record.OrgOr(t.Org) == r.who.Org {
			out = append(out, t)
		}
	}
	return http.StatusOK, out, err
}

func (a *API) createToken(r *request) (int, any, error) {
	var req TokenRequest
	if err := a.decode(r, &req); err != nil {
		return 0, nil, err
	}
	t, secret, err := IssueToken(req.Name, req.Role, req.Env, r.token.Name, a.now())
	if err != nil {
		return 0, nil, err
	}
	if t.ExpiresAt, err = a.expiry(req.ExpiresIn, "720h"); err != nil {
		return 0, nil, err
	}
	if t.Env != "" {
		if e, err := a.svc.Envs.GetEnv(r.ctx(), t.Env); isNotFound(err) || err == nil && record.OrgOr(e.Org) != r.who.Org {
			return 0, nil, newError("not_found", "create it first, or leave env out for a token of every environment", "environment %s does not exist", t.Env)
		} else if err != nil {
			return 0, nil, err
		}
	}
	t.Org = r.who.Org
	switch {
	case req.OrgOwned && req.User != "":
		return 0, nil, newError("invalid", "give user or org_owned, not both", "a token is owned by a user or by the organization")
	case req.OrgOwned:
	case req.User != "":
		if a.svc.People == nil {
			return 0, nil, newError("conflict", "leave user out", "this server keeps no users")
		}
		u, err := a.svc.People.GetUser(r.ctx(), r.who.Org, req.User)
		if isNotFound(err) {
			return 0, nil, newError("not_found", "tether user list shows the organization's users", "user %s not found", clip(req.User))
		} else if err != nil {
			return 0, nil, err
		}
		t.Owner = u.ID
	default:
		t.Owner = r.who.UserID
	}
	if err := a.svc.Tokens.CreateToken(r.ctx(), t); err != nil {
		return 0, nil, err
	}
	r.SetParamNames("id")
	r.SetParamValues(t.ID)
	r.detail = fmt.Sprintf("%s, role %s, env %q", t.Name, t.Role, t.Env)
	return http.StatusCreated, NewToken{Token: t, Secret: secret}, nil
}

// expiry turns a request's expires_in into an expiry time (nil: never);
// example is the duration the error suggests.
func (a *API) expiry(expiresIn, example string) (*time.Time, error) {
	if expiresIn == "" {
		return nil, nil
	}
	d, err := time.ParseDuration(expiresIn)
	if err != nil || d <= 0 {
		return nil, newError("invalid", "", "expires_in %q: want a duration such as %s", clip(expiresIn), example)
	}
	exp := a.now().Add(d).UTC()
	return &exp, nil
}

// IssueToken makes a token and its secret (not stored).
func IssueToken(name string, role record.Role, env, by string, now time.Time) (record.Token, string, error) {
	secret, err := record.NewSecret()
	if err != nil {
		return record.Token{}, "", err
	}
	t := record.Token{ID: uuid.NewString(), Name: name, Role: role, Env: env, Hash: record.HashSecret(secret), CreatedBy: by, CreatedAt: now.UTC()}
	if err := t.Validate(); err != nil {
		return record.Token{}, "", newError("invalid", "", "%v", err)
	}
	return t, secret, nil
}

func (a *API) revokeToken(r *request) (int, any, error) {
	id, err := r.uuidParam("id", "token")
	if err != nil {
		return 0, nil, err
	}
	// Another organization's token is answered as a missing one.
	ts, err := a.svc.Tokens.ListTokens(r.ctx())
	if err != nil {
		return 0, nil, err
	}
	for _, t := range ts {
		if t.ID == id && record.OrgOr(t.Org) != r.who.Org {
			return 0, nil, newError("not_found", "", "token %s not found", id)
		}
	}
	return http.StatusNoContent, nil, a.svc.Tokens.DeleteToken(r.ctx(), id)
}

func (a *API) listAudit(r *request) (int, any, error) {
	limit, err := r.limit()
	if err != nil {
		return 0, nil, err
	}
	env := r.QueryParam("env")
	if env != "" {
		if err := model.ValidateEnvName(clip(env)); err != nil {
			return 0, nil, newError("bad_request", "", "env=: %v", err)
		}
	}
	es, err := a.svc.Records.Audit(r.ctx(), record.AuditFilter{Env: env, Org: r.who.Org, Limit: limit})
	return http.StatusOK, nonNil(es), err
}

// Whoami is who calls: the calling token (for a user, the user's ID, name
// and organization-wide role), with the organization and every role.
type Whoami struct {
	record.Token
	Kind        string                 `json:"kind"`
	Roles       map[string]record.Role `json:"roles,omitempty"`
	User        string                 `json:"user,omitempty"`
	ServerAdmin bool                   `json:"server_admin,omitempty"`
}

func (a *API) whoami(r *request) (int, any, error) {
	w := Whoami{Token: r.token, Kind: r.who.Kind, Roles: r.who.Roles, User: r.who.UserID, ServerAdmin: r.who.ServerAdmin()}
	w.Org = r.who.Org
	return http.StatusOK, w, nil
}

// ServerInfo is what agents need to know of the server: the key it signs
// commands with.
type ServerInfo struct {
	// PublicKey is the server's ed25519 public key (base64 in JSON).
	PublicKey []byte `json:"public_key"`
	// Fingerprint names the key: SHA256:<base64>.
	Fingerprint string `json:"fingerprint"`
	Version     string `json:"version"`
}

func (a *API) serverInfo(r *request) (int, any, error) {
	key := a.serverKey()
	return http.StatusOK, ServerInfo{PublicKey: key, Fingerprint: model.Fingerprint(key), Version: a.cfg.Version}, nil
}

// nonNil makes an empty listing [] rather than null in JSON.
func nonNil[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}

func isNotFound(err error) bool { return errors.Is(err, model.ErrNotFound) }

// --- enrollment tokens

// EnrollmentTokenRequest creates an enrollment token.
type EnrollmentTokenRequest struct {
	Name string `json:"name"`
	// MaxUses bounds how many agents it enrolls; 0: no bound.
	MaxUses int `json:"max_uses,omitempty"`
	// ExpiresIn: "24h"; empty: never.
	ExpiresIn string `json:"expires_in,omitempty"`
}

// NewEnrollmentToken is a created enrollment token with its secret, shown
// this once: agents pass it as --token.
type NewEnrollmentToken struct {
	record.EnrollmentToken
	Token string `json:"token"`
}

func (a *API) listEnrollTokens(r *request) (int, any, error) {
	env, err := a.existingEnv(r)
	if err != nil {
		return 0, nil, err
	}
	ts, err := a.svc.Enrollment.ListEnrollTokens(r.ctx(), env)
	return http.StatusOK, nonNil(ts), err
}

func (a *API) createEnrollToken(r *request) (int, any, error) {
	env, err := r.envName()
	if err != nil {
		return 0, nil, err
	}
	var req EnrollmentTokenRequest
	if err := a.decode(r, &req); err != nil {
		return 0, nil, err
	}
	if req.Name == "" {
		return 0, nil, newError("invalid", "", "name is required: say what the token is for (a rack, a team, an image)")
	}
	if req.MaxUses < 0 {
		return 0, nil, newError("invalid", "", "max_uses %d: want 0 (no bound) or more", req.MaxUses)
	}
	// The token carries the server key's fingerprint: an agent started
	// with it trusts only this server.
	secret, err := model.NewEnrollmentToken(a.serverKey())
	if err != nil {
		return 0, nil, err
	}
	t := record.EnrollmentToken{ID: uuid.NewString(), Env: env, Name: req.Name, Hash: record.HashSecret(secret), MaxUses: req.MaxUses,
		CreatedBy: r.token.Name, CreatedAt: a.now().UTC()}
	if t.ExpiresAt, err = a.expiry(req.ExpiresIn, "24h"); err != nil {
		return 0, nil, err
	}
	if err := t.Validate(); err != nil {
		return 0, nil, newError("invalid", "", "%v", err)
	}
	if err := a.svc.Enrollment.CreateEnrollToken(r.ctx(), t); err != nil {
		return 0, nil, err
	}
	r.SetParamNames("env", "id")
	r.SetParamValues(env, t.ID)
	r.detail = fmt.Sprintf("%s, max uses %d", t.Name, t.MaxUses)
	return http.StatusCreated, NewEnrollmentToken{EnrollmentToken: t, Token: secret}, nil
}

func (a *API) revokeEnrollToken(r *request) (int, any, error) {
	env, err := r.envName()
	if err != nil {
		return 0, nil, err
	}
	id, err := r.uuidParam("id", "enrollment token")
	if err != nil {
		return 0, nil, err
	}
	return http.StatusNoContent, nil, a.svc.Enrollment.DeleteEnrollToken(r.ctx(), env, id)
}

// validAgentNames checks the agent names a request lists: at most
// model.MaxAgentsPerRequest, each a valid name.
func validAgentNames(names []string) error {
	if len(names) > model.MaxAgentsPerRequest {
		return newError("invalid", "", "agents: %d names: at most %d", len(names), model.MaxAgentsPerRequest)
	}
	for i, name := range names {
		if err := validAgentName(name); err != nil {
			return newError("invalid", "", "agents[%d]: %v", i, err)
		}
	}
	return nil
}
