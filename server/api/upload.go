package api

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/tetherhq/tether/model"
)

// decodeExport reads a version upload, {"resources": [...], "meta": {...}}
// in either order, one resource at a time: the decoder buffers one
// resource, never the body, so an upload costs its decoded resource set
// and little more.
func (a *API) decodeExport(r *request) (ExportRequest, error) {
	var req ExportRequest
	dec := json.NewDecoder(r.Request().Body)
	dec.DisallowUnknownFields()
	dec.UseNumber()
	where := "request body"
	fail := func(err error) (ExportRequest, error) {
		var e *Error
		if errors.As(err, &e) {
			return ExportRequest{}, e
		}
		return ExportRequest{}, r.jsonError(err, where, dec.InputOffset())
	}
	if err := expectDelim(dec, '{'); err != nil {
		return fail(err)
	}
	seen := map[string]bool{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return fail(err)
		}
		key, _ := tok.(string)
		if seen[key] {
			return ExportRequest{}, newError("invalid_json", "", "request body: %q appears twice", key)
		}
		seen[key] = true
		switch key {
		case "meta":
			where = "meta"
			if err := dec.Decode(&req.Meta); err != nil {
				return fail(err)
			}
			where = "request body"
		case "resources":
			if req.Resources, err = decodeResources(dec, r.Request().ContentLength, &where); err != nil {
				return fail(err)
			}
		default:
			return ExportRequest{}, newError("unknown_field", "an upload is {\"resources\": [...], \"meta\": {...}}", "request body: unknown field %q", clip(key))
		}
	}
	if err := expectDelim(dec, '}'); err != nil {
		return fail(err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return ExportRequest{}, newError("invalid_json", "", "request body has data after the JSON value")
	}
	return req, nil
}

// decodeResources reads a JSON array of resources, one element at a time;
// where follows the element being read, for errors. length is the body's
// announced length (-1: unknown), used to guess the slice's size so that
// it is not regrown many times.
func decodeResources(dec *json.Decoder, length int64, where *string) ([]model.Resource, error) {
	*where = "resources"
	if err := expectDelim(dec, '['); err != nil {
		return nil, err
	}
	// One resource per 512 bytes is fewer than most exports hold (a file
	// resource takes 150 bytes and more): the slice grows once or twice
	// rather than being oversized.
	out := make([]model.Resource, 0, min(max(length/512, 16), 1<<20))
	for i := 0; dec.More(); i++ {
		out = append(out, model.Resource{})
		if err := dec.Decode(&out[i]); err != nil {
			*where = fmt.Sprintf("resources[%d]", i)
			return nil, err
		}
	}
	if err := expectDelim(dec, ']'); err != nil {
		return nil, err
	}
	*where = "request body"
	return out, nil
}

// expectDelim reads the next token, which must be the delimiter d.
func expectDelim(dec *json.Decoder, d json.Delim) error {
	tok, err := dec.Token()
	if err != nil {
		return err
	}
	if got, ok := tok.(json.Delim); !ok || got != d {
		return newError("invalid_json", "an upload is {\"resources\": [...], \"meta\": {...}}", "request body: want %s at byte %d, got %s", d, dec.InputOffset(), clip(fmt.Sprint(tok)))
	}
	return nil
}

// uploadSlot waits for one of the MaxUploads upload slots, for UploadWait
// at most; release gives it back.
func (a *API) uploadSlot(r *request) (release func(), err error) {
	select {
	case a.uploads <- struct{}{}:
		return func() { <-a.uploads }, nil
	default:
	}
	t := time.NewTimer(a.cfg.UploadWait)
	defer t.Stop()
	select {
	case a.uploads <- struct{}{}:
		return func() { <-a.uploads }, nil
	case <-t.C:
		e := newError("busy", "retry in a moment", "the server is taking %d version uploads at once, its max-uploads; this one waited %s", a.cfg.MaxUploads, a.cfg.UploadWait)
		e.RetryAfter = 5 * time.Second
		return nil, e
	case <-r.ctx().Done():
		return nil, r.ctx().Err()
	}
}

// uploadDeadlines gives an upload the time its size needs to be stored
// and answered: the time its size takes to arrive at MinUploadRate (the
// limit's size when the length is not announced), as long again, and
// WriteTimeout. Its arrival is paced as every body's is (bodyDeadline).
func (a *API) uploadDeadlines(r *request) {
	n := r.Request().ContentLength
	if n < 0 || n > a.cfg.MaxUpload {
		n = a.cfg.MaxUpload
	}
	transfer := time.Duration(float64(n) / float64(a.cfg.MinUploadRate) * float64(time.Second))
	rc := http.NewResponseController(r.Response().Writer)
	// Writers that cannot (a test recorder) have no deadline to move.
	_ = rc.SetWriteDeadline(time.Now().Add(a.cfg.ReadTimeout + 2*transfer + a.cfg.WriteTimeout))
}
