package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/labstack/echo/v4"

	"github.com/tetherhq/tether/model"
	"github.com/tetherhq/tether/server/record"
)

// Error is an API error as clients receive it: a stable code to match on,
// a message for people, what to do about it when that is known, and, for
// the server's own failures, a reference to find the details in its log.
type Error struct {
	Status  int    `json:"-"`
	Code    string `json:"code"`
	Message string `json:"message"`
	Hint    string `json:"hint,omitempty"`
	Ref     string `json:"ref,omitempty"`
	// RetryAfter, when set, is sent as the Retry-After header.
	RetryAfter time.Duration `json:"-"`
}

func (e *Error) Error() string { return e.Code + ": " + e.Message }

// Body is the JSON body of every error response.
type Body struct {
	Error *Error `json:"error"`
}

// Codes is the catalogue of error codes: code → HTTP status. Codes never
// change meaning; new ones may be added.
var Codes = map[string]int{
	"bad_request":       http.StatusBadRequest,
	"invalid_json":      http.StatusBadRequest,
	"unknown_field":     http.StatusBadRequest,
	"unauthorized":      http.StatusUnauthorized,
	"forbidden":         http.StatusForbidden,
	"csrf_failed":       http.StatusForbidden, // a change with a session cookie came without the session's CSRF token
	"not_found":         http.StatusNotFound,
	"no_route":          http.StatusNotFound,
	"bad_method":        http.StatusMethodNotAllowed,
	"request_timeout":   http.StatusRequestTimeout,
	"exists":            http.StatusConflict,
	"env_exists":        http.StatusConflict, // an environment of that name exists already
	"conflict":          http.StatusConflict,
	"not_staged":        http.StatusConflict,
	"release_finished":  http.StatusConflict,
	"halted":            http.StatusConflict,
	"no_release":        http.StatusConflict,
	"no_agents":         http.StatusConflict,
	"not_ready":         http.StatusConflict, // agents are not ready for a step of a rollover of the server's signing key (force takes it)
	"too_large":         http.StatusRequestEntityTooLarge,
	"invalid":           http.StatusUnprocessableEntity,
	"invalid_attribute": http.StatusUnprocessableEntity, // an uploaded resource breaks its kind's declaration (model.CheckKind)
	"unknown_kind":      http.StatusUnprocessableEntity, // an uploaded resource's type is neither built in nor namespaced
	"rate_limited":      http.StatusTooManyRequests,
	"internal":          http.StatusInternalServerError,
	"unavailable":       http.StatusServiceUnavailable,
	"busy":              http.StatusServiceUnavailable,
	"timeout":           http.StatusGatewayTimeout,
}

func newError(code, hint, format string, args ...any) *Error {
	return &Error{Status: Codes[code], Code: code, Message: fmt.Sprintf(format, args...), Hint: hint}
}

// clip shortens what a client sent for a message that repeats it.
func clip(s string) string { return model.Clip(s, 128) }

// explained are the errors whose text is written for people by Tether
// itself (model's validators, the scheduler), never with a database,
// driver or broker message inside: an error that wraps one directly is
// shown as it is. A *model.KindError (the catalogue's verdict on an
// uploaded resource) is one too, found by its type and given its own codes.
var explained = []error{model.ErrInvalidResource, model.ErrInvalidID, model.ErrInvalidName, model.ErrInvalidText,
	record.ErrInvalidSetting, record.ErrHalted, record.ErrNoAgents, record.ErrInvalidSource, record.ErrInvalidWebhook, record.ErrInvalidHook}

// explanation returns the text of the error in err's tree that wraps an
// explained error directly.
func explanation(err error) (string, bool) {
	var children []error
	switch u := err.(type) {
	case interface{ Unwrap() error }:
		children = []error{u.Unwrap()}
	case interface{ Unwrap() []error }:
		children = u.Unwrap()
	}
	for _, c := range children {
		for _, e := range explained {
			if c == e {
				return err.Error(), true
			}
		}
	}
	for _, c := range children {
		if c == nil {
			continue
		}
		if text, ok := explanation(c); ok {
			return text, true
		}
	}
	return "", false
}

