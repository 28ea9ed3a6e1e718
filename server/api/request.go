package api

import (
	"context"
	"errors"
	"net/http"
	"strconv"

	"github.com/google/uuid"
	"github.com/labstack/echo/v4"

	"github.com/tetherhq/tether/model"
	"github.com/tetherhq/tether/server/record"
)

// request is one call, authenticated.
type request struct {
	echo.Context
	api *API
	// who calls; token is the calling token (for a user, one made up of
	// the user's ID and name, which handlers record as who did a thing).
	who   record.Principal
	token record.Token
	// session is the session the request came with, if it came with one.
	session *session
	// auditOrg is the organization the audit entry is of, when not the
	// caller's (a server admin managing another organization's users).
	auditOrg string
	// bodyMax bounds the body; upload says which limit it is.
	bodyMax int64
	upload  bool
	// detail is what the audit log says of the change beyond its target.
	detail string
}

func (r *request) ctx() context.Context { return r.Request().Context() }

// naming makes what a handler created the target of the change, in the
// audit log and in errors, as if the request's path had named it: pairs
// are path parameters, name then value ("env", "prod", "id", "17").
func (r *request) naming(pairs ...string) {
	var names, values []string
	for i := 0; i+1 < len(pairs); i += 2 {
		names, values = append(names, pairs[i]), append(values, pairs[i+1])
	}
	r.SetParamNames(names...)
	r.SetParamValues(values...)
}

// input is what a handler reads of its request, checked, in the order it
// asks for it: path and query parameters, then the body. The first that
// is wrong is err, and what is asked after it is not read (nor looked up
// in the store): a handler reads all it needs, then checks err once, and
// a request wrong in two ways is told of the first.
type input struct {
	r   *request
	err error
}

func (r *request) input() *input { return &input{r: r} }

// take returns what read reads, unless an earlier read failed; its error
// becomes the input's.
func take[T any](in *input, read func() (T, error)) T {
	var v T
	if in.err == nil {
		v, in.err = read()
	}
	return v
}

// check makes err the input's error, unless an earlier read failed.
func (in *input) check(err error) {
	if in.err == nil {
		in.err = err
	}
}

// env is the :env parameter, checked.
func (in *input) env() string { return take(in, in.r.envName) }

// existingEnv is env for a route that answers not_found for an
// environment that does not exist (a listing answers it, not an empty
// list).
func (in *input) existingEnv() string { return take(in, in.r.existingEnv) }

// version is the :n parameter, a version number.
func (in *input) version() int64 { return take(in, in.r.number) }

// uuid is the :id parameter, a UUID (what identifies tokens and deploys);
// what names the thing in the error.
func (in *input) uuid(what string) string {
	return take(in, func() (string, error) { return in.r.uuidParam(what) })
}

// limit is the limit query parameter of a listing, newest first.
func (in *input) limit() int { return take(in, in.r.limit) }

// page is the page of a paged listing.
func (in *input) page() pageQuery { return take(in, in.r.page) }

// boolean is the query parameter name, true or false (false if left
// out).
func (in *input) boolean(name string) bool {
	return take(in, func() (bool, error) { return in.r.boolQuery(name) })
}

// filters are the agent and type filters of a listing.
func (in *input) filters() (agent, typ string) {
	if in.err == nil {
		agent, typ, in.err = in.r.filters()
	}
	return agent, typ
}

// body decodes the JSON body into v.
func (in *input) body(v any) {
	if in.err == nil {
		in.err = in.r.api.decode(in.r, v)
	}
}

// optionalBody is body for a route whose body may be left out.
func (in *input) optionalBody(v any) {
	if in.r.Request().ContentLength != 0 {
		in.body(v)
	}
}

// answer answers 200 with what get returns, once the input is read.
func answer[T any](in *input, get func() (T, error)) (int, any, error) {
	if in.err != nil {
		return 0, nil, in.err
	}
	v, err := get()
	return http.StatusOK, v, err
}

// listing is answer for a listing: an empty one is [], never null.
func listing[T any](in *input, list func() ([]T, error)) (int, any, error) {
	if in.err != nil {
		return 0, nil, in.err
	}
	vs, err := list()
	return http.StatusOK, nonNil(vs), err
}

// removed answers 204 once remove removed what the input names.
func removed(in *input, remove func() error) (int, any, error) {
	if in.err != nil {
		return 0, nil, in.err
	}
	return http.StatusNoContent, nil, remove()
}

// envListing answers the listing list makes of svc for an existing
// environment (:env): nothing from a server that keeps none (svc nil).
func envListing[S, T any](r *request, svc S, list func(S, context.Context, string) ([]T, error)) (int, any, error) {
	in := r.input()
	env := in.existingEnv()
	return listing(in, func() ([]T, error) {
		if any(svc) == nil {
			return nil, nil
		}
		return list(svc, r.ctx(), env)
	})
}

// limitedListing is envListing for a listing at most ?limit= long, newest
// first.
func limitedListing[S, T any](r *request, svc S, list func(S, context.Context, string, int) ([]T, error)) (int, any, error) {
	in := r.input()
	env, limit := in.existingEnv(), in.limit()
	return listing(in, func() ([]T, error) {
		if any(svc) == nil {
			return nil, nil
		}
		return list(svc, r.ctx(), env, limit)
	})
}

// envItem answers what get finds in svc: the thing (what: a release, a
// compile) of an existing environment (:env) that :id names, and
// not_found from a server that keeps none (svc nil).
func envItem[S, T any](r *request, what string, svc S, get func(S, context.Context, string, string) (T, error)) (int, any, error) {
	in := r.input()
	env := in.existingEnv()
	id := r.Param("id")
	return answer(in, func() (T, error) {
		if any(svc) == nil {
			var none T
			return none, newError("not_found", "", "no %s %q in %s", what, clip(id), env)
		}
		return get(svc, r.ctx(), env, id)
	})
}

// present returns svc, or none where the server does without it (svc
// nil).
func present[S any](svc S, none *Error) (S, error) {
	if any(svc) == nil {
		return svc, none
	}
	return svc, nil
}

// only returns the elements of xs that keep keeps, in a slice of their
// own ([], not nil, when none is kept).
func only[T any](xs []T, keep func(T) bool) []T {
	out := []T{}
	for _, x := range xs {
		if keep(x) {
			out = append(out, x)
		}
	}
	return out
}

// envName returns the :env parameter, checked.
func (r *request) envName() (string, error) {
	env := r.Param("env")
	if err := model.ValidateEnvName(clip(env)); err != nil {
		return "", newError("bad_request", "", "%v", err)
	}
	return env, nil
}

// existingEnv is envName for a route of an environment that must exist.
func (r *request) existingEnv() (string, error) {
	env, err := r.envName()
	if err != nil {
		return "", err
	}
	if _, err := r.api.svc.Envs.GetEnv(r.ctx(), env); err != nil {
		return "", err
	}
	return env, nil
}

// uuidParam returns the :id parameter, which must be a UUID.
func (r *request) uuidParam(what string) (string, error) {
	id := r.Param("id")
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

// number parses the :n parameter as a version number.
func (r *request) number() (int64, error) {
	n, err := strconv.ParseInt(r.Param("n"), 10, 64)
	if err != nil || n <= 0 {
		return 0, newError("bad_request", "", "version %q: want a positive number", clip(r.Param("n")))
	}
	return n, nil
}

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

func (r *request) boolQuery(name string) (bool, error) {
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

// nonNil makes an empty listing [] rather than null in JSON.
func nonNil[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}

func isNotFound(err error) bool { return errors.Is(err, model.ErrNotFound) }
