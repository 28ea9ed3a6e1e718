package api

import (
	"context"
	"errors"
	"net/http"
	"net/netip"
	"reflect"
	"slices"
	"strings"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/labstack/echo/v4/middleware"

	"github.com/tetherhq/tether/server/clientlimit"
	"github.com/tetherhq/tether/server/record"
)

// route is one endpoint: how it is reached, who may call it, what it is
// called in the audit log and the OpenAPI document, and what serves it.
type route struct {
	method, path string
	// role is the least role that may call it; "" needs no token.
	role record.Role
	// global routes need the role in every environment of the
	// organization (a token for every environment, or a user's
	// organization-wide role).
	global bool
	// server routes are for server admins (Principal.ServerAdmin).
	server bool
	// anyone: any authenticated caller, whatever its roles; the route
	// checks what it allows (a user changing their own password).
	anyone bool
	// action names a change in the audit log; reads have none.
	action  string
	summary string
	// query lists the query parameters it reads.
	query []param
	// pathParams types the path parameters pathParams does not, or
	// otherwise (an :id that is a number).
	pathParams []param
	// in is the type of the JSON body it reads, if it reads one
	// (inOptional: it may be left out); raw, the media types of a body
	// it reads as bytes. A route with neither reads no body. Bodies are
	// bounded by MaxBody, an upload's by MaxUpload.
	in         reflect.Type
	inOptional bool
	raw        []string
	// upload marks the version upload: its own body limit, deadlines
	// that fit its size, a bounded number at once.
	upload bool
	// stream marks the event stream, which lasts as long as its client.
	stream bool
	// wait marks a route that waits for agents up to a timeout of its
	// own, at most record.MaxPlanTimeout: its work may take that much
	// longer than HandlerTimeout.
	wait bool
	// maxBody, when set, bounds the body instead of MaxBody.
	maxBody int64
	// out is the type of the JSON answer (nil: none), sent with one of
	// the statuses ok (none: 200, or 204 without an answer); total: the
	// answer carries TotalHeader. The OpenAPI document says them, and a
	// test checks every answer against it.
	out   reflect.Type
	ok    []int
	total bool
	serve func(r *request) (int, any, error)
}

// routes is the route table: every noun's routes, each kept in the
// noun's file with the handlers that serve them.
func (a *API) routes() []route {
	return slices.Concat(
		a.envRoutes(), a.settingsRoutes(), a.versionRoutes(), a.planRoutes(), a.releaseRoutes(),
		a.resourceRoutes(), a.summaryRoutes(), a.agentRoutes(), a.deployRoutes(), a.sourceRoutes(),
		a.compileRoutes(), a.enrollmentRoutes(), a.alertRoutes(), a.tokenRoutes(), a.auditRoutes(),
		a.eventRoutes(), a.sessionRoutes(), a.peopleRoutes(), a.serverRoutes(), a.openapiRoutes(),
		a.webhookRoutes(), a.machineRoutes(),
	)
}

// build makes the public handler, or (ops) the operations one.
func (a *API) build(ops bool) *echo.Echo {
	e := echo.New()
	e.HideBanner, e.HidePort = true, true
	e.HTTPErrorHandler = a.errorHandler
	if !ops {
		e.Pre(a.limitAnonymous)
	}
	e.Use(middleware.RecoverWithConfig(middleware.RecoverConfig{DisableStackAll: true, LogErrorFunc: func(c echo.Context, err error, stack []byte) error {
		a.log.Error().Err(err).Bytes("stack", stack).Str("path", clip(c.Request().URL.Path)).Msg("panic serving a request")
		return errors.New("panic serving a request")
	}}))
	if !ops {
		v1 := e.Group("/api/v1")
		for _, rt := range a.routes() {
			v1.Add(rt.method, rt.path, a.handler(rt))
		}
	}
	e.GET("/healthz", func(c echo.Context) error { return c.JSON(http.StatusOK, map[string]string{"status": "ok"}) })
	e.GET("/readyz", a.readyz(ops))
	if a.svc.Metrics != nil && (ops || !a.cfg.SeparateOps) {
		e.GET("/metrics", echo.WrapHandler(a.svc.Metrics))
	}
	return e
}

// handler wraps a route: authentication, authorization, the body limit,
// the time its work may take, the audit log and the request metric.
func (a *API) handler(rt route) echo.HandlerFunc {
	return func(c echo.Context) error {
		start := a.now()
		r := &request{Context: c, api: a}
		if !rt.stream && !rt.upload {
			limit := a.cfg.HandlerTimeout
			if rt.wait {
				limit += record.MaxPlanTimeout
			}
			ctx, cancel := context.WithTimeout(c.Request().Context(), limit)
			defer cancel()
			c.SetRequest(c.Request().WithContext(ctx))
		}
		status, body, err := a.call(rt, r)
		var werr error
		switch {
		case err != nil:
			a.errorHandler(err, c)
		case status == 0:
			// the route wrote its own response (the event stream)
		case body == nil:
			werr = c.NoContent(status)
		default:
			werr = c.JSON(status, body)
		}
		a.observe(rt.path, rt.method, c.Response().Status, time.Since(start))
		if werr != nil {
			// The client went away mid-answer; nothing more to tell it.
			a.log.Debug().Err(werr).Str("path", clip(c.Request().URL.Path)).Msg("response not fully written")
		}
		return nil
	}
}

func (a *API) observe(route, method string, status int, d time.Duration) {
	if a.svc.Observer != nil {
		a.svc.Observer.ObserveRequest(route, method, status, d)
	}
}