// classify turns an error from a service into a catalogue error. Its
// message is the API's own, or an explanation Tether wrote (see
// explained): never the text of a database, driver or broker error, which
// goes to the log alone. target names what the request addressed.
func classify(err error, target string) *Error {
	var e *Error
	if errors.As(err, &e) {
		return e
	}
	about := func(what string) string {
		if target == "" {
			return what
		}
		return what + ": " + target
	}
	text, ok := explanation(err)
	var tooLarge *http.MaxBytesError
	var ne net.Error
	var kind *model.KindError
	var machine *record.MachineError
	switch {
	case errors.As(err, &kind) && kind.Rule == model.RuleKind:
		return newError("unknown_kind", "the built-in kinds are in docs/model-language.md", "%s", model.Clip(kind.Error(), 1024))
	case errors.As(err, &kind):
		return newError("invalid_attribute", "each kind's attributes are in docs/model-language.md; tether compile of the server's version applies the same check", "%s", model.Clip(kind.Error(), 1024))
	case errors.As(err, &tooLarge):
		return newError("too_large", "", "request body is larger than %s", size(tooLarge.Limit))
	case errors.As(err, &machine):
		return newError(machineCode(machine.Kind), "", "%s", model.Clip(machine.Msg, 1024))
	case errors.Is(err, record.ErrHalted):
		return newError("halted", "resume it first (tether env resume)", "%s", orText(text, ok, about("the environment is halted")))
	case errors.Is(err, record.ErrNoRelease):
		return newError("no_release", "release a version first (tether export --release)", "%s", about("no released version"))
	case errors.Is(err, record.ErrNoAgents):
		return newError("no_agents", "", "%s", orText(text, ok, about("no agent to act on")))
	case ok:
		return newError("invalid", "", "%s", model.Clip(text, 1024))
	case errors.Is(err, model.ErrNotFound):
		return newError("not_found", "", "%s", about("not found"))
	case errors.Is(err, model.ErrExists):
		return newError("exists", "", "%s", about("already exists"))
	case errors.Is(err, model.ErrConflict):
		return newError("conflict", "read its current state and try again", "%s", about("the change conflicts with the stored state"))
	case errors.Is(err, model.ErrInvalid):
		return newError("invalid", "look for control characters, or values out of range", "%s", about("the server refused a value of the request"))
	case errors.Is(err, context.DeadlineExceeded):
		return newError("timeout", "retry; if it lasts, the server's log says what is slow", "the server did not finish in time")
	case errors.As(err, &ne) && ne.Timeout():
		return newError("request_timeout", "send the request faster, or raise the server's read-timeout", "the request did not arrive in time")
	case errors.Is(err, model.ErrUnavailable), errors.Is(err, context.Canceled):
		return newError("unavailable", "retry in a moment; the server reconnects by itself", "the database or the broker cannot be reached")
	}
	return newError("internal", "the server's log has the details under this reference", "internal error")
}

// machineCode is the code of a record.MachineError of kind.
func machineCode(kind error) string {
	switch {
	case errors.Is(kind, record.ErrHalted):
		return "halted"
	case errors.Is(kind, model.ErrNotFound):
		return "not_found"
	case errors.Is(kind, model.ErrExists):
		return "exists"
	case errors.Is(kind, model.ErrConflict):
		return "conflict"
	case errors.Is(kind, model.ErrUnavailable):
		return "unavailable"
	}
	return "invalid"
}

func orText(text string, ok bool, otherwise string) string {
	if ok {
		return text
	}
	return otherwise
}

// target names what a request addressed, from its parameters (those of
// its path, or those a handler set once it knew them): "environment prod,
// agent web-1".
func target(c echo.Context) string {
	segs := strings.Split(c.Path(), "/")
	var parts []string
	for i, name := range c.ParamNames() {
		if i >= len(c.ParamValues()) {
			break
		}
		v := c.ParamValues()[i]
		if u, err := url.PathUnescape(v); err == nil {
			v = u
		}
		parts = append(parts, noun(name, segs)+" "+clip(v))
	}
	return strings.Join(parts, ", ")
}

// noun names what a parameter identifies: by its name, or by the path
// segment before it (resources/:id, hosts/:name) or the path's last
// segment (POST /tokens sets id once the token exists); a name is an
// agent's unless the path says otherwise.
func noun(param string, segs []string) string {
	switch param {
	case "env":
		return "environment"
	case "n":
		return "version"
	}
	for i := len(segs) - 1; i > 0; i-- {
		if segs[i] == ":"+param {
			if n := nouns[segs[i-1]]; n != "" || param != "name" {
				return n
			}
		}
	}
	if n := nouns[segs[len(segs)-1]]; n != "" {
		return n
	}
	if param == "name" {
		return "agent"
	}
	return param
}

// nouns names what the parameter after each path segment identifies.
var nouns = map[string]string{"resources": "resource", "deploys": "deploy", "tokens": "token", "enrollment-tokens": "enrollment token",
	"platforms": "platform", "distributions": "distribution", "hosts": "host", "instances": "instance"}

