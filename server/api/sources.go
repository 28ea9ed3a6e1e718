package api

import (
	"errors"
	"fmt"
	"io"
	"net/http"

	"github.com/tetherhq/tether/model"
	"github.com/tetherhq/tether/server/record"
)

// sourceRoutes are the routes of the environments' model sources: where
// the server reads a model to compile, and the push webhook of a git
// source.
func (a *API) sourceRoutes() []route {
	return []route{
		{method: "GET", path: "/envs/:env/source", role: record.RoleViewer, summary: "Where the server reads the environment's model: a git repository or an uploaded archive (credentials are never shown)", out: of[record.SourceView](), serve: a.getSource},
		{method: "PUT", path: "/envs/:env/source", role: record.RoleOperator, action: "env.source.set", summary: "Make a git repository the environment's source, and compile it (the answer shows a new webhook secret once)", in: of[record.SourceRequest](), out: of[record.SourceView](), serve: a.setSource},
		{method: "PUT", path: "/envs/:env/source/archive", role: record.RoleOperator, action: "env.source.upload", summary: "Make an uploaded tar or tar.gz archive the environment's source, and compile it", query: []param{{name: "subdir", typ: of[string](), desc: "the model's directory in the archive"}}, raw: []string{"application/gzip", "application/x-tar"}, upload: true, out: of[record.SourceView](), serve: a.uploadSource},
		{method: "DELETE", path: "/envs/:env/source", role: record.RoleOperator, action: "env.source.delete", summary: "Remove the environment's source: the server compiles it no more; what it released stays", serve: a.deleteSource},
		{method: "POST", path: "/envs/:env/compile/hook", summary: "A git host's push webhook (GitHub, GitLab, Gitea, Forgejo): no token; authenticated by the source's webhook secret (HMAC signature, GitLab signing or secret token). A push of the ref the source follows asks for a compile (202)", raw: []string{"application/json", "application/x-www-form-urlencoded"}, maxBody: webhookMaxBody, out: of[record.WebhookResult](), ok: []int{http.StatusOK, http.StatusAccepted}, serve: a.webhook},
	}
}

// sources returns the server's sources; a server that compiles no models
// has none.
func (a *API) sources() (Sources, error) {
	return present(a.svc.Sources, newError("conflict", "start the server with compiles on, or export versions instead (tether export)", "this server compiles no models"))
}

// rawBody reads the body of a route that takes it as bytes.
func (r *request) rawBody() ([]byte, error) {
	data, err := io.ReadAll(r.Request().Body)
	var tooLarge *http.MaxBytesError
	if errors.As(err, &tooLarge) {
		return nil, r.tooLarge()
	}
	return data, err
}

func (a *API) getSource(r *request) (int, any, error) {
	in := r.input()
	env, src := in.existingEnv(), take(in, a.sources)
	return answer(in, func() (record.SourceView, error) {
		v, err := src.GetSource(r.ctx(), env)
		if errors.Is(err, model.ErrNotFound) {
			return v, newError("not_found", "set one: tether env source set URL, or tether env source upload DIR", "environment %s has no source", env)
		}
		return v, err
	})
}

func (a *API) setSource(r *request) (int, any, error) {
	in := r.input()
	env, src := in.existingEnv(), take(in, a.sources)
	var req record.SourceRequest
	in.body(&req)
	return answer(in, func() (record.SourceView, error) {
		v, err := src.SetSource(r.ctx(), env, req, r.token.Name)
		r.detail = fmt.Sprintf("git %s ref %q", v.URL, v.Ref)
		return v, err
	})
}

func (a *API) uploadSource(r *request) (int, any, error) {
	in := r.input()
	env, src := in.existingEnv(), take(in, a.sources)
	data := take(in, r.rawBody)
	if len(data) == 0 {
		in.check(newError("invalid", "send a tar or tar.gz archive of the model's directory (tether env source upload DIR)", "the archive is empty"))
	}
	return answer(in, func() (record.SourceView, error) {
		v, err := src.UploadSource(r.ctx(), env, data, r.QueryParam("subdir"), r.token.Name)
		r.detail = fmt.Sprintf("archive of %d bytes, sha256 %s", v.ArchiveBytes, v.ArchiveSHA256)
		return v, err
	})
}

func (a *API) deleteSource(r *request) (int, any, error) {
	in := r.input()
	env, src := in.existingEnv(), take(in, a.sources)
	return removed(in, func() error {
		err := src.DeleteSource(r.ctx(), env)
		if errors.Is(err, model.ErrNotFound) {
			return newError("not_found", "", "environment %s has no source", env)
		}
		return err
	})
}

// webhookMaxBody bounds a push webhook's payload: hosts cap a push's
// commit list (GitHub at 2048 commits), which fits with room to spare.
const webhookMaxBody = 5 << 20

// webhook answers a git host's push. It has no token: the source's webhook
// secret authenticates it, and every refusal to authenticate looks alike.
func (a *API) webhook(r *request) (int, any, error) {
	in := r.input()
	env, src := in.env(), take(in, a.sources)
	body := take(in, r.rawBody)
	if in.err != nil {
		return 0, nil, in.err
	}
	res, err := src.Webhook(r.ctx(), env, r.Request().Header, body)
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