func (a *API) call(rt route, r *request) (int, any, error) {
	if rt.role != "" {
		who, err := a.authenticate(r)
		if err != nil {
			return 0, nil, err
		}
		r.who = who
		r.SetRequest(r.Request().WithContext(record.WithWho(r.ctx(), who.Name)))
		if err := a.checkCSRF(r); err != nil {
			return 0, nil, err
		}
		if err := a.authorize(r, rt); err != nil {
			return 0, nil, err
		}
	}
	if a.svc.People == nil && (strings.HasPrefix(rt.path, "/users") || strings.HasPrefix(rt.path, "/orgs") || rt.path == "/session") {
		return 0, nil, newError("conflict", "use a bearer token", "this server keeps no users")
	}
	if rt.in != nil || len(rt.raw) > 0 {
		if err := a.bodyLimit(r, rt); err != nil {
			return 0, nil, err
		}
	}
	status, body, err := rt.serve(r)
	if err == nil && rt.action != "" {
		a.audit(r, rt)
	}
	return status, body, err
}

// bodyLimit bounds the request body of rt: a body announced larger than
// the limit is refused before a byte of it is read, one that turns out
// larger fails its read.
func (a *API) bodyLimit(r *request, rt route) error {
	r.bodyMax, r.upload = a.cfg.MaxBody, rt.upload
	if rt.upload {
		r.bodyMax = a.cfg.MaxUpload
	}
	if rt.maxBody > 0 {
		r.bodyMax = rt.maxBody
	}
	req := r.Request()
	if req.ContentLength > r.bodyMax {
		return r.tooLarge()
	}
	req.Body = http.MaxBytesReader(r.Response().Writer, req.Body, r.bodyMax)
	return nil
}

// tooLarge is the answer to a body over its limit, naming the limit and
// the setting that raises it.
func (r *request) tooLarge() *Error {
	got := ""
	if n := r.Request().ContentLength; n > r.bodyMax {
		got = " (" + size(n) + ")"
	}
	if r.upload {
		return newError("too_large", "split the model across environments, or raise the server's max-upload setting (tether server --max-upload, TETHER_MAX_UPLOAD)",
			"the version upload%s is larger than %s, the server's max-upload", got, size(r.bodyMax))
	}
	return newError("too_large", "raise the server's max-body setting (tether server --max-body, TETHER_MAX_BODY)",
		"request body%s is larger than %s, the server's max-body", got, size(r.bodyMax))
}

// limitAnonymous holds requests without a bearer token or session cookie
// to their client's bucket (AnonymousRate), health checks excepted: a
// prober must always get through. Requests with a credential are counted
// when their authentication fails (authenticate).
func (a *API) limitAnonymous(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		req := c.Request()
		if req.URL.Path == "/healthz" || credentialed(req) {
			return next(c)
		}
		if ok, wait := a.anonymous.Take(a.client(req), a.now()); !ok {
			a.errorHandler(rateLimited(wait, "too many requests without a token from this address", "wait the Retry-After seconds; requests with a valid token are not limited so"), c)
			a.observe("", req.Method, http.StatusTooManyRequests, 0)
			return nil
		}
		return next(c)
	}
}

func rateLimited(wait time.Duration, why, hint string) *Error {
	e := newError("rate_limited", hint, "%s: retry in %s", why, wait.Round(time.Second).String())
	if wait < time.Second {
		e.Message = why + ": retry in a second"
	}
	e.RetryAfter = wait
	return e
}

// bearer returns the request's bearer token, if any.
func bearer(req *http.Request) string {
	secret, ok := strings.CutPrefix(req.Header.Get("Authorization"), "Bearer ")
	if !ok {
		return ""
	}
	return strings.TrimSpace(secret)
}

// client returns the key the request's client is counted under: its
// address, or, from a trusted proxy, the address the proxy says it
// forwards for.
func (a *API) client(req *http.Request) clientlimit.Client {
	ap, err := netip.ParseAddrPort(req.RemoteAddr)
	if err != nil {
		return clientlimit.ClientOfRemote(req.RemoteAddr)
	}
	addr := ap.Addr().Unmap()
	if a.trusted(addr) {
		hops := strings.Split(strings.Join(req.Header.Values("X-Forwarded-For"), ","), ",")
		for i := len(hops) - 1; i >= 0; i-- {
			hop, err := netip.ParseAddr(strings.TrimSpace(hops[i]))
			if err != nil {
				break
			}
			addr = hop.Unmap()
			if !a.trusted(addr) {
				break
			}
		}
	}
	return clientlimit.ClientOf(addr)
}

func (a *API) trusted(addr netip.Addr) bool {
	for _, p := range a.cfg.TrustedProxies {
		if p.Contains(addr) {
			return true
		}
	}
	return false
}

// readyz runs the readiness checks. The public answer says which check
// fails, not why (the why may name hosts and drivers): the reason is
// logged when a check starts failing, and shown on the operations
// listener (detail).
func (a *API) readyz(detail bool) echo.HandlerFunc {
	return func(c echo.Context) error {
		out := map[string]string{}
		status := http.StatusOK
		for name, check := range a.svc.Ready {
			why := "ok"
			if err := check(c.Request().Context()); err != nil {
				status = http.StatusServiceUnavailable
				why = err.Error()
			}
			a.readyMu.Lock()
			if was := a.ready[name]; was != why {
				a.ready[name] = why
				if why != "ok" {
					a.log.Warn().Str("check", name).Str("reason", why).Msg("not ready")
				} else if was != "" {
					a.log.Info().Str("check", name).Msg("ready again")
				}
			}
			a.readyMu.Unlock()
			if why != "ok" && !detail {
				why = "unavailable"
			}
			out[name] = why
		}
		return c.JSON(status, out)
	}
}