// errorHandler writes every error, echo's own included, as a catalogue
// error. The server's own failures (internal, unavailable, timeout) are
// logged once, here, with the reference the answer gives.
func (a *API) errorHandler(err error, c echo.Context) {
	if c.Response().Committed {
		return
	}
	req := c.Request()
	var he *echo.HTTPError
	var e *Error
	switch {
	case errors.As(err, &he) && he.Code == http.StatusNotFound:
		e = newError("no_route", "see /api/v1/openapi.json", "no such endpoint: %s %s", req.Method, clip(req.URL.Path))
	case errors.As(err, &he) && he.Code == http.StatusMethodNotAllowed:
		e = newError("bad_method", "see /api/v1/openapi.json", "%s is not allowed on %s", req.Method, clip(req.URL.Path))
	case errors.As(err, &he) && he.Code == http.StatusRequestEntityTooLarge:
		e = newError("too_large", "", "request body too large")
	case errors.As(err, &he):
		e = &Error{Status: he.Code, Code: "bad_request", Message: clip(fmt.Sprint(he.Message))}
	default:
		e = classify(err, target(c))
	}
	switch e.Code {
	case "internal", "unavailable", "timeout":
		e.Ref = uuid.NewString()
		ev := a.log.Warn()
		if e.Code == "internal" {
			ev = a.log.Error()
		}
		if errors.Is(err, context.Canceled) {
			ev = a.log.Debug()
		}
		ev.Err(err).Str("ref", e.Ref).Str("code", e.Code).Str("method", req.Method).Str("path", clip(req.URL.Path)).Msg("request failed")
	}
	if e.RetryAfter > 0 {
		c.Response().Header().Set("Retry-After", strconv.Itoa(int((e.RetryAfter+time.Second-1)/time.Second)))
	}
	if req.Method == http.MethodHead {
		_ = c.NoContent(e.Status)
		return
	}
	_ = c.JSON(e.Status, Body{Error: e})
}

// decode reads a JSON request body into v: strict about unknown fields and
// trailing data. The body is bounded already (see bodyLimit).
func (a *API) decode(r *request, v any) error {
	dec := json.NewDecoder(r.Request().Body)
	dec.DisallowUnknownFields()
	dec.UseNumber()
	if err := dec.Decode(v); err != nil {
		return r.jsonError(err, "request body", dec.InputOffset())
	}
	if dec.More() {
		return newError("invalid_json", "", "request body has data after the JSON value")
	}
	return nil
}

// jsonError turns an error decoding the request body (at byte offset)
// into a catalogue error; where says what was being read ("request body",
// "resources[17]").
func (r *request) jsonError(err error, where string, offset int64) error {
	var tooLarge *http.MaxBytesError
	var syntax *json.SyntaxError
	var typ *json.UnmarshalTypeError
	var ne net.Error
	switch {
	case errors.As(err, &tooLarge):
		return r.tooLarge()
	case errors.As(err, &ne) && ne.Timeout():
		return newError("request_timeout", "send the body faster, or raise the server's read-timeout (min-upload-rate for uploads)", "the request body did not arrive in time (%d bytes read)", offset)
	case errors.As(err, &syntax):
		return newError("invalid_json", "", "%s is not valid JSON: %s (at byte %d)", where, clip(err.Error()), syntax.Offset)
	case errors.As(err, &typ):
		return newError("invalid_json", "", "%s: field %q: want %s, got %s (at byte %d)", where, clip(typ.Field), typ.Type, typ.Value, typ.Offset)
	case strings.HasPrefix(err.Error(), "json: unknown field "):
		return newError("unknown_field", "see /api/v1/openapi.json for the fields", "%s: %s", where, clip(strings.TrimPrefix(err.Error(), "json: ")))
	case errors.Is(err, io.EOF):
		return newError("invalid_json", "", "%s is empty: want a JSON object", where)
	case errors.Is(err, io.ErrUnexpectedEOF):
		return newError("invalid_json", "", "%s ends in the middle of its JSON value (at byte %d)", where, offset)
	case errors.Is(err, model.ErrInvalidID):
		// A resource ID that does not parse, from model's UnmarshalText.
		return newError("invalid_json", "IDs look like file[web-1,path=/etc/motd]", "%s (at byte %d): %s", where, offset, clip(err.Error()))
	}
	return newError("invalid_json", "", "%s (at byte %d): %s", where, offset, clip(err.Error()))
}

// size writes a byte count for people: "64 MiB", "300.5 MiB".
func size(n int64) string {
	for _, u := range []struct {
		unit string
		n    int64
	}{{"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}} {
		switch {
		case n >= u.n && n%u.n == 0:
			return fmt.Sprintf("%d %s", n/u.n, u.unit)
		case n >= u.n:
			return fmt.Sprintf("%.1f %s", float64(n)/float64(u.n), u.unit)
		}
	}
	return fmt.Sprintf("%d bytes", n)
}
