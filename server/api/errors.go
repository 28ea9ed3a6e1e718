package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/labstack/echo/v4"

	"github.com/tetherhq/tether/model"
)

// Error is an API error as clients receive it: a stable code to match on,
// a message for people, and what to do about it when that is known.
type Error struct {
	Status  int    `json:"-"`
	Code    string `json:"code"`
	Message string `json:"message"`
	Hint    string `json:"hint,omitempty"`
}

func (e *Error) Error() string { return e.Code + ": " + e.Message }

// Body is the JSON body of every error response.
type Body struct {
	Error *Error `json:"error"`
}

// Codes is the catalogue of error codes: code → HTTP status. Codes never
// change meaning; new ones may be added.
var Codes = map[string]int{
	"bad_request":   http.StatusBadRequest,
	"invalid_json":  http.StatusBadRequest,
	"unknown_field": http.StatusBadRequest,
	"unauthorized":  http.StatusUnauthorized,
	"forbidden":     http.StatusForbidden,
	"not_found":     http.StatusNotFound,
	"no_route":      http.StatusNotFound,
	"bad_method":    http.StatusMethodNotAllowed,
	"exists":        http.StatusConflict,
	"conflict":      http.StatusConflict,
	"halted":        http.StatusConflict,
	"no_release":    http.StatusConflict,
	"no_agents":     http.StatusConflict,
	"too_large":     http.StatusRequestEntityTooLarge,
	"invalid":       http.StatusUnprocessableEntity,
	"unavailable":   http.StatusServiceUnavailable,
	"internal":      http.StatusInternalServerError,
}

func newError(code, hint, format string, args ...any) *Error {
	return &Error{Status: Codes[code], Code: code, Message: fmt.Sprintf(format, args...), Hint: hint}
}

// classify turns an error from a service into a catalogue error.
func classify(err error) *Error {
	var e *Error
	if errors.As(err, &e) {
		return e
	}
	var tooLarge *http.MaxBytesError
	switch {
	case errors.As(err, &tooLarge):
		return newError("too_large", "split the upload or raise the server's limit", "request body is larger than %d bytes", tooLarge.Limit)
	case errors.Is(err, model.ErrHalted):
		return newError("halted", "", "%v", err)
	case errors.Is(err, model.ErrNoRelease):
		return newError("no_release", "release a version first (tether export --release)", "%v", err)
	case errors.Is(err, model.ErrNoAgents):
		return newError("no_agents", "", "%v", err)
	case errors.Is(err, model.ErrNotFound):
		return newError("not_found", "", "%v", err)
	case errors.Is(err, model.ErrExists):
		return newError("exists", "", "%v", err)
	case errors.Is(err, model.ErrConflict):
		return newError("conflict", "", "%v", err)
	case errors.Is(err, model.ErrInvalid), errors.Is(err, model.ErrInvalidSetting):
		return newError("invalid", "", "%v", err)
	case errors.Is(err, model.ErrUnavailable), errors.Is(err, context.DeadlineExceeded):
		return newError("unavailable", "retry in a moment; the server reconnects by itself", "%v", err)
	}
	return newError("internal", "see the server log", "internal error")
}

// errorHandler writes every error, echo's own included, as a catalogue
// error. Internal errors are logged once, here.
func (a *API) errorHandler(err error, c echo.Context) {
	if c.Response().Committed {
		return
	}
	var he *echo.HTTPError
	var e *Error
	switch {
	case errors.As(err, &he) && he.Code == http.StatusNotFound:
		e = newError("no_route", "see /api/v1/openapi.json", "no such endpoint: %s %s", c.Request().Method, c.Request().URL.Path)
	case errors.As(err, &he) && he.Code == http.StatusMethodNotAllowed:
		e = newError("bad_method", "see /api/v1/openapi.json", "%s is not allowed on %s", c.Request().Method, c.Request().URL.Path)
	case errors.As(err, &he) && he.Code == http.StatusRequestEntityTooLarge:
		e = newError("too_large", "", "request body too large")
	case errors.As(err, &he):
		e = &Error{Status: he.Code, Code: "bad_request", Message: fmt.Sprint(he.Message)}
	default:
		e = classify(err)
	}
	switch {
	case e.Status >= 500 && e.Code == "internal":
		a.log.Error().Err(err).Str("method", c.Request().Method).Str("path", c.Request().URL.Path).Msg("request failed")
	case e.Status >= 500:
		a.log.Warn().Err(err).Str("path", c.Request().URL.Path).Msg("request failed: a service is unavailable")
	}
	if c.Request().Method == http.MethodHead {
		_ = c.NoContent(e.Status)
		return
	}
	_ = c.JSON(e.Status, Body{Error: e})
}

// decode reads a JSON request body into v: bounded, strict about unknown
// fields and trailing data.
func (a *API) decode(c echo.Context, v any) error {
	body := http.MaxBytesReader(c.Response(), c.Request().Body, a.cfg.MaxBody)
	dec := json.NewDecoder(body)
	dec.DisallowUnknownFields()
	dec.UseNumber()
	if err := dec.Decode(v); err != nil {
		var tooLarge *http.MaxBytesError
		var syntax *json.SyntaxError
		var typ *json.UnmarshalTypeError
		switch {
		case errors.As(err, &tooLarge):
			return classify(err)
		case errors.As(err, &syntax):
			return newError("invalid_json", "", "request body is not valid JSON: %v (at byte %d)", err, syntax.Offset)
		case errors.As(err, &typ):
			return newError("invalid_json", "", "request body: field %q: want %s, got %s", typ.Field, typ.Type, typ.Value)
		case strings.HasPrefix(err.Error(), "json: unknown field "):
			return newError("unknown_field", "see /api/v1/openapi.json for the fields", "request body: %s", strings.TrimPrefix(err.Error(), "json: "))
		case errors.Is(err, io.EOF):
			return newError("invalid_json", "", "request body is empty: want a JSON object")
		}
		return newError("invalid_json", "", "request body: %v", err)
	}
	if dec.More() {
		return newError("invalid_json", "", "request body has data after the JSON value")
	}
	return nil
}
